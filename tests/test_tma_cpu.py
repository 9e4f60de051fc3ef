"""TMA without a GPU: every tensor-map rule raises a clear error, parameter layouts, the kernels compile for
sm_90a and sm_100a without spills and contain the TMA instructions, the ncu CSV parser."""


import numpy as np
import pytest
from sass_tools import sass_ops

from cuadv.errors import LaunchConfigError
from cuadv.labs import tma as lab
from cuadv.tma.tensormap import TensorMapError, TiledLayout, describe_array, pitch_elements



class FakeArray:
    """Just a __cuda_array_interface__: enough for the pure checks."""

    def __init__(self, shape, typestr="<f4", strides=None, address=0x10000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (address, False), "version": 3}


def layout(**kw):
    base = dict(address=0x10000, dtype="float32", shape=(100, 64), strides=(256, 4), box=(32, 32))
    base.update(kw)
    return TiledLayout(**base)


def test_valid_layout_and_driver_order():
    lay = layout(shape=(100, 61), strides=(256, 4), box=(16, 32))
    args = lay.driver_arguments()
    assert args["global_dim"] == (61, 100) and args["global_strides"] == (256,) and args["box_dim"] == (32, 16)
    assert args["element_strides"] == (1, 1) and lay.box_bytes == 16 * 32 * 4 and lay.tiles() == (7, 2)


@pytest.mark.parametrize("kw, pattern", [
    (dict(address=0x10004), r"global address must be 16-byte aligned; got 0x10004 \(4 bytes past"),
    (dict(strides=(244, 4), shape=(100, 61)),
     r"multiples of 16 bytes; dimension 0 has stride 244 B .*pad each row to 64 elements"),
    (dict(strides=(2**40, 4)), r"below 2\^40"),
    (dict(strides=(256, 8)),
     r"innermost dimension must be contiguous; its stride is 8 B, the element \(float32\) is 4 B"),
    (dict(strides=(128, 4)), r"rows would overlap"),
    (dict(strides=(-256, 4)), r"strides must be positive"),
    (dict(box=(300, 32)), r"box dimensions must be 1 to 256; box dimension 0 is 300"),
    (dict(box=(32, 3)),
     r"inner extent must be a multiple of 16 bytes; got 3 x 4 B = 12 B \(use a multiple of 4 float32"),
    (dict(shape=(0, 64)), r"dimension 0 has 0 .*skip the launch"),
    (dict(shape=(2, 2, 2, 2, 2, 2), strides=(64,) * 5 + (4,), box=(1,) * 5 + (4,)), r"rank must be 1 to 5; got 6"),
    (dict(box=(32,)), r"box has 1 entries but the shape"),
    (dict(element_strides=(1, 9)), r"element strides must be 1 to 8; dimension 1 has 9"),
    (dict(dtype="int8"), r"element type must be one of"),
    (dict(swizzle="32B", box=(8, 16)), r"with swizzle 32B the box's inner extent must be at most 32 B; got 64 B"),
    (dict(oob_fill="nan", dtype="uint8", strides=(64, 1)), r"NaN out-of-bounds fill needs a floating-point"),
    (dict(oob_fill="ones"), r"oob_fill must be 'zero' or 'nan'"),
])
def test_rules_raise_before_the_driver(kw, pattern):
    with pytest.raises(TensorMapError, match=pattern):
        layout(**kw)


def test_pitch_elements():
    assert pitch_elements(61, "float32") == 64 and pitch_elements(64, "float32") == 64
    assert pitch_elements(999, "uint8") == 1008 and pitch_elements(9, "float16") == 16
    assert pitch_elements(3, "float64") == 4


