"""The segreduce lab on the GPU: the segmented sum within the lab's tolerance of float64 sums under every policy and
both tile lists, for power-law, R-MAT and uniform segments, all-empty segments, back-to-back launches (the split
segments' counters reset themselves), the lab's smoke run, and the CUB and torch peers on the same arrays."""

import numpy as np
import pytest

from cuadv import current_device
from cuadv.labs import segreduce_support as G
from cuadv.labs import spmv_support as S
from cuadv.labs.peers.cub_segmented_reduce import load_cub_segmented_sum
from cuadv.labs.segreduce import SegReduceLab, segment_tiles, segsum_kernel
from test_spmv_gpu import policies  # every policy this GPU runs

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kernel():
    return segsum_kernel()


def test_the_staged_body_sums_segments_too(cp):
    """The lab runs the register body; the staged one compiles without the gather as well, and sums right."""
    staged = S.spmv_kernel(short_rows="staged", gather=False)
    m = G.generate_segments("power-law", 1 << 12, 32, seed=3)
    sums, mags = G.reference(m)
    dev = S.DeviceCsr(m, None, slots=4)
    for policy in policies():
        dev.y.fill(cp.nan)
        dev.run(staged, "split_fixed", policy)
        S.check(f"staged {policy}", S.to_host(dev.y), sums, S.tolerance(m.lengths, mags), lab="segreduce")


def test_a_kernel_and_arrays_that_do_not_match_raise_before_launch(cp, kernel):
    m = G.generate_segments("uniform", 1 << 8, 8, seed=1)
    with pytest.raises(ValueError, match="gather=True kernel and no x"):
        S.DeviceCsr(m, None, slots=4).run(S.spmv_kernel(), "split")


def run_checked(cp, kernel, m, group=S.GROUP_NNZ, launches=1):
    sums, mags = G.reference(m)
    tol = S.tolerance(m.lengths, mags)
    dev = segment_tiles(m, group, slots=4)  # slots=4: guided windows widen even on these small arrays
    assert dev.cols is None and dev.x is None  # a segmented sum uploads no columns and no x
    for tiling in dev.tilings:
        for policy in policies():
            dev.y.fill(cp.nan)
            for _ in range(launches):
                dev.run(kernel, tiling, policy)
            S.check(f"{m.name} {tiling} {policy}", S.to_host(dev.y), sums, tol, lab="segreduce")
    return dev


@pytest.mark.parametrize("kind", G.KINDS)
@pytest.mark.parametrize("group", [64, S.GROUP_NNZ])
def test_every_segment_sums_right_under_every_policy(cp, kernel, kind, group):
    run_checked(cp, kernel, G.generate_segments(kind, 1 << 12, 32, seed=11), group)


def test_back_to_back_launches_reset_the_slices_counters(cp, kernel):
    m = G.generate_segments("power-law", 1 << 12, 64, seed=2)
    dev = run_checked(cp, kernel, m, group=64, launches=3)
    assert dev.tilings["split"][0].kinds()["slices"] > 0  # the counters' path ran


def test_all_empty_segments_sum_to_zero(cp, kernel):
    m = S.Csr("empty", np.zeros(1001, np.int32), np.empty(0, np.int32), np.empty(0, np.float32), 0)
    dev = run_checked(cp, kernel, m)
    assert not np.any(S.to_host(dev.y))


def test_smoke():
    SegReduceLab().smoke()


def test_peers_agree_with_the_reference(cp):
    m = G.generate_segments("power-law", 1 << 12, 32, seed=4)
    sums, mags = G.reference(m)
    tol = S.tolerance(m.lengths, mags)
    dev = segment_tiles(m, slots=4)
    cc = current_device().caps.compute_capability
    found, missing = G.peers(dev, load_cub_segmented_sum(f"sm_{cc[0]}{cc[1]}"))
    for kind, label, fn in found:
        S.check(label, S.to_host(fn()), sums, tol, lab="segreduce")
    if not found:
        pytest.skip(f"no peer here: {missing}")
