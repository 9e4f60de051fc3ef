"""Why a target is missed: what Nsight Compute, block traces and fits of time against size measured on the kernels
behind each missed target.

Measured on one NVIDIA H200 on 2026-12-02 and 03: ``ncu`` at 01:52 and 06:12 UTC with ``scripts/gpu_suite.sh profile``
(over ``scripts/profile_cases.py``: SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, SchedulerStats and
MemoryWorkloadAnalysis; ncu locks the clocks to base, so its durations run longer than the lab's), the raw counters
committed in docs/results/h200-2026-12-02-0612/profile (and -issue18/profile for the first); block traces and fits
at 07:58-08:31 with ``scripts/sched_trace_breakdown.py`` (docs/results/h200-2026-12-02-0758); feed sweeps and the
shared atomics' cost at 13:36-14:20 (docs/results/h200-2026-12-02-1333); the histogram's TMA ring probed, swept and
profiled again on 2026-12-03 at 06:55-07:30 (docs/results/h200-2026-12-03-0655). A lab appends the
note of a target it misses to that target's line, so the report says why beside by how much.
"""

from __future__ import annotations

PROFILED = "ncu, block traces and timing sweeps on the H200, 2026-12-02 and 03"

# Histogram peers: (input dtype, distribution, bins) -> what the profile of cuadv's kernel found.
HISTOGRAM = {
    ("int32", "uniform", 256): (
        "profiled with a ring of 4 chunks of 16 KB per block and 32 replicas of the counters, the TMA-fed "
        "hist_block_tma ran 249 us under ncu against 234 us for the kernel that only reads the same 1 GiB, DRAM at "
        "90.0% of peak against 95.7%, with 96% of warp slots resident and 53.8% of issue slots used, top stall "
        "long_scoreboard (13.9 cycles per issued instruction). Since then int32 takes a ring of 6 with 16 replicas "
        "(two blocks per SM still): 96.9% of the read-only ceiling alone against 94.0% with 4 and 32 "
        "(scripts/hist_feed_sweep.py, 08:31; the sweep does not separate the ring's depth from the replicas); 2.5x "
        "CUB's 0.62 ms takes 0.248 ms, 94-96% of the read-only ceilings measured (4.51-4.59 TB/s). CUB's sweep is "
        "issue-bound (68.7% issue active, 27.6% DRAM). Since 2026-12-03 a ring of 3 chunks of 32 KB, released by "
        "one arrival per warp: 97.4% and 2.53x CUB in the bench (07:19)"),
    ("int32", "uniform", 4096): (
        "as at 256 bins (the same TMA-fed kernel, a ring of 6 and one replica of the counters per block): 95.3-95.8% "
        "of the read-only ceiling alone with rings of 2 to 6 (scripts/hist_feed_sweep.py, 08:31); in the bench the "
        "prepared call read 96.1% (11:44) and 95.7% (14:24), the one-shot call 94.8% and 94.6%, when it still "
        "allocated and cleared its counts on every call; since 19:48 the widening pass's zeros are kept for the "
        "stream's next one-shot call (cuadv.histograms.zeroed): 95.9% (19:51) and 96.3% (20:20) one-shot. Blocks "
        "claiming chunks from a counter instead of a fixed share each were slower: 87.5-89.0% against 94-96.9% "
        "(20:10), not kept. Since 2026-12-03 a ring of 3 chunks of 32 KB: 97.1% one-shot (07:19)"),
    ("int32", "uniform", 65536): (
        "65,537 32-bit counters do not fit one block's 227 KB, so the counters are 16-bit, packed two per "
        "word: one 1,024-thread block per SM (50% of warp slots). Register loads read 88.0% of the read-only "
        "ceiling (two 16-byte loads per thread in flight; three spill); since 2026-12-03 a TMA ring of 3 chunks of "
        "32 KB, released by one named-barrier arrival per warp, feeds the counters: 91.3-91.8% "
        "(scripts/hist_feed_sweep.py, 07:14). Under ncu (07:18) hist_block_tma<int, 3, 2, true> issues on 70.6% of "
        "cycles, top stalls not_selected 3.23 and math_pipe_throttle 2.74 cycles per issued instruction, "
        "long_scoreboard only 1.09: the loads in flight no longer hold it, the instructions per element do "
        "(extract, clamp, word and half, the atomic that returns its old word, the wrap test)"),
    ("int32", "zipf", 1048576): (
        "the counting is 18.2x CUB (the prepared call, 0.304 ms, 11:44); a one-shot call also launches the skew "
        "sample and the plan not chosen, both gated on the GPU (the other plan's blocks leave at once): 16.9x at "
        "11:44. Before 11:27 the host read the sample back and waited for it: 9.58-11.1x"),
    ("uint8", "uniform", 256): (
        "one shared-memory atomic per byte (four times int32's per byte of input): the TMA-fed kernel is bound by "
        "the shared-memory pipe, not DRAM (hist_block_tma<unsigned char, 2, 2>, ncu 2026-12-03 07:18: DRAM 72.5% of "
        "peak, 62.8% of issue slots used, top stall mio_throttle 7.09 cycles per issued instruction); CUB's uint8 "
        "sweep is held by the same pipe (mio_throttle 11.5, DRAM 35.1%). The atomics alone (scripts/atoms_rate.py, "
        "14:20: 1 GiB of bytes counted with bins drawn in registers, no input read) take 0.212 ms, 89% of the "
        "read-only kernel's 0.238 ms; 2x CUB's 0.50 ms allows 0.249 ms. Fewer waits and releases per byte (chunks "
        "of 2 vectors, one release per warp) took it from 90.3% to 94.2-94.6% of the read-only ceiling alone; "
        "blocks of 768 or 512 threads read less (91.8-93.7%)"),
}