def test_describe_array_from_cuda_array_interface():
    addr, dtype, shape, strides = describe_array(FakeArray((10, 7)))
    assert (addr, dtype, shape, strides) == (0x10000, "float32", (10, 7), (28, 4))
    _, dtype, _, strides = describe_array(FakeArray((10, 7), "<u2", strides=(32, 2)), dtype="bfloat16")
    assert dtype == "bfloat16" and strides == (32, 2)
    with pytest.raises(TensorMapError, match=r"TMA has no element type for '\|i1'.*dtype='uint8'"):
        describe_array(FakeArray((4, 16), "|i1"))
    with pytest.raises(TensorMapError, match="dtype 'float32' is 4 B but the array's elements are 2 B"):
        describe_array(FakeArray((4, 16), "<f2"), dtype="float32")
    with pytest.raises(TensorMapError, match="neither __cuda_array_interface__ nor __dlpack__"):
        describe_array(object())


def test_plan_checks_a_users_array_before_launch():
    # A dense float32 array with 61 columns: rows are 244 B apart, not a multiple of 16.
    with pytest.raises(TensorMapError, match="stride 244 B"):
        lab.Plan2D.of(FakeArray((100, 61)), (16, 32))
    plan = lab.Plan2D.of(FakeArray((100, 61), strides=(256, 4)), (16, 32))
    assert (plan.rows, plan.cols, plan.pitch) == (100, 61, 256)


class FakeMap:
    def __init__(self, fill):
        self.fill = fill

    def kernel_param_bytes(self):
        return bytes([self.fill]) * 128


def test_parameter_layouts_match_the_kernels():
    b = lab.TmaTileParams(FakeMap(1), FakeMap(2), 3, 4, 64, 32, 8192, 4, 3, 5, 2, 6).kernel_param_bytes()
    assert len(b) == lab.TMA_PARAMS_BYTES == 320
    assert b[:128] == bytes([1]) * 128 and b[128:256] == bytes([2]) * 128
    assert [int.from_bytes(b[256 + 4 * i:260 + 4 * i], "little") for i in range(10)] == [3, 4, 64, 32, 8192, 4, 3,
                                                                                          5, 2, 6]
    assert b[296:] == bytes(24)
    t = lab.ThreadTileParams(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12).kernel_param_bytes()
    assert len(t) == lab.THREAD_PARAMS_BYTES == 72 and int.from_bytes(t[68:72], "little") == 12
    g = lab.GemvParams(FakeMap(7), 0x100, 0x200, 300, 400, 500, 600).kernel_param_bytes()
    assert len(g) == lab.GEMV_PARAMS_BYTES == 192 and int.from_bytes(g[152:160], "little") == 400


@pytest.fixture(scope="module", params=["sm_90a", "sm_100a"])
def module(request):
    return lab.build_module(request.param)


def test_every_kernel_compiles_without_spills(module):
    names = ["tma_copy", "thread_copy", "tma_load_tiles"] + lab.kernel_expressions()
    for name in names:
        res = module.resources_for(name)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0, (module.arch, res)
        assert res.registers <= 255, res


def test_sass_uses_tma_and_multicast(module, tmp_path):
    ops = sass_ops(module.cubin, tmp_path)
    low = module.lowered_names
    copy = ops["tma_copy"]
    assert any(o.startswith("UTMALDG") for o in copy) and any(o.startswith("UTMASTG") for o in copy)
    assert not any(o.startswith("LDG") for o in copy)  # no thread loads in the TMA copy
    assert any("MULTICAST" in o for o in ops[low["gemv_tma<true, 1>"]])
    assert not any("MULTICAST" in o for o in ops[low["gemv_tma<false, 1>"]])
    assert any(o.startswith("LDG") for o in ops["thread_copy"])


