"""Why a target is missed: what Nsight Compute, block traces and fits of time against size measured on the kernels
behind each missed target.

Measured on one NVIDIA H200 on 2026-12-02 to 04: ``ncu`` at 01:52 and 06:12 UTC with ``scripts/gpu_suite.sh profile``
(over ``scripts/profile_cases.py``: SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, SchedulerStats and
MemoryWorkloadAnalysis; ncu locks the clocks to base, so its durations run longer than the lab's), the raw counters
committed in docs/results/h200-2026-12-02-0612/profile (and -issue18/profile for the first); block traces and fits
at 07:58-08:31 with ``scripts/sched_trace_breakdown.py`` (docs/results/h200-2026-12-02-0758); feed sweeps and the
shared atomics' cost at 13:36-14:20 (docs/results/h200-2026-12-02-1333); the histogram's TMA ring probed, swept and
profiled again on 2026-12-03 at 06:55-07:30 (docs/results/h200-2026-12-03-0655), its 64K kernel's instruction
count tested at 14:45 (docs/results/h200-2026-12-03-1438), the uint8 kernel's shared-memory pipe at 16:15 and
steal's first claim at 16:10-17:08 (docs/results/h200-2026-12-03-1600), the 64K kernel's flush and atomics and the
uint8 kernel's feed at 18:22-18:50 (docs/results/h200-2026-12-03-1820); the 64K kernel's phases traced block by
block on 2026-12-04 (docs/results/h200-2026-12-04-1915 and -2115). A lab appends the
note of a target it misses to that target's line, so the report says why beside by how much.
"""

from __future__ import annotations

PROFILED = "ncu, block traces and timing sweeps on the H200, 2026-12-02 to 04"

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
        "long_scoreboard only 1.09: the loads in flight no longer hold it. Nor do the instructions per element: 9 "
        "in place of 11.6, half of the integer-ALU ones moved to the FMA pipe, read the same (92.0-92.4% against "
        "91.8-91.9%, alternated in one call, 14:45). No unit is near its peak (ALU 76%, shared-memory wavefronts "
        "74%, DRAM 75% at ncu's base clocks) and no stall dominates (not_selected 3.23, math_pipe_throttle 2.74, "
        "short_scoreboard 1.00 cycles per issue); one block per SM fits beside the counters, yet a ring of 2 chunks "
        "reads as 3. Ruled out at 18:22-18:40 (docs/results/h200-2026-12-03-1820): the flush of 64K global atomics "
        "per block (0.7 points: 92.2% without it against 91.5%; summing a cluster's counters through distributed "
        "shared memory first gained nothing), and the atomics' returned words (red in place of atom, no wrap test: "
        "91.3-91.4% either way). What separates it from 32-bit counters in one block per SM (33,000 bins behind the "
        "same ring: 93.6-94.8%) is SM-side: under ncu it executes 155.8 M warp instructions against their 78.5 M and "
        "takes 291 us against 254 us at ncu's locked 1.47 GHz, 2.5-3.0% longer unlocked. Yet cutting its integer-ALU "
        "instructions (14:45) or its wrap test (18:25), each alone, did not move it unlocked, and both together "
        "gained 0.4-0.5 points (91.8-91.9% against 91.4%, alternated in one call, 20:22): an exact scheme without a "
        "per-element test would still be 3 points short. Block traces on 2026-12-04 (19:15 and 21:15, "
        "docs/results/h200-2026-12-04-1915 and -2115) place the rest at the launch's end: the SMs stream their equal "
        "shares in 219-240 us and the launch ends with the slowest stream plus its flush. Since then the flush adds "
        "two adjacent bins with one 64-bit atomic (half the atomics): 93.7-93.8% against 92.2-92.5% one-shot and "
        "93.6-94.2% against 91.9-92.1% prepared, in the same run (21:15), flush median 7.7 us (11.3 us in the 19:15 "
        "trace of the tree before); claiming the last eighth of the chunks by ticket evened the streams but "
        "made the blocks' flushes collide (90.5%), and summing a cluster pair's counters first gained nothing; "
        "flushing through the TMA unit (6 bulk reductions per block, 2026-12-05, docs/results/h200-2026-12-05-0140) "
        "left the flush at 7.9 us: it is bound by the L2's 4.3 M 64-bit reductions, not by the instructions; the "
        "last 32 blocks copying their counters for the widening pass instead of flushing them read 0.4-0.8 points "
        "less (on an H100, 2026-12-05, docs/results/h100-2026-12-05-1358)"),
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
        "blocks of 768 or 512 threads read less (91.8-93.7%). Under ncu again (2026-12-03 16:15, scripts/"
        "profile_cases.py uint8) the SM's L1 / shared-memory data pipe is at 91.2% of its peak over the kernel's "
        "time (93.8% of its active cycles): 53.5 M wavefronts, of which 33.6 M are the atomics (one per warp "
        "instruction), 9.2 M more are counted as those atomics' bank conflicts (the same atomics with no input read "
        "count none) and 10.6 M read the ring. So the pipe, not DRAM, sets the pace (at ncu's base clocks the kernel "
        "takes 303 us against the read-only kernel's 234 us); 2x CUB needs fewer wavefronts per byte. The 9.2 M are "
        "the ring's (18:44): fed by register loads instead, the same counting makes 1,792 such conflicts, and 35.8 M "
        "shared-memory wavefronts in all; but those loads pass through the same data pipe (89.0% of its peak) and "
        "read 91.4-91.5% of the read-only ceiling against the ring's 95.9-96.0% unlocked (18:50; likely fewer bytes "
        "in flight, not measured). Half of each chunk by register loads, half through the ring, read 94.8-94.9% "
        "against 95.9-96.0% (18:50), not kept. The flush read a slot's 32 replicas with every lane of a warp on one "
        "bank (4.8 us per block, traced 2026-12-04 19:15); since 2026-12-05 each lane starts at its own replica: "
        "flush 0.94 us, 2.064-2.073x CUB against 2.008-2.010x in the same machine start (05:40, "
        "docs/results/h200-2026-12-05-0540); earlier starts read the code before at 1.963-1.978x"),
}

