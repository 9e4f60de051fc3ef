"""Nothing lost: a library call that fails after it has received the user's arrays leaves every one of them (``out=``
and ``dst`` included, the padding of pitched rows too) byte for byte as it was. Each case fails at a different point:
the first checks, after a min/max pass on the GPU (the data decides), after compiling (the plan or the store method
decides). The corpus' conftest then checks that the CUDA context still runs a kernel."""

import numpy as np
import pytest

import cuadv
from cuadv.errors import KernelArgumentError, LaunchConfigError

pytestmark = pytest.mark.gpu


class ReadOnly:
    """A device array whose producer marks it read-only (CUDA Array Interface data[1])."""

    def __init__(self, array):
        self.array = array
        cai = dict(array.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], True)
        self.__cuda_array_interface__ = cai


def kept(cp, *arrays):
    """Host copies of ``arrays`` (after the work queued on them), to compare with after the bad call."""
    cp.cuda.get_current_stream().synchronize()
    return [cp.asnumpy(a).copy() for a in arrays]


def assert_unchanged(cp, arrays, before):
    cp.cuda.get_current_stream().synchronize()
    for i, (a, b) in enumerate(zip(arrays, before)):
        after = cp.asnumpy(a)
        assert after.dtype == b.dtype and np.array_equal(after.view(np.uint8), b.view(np.uint8)), f"array {i} changed"


def sentinel(cp, shape, dtype):
    return cp.full(shape, 7, dtype=dtype)


# ---- histograms


@pytest.mark.parametrize("bad_out, error, text", [
    (lambda cp, x: sentinel(cp, 10, cp.int32), TypeError, "out must have dtype int64"),
    (lambda cp, x: sentinel(cp, 11, cp.int64), ValueError, r"out must have shape \(10,\)"),
    (lambda cp, x: ReadOnly(sentinel(cp, 10, cp.int64)), KernelArgumentError, "out is read-only"),
    (lambda cp, x: x[:10], ValueError, "overlaps x"),
])
def test_histogram_bad_out(cp, bad_out, error, text):
    x = cp.arange(1000, dtype=cp.int64) % 10
    out = bad_out(cp, x)
    arrays = [x, getattr(out, "array", out)]
    before = kept(cp, *arrays)
    with pytest.raises(error, match=text):
        cuadv.histogram(x, bins=10, range=(0, 10), out=out)
    assert_unchanged(cp, arrays, before)


def test_histogram_whose_data_has_no_finite_range(cp):
    """The default range is the data's min and max, known only after a pass on the GPU: NaN raises, out untouched."""
    x = cp.arange(1000, dtype=cp.float32)
    x[500] = cp.nan
    out = sentinel(cp, 16, cp.int64)
    before = kept(cp, x, out)
    with pytest.raises(ValueError, match="autodetected range of .* is not finite"):
        cuadv.histogram(x, bins=16, out=out)
    assert_unchanged(cp, [x, out], before)


def test_prepared_histogram_given_another_size(cp):
    x = cp.arange(1000, dtype=cp.float32)
    prepared = cuadv.prepare_histogram(x, bins=16, range=(0.0, 1000.0))
    other, out = cp.arange(999, dtype=cp.float32), sentinel(cp, 16, cp.int64)
    before = kept(cp, x, other, out)
    with pytest.raises(ValueError, match="x has 999 elements of float32; this prepared histogram was made for 1000"):
        prepared(other, out=out)
    assert_unchanged(cp, [x, other, out], before)


@pytest.mark.parametrize("values, out_len, kwargs, error, text", [
    ([0, 1, -1, 3], 4, {}, ValueError, r"'list' argument must have no negative elements \(x.min\(\) = -1\)"),
    ([0, 9, 3], 5, {}, ValueError, r"out must have shape \(10,\), got \(5,\)"),
    ([0, 130_000], 130_001, dict(variant="shared"), LaunchConfigError,  # past 16-bit counters in one block too
     "bins = 130001 need .* shared memory in one block"),
])
def test_bincount_refused_once_the_data_is_known(cp, values, out_len, kwargs, error, text):
    """The length and the sign come from a min/max pass on the GPU; the refusal still leaves out as it was."""
    x = cp.asarray(np.array(values, dtype=np.int32))
    out = sentinel(cp, out_len, cp.int64)
    before = kept(cp, x, out)
    with pytest.raises(error, match=text):
        cuadv.bincount(x, out=out, **kwargs)
    assert_unchanged(cp, [x, out], before)


# ---- tma


def square(cp, n=64):
    return cp.arange(n * n, dtype=cp.float32).reshape(n, n)


@pytest.mark.parametrize("make_dst, error, text", [
    (lambda cp, src: sentinel(cp, (64, 32), cp.float32), LaunchConfigError, r"dst is float32\(64, 32\)"),
    (lambda cp, src: src, LaunchConfigError, "overlaps src"),
    (lambda cp, src: ReadOnly(sentinel(cp, (64, 64), cp.float32)), KernelArgumentError, "dst is read-only"),
])
def test_tma_copy_bad_dst(cp, make_dst, error, text):
    src = square(cp)
    dst = make_dst(cp, src)
    arrays = [src, getattr(dst, "array", dst)]
    before = kept(cp, *arrays)
    with pytest.raises(error, match=text):
        cuadv.tma.copy(src, dst)
    assert_unchanged(cp, arrays, before)