def test_gemv_argument_errors_before_launch():
    ops = lab.TmaOps(arch="sm_90a")
    a = FakeArray((130, 64), strides=(256, 4))
    x, y = FakeArray((16, 64)), FakeArray((16, 130))
    with pytest.raises(LaunchConfigError, match="cluster must be 1 to 8 blocks"):
        ops.prepare_gemv(a, x, y, vectors_per_block=1, cluster=9, multicast=True)
    with pytest.raises(LaunchConfigError, match="vectors_per_block must be one of"):
        ops.prepare_gemv(a, x, y, vectors_per_block=3, cluster=1, multicast=True)
    with pytest.raises(LaunchConfigError, match="cluster of 3 does not divide the 16 blocks"):
        ops.prepare_gemv(a, x, y, vectors_per_block=1, cluster=3, multicast=True)
    with pytest.raises(LaunchConfigError, match="need x v x 64 and y v x 130"):
        ops.prepare_gemv(a, x, FakeArray((16, 129)), vectors_per_block=1, cluster=1, multicast=False)
    with pytest.raises(TensorMapError, match="stride"):
        ops.prepare_gemv(FakeArray((130, 63)), FakeArray((16, 63)), y, vectors_per_block=1, cluster=1,
                         multicast=False)


def test_copy_and_transpose_errors_before_launch():
    ops = lab.TmaOps(arch="sm_90a")
    src = FakeArray((100, 64))
    with pytest.raises(LaunchConfigError, match="copy: dst is float32\\(100, 60\\)"):
        ops.prepare_copy(src, FakeArray((100, 60), strides=(256, 4)), (32, 32), method="threads")
    with pytest.raises(LaunchConfigError,
                       match="transpose: dst is float32\\(100, 64\\), expected float32\\(64, 100\\)"):
        ops.prepare_transpose(src, FakeArray((100, 64)), (32, 32), method="threads")
    with pytest.raises(TensorMapError, match="inner extent"):  # the transposed box has 2 x 4 B rows
        ops.prepare_transpose(src, FakeArray((64, 100), strides=(416, 4)), (2, 32), method="threads")
    with pytest.raises(ValueError, match="method must be"):
        ops.prepare_copy(src, FakeArray((100, 64)), (32, 32), method="dma")
    with pytest.raises(LaunchConfigError, match="give stages or config"):
        ops.prepare_copy(src, FakeArray((100, 64)), (32, 32), stages=4, config=lab.TmaCopyConfig())
    with pytest.raises(LaunchConfigError, match="the thread copy takes only chunk"):
        ops.prepare_copy(src, FakeArray((100, 64)), (32, 32), method="threads", config=lab.TmaCopyConfig())
    with pytest.raises(LaunchConfigError, match="thread copy: chunk must be 1 to 1024 tiles; got 0"):
        ops.prepare_copy(src, FakeArray((100, 64)), (32, 32), method="threads", chunk=0)
    with pytest.raises(LaunchConfigError, match="stages must be 2 to 32; got 40"):
        ops.prepare_copy(src, FakeArray((100, 64)), (32, 32), stages=40)


def test_copy_config_defaults():
    c = lab.TmaCopyConfig()
    assert (c.stages, c.lookahead, c.reading, c.burst, c.blocks_per_sm, c.chunk) == (4, 3, 1, 1, None, 1)
    assert c == lab.TmaCopyConfig(stages=4, lookahead=3) and hash(c) == hash(lab.TmaCopyConfig(stages=4, lookahead=3))
    assert c.shared_bytes(8192) == 4 * 8192 + 128 and c.shared_bytes(100) == 4 * 128 + 128
    assert lab.config_label(lab.TmaCopyConfig(stages=12, lookahead=8, blocks_per_sm=2, chunk=4, burst=4,
                                              l2_promotion="256B")) == \
        "12 slots, 8 ahead, 2/SM, chunk 4, bursts of 4, L2 256B"


