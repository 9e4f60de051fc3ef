"""Why a target is missed: what Nsight Compute measured on the kernels behind each missed target.

Measured on one NVIDIA H200 on 2026-12-02 (01:52 and 06:12 UTC) with ``scripts/gpu_suite.sh profile`` (``ncu`` over
``scripts/profile_cases.py``: SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, SchedulerStats and
MemoryWorkloadAnalysis; ncu locks the clocks to base, so its durations run longer than the lab's). The raw
counters are committed in docs/results/h200-2026-12-02-0612/profile (and -issue18/profile for the first). A lab
appends the note of a target it misses to that target's line, so the report says why beside by how much.
"""

from __future__ import annotations

PROFILED = "ncu on the H200, 2026-12-02"

# Histogram peers: (input dtype, distribution, bins) -> what the profile of cuadv's kernel found.
HISTOGRAM = {
    ("int32", "uniform", 256): (
        "the TMA-fed hist_block_tma (a ring of 4 chunks of 16 KB per block) ran 249 us under ncu against 234 us "
        "for the kernel that only reads the same 1 GiB, DRAM at 90.0% of peak against 95.7%, with 96% of warp "
        "slots resident (32 registers) and 53.8% of issue slots used, top stalls long_scoreboard (13.9 cycles "
        "per issued instruction) and branch_resolving (4.9): with 64 KB in flight per block it still reads 6% "
        "below the read-only kernel, and these counters do not separate the ring's waits from the counting; "
        "2.5x CUB's 0.62 ms would take 0.248 ms, 96% of the read-only ceiling. (The register-fed kernel before "
        "it was memory-latency bound: 34% issue, DRAM 82.9%.) CUB's sweep is issue-bound (68.7% issue active, "
        "27.6% DRAM)"),
    ("int32", "uniform", 4096): (
        "as at 256 bins (the same TMA-fed kernel, two replicas of the counters per block instead of 32): 96.3% "
        "of the read-only ceiling alone (scripts/hist_feed_sweep.py, 2026-12-02 05:10), 94.2-95.1% in the "
        "interleaved rounds here"),
    ("int32", "uniform", 65536): (
        "65,537 32-bit counters do not fit one block's 227 KB, so the counters are 16-bit, packed two per "
        "word: one 1,024-thread block per SM (50% of warp slots) and returning atomics with wrap checks; "
        "issue-bound at 78.6% issue active, 67.7% of DRAM peak"),
    ("uint8", "uniform", 256): (
        "one shared-memory atomic per byte (four times int32's per byte of input): the TMA-fed kernel is bound by "
        "the shared-memory pipe, not DRAM (322 us under ncu, DRAM 69.6% of peak, 68% of issue slots used, top "
        "stall mio_throttle 5.2 cycles per issued instruction); CUB's uint8 sweep is held by the same pipe "
        "(mio_throttle 11.3, DRAM 35.2%). 2x CUB's 0.50 ms would take 0.248 ms, 96% of the read-only ceiling"),
}

SPMV = (
    "the register body (profiled 06:12 on split rows) is latency-bound like cuSPARSE's csrmv_v3 (DRAM 22-25% "
    "of peak for both, top stall long_scoreboard); it keeps 72.9% of warp slots resident under steal (40 "
    "registers) against cuSPARSE's 94.5%, but a cap of 32 registers (8 blocks per SM, no spill) made it slower "
    "(power-law 0.890x against 0.955x: ptxas then keeps fewer gathers in flight; scripts/spmv_occupancy_sweep.py). "
    "What remains is the policy: on the same tiles and body fixed_work reaches 1.01x cuSPARSE on the power-law "
    "matrix (0.965x R-MAT), steal 0.955x (0.938x): under ncu split steal took 305 us against fixed_work's 296 "
    "us, and a barrier stall (3.5 cycles per issued instruction, absent from fixed_work's top four) is the "
    "hand-off of the next tile between a steal block's tiles, where fixed_work's tile boundaries are block "
    "launches the hardware overlaps with other blocks' work")

VECSCALE = (
    "the tile body, not the scheduling, holds every policy below 95%: under ncu (06:12, the default shape of 8 "
    "float4 in one row) fixed_work took 536 us at 82.2% of DRAM peak and steal 546 us at 80.7%, both stalled on "
    "long_scoreboard (51-53 cycles per issued instruction) and lg_throttle (the load/store queue full); fixed_work's "
    "best shape, a block per tile with no scheduler at all, reads 93.3% of the copy ceiling at 1 GiB (94.0% at 4 "
    "GiB), so steal at 95% would have to beat the body without a scheduler. Steal's default reads 91.8%, its best "
    "shape 92.3% and without slices 92.8% (98.4-99.5% of fixed_work's best)")

# Dynamic scheduling (the scheduling lab's table d): why steal trails the atomic counter where it does.
COUNTER = (
    "not profiled with ncu; from the same table: without slices (steal Q=inf, the atomic counter's resident grid) "
    "steal is within 0.6% of the atomic counter on the spin workloads, so the slices cost the rest there (a block "
    "launch and a first claim each time a block gives its SM back; 'short launches' has 8 tiles per slot, so "
    "every slot changes blocks about once per launch); on v := a v fixed_blocks, which takes no ticket at all, "
    "trails the atomic counter by as much as steal does (0.97-0.98x), so there the cost is not steal's tickets; "
    "why the atomic counter's kernel streams 2-3% faster than both is not profiled yet")


def histogram_note(dtype: str, dist: str, bins: int) -> str | None:
    """The profile's finding for cuadv's kernel on this histogram case, or None where none was profiled."""
    found = HISTOGRAM.get((dtype, dist, bins))
    return f"why ({PROFILED}): {found}" if found else None