SPMV = (
    "the register body (profiled 06:12 on split rows) is latency-bound like cuSPARSE's csrmv_v3 (DRAM 22-25% "
    "of peak for both, top stall long_scoreboard); it keeps 72.9% of warp slots resident under steal (40 "
    "registers) against cuSPARSE's 94.5%, but a cap of 32 registers (8 blocks per SM, no spill) made it slower "
    "(power-law 0.890x against 0.955x: ptxas then keeps fewer gathers in flight; scripts/spmv_sweep.py "
    "--blocks-per-sm 5 6 8). "
    "What remains is the policy: on the same tiles and body fixed_work reaches 1.01x cuSPARSE on the power-law "
    "matrix (0.965x R-MAT), steal 0.955x (0.938x): under ncu split steal took 305 us against fixed_work's 296 "
    "us, with a barrier stall (3.5 cycles per issued instruction, absent from fixed_work's top four) at the "
    "hand-off of the next tile between a steal block's tiles; but that wait is not the loss: a second barrier after "
    "each tile left steal as it was (0.952x / 0.953x), and made fixed_blocks, a loop with no barrier, 4% faster "
    "on power-law (scripts/spmv_barrier_probe.py, 2026-12-03 05:45). "
    "Block traces (07:58, power-law): steal's kernel runs "
    "6 blocks per SM (792 slots), fixed_work's 5 (660), and a tile takes 6.91 us in steal's against 6.66 us (the "
    "median, warp 0's view); loading the next rows' offsets a batch ahead changed nothing (the body does not wait "
    "on them). Neither steal's time slice nor its claims are the cause (sweep of 21:41, split rows): with no slice "
    "(quantum_us=inf) steal reads 0.966x on power-law against 0.957x with the default 50 us, and the atomic-counter "
    "scheduler, a loop over tiles at fixed_work's 5 blocks per SM, 0.972x; every loop with a block barrier between "
    "tiles trails fixed_work by 3-4% whichever policy claims them, and tiles of 4096 non-zeros move it by 1% at "
    "most (scripts/spmv_sweep.py --group 2048 4096 --quantum-us 50 200 inf --policy steal fixed_work "
    "atomic_counter); prefetching the tile list into L2 gained nothing (05:20), nor did compiling the body once, "
    "out of line, for every policy (06:20: fixed_work 1.005x, steal 0.944x). Part of what a loop loses is its "
    "warps' wait for each tile's slowest warp: the same barrier in fixed_work, whose warps otherwise leave as they "
    "finish, cost it 7% on R-MAT (0.900x, below steal's 0.920x) but only 1.3 of steal's 5.4 points on power-law "
    "(scripts/spmv_barrier_probe.py). Letting a tile's warps claim its batches of rows where the host's model "
    "finds them uneven (dynamic batches, 2026-12-03 08:52 and 09:11, with the model before its replay followed the "
    "kernel's order of claims) took back 0.7-0.8% of it on R-MAT (steal "
    "0.918x to 0.925x, atomic counter 0.866x to 0.875x in one sweep) and 0.2% on power-law: within a tile of "
    "2048 non-zeros the batches are too few for claims to even the warps out (a model replay leaves the busiest "
    "warp at 1.5x the mean). With tiles of 4096 non-zeros steal reads 0.962x / 0.943x (power-law / R-MAT) but "
    "fixed_work loses 1-2% on power-law and uniform rows, so the lab keeps 2048 (scripts/spmv_sweep.py --group "
    "2048 4096 --batches dynamic static)")