@pytest.mark.parametrize("kw, pattern", [
    (dict(stages=1), r"stages must be 2 to 32; got 1"),
    (dict(stages=33), r"stages must be 2 to 32; got 33"),
    (dict(stages=4, lookahead=5), r"lookahead must be 1 to stages \(4\); got 5"),
    (dict(stages=4, lookahead=0), r"lookahead must be 1 to stages \(4\); got 0"),
    (dict(stages=16, lookahead=4), r"must be at most 8; got 12 \(stages 16, lookahead 4\)"),
    (dict(blocks_per_sm=0), r"blocks_per_sm must be >= 1"),
    (dict(chunk=0), r"chunk must be 1 to 1024 tiles; got 0"),
    (dict(stages=8, lookahead=4, burst=5), r"burst must be 1 to lookahead \(4\) loads; got 5"),
    (dict(burst=0), r"burst must be 1 to lookahead"),
    (dict(l2_promotion="512B"), r"l2_promotion must be one of none, 64B, 128B, 256B; got '512B'"),
    (dict(evict_first="all"), r"evict_first must be one of none, loads, stores, both; got 'all'"),
    (dict(stages=4, lookahead=2.5), r"lookahead must be an integer; got 2.5"),
    (dict(stages=4.0), r"stages must be an integer; got 4.0"),
    (dict(chunk=True), r"chunk must be an integer; got True"),
])
def test_copy_config_errors(kw, pattern):
    with pytest.raises(LaunchConfigError, match=pattern):
        lab.TmaCopyConfig(**kw)


def test_sweep_configurations_are_valid():
    grid = lab.sweep_grid(lab.TILE_SHAPES, 4)
    assert len(grid) == len(set(grid)) and {box for box, _ in grid} == set(lab.TILE_SHAPES)
    assert len(lab.sweep_grid(lab.TILE_SHAPES, 4, quick=True)) < len(grid)
    for box, c in list(grid) + list(lab.SWEEP_EXTRA):
        assert c.blocks_per_sm in lab.SWEEP_BLOCKS_PER_SM and 1 <= c.reading <= 2 or c.burst > 1, (box, c)
        for chunk in lab.SWEEP_CHUNKS + (65,):
            for v in lab.chunk_variants(c, chunk):
                assert v.chunk == chunk and v.burst in (1, chunk) and v.stages == c.stages
                if v.burst > 1:
                    assert v.lookahead % chunk == 0 and v.reading <= lab.MAX_READING
        for v in lab.ring_neighbours(c):
            assert v != c and v.blocks_per_sm * v.stages <= c.blocks_per_sm * c.stages
    # Bursts line up with chunks where the ring allows it, and are left out where it does not.
    c = lab.TmaCopyConfig(stages=32, lookahead=30, blocks_per_sm=1)
    assert [v.lookahead for v in lab.chunk_variants(c, 8)] == [30, 24]
    assert [v.burst for v in lab.chunk_variants(c, 16)] == [1]  # lookahead 16 would leave 16 stores reading
    assert lab.ring_neighbours(lab.TmaCopyConfig(stages=8, lookahead=6, blocks_per_sm=2)) == [
        lab.TmaCopyConfig(stages=8, lookahead=7, blocks_per_sm=2),
        lab.TmaCopyConfig(stages=8, lookahead=4, blocks_per_sm=2),
        lab.TmaCopyConfig(stages=4, lookahead=2, blocks_per_sm=4),
        lab.TmaCopyConfig(stages=16, lookahead=14, blocks_per_sm=1)]


def test_box_for_keeps_row_bytes():
    assert lab.box_for("float32", (64, 64)) == (64, 64)
    assert lab.box_for("float16", (64, 64)) == (64, 128)
    assert lab.box_for("uint8", (64, 64)) == (64, 256)
    assert lab.box_for("uint8", (8, 128)) == (8, 256)


def test_default_stages():
    assert lab.default_stages(4096) == 4 and lab.default_stages(32768) == 3 and lab.default_stages(65536) == 2


def test_copy_config_cases_cover_the_ring_limits():
    configs = [case[-1] for case in lab.COPY_CONFIG_CASES]
    assert min(c.stages for c in configs) == 2 and max(c.stages for c in configs) == lab.MAX_STAGES
    assert any(c.lookahead == c.stages for c in configs) and any(c.reading == lab.MAX_READING for c in configs)
    assert any(c.burst > 1 and c.lookahead % c.burst for c in configs)
    assert {c.l2_promotion for c in configs} == {"none", "64B", "128B", "256B"}
    assert {c.evict_first for c in configs} == {"none", "loads", "stores", "both"}


