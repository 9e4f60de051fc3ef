"""cuadv.tma's public ops on a GPU: copy and transpose exact against NumPy for every element type, with tails
(1x1, 7x13, 1000x999 pitched), CuPy and torch inputs, dst given or allocated, prepared ops reused, and
stream=None following a non-blocking CuPy stream and a torch side stream (work held behind a gate shows the
launch went to that stream, ordered with the work around it)."""

import numpy as np
import pytest

import cuadv
from cuadv.memo import BoundedMemo
from cuadv.tma import BEST_COPY_CONFIG, TensorMapError
from cuadv.timing import StreamGate

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (7, 13), (1000, 999), (64, 64)]
# (CuPy/NumPy dtype, the dtype= TMA sees): bfloat16 as uint16 bits
DTYPES = [("float32", None), ("float16", None), ("uint16", "bfloat16"), ("uint8", None)]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def random_pitched(cp, shape, dtype, rng):
    """Random bit patterns in a (rows, cols) array with 16-byte-pitched rows (NaN-free for floats)."""
    out = cuadv.tma.empty_pitched(shape, dtype)
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        host = rng.standard_normal(shape).astype(np_dtype)
    else:
        host = rng.integers(0, np.iinfo(np_dtype).max, size=shape, endpoint=True).astype(np_dtype)
    out[...] = cp.asarray(host)
    return out, host


def poisoned(cp, shape, dtype):
    out = cuadv.tma.empty_pitched(shape, dtype)
    out.view(np.dtype(f"u{np.dtype(dtype).itemsize}"))[...] = np.iinfo(np.dtype(f"u{np.dtype(dtype).itemsize}")).max
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(17)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype, tma_dtype", DTYPES, ids=[d for d, _ in DTYPES])
def test_copy_matches_numpy(cp, rng, shape, dtype, tma_dtype):
    x, host = random_pitched(cp, shape, dtype, rng)
    y = cuadv.tma.copy(x, dtype=tma_dtype)
    assert isinstance(y, cp.ndarray) and y.shape == shape and y.dtype == x.dtype and y.strides[0] % 16 == 0
    assert np.array_equal(_bits(cp.asnumpy(y)), _bits(host))
    dst = poisoned(cp, shape, dtype)
    assert cuadv.tma.copy(x, dst, dtype=tma_dtype) is dst
    assert np.array_equal(_bits(cp.asnumpy(dst)), _bits(host))
    assert np.array_equal(_bits(cp.asnumpy(x)), _bits(host))  # the source is untouched


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype, tma_dtype", DTYPES, ids=[d for d, _ in DTYPES])
def test_transpose_matches_numpy(cp, rng, shape, dtype, tma_dtype):
    x, host = random_pitched(cp, shape, dtype, rng)
    t = cuadv.tma.transpose(x, dtype=tma_dtype)
    assert isinstance(t, cp.ndarray) and t.shape == shape[::-1] and t.strides[0] % 16 == 0
    assert np.array_equal(_bits(cp.asnumpy(t)), _bits(host.T))
    dst = poisoned(cp, shape[::-1], dtype)
    assert cuadv.tma.transpose(x, dst, dtype=tma_dtype) is dst
    assert np.array_equal(_bits(cp.asnumpy(dst)), _bits(host.T))


@pytest.mark.parametrize("box", [(8, 64), (32, 32), (256, 16), (1, 4)])
def test_copy_and_transpose_with_a_given_box(cp, rng, box):
    x, host = random_pitched(cp, (300, 203), "float32", rng)
    assert np.array_equal(cp.asnumpy(cuadv.tma.copy(x, box=box)), host)
    if box[0] * 4 % 16 == 0:
        assert np.array_equal(cp.asnumpy(cuadv.tma.transpose(x, box=box)), host.T)


def test_dense_arrays_and_a_single_row(cp, rng):
    dense = cp.asarray(rng.standard_normal((64, 64)).astype(np.float32))  # 256-byte rows: no padding needed
    assert bool(cp.array_equal(cuadv.tma.copy(dense), dense))
    assert bool(cp.array_equal(cuadv.tma.transpose(dense), dense.T))
    row = cp.asarray(rng.standard_normal((1, 13)).astype(np.float32))  # 52-byte "pitch" of a single row
    assert bool(cp.array_equal(cuadv.tma.copy(row), row))
    assert bool(cp.array_equal(cuadv.tma.transpose(row), row.T))


def test_empty_arrays_launch_nothing(cp):
    x = cp.zeros((0, 16), dtype=cp.float32)
    y = cuadv.tma.copy(x)
    assert y.shape == (0, 16)
    assert cuadv.tma.transpose(x).shape == (16, 0)


def test_defaults_are_the_measured_best(cp, rng):
    x, _ = random_pitched(cp, (100, 100), "float32", rng)
    op = cuadv.tma.prepare_copy(x)
    assert op.box == (8, 256) and op.config == BEST_COPY_CONFIG  # fits an H200's shared memory
    assert cuadv.tma.prepare_transpose(x).box == (256, 32)
    assert cuadv.tma.prepare_copy(x, box=(32, 32)).config.stages == 4  # a box of one's own: the default ring


