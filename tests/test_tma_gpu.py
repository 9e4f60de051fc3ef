"""TMA on a GPU: tensor maps from Python, copies and transposes for every dtype against NumPy, out-of-bounds
fill, the multicast gemv for clusters of 1 to 8, and the errors raised before launch."""

import numpy as np
import pytest

from cuadv.labs import tma as lab
from cuadv.tensormap import TensorMap, TensorMapError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ops():
    return lab.TmaOps()


def test_tensor_map_from_a_cupy_array(cp):
    storage = cp.zeros((1000, 1008), dtype=cp.uint8)
    image = storage[:, :999]
    tmap = TensorMap.tiled(image, box=(64, 128))
    raw = tmap.kernel_param_bytes()
    assert len(raw) == 128 and any(raw)
    assert tmap.layout.shape == (1000, 999) and tmap.layout.strides == (1008, 1) and tmap.box_bytes == 64 * 128
    assert TensorMap.tiled(image, box=(64, 128)).kernel_param_bytes() == raw  # deterministic encoding


def test_users_array_errors_before_launch(cp):
    dense = cp.zeros((100, 61), dtype=cp.float32)  # 244-byte rows
    with pytest.raises(TensorMapError, match="stride 244 B .*pad each row to 64 elements"):
        TensorMap.tiled(dense, box=(16, 32))
    storage = cp.zeros((100, 64), dtype=cp.float32)
    with pytest.raises(TensorMapError, match="16-byte aligned"):
        TensorMap.tiled(storage[:, 1:], box=(16, 32))
    with pytest.raises(TensorMapError, match="NaN out-of-bounds fill"):
        TensorMap.tiled(cp.zeros((16, 16), dtype=cp.uint8), box=(8, 16), oob_fill="nan")


@pytest.mark.parametrize("dtype", list(lab.NUMPY_TYPES))
def test_copies_and_transposes(ops, cp, dtype):
    assert lab.validate_tiles(ops, dtypes=(dtype,))


def test_out_of_bounds_fill(ops, cp):
    assert lab.validate_oob_fill(ops)


@pytest.mark.parametrize("stages", [2, 3, 8])
def test_copy_stages(ops, cp, stages):
    rng = np.random.default_rng()
    src = lab.random_array(cp, rng, 515, 1000, "float32")
    dst = lab.pitched(cp, 515, 1000, "float32", extra=2)
    dst.fill(cp.nan)
    ops.prepare_copy(src, dst, (32, 64), method="tma", stages=stages)()
    assert np.array_equal(cp.asnumpy(dst), cp.asnumpy(src))


def test_copy_many_tiles_per_block(ops, cp):
    rng = np.random.default_rng()
    src = lab.random_array(cp, rng, 4099, 4093, "float16")
    for method in ("tma", "threads"):
        dst = lab.pitched(cp, 4099, 4093, "float16")
        lab.poison_against(cp, dst, src)
        ops.prepare_copy(src, dst, (16, 64), method=method)()
        assert np.array_equal(lab._bits(cp.asnumpy(dst)), lab._bits(cp.asnumpy(src))), method


@pytest.mark.parametrize("cluster", range(1, 9))
def test_gemv_clusters(ops, cp, cluster):
    assert lab.validate_gemv(ops, clusters=(cluster,))


def test_gemv_large(ops, cp):
    rng = np.random.default_rng()
    a, x, y, expected = lab.integer_problem(cp, rng, 1000, 3000, 8)
    for cluster in (1, 2, 4, 8):
        for multicast in (False, True):
            y.fill(cp.nan)
            ops.prepare_gemv(a, x, y, vectors_per_block=1, cluster=cluster, multicast=multicast)()
            assert bool(cp.array_equal(y, expected)), (cluster, multicast)


def test_smoke(cp):
    lab.TmaLab().smoke()
