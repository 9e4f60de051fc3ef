"""Memory synchronization domains: does a fence wait for another kernel's writes?

Shows: the launch attribute (``LaunchConfig(mem_sync_domain="default" | "remote")``; the library
side is ``cuadv.domains``) and an experiment: a fence-heavy kernel (every thread writes and fences,
``iterations`` times, at .gpu or .sys scope, or not at all as the control) runs alone, then beside a
write-heavy kernel streaming writes in another stream - both in the default domain, then the writer
in the remote domain. The two kernels are made to overlap (the fence kernel waits for the writer to
start, the writer stops when the fence kernel is done) and the overlap is checked on every run. The
fence kernel's loop time is measured in-kernel (%globaltimer). What the GPU shows is reported, "no
difference" included.
Needs: compute capability 9.0 and at least 2 memory sync domains.
Key insight: a fence must wait until the memory operations it orders are visible; without domains
the hardware may also make it wait for unrelated traffic in flight (in multi-GPU systems: NVLink
writes of communication kernels). A kernel in another domain is not waited for. On one GPU,
local writes drain fast, so expect a small difference; ``--peer`` repeats the experiment with the
writer streaming into a second GPU's memory over peer access, the case that motivates domains (needs 2 GPUs).
Run: ``cuadv bench domains [--peer]`` (``--quick`` for a short run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compiler import shipped
from ..domains import in_domain, stream_domain, why_not
from ..errors import LaunchConfigError, UnsupportedFeatureError, ValidationError
from ..launching import LaunchConfig, launch
from ..params import c_struct
from ..report.results import LabResult, Spread, Table, spread_map
from ..timing import synchronize, synchronize_device
from .base import RunContext, readback

FENCE_BLOCK = 128
WRITER_BLOCK = 256
WRITER_BLOCKS_PER_SM = 2
SCOPES = {"none (control)": 0, ".gpu (__threadfence)": 1, ".sys (__threadfence_system)": 2}
CONDITIONS = {"alone": None, "writer, same domain": "default", "writer, remote domain": "remote"}
# mirror WriterParams / FenceParams in domains.cu
WRITER_DTYPE = c_struct("WriterParams", [("dst", "<u8"), ("n_vec", "<u8"), ("active", "<u8"), ("stop", "<u8"),
                                         ("timeout_ns", "<u8"), ("passes", "<u8")], size=48)
FENCE_DTYPE = c_struct("FenceParams", [("slots", "<u8"), ("iterations", "<u4"), ("scope", "<i4"), ("active", "<u8"),
                                       ("stop", "<u8"), ("blocks_done", "<u8"), ("times", "<u8"), ("overlap", "<u8"),
                                       ("gate_ns", "<u8")], size=64)


def build_module(arch: str | None = None):
    return shipped("domains.cu", arch=arch, name="domains")


def check_domain(domain: str | None) -> None:
    if domain not in (None, "default", "remote"):
        raise LaunchConfigError(
            f"memory sync domain must be 'default' or 'remote' (or None: no writer), got {domain!r}")


def check_scope(scope: int) -> None:
    if scope not in SCOPES.values():
        raise LaunchConfigError(f"fence scope must be 0 (none), 1 (.gpu) or 2 (.sys), got {scope}")


@dataclass
class FenceSample:
    loop_us: float  # the fence kernel's loop: latest block end minus earliest block start
    overlapped: bool  # the writer was running at every fence block's loop start and end
    writer_passes: int  # completed passes summed over writer blocks


class FenceExperiment:
    """The fence kernel and the writer, their buffers and control words.

    writer_dst: the writer's destination, a uint32 CuPy array of writer_bytes (default: a new buffer
    of this GPU). Pass an array of a peer GPU (see ``peer_destination``) for a multi-GPU run.
    """

    def __init__(self, module, caps, *, iterations: int, writer_bytes: int, fence_blocks: int | None = None,
                 writer_timeout_ns: int = 2_000_000_000, gate_ns: int = 200_000_000, writer_dst=None):
        import cupy as cp

        if iterations < 1:
            raise LaunchConfigError(f"fence iterations must be >= 1, got {iterations}")
        if writer_bytes < 16 or writer_bytes % 16:
            raise LaunchConfigError(f"the writer's buffer must be a positive multiple of 16 bytes, got {writer_bytes}")
        self.cp = cp
        self.fence = module.kernel("dom_fence")
        self.writer = module.kernel("dom_writer")
        self.iterations, self.gate_ns, self.writer_timeout_ns = iterations, gate_ns, writer_timeout_ns
        self.fence_blocks = fence_blocks or caps.sm_count
        self.writer_blocks = caps.sm_count * WRITER_BLOCKS_PER_SM
        self.n_vec = writer_bytes // 16
        if writer_dst is not None and (writer_dst.dtype != np.uint32 or writer_dst.nbytes != writer_bytes):
            raise LaunchConfigError(f"the writer's destination must be a uint32 array of {writer_bytes} bytes, got "
                                    f"{writer_dst.dtype} with {writer_dst.nbytes} bytes")
        self.dst = writer_dst if writer_dst is not None else cp.empty(self.n_vec * 4, dtype=cp.uint32)
        self.dst_ptr = self.dst.data.ptr
        self.slots = cp.zeros(self.fence_blocks * FENCE_BLOCK, dtype=cp.uint32)
        self.control = cp.zeros(3, dtype=cp.uint32)  # active, stop, blocks_done
        self.times = cp.zeros(2 * self.fence_blocks, dtype=cp.uint64)
        self.overlap = cp.zeros(self.fence_blocks, dtype=cp.uint32)
        self.passes = cp.zeros(1, dtype=cp.uint64)
        self.fence_stream = cp.cuda.Stream(non_blocking=True)
        self.writer_stream = cp.cuda.Stream(non_blocking=True)

    def _writer_params(self) -> bytes:
        rec = np.zeros((), WRITER_DTYPE)
        base = self.control.data.ptr
        rec["dst"], rec["n_vec"], rec["active"], rec["stop"] = self.dst_ptr, self.n_vec, base, base + 4
        rec["timeout_ns"], rec["passes"] = self.writer_timeout_ns, self.passes.data.ptr
        return rec.tobytes()

    def _fence_params(self, scope: int, gate: bool) -> bytes:
        rec = np.zeros((), FENCE_DTYPE)
        base = self.control.data.ptr
        rec["slots"], rec["iterations"], rec["scope"] = self.slots.data.ptr, self.iterations, scope
        rec["active"], rec["stop"], rec["blocks_done"] = base, base + 4, base + 8
        rec["times"], rec["overlap"] = self.times.data.ptr, self.overlap.data.ptr
        rec["gate_ns"] = self.gate_ns if gate else 0
        return rec.tobytes()

    def run_once(self, scope: int, writer_domain: str | None, fence_domain: str = "default") -> FenceSample:
        """One fence-kernel run, beside a writer in `writer_domain` (None: alone)."""
        check_scope(scope)
        check_domain(writer_domain)
        self.control.fill(0)
        self.times.fill(0)
        self.overlap.fill(0)
        self.passes.fill(0)
        self.slots.fill(np.uint32(0xFFFFFFFF))
        synchronize_device()
        if writer_domain is not None:
            cfg = LaunchConfig(grid=self.writer_blocks, block=WRITER_BLOCK, mem_sync_domain=writer_domain)
            launch(self.writer, cfg, self._writer_params(), stream=self.writer_stream)
        launch(self.fence, LaunchConfig(grid=self.fence_blocks, block=FENCE_BLOCK, mem_sync_domain=fence_domain),
               self._fence_params(scope, gate=writer_domain is not None), stream=self.fence_stream)
        synchronize(self.fence_stream)
        synchronize(self.writer_stream)
        times = readback(self.times).reshape(-1, 2)
        self._check_fence_output()
        overlapped = writer_domain is not None and bool((readback(self.overlap) == 3).all())
        return FenceSample(loop_us=float(times[:, 1].max() - times[:, 0].min()) / 1e3, overlapped=overlapped,
                           writer_passes=int(readback(self.passes)[0]))

    def _check_fence_output(self) -> None:
        slots = readback(self.slots)
        if not (slots == self.iterations - 1).all():
            raise ValidationError(f"fence kernel: {(slots != self.iterations - 1).sum()} of {slots.size} slots do not "
                                  f"hold the last iteration {self.iterations - 1}")

    def check_writer_output(self) -> None:
        """Every uint4 of the writer's destination was written at least once (its .y is its index)."""
        got = readback(self.dst.reshape(-1, 4)[:, 1])
        if not np.array_equal(got, np.arange(self.n_vec, dtype=np.uint32)):
            raise ValidationError("writer kernel: some elements of its buffer were never written")


