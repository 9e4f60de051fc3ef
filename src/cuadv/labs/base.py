"""The Lab interface and the context a lab runs in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from ..compiler import CompiledModule
    from ..device import DeviceCaps
    from ..report.results import LabResult, Spread
    from ..timing import Ceiling, CopyCeiling

K = TypeVar("K", bound=Hashable)


@dataclass
class RunContext:
    """Where a lab writes plots, how big it runs, and the shared measurements."""

    out_dir: Path
    quick: bool
    caps: "DeviceCaps"
    ceiling: "CopyCeiling"
    progress: Callable[[str], None] = field(default=lambda message: None)
    peer: bool = False  # also run the experiments that need a second GPU (cuadv bench domains --peer)

    def plot_path(self, name: str) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / name

    def save_figure(self, fig, name: str, result: "LabResult") -> None:
        """Write a matplotlib figure next to the report, close it, and list it in the result."""
        from ..figures import save_figure

        save_figure(fig, self.plot_path(name))
        result.plots.append(name)


class Lab(Protocol):
    name: str
    title: str

    def supported(self, caps: "DeviceCaps") -> str | None:
        """None if the lab can run on this GPU, else the reason (naming the capability and fallback)."""

    def build(self, arch: str) -> list["CompiledModule"]:
        """Compile every kernel of the lab for a target; needs no GPU."""

    def run(self, ctx: RunContext) -> "LabResult":
        """Validate against a reference, then measure. Raises ValidationError on a wrong result."""

    def smoke(self) -> None:
        """Launch every kernel of the lab once at a small size and validate (for `cuadv check`)."""


def interleaved_samples(variants: Mapping[K, Callable[[], Sequence[float]]], rounds: int,
                        on_round: Callable[[int], None] | None = None) -> dict[K, list[float]]:
    """The samples of `rounds` rounds that each run every variant once, in the mapping's order, so a drift of
    clocks or temperature during a lab falls on all variants alike instead of on whichever ran last.

    variants: key -> a callable that measures one round of that variant and returns its samples (any unit);
    each variant's list holds them round after round. on_round(r) is called before round r (0-based), e.g. to
    report progress."""
    samples: dict[K, list[float]] = {key: [] for key in variants}
    for r in range(rounds):
        if on_round is not None:
            on_round(r)
        for key, measure in variants.items():
            samples[key] += measure()
    return samples


def interleaved_rounds(variants: Mapping[K, Callable[[], Sequence[float]]], rounds: int,
                       on_round: Callable[[int], None] | None = None) -> dict[K, "Spread"]:
    """Median per variant over the samples of ``interleaved_samples`` (all rounds together). Each median is a
    ``Spread``: a float that also carries the 10th and 90th percentiles of those samples, which tables show
    beside it and results.json records."""
    from ..report.results import Spread

    return {key: Spread.of(s) for key, s in interleaved_samples(variants, rounds, on_round).items()}


def ratio_interval(base: Sequence[float], other: Sequence[float], level: float = 0.9, resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float]:
    """How precisely median(base) / median(other) is known from paired rounds: base[i] and other[i] are round i's
    one sample of each (``interleaved_samples`` with measures that return one sample per call; a round of several
    samples would be resampled as several rounds, too narrow an interval). The central `level` interval of that
    ratio over `resamples` bootstrap resamples of the rounds (each resample draws rounds with replacement and keeps
    each round's pair together, so a drift both saw largely cancels). Seeded: the same samples give the same
    interval."""
    import numpy as np

    b, o = np.asarray(base, np.float64), np.asarray(other, np.float64)
    if b.size != o.size or b.size == 0:
        raise ValueError(f"need one sample per round of each, the same number of rounds (at least 1) for both; got "
                         f"{b.size} and {o.size} samples")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    picks = np.random.default_rng(seed).integers(0, b.size, size=(resamples, b.size))
    ratios = np.median(b[picks], axis=1) / np.median(o[picks], axis=1)
    tail = 100 * (1 - level) / 2
    return float(np.percentile(ratios, tail)), float(np.percentile(ratios, 100 - tail))


def gb_per_s(ms: float, nbytes: float) -> float:
    """GB/s of moving ``nbytes`` (the lab's byte formula) in ``ms`` milliseconds; from a Spread of times, a
    Spread of rates (``spread_map``: the slowest tenth of the times gives the lowest tenth of the rates)."""
    from ..report.results import spread_map

    return spread_map(lambda t: nbytes / (t * 1e-3) / 1e9, ms)


def rates(ms: float, nbytes: float, ceiling: "Ceiling") -> tuple[float, float]:
    """``gb_per_s`` and the % of ``ceiling`` it reaches (each a Spread where ``ms`` is one)."""
    from ..report.results import spread_map

    gbps = gb_per_s(ms, nbytes)
    return gbps, spread_map(lambda g: 100 * ceiling.fraction(g * 1e9), gbps)


def missed_by(value: float, least: float, points: bool = False) -> str:
    """'missed by ...' for a ``value`` below its target ``least``: by how much, relative to the target (0.988
    against 1.0: '1.2%') or, for a target that is itself a percentage, in percentage points (93.7 against 95:
    '1.3 points'). One decimal, more where that would round a miss to nothing (0.16%), so a missed target
    never reads 'missed by 0%'."""
    gap = least - value if points else 100 * (1 - value / least)
    text = f"{gap:.1f}"
    if float(text) == 0:
        text = f"{gap:.2g}" if gap >= 0.01 else "less than 0.01"
    return f"missed by {text}" + (" points" if points else "%")


def ratio_target(ratio: float, interval: tuple[float, float], least: float = 1.0, level: float = 0.9) -> str:
    """A target's cell for a ratio (``ratio`` against at least ``least``) known to within ``interval``
    (``ratio_interval`` at the same ``level``): met or missed by how much, the interval, and, where the interval
    holds the target on both sides, that the rounds do not resolve the difference."""
    lo, hi = interval
    verdict = f"met ({ratio:.2f}x)" if ratio >= least else missed_by(ratio, least)
    unresolved = ": the rounds do not resolve it" if lo < least <= hi else ""
    # Enough decimals to tell the bounds apart (up to 5): a narrow interval shown as 1.000-1.000x says nothing
    digits = next((d for d in range(3, 6) if f"{lo:.{d}f}" != f"{hi:.{d}f}"), 5)
    return f"{verdict}; {level:.0%} interval {lo:.{digits}f}-{hi:.{digits}f}x{unresolved}"


def readback(array):
    """A CuPy array on the host (NumPy) after a bounded wait for the current stream (``cuadv.waiting``): a lab
    reading back after a kernel that never ends fails naming its step instead of hanging in CuPy's own copy."""
    import cupy as cp

    from ..timing import synchronize

    synchronize(what="the work before a lab's readback")
    return cp.asnumpy(array)


_torch_import_failure: str | None = None  # why torch's import failed in this process: it is not tried again


def import_torch() -> tuple[Any, str | None]:
    """torch for a lab's torch peer: (the module, None), or (None, why it is left out). A torch whose own import
    fails (torch 2.11 at times could not parse one of its custom-op schemas, 2026-12-04) leaves the peer out with the
    reason instead of failing the lab. A failed import is not tried again: it leaves torch's extension module loaded
    half set up, which a second run of torch's __init__ would build on (the processes whose torch peer was missing
    were the ones that crashed at exit, 2026-12-05)."""
    global _torch_import_failure
    if _torch_import_failure is not None:
        return None, _torch_import_failure
    try:
        import torch
    except ImportError:
        _torch_import_failure = "torch is not installed"
    except Exception as exc:
        _torch_import_failure = f"torch failed to import ({type(exc).__name__}: {str(exc).splitlines()[0]})"
    else:
        return torch, None
    return None, _torch_import_failure
