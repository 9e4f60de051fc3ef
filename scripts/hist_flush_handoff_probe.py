"""What the 64K-bin histogram would gain if its last blocks did not flush: an upper bound, measured, for issue 18's
95% of the read-only ceiling at 64K bins (94.4% on 2026-12-05).

The 16-bit kernel (one block per SM, 128 KB of packed counters) ends with its slowest SM's stream plus that block's
flush, 32,768 64-bit atomics that take 7.7-7.9 us whether issued by threads or by the TMA unit (block traces,
docs/histogram.md): one SM's reductions reaching the L2, while the others are idle. A copy of histogram.cu (a text
patch made here, not shipped) lets the last LATE blocks to finish their stream copy their counters to a dump in
global memory with plain 16-byte stores instead; the others flush as shipped. The counts are then the global bins
plus the dumps, which this script checks against cupy.bincount, so every timed variant is checked exact. Someone
must still add the dumps (the widening pass, which a one-shot call already launches, could read them): the time
CuPy takes to sum LATE dumps is printed beside, as an estimate of that cost, not measured inside the widening pass.

Per LATE (0: every block flushes; that row measures the ticket and the patched code's other register allocation, 49
registers against 55 on sm_90a), in interleaved rounds with the shipped kernel, 1 GiB of
uniform int32: the launch's median event time, its % of the read-only ceiling and its gain over the shipped kernel.

    PYTHONPATH=src python3 scripts/hist_flush_handoff_probe.py [--late=0,8,16,32,64] [--rounds=2] [--bins=65536]
"""

from __future__ import annotations

import sys

import numpy as np

ANCHOR = "  cuadv_hist::flush_counters<Packed>(counters, out, bins, 0u, 0u, log2r, blockIdx.x);\n}\n"
HANDOFF = """  if constexpr (Packed) {
    // probe: the last CUADV_PROBE_LATE blocks to get here copy their counters to a dump instead of flushing them
    __shared__ u32 probe_ticket;
    u32* const probe_tail = out + ((bins + 1u) & ~1u);  // the word past the bins: zeroed before every launch
    if (threadIdx.x == 0) probe_ticket = atomicAdd(probe_tail, 1u);
    __syncthreads();  // orders thread 0's ticket before every thread's read of it
    const u32 late_from = gridDim.x > CUADV_PROBE_LATE ? gridDim.x - CUADV_PROBE_LATE : 0u;
    if (probe_ticket >= late_from) {
      const u32 quads = ((bins + 1u) >> 1) / 4u;  // the pairs' words, four at a time (the host checks bins % 8 == 0)
      const uint4* from = reinterpret_cast<const uint4*>(counters);
      uint4* dump = reinterpret_cast<uint4*>(probe_tail + 4u) + static_cast<u64>(probe_ticket - late_from) * quads;
      for (u32 i = threadIdx.x; i < quads; i += blockDim.x) dump[i] = from[i];
      return;
    }
  }
""" + ANCHOR


def handoff_source(source: str, late: int) -> str:
    """histogram.cu with the hand-off in block_histogram (16-bit counters only) for ``late`` blocks."""
    if source.count(ANCHOR) != 1:
        raise SystemExit("the patch anchor (block_histogram's flush) is not in histogram.cu exactly once")
    return f"#define CUADV_PROBE_LATE {late}u\n" + source.replace(ANCHOR, HANDOFF)


def dump_offset(bins: int) -> int:
    """Where the dumps start in the output buffer (uint32 words): past the bins' even count, the ticket word and
    padding to 16 bytes."""
    return ((bins + 1) & ~1) + 4