def peer_destination(nbytes: int, device: int):
    """A uint32 buffer of ``nbytes`` on another GPU that ``device`` can write over peer access
    (NVLink or PCIe), with that access enabled. Raises UnsupportedFeatureError naming what is
    missing: a second GPU, or peer access between the two."""
    import cupy as cp

    count = cp.cuda.runtime.getDeviceCount()
    peers = [d for d in range(count) if d != device and cp.cuda.runtime.deviceCanAccessPeer(device, d)]
    if not peers:
        have = f"{count} GPU" if count < 2 else f"{count} GPUs, none reachable from GPU {device} by peer access"
        raise UnsupportedFeatureError("the peer fence experiment", "a second GPU with peer access", have,
                                      "the one-GPU experiment (cuadv bench domains without --peer)")
    with cp.cuda.Device(device):
        try:
            cp.cuda.runtime.deviceEnablePeerAccess(peers[0])
        except cp.cuda.runtime.CUDARuntimeError as exc:
            if "AlreadyEnabled" not in str(exc):
                raise
    with cp.cuda.Device(peers[0]):
        return cp.empty(nbytes // 4, dtype=cp.uint32)


class DomainsLab:
    name = "domains"
    title = "Memory synchronization domains: a fence-heavy kernel beside a write-heavy kernel"

    def supported(self, caps) -> str | None:
        return why_not(caps)  # cuadv.domains: compute capability 9.0 and 2 or more domains

    def build(self, arch: str):
        return [build_module(arch)]

    def smoke(self) -> None:
        from ..device import current_device

        caps = current_device().caps
        exp = FenceExperiment(build_module(caps.arch), caps, iterations=8, writer_bytes=4 << 20, fence_blocks=4,
                              writer_timeout_ns=20_000_000, gate_ns=10_000_000)
        for scope in SCOPES.values():
            for domain in CONDITIONS.values():
                exp.run_once(scope, domain)
        exp.check_writer_output()
        with in_domain(exp.writer_stream, "remote"):  # the stream attribute of cuadv.domains, put back after
            if stream_domain(exp.writer_stream) != "remote":
                raise ValidationError("domains smoke: the stream's memory sync domain did not read back as 'remote'")

    def run(self, ctx: RunContext) -> LabResult:
        caps = ctx.caps
        result = LabResult(self.name, self.title)
        repeats = 7 if ctx.quick else 21
        iterations, writer_bytes = (256, 256 << 20) if ctx.quick else (512, 512 << 20)
        module = build_module(caps.arch)
        places = [("this GPU's memory", "", None)]  # where the writer writes, figure-name suffix, destination
        if ctx.peer:  # before any measuring: a missing second GPU fails at once, with the reason
            places.append(("a peer GPU's memory", "_peer", peer_destination(writer_bytes, caps.ordinal)))
        for where, suffix, dst in places:
            exp = FenceExperiment(module, caps, iterations=iterations, writer_bytes=writer_bytes, writer_dst=dst)
            medians = self._measure(exp, where, repeats, ctx, result)
            self._table(medians, exp, caps, repeats, where, suffix, result)
            if dst is None:
                self._plot(medians, ctx, result)
        return result

    def _measure(self, exp: FenceExperiment, where: str, repeats: int, ctx: RunContext,
                 result: LabResult) -> dict[tuple[str, str], Spread]:
        medians: dict[tuple[str, str], Spread] = {}
        not_overlapped = 0
        for scope_name, scope in SCOPES.items():
            for cond, domain in CONDITIONS.items():
                ctx.progress(f"domains ({where}): {scope_name}, {cond}")
                exp.run_once(scope, domain)  # warm-up
                samples = [exp.run_once(scope, domain) for _ in range(repeats)]
                if domain is not None:
                    not_overlapped += sum(not s.overlapped for s in samples)
                medians[(scope_name, cond)] = Spread.of([s.loop_us for s in samples])
        exp.check_writer_output()
        result.checks.append(f"writer into {where}: every fence-kernel thread's slot holds its last iteration after "
                             "every run, and the writer wrote every element of its buffer")
        runs = len(SCOPES) * (len(CONDITIONS) - 1) * repeats
        if not_overlapped == 0:
            result.checks.append(f"writer into {where}: in all {runs} runs with a writer, the writer was running when "
                                 "every fence block started and ended its loop")
        else:
            result.notes.append(f"writer into {where}: in {not_overlapped} of {runs} runs with a writer, some fence "
                                "block found the writer not running at its start or end (included in the medians)")
        return medians

    def _table(self, medians, exp: FenceExperiment, caps, repeats: int, where: str, suffix: str,
               result: LabResult) -> None:
        rows = []
        for scope_name in SCOPES:
            alone, same, remote = (medians[(scope_name, c)] for c in CONDITIONS)
            diff = 100 * (remote / same - 1)
            rows.append([scope_name, alone, same, remote, same / alone, remote / alone, diff,
                         spread_map(lambda us: 1e3 * us / exp.iterations, same)])
            key = scope_name.split()[0].strip(".()") + suffix
            result.figures[f"domains_{key}_same_over_alone"] = same / alone
            result.figures[f"domains_{key}_remote_vs_same_pct"] = diff
        result.tables.append(Table(
            f"Fence-heavy kernel: loop time (us) alone and beside a kernel writing into {where}",
            ["fence", "alone", "writer, same domain", "writer, remote domain", "same / alone", "remote / alone",
             "remote vs same %", "ns per fence (same domain)"], rows,
            note=(f"fence kernel: {exp.fence_blocks} blocks x {FENCE_BLOCK} threads, {exp.iterations} x (write own "
                  f"slot, fence); writer: {exp.writer_blocks} blocks x {WRITER_BLOCK} threads of this GPU streaming "
                  f"uint4 writes over {exp.n_vec * 16 >> 20} MiB of {where} in another stream; fence kernel always in "
                  f"the default domain; "
                  f"medians of {repeats} runs, loop time from %globaltimer in the kernel; this GPU has "
                  f"{caps.mem_sync_domain_count} domains")))
        for scope_name in list(SCOPES)[1:]:
            same, remote = medians[(scope_name, "writer, same domain")], medians[(scope_name, "writer, remote domain")]
            diff = 100 * (remote / same - 1)
            if abs(diff) < 5:
                result.notes.append(f"{scope_name}, writer into {where}: no measurable difference between the writer "
                                    f"in the same and in the remote domain ({diff:+.1f}%)")
            else:
                result.notes.append(f"{scope_name}, writer into {where}: the fence loop took {diff:+.1f}% with the "
                                    "writer in the remote domain compared with the same domain")

    def _plot(self, medians, ctx: RunContext, result: LabResult) -> None:
        from ..figures import pyplot as _pyplot

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 4.5))
        width = 0.26
        xs = np.arange(len(SCOPES))
        for i, cond in enumerate(CONDITIONS):
            ax.bar(xs + (i - 1) * width, [medians[(s, cond)] for s in SCOPES], width, label=cond)
        ax.set_xticks(xs, list(SCOPES), fontsize=8)
        ax.set_ylabel("fence-kernel loop time (us)")
        ax.set_title("Fences beside a write-heavy kernel: same vs remote domain")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ctx.save_figure(fig, "domains_fence.png", result)