VECSCALE = (
    "the tile shape, not the scheduler: with the earlier default (256 threads x 8 float4, 5 blocks/SM, 160 KB in "
    "flight per SM) steal reached 94.1% of the copy ceiling (91.6% since the reporting change of 18:24 moved "
    "ptxas's code of that loop) and fixed_work 93.4%, with 768 threads x 2 float4 at "
    "2 blocks/SM (48 KB) 97.7% and 96.5%, torch's in-place mul_ 98.8% (scripts/vecscale_inplace_probe.py, 18:13); "
    "streaming cache hints changed nothing, the same body out of place gained at most 1.1 points. Before that, "
    "under ncu (06:12), every policy's body was stalled on long_scoreboard and lg_throttle (fixed_work 82.2% of "
    "DRAM peak, steal 80.7%)")

# Dynamic scheduling (the scheduling lab's table d): why steal trails the atomic counter where it does.
COUNTER = (
    "block traces and lines fitted to time against size (scripts/sched_trace_breakdown.py, H200, 2026-12-02): "
    "with slices, each block that gives its SM back is replaced by a block launch and a first claim, which "
    "'short launches' (8 tiles per slot) paid about once per slot until steal took a slot's whole share where it "
    "is at most two slices (16:15: 0.999x / 1.01x, stream / graph); Pareto tiles' rounds spread as widely as the "
    "gap (690-731 us at 16:15), and the same rows read 1.00x / 0.975x there and 0.984x / 0.969x at 15:30; "
    "with the tiles drawn from a fixed seed and 21 rounds (2026-12-03 05:45) 0.993x / 0.988x, each launch of the "
    "same tiles taking 687-732 us under either scheduler. "
    "On v := a v the gap was in the streaming rate, not "
    "per launch (08:16: 3999 against 4078 GB/s, 7.5 against 6.7 us), and followed the order of the tile body's "
    "loads and stores in each kernel's code: ptxas issued two of a row's stores before its last two loads in the "
    "atomic counter's kernel and all eight loads first in steal's; at 4 blocks per SM, where both issue all eight "
    "first, the two streamed within 0.4%. The body now issues those two stores first in every kernel. Since "
    "18:24 the tile is 768 threads x 2 float4 (the vecscale lab's default; no reordering at 2 a row): both "
    "kernels stream at 96-98% of the copy ceiling, and at 256 MiB steal reads 0.995x / 1.00x the counter, "
    "within the rounds' spread; not traced since")


def histogram_note(dtype: str, dist: str, bins: int) -> str | None:
    """The profile's finding for cuadv's kernel on this histogram case, or None where none was profiled."""
    found = HISTOGRAM.get((dtype, dist, bins))
    return f"why ({PROFILED}): {found}" if found else None
