"""The histogram probe scripts that text-patch histogram.cu (run on a GPU by hand, scripts/): their anchors are in the
shipped source exactly once, the patched source compiles, and their host-side arithmetic is right."""

import numpy as np
import pytest

from cuadv.compiler import compile_source, kernel_source
from repo_files import load_script

handoff = load_script("hist_flush_handoff_probe")


@pytest.mark.parametrize("late", [0, 32])
def test_the_flush_handoff_patch_applies_once_and_compiles_for_hopper_without_spills(late):
    source = handoff.handoff_source(kernel_source("histogram.cu"), late)
    assert source.count("probe_ticket = atomicAdd") == 1 and f"#define CUADV_PROBE_LATE {late}u" in source
    expr = "hist_block_tma<int, 3, 2, true>"  # the 16-bit kernel 'auto' takes at 64K int32 bins
    res = compile_source(source, name=f"handoff_probe_{late}", arch="sm_90a",
                         name_expressions=[expr]).resources_for(expr)
    assert res.spill_store_bytes == 0 and res.registers <= 64  # one block of 1,024 threads per SM


def test_the_flush_handoff_counts_are_the_bins_plus_the_dumps_halves():
    bins, slots, dumped = 64, 3, 2
    pairs = (bins + 1) >> 1
    rng = np.random.default_rng(0)
    words = np.zeros(handoff.dump_offset(bins) + slots * pairs, np.uint32)
    direct = rng.integers(0, 1000, bins)
    words[:bins] = direct
    lo, hi = rng.integers(0, 1 << 16, (slots, pairs)), rng.integers(0, 1 << 16, (slots, pairs))
    words[handoff.dump_offset(bins):] = ((hi << 16) | lo).astype(np.uint32).ravel()
    want = direct.astype(np.int64)
    want[0::2] += lo[:dumped].sum(axis=0)
    want[1::2] += hi[:dumped].sum(axis=0)
    assert np.array_equal(handoff.counts_with_dumps(words, bins, slots, dumped), want)
    assert handoff.dump_offset(65536) * 4 % 16 == 0  # the dumps' 16-byte stores stay aligned