def counts_with_dumps(words: np.ndarray, bins: int, late: int, dumped: int) -> np.ndarray:
    """The histogram a hand-off launch counted: its global bins plus the ``dumped`` dumps of packed 16-bit counters
    (word w: bin 2w in the low half, 2w + 1 in the high half) that ``late`` slots hold."""
    counts = words[:bins].astype(np.int64)
    start, pairs = dump_offset(bins), (bins + 1) >> 1
    dumps = words[start:start + late * pairs].reshape(late, pairs)[:dumped].astype(np.int64)
    counts[0::2] += (dumps & 0xFFFF).sum(axis=0)[: (bins + 1) // 2]
    counts[1::2] += (dumps >> 16).sum(axis=0)[: bins // 2]
    return counts


def main(lates: tuple[int, ...], rounds: int, bins: int) -> None:
    if bins % 8 or bins <= 0:
        raise SystemExit(f"--bins={bins}: the dumps copy 16 bytes at a time, so bins must be a positive multiple of 8")
    if not lates or min(lates) < 0:
        raise SystemExit(f"--late={','.join(map(str, lates))}: block counts >= 0")
    import cupy as cp

    from cuadv.compiler import compile_source, kernel_source
    from cuadv.device import current_device
    from cuadv.histograms.launcher import engine
    from cuadv.kernel import max_active_blocks_per_sm
    from cuadv.launching import launch
    from cuadv.timing import read_ceiling, time_gpu

    caps = current_device().caps
    eng = engine()
    plan = eng.plan(bins, "int32")
    if not (plan.variant == "shared" and plan.counter_bits == 16):  # the one-block kernels block_histogram runs
        raise SystemExit(f"{bins} bins take '{plan.label}', not the 16-bit one-block kernel this probe patches")
    nbytes = 1 << 30
    n = nbytes // 4
    shipped, config = eng.launch_config(plan, n)
    ceiling = read_ceiling(nbytes)
    kernels = {"shipped": (shipped, 0)}
    for late in lates:
        module = compile_source(handoff_source(kernel_source("histogram.cu"), late), name=f"histogram_handoff_{late}",
                                arch=caps.arch, name_expressions=[plan.kernel_expr])
        # the ticket adds static shared memory (128 B with its padding) beside the plan's dynamic bytes
        static = module.resources_for(plan.kernel_expr).static_shared_bytes
        if plan.shared_bytes + static > caps.shared_mem_per_block_optin:
            raise SystemExit(f"{bins} bins: {plan.shared_bytes} B of counters and ring plus the probe's {static} B "
                             f"exceed {caps.shared_mem_per_block_optin} B per block; try fewer bins")
        kernels[f"last {late} dump"] = (module.kernel(plan.kernel_expr), late)
    grid = config.grid[0]
    for label, (kernel, _) in kernels.items():
        resident = max_active_blocks_per_sm(kernel, plan.threads, plan.shared_bytes) * caps.sm_count
        if resident < grid:
            raise SystemExit(f"{label}: {resident} blocks resident at once, the plan's grid is {grid}")
    x = cp.random.randint(0, bins, size=n, dtype=cp.int32)
    want = cp.asnumpy(cp.bincount(x, minlength=bins)).astype(np.int64)
    most = max(lates, default=0)
    out = cp.zeros(dump_offset(bins) + most * ((bins + 1) >> 1), dtype=cp.uint32)
    args = plan.kernel_args(x.data.ptr, n, out.data.ptr)
    print(f"int32 {bins} bins, {plan.label}, grid {grid}, 1 GiB; read-only ceiling {ceiling.bytes_per_s / 1e9:.0f} GB/s",
          flush=True)

    def zero() -> None:
        out[: dump_offset(bins) - 3].fill(0)  # the bins and the ticket word; the dumps are overwritten

    times: dict[str, list[float]] = {label: [] for label in kernels}
    for _ in range(rounds):
        for label, (kernel, late) in kernels.items():
            zero()
            out[dump_offset(bins):].fill(0xFFFFFFFF)  # a dump slot the launch should write and does not: wrong counts
            launch(kernel, config, *args)
            cp.cuda.Device().synchronize()
            words = cp.asnumpy(out)
            got = counts_with_dumps(words, bins, most, min(late, grid))
            tickets = int(words[dump_offset(bins) - 4])
            if not np.array_equal(got, want) or (label != "shipped" and tickets != grid):
                raise SystemExit(f"{label}: the bins plus the dumps differ from cupy.bincount "
                                 f"({int((got != want).sum())} bins), or {tickets} tickets for {grid} blocks")
            t = time_gpu(lambda kernel=kernel: launch(kernel, config, *args), setup=zero, repeats=15)
            times[label].append(t.median_ms)
    base = np.median(times["shipped"])
    for label, ms in times.items():
        med = float(np.median(ms))
        pct = 100 * nbytes / (med * 1e-3) / ceiling.bytes_per_s
        rounds_text = " / ".join(f"{1e3 * m:.1f}" for m in ms)
        print(f"  {label:16s} {1e3 * med:7.1f} us ({rounds_text})  {pct:5.1f}% of the read-only ceiling  "
              f"x{base / med:.4f} the shipped kernel  exact", flush=True)
    pairs = (bins + 1) >> 1
    for late in sorted({min(late, grid) for late in lates} - {0}):
        halves = out[dump_offset(bins):dump_offset(bins) + late * pairs].view(cp.uint16).reshape(late, -1)
        t = time_gpu(lambda halves=halves: halves.sum(axis=0, dtype=cp.uint32), repeats=15)
        print(f"  adding {late} dumps ({late * pairs * 4 // 1024} KB) with CuPy's sum: {1e3 * t.median_ms:.1f} us "
              f"(an estimate of what the widening pass would add)", flush=True)


def _ints(args: list[str], name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    given = [a[len(name) + 3:] for a in args if a.startswith(f"--{name}=")]
    return tuple(int(v) for g in given for v in g.split(",")) if given else default


if __name__ == "__main__":
    argv = sys.argv[1:]
    main(_ints(argv, "late", (0, 8, 16, 32, 64)), _ints(argv, "rounds", (2,))[0], _ints(argv, "bins", (65536,))[0])