SPMV = (
    "steal trails fixed_work by about 2.5% on R-MAT rows, the one matrix where it misses 1.0x cuSPARSE (0.987-0.996x "
    "over six runs of 2026-12-03/04; fixed_work 1.02x). Both bodies make the same L2 tag lookups, the SpMV's bound "
    "(cuSPARSE's csrmv_v3 runs at 94-96% of the L2's peak lookup rate, ncu 2026-12-03 10:43). Block traces "
    "(2026-12-03 13:06-14:37, scripts/spmv_residency_probe.py) locate part of the gap: the warps of a fixed_work "
    "block leave as each finishes its rows and the SM starts the next block on what they held, so it runs up to "
    "10 blocks per SM where the occupancy calculator fits 6; a loop over tiles keeps every warp to the block's last "
    "tile and holds 6, and fixed_work with a barrier after each tile loses 4-7% on R-MAT. Steal's time slice (then "
    "50 us, 200 us since 2026-12-06) cost 0.7-1.0 points (kept: it lets other kernels take the SMs). Tried and not "
    "kept, each with its figures in docs/spmv.md: warps that do not wait for each other between tiles, blocks that "
    "start on their own tile, a first claim without its counter read, wider guided windows, listed-row tiles of "
    "one warp per row, one barrier fewer per long row, cache hints that keep the streamed columns and values out "
    "of L1 (8-20% slower). The rest of the gap is not located")

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
    "kernels stream at 96-98% of the copy ceiling. With 105 rounds and each ratio's 90% interval (H200, "
    "2026-12-06 03:36) two misses are resolved: Pareto tiles 0.985x in graph replays (0.980-0.994x) and v := a v "
    "0.995x in a stream (0.994-0.995x), while the same kernel without slices (steal Q=inf) reads 0.993x "
    "(0.989-1.003x, not resolved) and 0.998x (0.997-0.998x): on Pareto tiles the slices' relaunches are what the "
    "rounds resolve, on v := a v 0.3 of the 0.5 points; the other 0.2 points are not located (not traced since). "
    "Those ran 50 us slices; with the 200 us default since (an H100, 2026-12-06 05:23, one run of each) Pareto "
    "tiles read 0.995x / 0.997x (0.990-1.002x, not resolved) where 50 us read 0.985x / 0.991x (0.980-0.990x)")


def histogram_note(dtype: str, dist: str, bins: int) -> str | None:
    """The profile's finding for cuadv's kernel on this histogram case, or None where none was profiled."""
    found = HISTOGRAM.get((dtype, dist, bins))
    return f"why ({PROFILED}): {found}" if found else None