def test_prepared_ops_are_reused(cp, rng):
    x, _ = random_pitched(cp, (1000, 999), "float32", rng)
    op = cuadv.tma.prepare_copy(x)
    t = cuadv.tma.prepare_transpose(x)
    for i in range(4):
        host = rng.standard_normal((1000, 999)).astype(np.float32)
        x[...] = cp.asarray(host)
        assert op() is op.dst and t() is t.dst
        assert np.array_equal(cp.asnumpy(op.dst), host), i
        assert np.array_equal(cp.asnumpy(t.dst), host.T), i


def test_bad_user_arrays_raise_and_stay_untouched(cp):
    dense = cp.arange(7 * 13, dtype=cp.float32).reshape(7, 13)  # 52-byte rows
    before = dense.copy()
    with pytest.raises(TensorMapError, match=r"src: .*stride 52 B .*pad each row to 16 elements"):
        cuadv.tma.copy(dense)
    out = cp.zeros((7, 13), dtype=cp.float32)
    with pytest.raises(TensorMapError, match=r"src: .*16-byte aligned"):
        cuadv.tma.copy(cuadv.tma.empty_pitched((7, 16), cp.float32)[:, 1:14], out)
    with pytest.raises(TensorMapError, match="src: cannot describe ndarray: a NumPy array lives in host memory"):
        cuadv.tma.copy(np.zeros((4, 4), np.float32))
    assert bool(cp.array_equal(dense, before)) and not bool(out.any())


# ---------------------------------------------------------------------------------------------- torch

@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def torch_pitched(torch, shape, dtype, gen):
    rows, cols = shape
    out = cuadv.tma.empty_pitched(shape, dtype, like=torch.empty(0, device="cuda"))
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        out.copy_(torch.randn(shape, generator=gen, device="cuda").to(dtype))
    else:
        out.copy_(torch.randint(0, 256, shape, generator=gen, device="cuda").to(dtype))
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "uint8"])
def test_torch_in_torch_out(torch, shape, name):
    dtype = getattr(torch, name)
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch_pitched(torch, shape, dtype, gen)
    y = cuadv.tma.copy(x)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.device == x.device and y.shape == x.shape
    assert torch.equal(y, x)
    t = cuadv.tma.transpose(x)
    assert isinstance(t, torch.Tensor) and t.dtype == dtype and torch.equal(t, x.T)
    dst = cuadv.tma.empty_pitched(shape[::-1], dtype, like=x)
    assert cuadv.tma.transpose(x, dst) is dst and torch.equal(dst, x.T)


# ---------------------------------------------------------------------------------------------- streams

def _warm(fn):
    fn()  # first launches load modules, which may wait for the whole context: never behind a gate
    fn()


def test_stream_none_follows_a_nonblocking_cupy_stream(cp, rng):
    x, _ = random_pitched(cp, (1000, 999), "float32", rng)
    op = cuadv.tma.prepare_copy(x)
    peek = cp.cuda.Stream(non_blocking=True)

    def look():
        with peek:
            out = cp.asnumpy(op.dst)
        return out

    _warm(op)
    _warm(lambda: x.fill(3.0))
    _warm(lambda: op.dst * 2)
    _warm(look)
    op.dst.fill(cp.nan)
    cp.cuda.Device().synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    gate = StreamGate()
    try:
        with s:
            gate.hold(s.ptr)
            x.fill(3.0)       # the producer, held by the gate
            op()              # stream=None: CuPy's current stream, s
            doubled = op.dst * 2
        assert np.isnan(look()).all()  # nothing ran: the copy is queued on s behind the gate
    finally:
        gate.release()
    s.synchronize()
    assert bool((doubled == 6).all())


def _peek(torch, stream, t):
    """A host copy of ``t`` made on ``stream`` (not the stream under test)."""
    with torch.cuda.stream(stream):
        out = t.cpu()
    stream.synchronize()
    return out


def _waits_behind_a_gated_side_stream(torch, x, dst, call, look):
    """Holds a torch side stream at a gate, fills ``x`` with 3 and calls ``call`` (stream=None: torch's current
    stream, the side one) there: nothing may have written ``dst`` (NaN, as ``look`` sees it) before the gate
    opens, and afterwards dst doubled on the same stream is 6 everywhere."""
    dst.fill_(float("nan"))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    gate = StreamGate()
    try:
        with torch.cuda.stream(side):
            gate.hold(side.cuda_stream)
            x.fill_(3.0)
            call()
            doubled = dst * 2
        assert torch.isnan(look()).all()
    finally:
        gate.release()
    side.synchronize()
    assert bool((doubled == 6).all())