def test_tma_copy_uses_cache_hints_and_runtime_read_waits(module):
    # The ptx of the module: the hinted forms and a wait_group.read for every count the ring can ask for.
    ptx = module.ptx.decode() if isinstance(module.ptx, bytes) else module.ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group.L2::cache_hint" in ptx
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx
    for n in range(lab.MAX_READING + 1):
        assert f"cp.async.bulk.wait_group.read {n};" in ptx, n


NCU_SAMPLE = '''==PROF== Connected to process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","gemv_tma","1","7","(256, 1, 1)","(8, 64, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","134,742,016"
"0","1","python","h","gemv_tma","1","7","(256, 1, 1)","(8, 64, 1)","0","9.0","Command line profiler metrics","lts__t_bytes.sum","byte","1,100,000,000"
"1","1","python","h","gemv_tma","1","7","(256, 1, 1)","(8, 64, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","135.5"
"1","1","python","h","gemv_tma","1","7","(256, 1, 1)","(8, 64, 1)","0","9.0","Command line profiler metrics","lts__t_bytes.sum","Gbyte","0.3"
'''


def test_parse_ncu_csv():
    rows = lab.parse_ncu_csv(NCU_SAMPLE)
    assert len(rows) == 2
    assert rows[0] == {"dram__bytes_read.sum": 134742016.0, "lts__t_bytes.sum": 1.1e9}
    assert rows[1]["dram__bytes_read.sum"] == pytest.approx(135.5e6) and rows[1]["lts__t_bytes.sum"] == 0.3e9
    assert lab.parse_ncu_csv("no csv here") == []


def test_lab_metadata():
    t = lab.TmaLab()
    assert t.name == "tma" and "9.0" in t.supported(type("C", (), {"tma": False, "cluster_launch": False,
                                                                    "cc_string": lambda self: "8.0"})())
    assert len(t.build("sm_90a")) == 1


def test_a_tensor_map_box_that_is_no_sequence_names_the_parameter():
    """TensorMap.tiled and from_pointer hand box, shape and strides to TiledLayout's check as given: box=64 is a
    TensorMapError naming box (before: Python's "'int' object is not iterable"), raised before the driver."""
    from cuadv.tma.tensormap import TensorMap

    with pytest.raises(TensorMapError, match=r"box must be a sequence of integers, one per dimension; got 64"):
        TensorMap.tiled(FakeArray((64, 64)), box=64)
    with pytest.raises(TensorMapError, match=r"shape must be a sequence of integers"):
        TensorMap.from_pointer(0x10000, "float32", 64, (256, 4), (8, 8))


def test_numpy_dtypes_name_tma_element_types():
    """dtype= takes NumPy's types and dtypes as well as names (the refusal used to list the very type it refused)."""
    from cuadv.tma.tensormap import describe_array, element_type

    assert [element_type(d) for d in ("uint8", np.uint8, np.dtype("float32"), np.float64)] == \
        ["uint8", "uint8", "float32", "float64"]
    layout = TiledLayout(0x10000, np.dtype("float32"), (64, 64), (256, 4), (8, 8))
    assert layout.dtype == "float32" and layout.itemsize == 4
    assert describe_array(FakeArray((64, 64), typestr="<u2"), np.float16)[1] == "float16"
    with pytest.raises(TensorMapError, match=r"dtype 'uint8' is 1 B but the array's elements are 4 B"):
        describe_array(FakeArray((64, 64)), np.uint8)
    for bad in (None, {"names": ["a"]}, "int8"):  # NumPy reads None as float64, and the dict fails in NumPy
        with pytest.raises(TensorMapError, match="TMA element type must be one of"):
            TiledLayout(0x10000, bad, (64, 64), (256, 4), (8, 8))
