"""TMA on a GPU: tensor maps from Python, copies and transposes for every dtype against NumPy, out-of-bounds
fill, the multicast gemv for clusters of 1 to 8, and the errors raised before launch."""

import numpy as np
import pytest

from cuadv.errors import LaunchConfigError
from cuadv.labs import tma as lab
from cuadv.tma.tensormap import TensorMap, TensorMapError

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


@pytest.mark.parametrize("case", lab.COPY_CONFIG_CASES, ids=lambda c: f"{c[0]}-{lab.config_label(c[-1])}")
def test_copy_configurations(ops, cp, case):
    assert lab.validate_copy_configs(ops, cases=(case,))


def test_copy_sweep_configurations_on_a_small_array(ops, cp):
    # Every configuration the lab's sweep may try (that fits this GPU) copies exactly, on an array with tails.
    rng = np.random.default_rng()
    src = lab.random_array(cp, rng, 403, 1333, "float32")
    host = cp.asnumpy(src)
    dst = lab.pitched(cp, 403, 1333, "float32", extra=1)
    configs = list(lab.sweep_grid(lab.TILE_SHAPES, 4)) + list(lab.SWEEP_EXTRA)
    configs += [(box, v) for box, c in lab.SWEEP_EXTRA[:2] for chunk in lab.SWEEP_CHUNKS
                for v in lab.chunk_variants(c, chunk) + lab.ring_neighbours(c)]
    tried = 0
    for box, config in configs:
        if not ops.copy_fits(4 * box[0] * box[1], config):
            continue
        lab.poison_against(cp, dst, host)
        ops.prepare_copy(src, dst, box, config=config)()
        assert np.array_equal(lab._bits(cp.asnumpy(dst)), lab._bits(host)), (box, config)
        tried += 1
    assert tried >= len(configs) // 2


def test_copy_configuration_errors_before_launch(ops, cp):
    src = cp.zeros((64, 64), dtype=cp.float32)
    dst = cp.zeros((64, 64), dtype=cp.float32)
    with pytest.raises(LaunchConfigError, match="tma_copy: 32 blocks per SM asked for, but only"):
        ops.prepare_copy(src, dst, (32, 32), config=lab.TmaCopyConfig(stages=16, blocks_per_sm=32))
    with pytest.raises(LaunchConfigError, match="exceed the per-block limit"):
        ops.prepare_copy(src, dst, (256, 32), config=lab.TmaCopyConfig(stages=32, lookahead=30))


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_copy_many_tiles_per_block(ops, cp, chunk):
    rng = np.random.default_rng()
    src = lab.random_array(cp, rng, 4099, 4093, "float16")
    config = lab.TmaCopyConfig(stages=8, lookahead=6, blocks_per_sm=1, chunk=chunk, burst=min(chunk, 6))
    for method in ("tma", "threads"):
        dst = lab.pitched(cp, 4099, 4093, "float16")
        lab.poison_against(cp, dst, src)
        if method == "tma":
            ops.prepare_copy(src, dst, (16, 64), config=config)()
        else:
            ops.prepare_copy(src, dst, (16, 64), method=method, chunk=chunk)()
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