def test_stream_none_follows_a_torch_side_stream(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch_pitched(torch, (1000, 999), torch.float32, gen)
    op = cuadv.tma.prepare_transpose(x)
    peek = torch.cuda.Stream()
    _warm(op)
    _warm(lambda: x.fill_(3.0))
    _warm(lambda: op.dst * 2)
    _warm(lambda: _peek(torch, peek, op.dst))
    _waits_behind_a_gated_side_stream(torch, x, op.dst, op, lambda: _peek(torch, peek, op.dst))


def test_a_kept_one_shot_copy_follows_a_torch_side_stream(torch):
    """The second one-shot call on the same arrays only launches (the kept launch): it still goes to torch's
    current stream, behind the producer's work queued there."""
    gen = torch.Generator(device="cuda").manual_seed(6)
    x = torch_pitched(torch, (600, 500), torch.float32, gen)
    dst = cuadv.tma.empty_pitched(x.shape, torch.float32, like=x)
    cuadv.tma.copy(x, dst)  # checked and kept

    def copy_again():
        assert cuadv.tma.copy(x, dst) is dst

    _warm(lambda: x.fill_(3.0))
    _warm(lambda: dst * 2)
    _waits_behind_a_gated_side_stream(torch, x, dst, copy_again, lambda: _peek(torch, torch.cuda.Stream(), dst))


def test_an_explicit_stream_wins(cp, rng):
    x, host = random_pitched(cp, (257, 300), "float32", rng)
    s = cp.cuda.Stream(non_blocking=True)
    y = cuadv.tma.copy(x, stream=s)
    s.synchronize()
    assert np.array_equal(cp.asnumpy(y), host)


@pytest.mark.parametrize("op", ["copy", "transpose"])
def test_a_callers_rows_ending_inside_16_bytes_are_stored_by_threads(cp, op):
    """A TMA store writes whole 16-byte units (the H200 overwrote columns 61-63 of 64-column rows when a copy
    went into a 61-column slice), so such a dst the caller owns is written by thread stores, and the bytes
    past its rows stay as they were; a dst of whole 16-byte units, or one cuadv allocates, keeps TMA."""
    rng = np.random.default_rng(5)
    host = rng.standard_normal((37, 61)).astype(np.float32)
    src = cuadv.tma.empty_pitched(host.shape, np.float32)
    src[...] = cp.asarray(host)
    want = host if op == "copy" else host.T
    storage = cp.full((want.shape[0], 64), 7.0, dtype=cp.float32)
    view = storage[:, :want.shape[1]]
    prepared = (cuadv.tma.prepare_copy if op == "copy" else cuadv.tma.prepare_transpose)(src, view)
    assert prepared.method == ("threads" if want.shape[1] % 4 else "tma")
    prepared()
    assert np.array_equal(cp.asnumpy(view), want)
    assert bool((storage[:, want.shape[1]:] == 7.0).all())
    assert (cuadv.tma.prepare_copy if op == "copy" else cuadv.tma.prepare_transpose)(src).method == "tma"


@pytest.mark.parametrize("op", ["copy", "transpose"])
def test_a_one_shot_call_with_dst_keeps_its_checked_launch(cp, rng, monkeypatch, op):
    """The second call on the same arrays builds nothing and copies the data as it is now; new arrays at the same
    address (the memory pool hands it back) of the same layout reuse the launch exactly; another shape, another
    box or a read-only dst is checked again."""
    from cuadv.tma import ops

    built = []
    cls = ops.TmaCopy if op == "copy" else ops.TmaTranspose
    monkeypatch.setattr(ops, cls.__name__, type(cls.__name__, (cls,), {
        "__init__": lambda self, *a, **k: (built.append(a), cls.__init__(self, *a, **k))[1]}))
    monkeypatch.setattr(ops, "_KEPT_LAUNCHES", BoundedMemo(ops.KEPT_LAUNCHES_MAX))
    run = cuadv.tma.copy if op == "copy" else cuadv.tma.transpose
    want = (lambda h: h) if op == "copy" else (lambda h: h.T)
    x, host = random_pitched(cp, (300, 200), "float32", rng)
    dst = poisoned(cp, want(host).shape, "float32")
    assert run(x, dst) is dst and np.array_equal(cp.asnumpy(dst), want(host))
    x[...] = -x
    assert run(x, dst) is dst and np.array_equal(cp.asnumpy(dst), want(-host))
    assert len(built) == 1 and len(ops._KEPT_LAUNCHES) == 1
    address = dst.data.ptr
    del dst
    again = cuadv.tma.empty_pitched(want(host).shape, np.float32)
    run(x, again)
    assert np.array_equal(cp.asnumpy(again), want(-host))
    assert len(built) == (1 if again.data.ptr == address else 2)
    run(x, again, box=(32, 32))
    assert len(built) == (2 if again.data.ptr == address else 3) and np.array_equal(cp.asnumpy(again), want(-host))
    small = again[:10]
    run(x[:, :10] if op == "transpose" else x[:10], small)
    assert np.array_equal(cp.asnumpy(small), want(-host)[:10]) and len(ops._KEPT_LAUNCHES) == len(built)