def test_tma_copy_one_row_down_in_the_same_array(cp):
    storage = cp.arange(65 * 64, dtype=cp.float32).reshape(65, 64)
    before = kept(cp, storage)
    with pytest.raises(LaunchConfigError, match="tma.copy: dst .* overlaps src"):
        cuadv.tma.copy(storage[:64], storage[1:])
    assert_unchanged(cp, [storage], before)


def test_tma_copy_config_for_rows_that_end_inside_16_bytes(cp):
    """Refused after the feature check and the build: the store method depends on dst's rows. The padding after each
    61-column row (what a TMA store would have overwritten) is checked too."""
    src = cuadv.tma.empty_pitched((64, 61), cp.float32)
    src[...] = 1.5
    storage = sentinel(cp, (64, 64), cp.float32)
    before = kept(cp, src, storage)
    with pytest.raises(LaunchConfigError, match="end inside a 16-byte unit.* takes no TmaCopyConfig"):
        cuadv.tma.copy(src, storage[:, :61], config=cuadv.tma.TmaCopyConfig(stages=4))
    assert_unchanged(cp, [src, storage], before)


@pytest.mark.parametrize("make_dst, error, text", [
    (lambda cp, src: src, LaunchConfigError, "tma.transpose: dst .* overlaps src"),  # in place
    (lambda cp, src: sentinel(cp, (32, 64), cp.float32), LaunchConfigError, r"expected float32\(64, 64\)"),
])
def test_tma_transpose_bad_dst(cp, make_dst, error, text):
    src = square(cp)
    dst = make_dst(cp, src)
    before = kept(cp, src, dst)
    with pytest.raises(error, match=text):
        cuadv.tma.transpose(src, dst)
    assert_unchanged(cp, [src, dst], before)


# ---- stencil


def test_stencil_in_place(cp):
    x = square(cp)
    before = kept(cp, x)
    with pytest.raises(LaunchConfigError, match="overlaps x"):
        cuadv.pipeline.stencil(x, x, c_center=0.5, c_neighbour=0.125)
    assert_unchanged(cp, [x], before)


def test_stencil_tma_stores_into_a_callers_rows(cp):
    """variant='tma_store' would write whole 16-byte units past each 63-column row of out: refused, padding intact."""
    x_storage, out_storage = square(cp), sentinel(cp, (64, 64), cp.float32)
    before = kept(cp, x_storage, out_storage)
    with pytest.raises(LaunchConfigError, match="end inside one"):
        cuadv.pipeline.stencil(x_storage[:, :63], out_storage[:, :63], c_center=0.5, c_neighbour=0.125,
                               variant="tma_store")
    assert_unchanged(cp, [x_storage, out_storage], before)


# ---- cooperative, persistent, pdl


@pytest.mark.parametrize("make_out, error, text", [
    (lambda cp, x: sentinel(cp, 3, cp.int32), ValueError, r"out must have ceil\(1000 / 256\) = 4 elements, got 3"),
    (lambda cp, x: x[:4], ValueError, "overlaps x"),
    (lambda cp, x: sentinel(cp, 4, cp.float32), TypeError, "out must be int32, got float32"),
])
def test_block_sum_bad_out(cp, make_out, error, text):
    x = cp.arange(1000, dtype=cp.int32)
    out = make_out(cp, x)
    before = kept(cp, x, out)
    with pytest.raises(error, match=text):
        cuadv.block_sum(x, out=out)
    assert_unchanged(cp, [x, out], before)


def test_two_phase_on_another_dtype(cp):
    x = cp.arange(1000, dtype=cp.int32)
    before = kept(cp, x)
    with pytest.raises(ValueError, match="two_phase works on uint32, got int32"):
        cuadv.cooperative.two_phase(x)
    assert_unchanged(cp, [x], before)


def test_persistent_kernel_with_an_extra_argument(cp):
    bump = cuadv.PersistentKernel(params="unsigned int* counts", task="if (lane == 0) atomicAdd(counts + task, 1u);",
                                  name="nothing_lost_bump")
    counts = sentinel(cp, 10, cp.uint32)
    before = kept(cp, counts)
    with pytest.raises(KernelArgumentError, match="takes 1 argument after n_tasks .* got 2"):
        bump(10, counts, counts)
    assert_unchanged(cp, [counts], before)


_ADD_ONE = r"""
extern "C" __global__ void nothing_lost_add_one(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}
"""


def test_a_chain_with_a_bad_last_link_launches_nothing(cp):
    kernel = cuadv.compile_source(_ADD_ONE, name="nothing_lost_add_one").kernel("nothing_lost_add_one")
    y = sentinel(cp, 256, cp.int32)
    cfg = cuadv.LaunchConfig(grid=1, block=256)
    before = kept(cp, y)
    with pytest.raises(KernelArgumentError, match=r"step 2 \(nothing_lost_add_one\): the kernel takes 2 arguments, "
                                                  r"got 1"):
        cuadv.launch_chain([(kernel, cfg, (y, np.int32(256)))] * 2 + [(kernel, cfg, (y,))], pdl="auto")
    assert_unchanged(cp, [y], before)
