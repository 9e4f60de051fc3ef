"""Bad kernel arguments: checked against the parameters the kernel's source declares (cuadv.signature), before
any launch. Each message names the kernel, the argument's position and declaration, what was passed, and
what to do instead. CPU: arrays are described by the CUDA Array Interface (runtime_fakes)."""

import numpy as np
import pytest

from cuadv.args import ArgumentPacker, PackedArguments
from cuadv.errors import KernelArgumentError
from cuadv.launching import LaunchConfig, launch
from cuadv.signature import declared_signature

from .runtime_fakes import HOPPER, DeviceArray, FakeKernel, HostDLPack, fake_gpu  # noqa: F401 (fixture)

SOURCE = r"""
#include <cuda_fp16.h>
// extern "C" __global__ void scale(double* wrong, int n);   (a comment: not the declaration)
extern "C" __global__ void __launch_bounds__(256, 2)
scale(const float* __restrict__ x, float* y, int n, unsigned int flags, float alpha, const float4* v,
      int* idx, unsigned char* bytes, double2* pairs, const __nv_bfloat16* b, void* any, unsigned long long m,
      __nv_bfloat16 beta, float4 bias, float* rows, long long rows_pitch) {}
extern "C" __global__ void empty() {}
"""
SIZES = (8, 8, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 2, 16, 8, 8)
SCALE = declared_signature(SOURCE, "scale")
PTR = 0x7F00_0000_0000  # 256-byte aligned, as every allocation is


def good_args() -> list:
    return [DeviceArray("float32"), DeviceArray("float32"), 7, np.uint32(1), 2.0, DeviceArray("float32"),
            DeviceArray("int32"), DeviceArray("uint8"), DeviceArray("complex128"),
            DeviceArray(typestr="<V2"),  # bfloat16 as a producer without a bfloat16 type describes it
            DeviceArray("float64"), 9, b"\x80\x3f", np.zeros(4, np.float32).tobytes(), DeviceArray("float32"), 64]


def with_arg(index: int, value) -> list:
    args = good_args()
    args[index] = value
    return args


def test_the_well_formed_call_packs():
    packed = PackedArguments(good_args(), SIZES, SCALE, device=0)
    assert packed.blobs[2] == np.int32(7).tobytes() and packed.blobs[4] == np.float32(2.0).tobytes()


# -- arrays for pointer parameters: element type, layout, alignment, memory ----------------------------
@pytest.mark.parametrize("index, value, message", [
    (0, DeviceArray("float64"), r"argument 0 \(const float\* x\): got a float64 array, but const float\* reads "
                                r"float32 elements; convert it \(x\.astype\(cupy\.float32\), torch: "
                                r"x\.to\(torch\.float32\)\) or declare the parameter void\*"),
    (6, DeviceArray("float32"), r"argument 6 \(int\* idx\): got a float32 array, but int\* reads int32 elements"),
    (6, DeviceArray("uint32"), r"argument 6 \(int\* idx\): got a uint32 array, but int\* reads int32 elements"),
    (7, DeviceArray("int32"), r"argument 7 \(unsigned char\* bytes\): got a int32 array, but unsigned char\* reads "
                              r"uint8 elements"),
    (7, DeviceArray("bool"), r"argument 7 \(unsigned char\* bytes\): got a bool array"),
    (8, DeviceArray("complex64"), r"argument 8 \(double2\* pairs\): got a complex64 array, but double2\* reads "
                                  r"complex128 or float64 elements"),
    (9, DeviceArray("float16"), r"argument 9 \(const __nv_bfloat16\* b\): got a float16 array, but const "
                                r"__nv_bfloat16\* reads bfloat16 elements"),
])
def test_an_array_of_another_element_type(index, value, message):
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', " + message):
        PackedArguments(with_arg(index, value), SIZES, SCALE, device=0)


def test_a_void_pointer_takes_any_element_type():
    for dtype in ("int8", "float64", "complex64"):
        PackedArguments(with_arg(10, DeviceArray(dtype)), SIZES, SCALE, device=0)


@pytest.mark.parametrize("value, message", [
    (DeviceArray("float32", shape=(512,), strides=(8,)),
     r"the float32 array of shape \(512,\) has strides \(8,\) B, not C-contiguous; float\* reads it as one dense "
     r"block\. Pass cupy\.ascontiguousarray\(x\) \(torch: x\.contiguous\(\)\), or, for a kernel that addresses rows "
     r"itself, declare y_pitch \(or _stride\) beside it"),
    (DeviceArray("float32", shape=(32, 16), strides=(4, 128)),
     r"the float32 array of shape \(32, 16\) has strides \(4, 128\) B, not C-contiguous"),
])
def test_a_strided_array_for_a_dense_pointer(value, message):
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', argument 1 \(float\* y\): " + message):
        PackedArguments(with_arg(1, value), SIZES, SCALE, device=0)


def test_a_pointer_with_a_pitch_parameter_takes_a_pitched_array():
    pitched = DeviceArray("float32", shape=(100, 60), strides=(256, 4))
    PackedArguments(with_arg(14, pitched), SIZES, SCALE, device=0)


@pytest.mark.parametrize("index, offset, message", [
    (5, 4, r"argument 5 \(const float4\* v\): the array starts at 0x7f0000000004, 4 B past a multiple of 16 B, "
           r"the alignment float4 needs"),
    (1, 2, r"argument 1 \(float\* y\): the array starts at 0x7f0000000002, 2 B past a multiple of 4 B, the "
           r"alignment float needs"),
])
def test_a_view_that_starts_off_its_types_alignment(index, offset, message):
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', " + message + r" .*pass an array that starts "
                                                  r"on a \d+-byte boundary"):
        PackedArguments(with_arg(index, DeviceArray("float32", ptr=PTR + offset)), SIZES, SCALE, device=0)


def test_a_host_numpy_array():
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', argument 0 \(const float\* x\): a NumPy array "
                                                  r"lives in host memory; copy it to the GPU \(cupy\.asarray\)"):
        PackedArguments(with_arg(0, np.zeros(16, np.float32)), SIZES, SCALE, device=0)


def test_a_host_array_through_dlpack():
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', argument 0 \(const float\* x\): HostDLPack lives "
                                                  r"in host memory; kernels need device memory: copy it to the GPU "
                                                  r"\(tensor\.cuda\(\), cupy\.asarray\)"):
        PackedArguments(with_arg(0, HostDLPack()), SIZES, SCALE, device=0)


def test_an_array_on_another_gpu():
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', argument 1 \(float\* y\): the array is in the "
                                                  r"memory of GPU 1, but the kernel launches on GPU 0; copy it there "
                                                  r"\(with cupy\.cuda\.Device\(0\): cupy\.asarray\(x\)\), or run cuadv "
                                                  r"on GPU 1 \(CUADV_DEVICE=1\)"):
        PackedArguments(with_arg(1, DeviceArray("float32", device=1)), SIZES, SCALE, device=0)


@pytest.mark.parametrize("index, value, message", [
    (11, DeviceArray("uint64"), r"argument 11 \(unsigned long long m\): an array cannot be passed for unsigned long "
                                r"long, which is no pointer; pass an int or np\.uint64"),
    (0, [1.0, 2.0], r"argument 0 \(const float\* x\): cannot pass list; use a NumPy scalar, int, float, bytes, or an "
                    r"array with __cuda_array_interface__ or DLPack"),
    (0, None, r"argument 0 \(const float\* x\): cannot pass NoneType"),
    (0, 1.5, r"argument 0 \(const float\* x\): a float \(1\.5\) cannot be passed for const float\*; pass a device "
             r"array \(CuPy, PyTorch\) or its address as an int"),
    (0, np.float64(0.0), r"argument 0 \(const float\* x\): a float64 scalar cannot be passed for const float\*"),
])
def test_something_else_than_an_array_for_a_pointer_or_an_array_for_a_scalar(index, value, message):
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', " + message):
        PackedArguments(with_arg(index, value), SIZES, SCALE, device=0)


# -- scalars against their declared C type ---------------------------------------------------------------
@pytest.mark.parametrize("index, value, message", [
    (2, 2**40, r"argument 2 \(int n\): 1099511627776 is outside the range of int, \[-2147483648, 2147483647\]"),
    (2, 2**31, r"argument 2 \(int n\): 2147483648 is outside the range of int, \[-2147483648, 2147483647\]"),
    (3, -1, r"argument 3 \(unsigned int flags\): -1 is outside the range of unsigned int, \[0, 4294967295\]"),
    (3, 2**32, r"argument 3 \(unsigned int flags\): 4294967296 is outside the range of unsigned int"),
    (2, 2.5, r"argument 2 \(int n\): a float \(2\.5\) cannot be passed for int; pass an int or np\.int32"),
    (2, np.float32(2), r"argument 2 \(int n\): a float32 scalar cannot be passed for int; pass np\.int32\(\.\.\.\)"),
    (2, np.uint32(3_000_000_000), r"argument 2 \(int n\): uint32 3000000000 is outside the range of int"),
    (2, True, r"argument 2 \(int n\): bool is ambiguous as a kernel argument"),
    (4, np.int32(2), r"argument 4 \(float alpha\): a int32 scalar cannot be passed for float; pass "
                     r"np\.float32\(\.\.\.\)"),
    (4, 2**24 + 1, r"argument 4 \(float alpha\): the int 16777217 has no exact float value; pass a float"),
    (4, np.float64(2.0), r"argument 4 \(float alpha\): the kernel declares a 4-byte parameter but got 8 bytes"),
    (12, 0.5, r"argument 12 \(__nv_bfloat16 beta\): a float \(0\.5\) cannot be passed for __nv_bfloat16; pass a "
              r"NumPy scalar of the parameter's type or its bytes"),
    (13, 1, r"argument 13 \(float4 bias\): an int cannot be passed for float4; pass a NumPy scalar of that type or "
            r"its bytes"),
    (13, b"\x00" * 12, r"argument 13 \(float4 bias\): the kernel declares a 16-byte parameter but got 12 bytes"),
])
def test_a_scalar_its_declared_type_cannot_hold(index, value, message):
    with pytest.raises(KernelArgumentError, match=r"kernel 'scale', " + message):
        PackedArguments(with_arg(index, value), SIZES, SCALE, device=0)


def test_an_int_for_a_float_parameter_is_its_exact_value():
    packed = PackedArguments(with_arg(4, 3), SIZES, SCALE, device=0)
    assert packed.blobs[4] == np.float32(3.0).tobytes()  # not the bits of the int 3


# -- how many -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("count, message", [
    (15, r"kernel 'scale' takes 16 arguments \(const float\* x, float\* y, int n, unsigned int flags, .*long long "
         r"rows_pitch\), got 15"),
    (17, r"kernel 'scale' takes 16 arguments .*, got 17"),
])
def test_the_wrong_number_of_arguments(count, message):
    args = (good_args() * 2)[:count]
    with pytest.raises(KernelArgumentError, match=message):
        PackedArguments(args, SIZES, SCALE, device=0)


def test_an_argument_for_a_kernel_without_parameters():
    with pytest.raises(KernelArgumentError, match=r"kernel 'empty' takes 0 arguments \(none\), got 1"):
        PackedArguments([DeviceArray()], (), declared_signature(SOURCE, "empty"), device=0)


# -- the repeated-launch path: a cached plan still checks every call ---------------------------------
class ndarray:  # noqa: N801 (CuPy's name: the packer's fast path recognises it)
    """What the packer reads of a CuPy array: its pointer, GPU, layout and element type."""

    __module__ = "cupy._core.core"

    def __init__(self, dtype="float32", ptr=PTR, device=0, contiguous=True):
        self.dtype, self.size = np.dtype(dtype), 1024
        self.data = type("MemoryPointer", (), {"ptr": ptr, "device_id": device})()
        self.flags = type("Flags", (), {"c_contiguous": contiguous})()
        strides = (4,) if contiguous else (8,)
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (1024,), "typestr": self.dtype.str,
                                         "strides": strides, "version": 3}


@pytest.mark.parametrize("bad, message", [
    (ndarray("float64"), r"got a float64 array, but float\* reads float32 elements"),
    (ndarray(contiguous=False), r"the float32 array of shape \(1024,\) has strides \(8,\) B, not C-contiguous"),
    (ndarray(ptr=PTR + 2), r"the array starts at 0x7f0000000002, 2 B past a multiple of 4 B"),
    (ndarray(device=1), r"the array is in the memory of GPU 1, but the kernel launches on GPU 0"),
])
def test_a_cached_plan_checks_each_cupy_array(bad, message):
    source = 'extern "C" __global__ void add(float* y, int n) {}'
    packer = ArgumentPacker((8, 4), declared_signature(source, "add"), device=0)
    packer.pack((ndarray(), 5))  # the plan for (ndarray, int)
    with pytest.raises(KernelArgumentError, match=r"kernel 'add', argument 0 \(float\* y\): " + message):
        packer.pack((bad, 5))  # the same types: the cached plan
    with pytest.raises(KernelArgumentError, match=r"kernel 'add', argument 1 \(int n\): 2147483648 is outside the "
                                                  r"range of int"):
        packer.pack((ndarray(), 2**31))


class Tensor:
    """What the packer reads of a PyTorch CUDA tensor: the CUDA Array Interface (a property of the class) and the
    DLPack device."""

    def __init__(self, typestr="<f4", ptr=PTR, strides=None, device=0):
        self._cai = {"data": (ptr, False), "shape": (1024,), "typestr": typestr, "strides": strides, "version": 2}
        self.device = device

    @property
    def __cuda_array_interface__(self):
        return dict(self._cai)

    def __dlpack_device__(self):
        return (2, self.device)


@pytest.mark.parametrize("bad, message", [
    (Tensor("<f8"), r"got a float64 array, but float\* reads float32 elements"),
    (Tensor(strides=(8,)), r"the float32 array of shape \(1024,\) has strides \(8,\) B, not C-contiguous"),
    (Tensor(ptr=PTR + 2), r"the array starts at 0x7f0000000002, 2 B past a multiple of 4 B"),
    (Tensor(device=1), r"the array is in the memory of GPU 1, but the kernel launches on GPU 0"),
])
def test_a_cached_plan_checks_each_tensor(bad, message):
    packer = ArgumentPacker((8, 4), declared_signature('extern "C" __global__ void add(float* y, int n) {}', "add"),
                            device=0)
    packer.pack((Tensor(), 5))  # the plan for (Tensor, int)
    with pytest.raises(KernelArgumentError, match=r"kernel 'add', argument 0 \(float\* y\): " + message):
        packer.pack((bad, 5))


def test_a_launch_with_a_mismatched_array_reaches_no_gpu(fake_gpu):
    fake_gpu(HOPPER)
    source = 'extern "C" __global__ void add(float* y, int n) {}'
    kernel = FakeKernel(name="add", sizes=(8, 4), source=source)
    with pytest.raises(KernelArgumentError, match=r"kernel 'add', argument 0 \(float\* y\): got a float64 array"):
        launch(kernel, LaunchConfig(grid=4, block=256), DeviceArray("float64"), 1024)


# -- on the GPU: real CuPy arrays and tensors into a compiled kernel; the context stays usable -----------
GPU_SOURCE = r"""
extern "C" __global__ void add_rows(float* y, const float4* v, unsigned int* hits, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { y[i] += v[i / 4].x; atomicAdd(hits, 1u); }
}
"""


@pytest.fixture
def add_rows():
    from cuadv.compiler import compile_source

    return compile_source(GPU_SOURCE, name="bad_input_add_rows").kernel("add_rows")


def _gpu_args(cp, n=64):
    return cp.zeros(n, cp.float32), cp.ones(n, cp.float32), cp.zeros(1, cp.uint32)


@pytest.mark.gpu
def test_gpu_mismatched_strided_and_misaligned_arrays_raise_then_a_good_call_runs(cp, add_rows):
    y, v, hits = _gpu_args(cp)
    config = LaunchConfig(grid=1, block=64)
    with pytest.raises(KernelArgumentError, match=r"argument 0 \(float\* y\): got a float64 array"):
        launch(add_rows, config, y.astype(cp.float64), v, hits, 64)
    with pytest.raises(KernelArgumentError, match=r"argument 0 \(float\* y\): the float32 array of shape \(32,\) has "
                                                  r"strides \(8,\) B, not C-contiguous"):
        launch(add_rows, config, y[::2], v, hits, 32)
    with pytest.raises(KernelArgumentError, match=r"argument 1 \(const float4\* v\): the array starts at 0x[0-9a-f]+, "
                                                  r"4 B past a multiple of 16 B"):
        launch(add_rows, config, y, v[1:], hits, 63)
    with pytest.raises(KernelArgumentError, match=r"argument 2 \(unsigned int\* hits\): got a int32 array"):
        launch(add_rows, config, y, v, hits.view(cp.int32), 64)
    launch(add_rows, config, y, v, hits, 64)  # the same launcher, the right arguments: it runs once
    cp.cuda.Device().synchronize()
    assert int(hits.get()[0]) == 64 and (y.get() == 1).all()


@pytest.mark.gpu
def test_gpu_an_int32_tensor_for_an_unsigned_pointer(cp, add_rows):
    torch = pytest.importorskip("torch")
    y, v, _ = _gpu_args(cp)
    hits = torch.zeros(1, dtype=torch.int32, device="cuda")
    with pytest.raises(KernelArgumentError, match=r"argument 2 \(unsigned int\* hits\): got a int32 array, but "
                                                  r"unsigned int\* reads uint32 elements"):
        launch(add_rows, LaunchConfig(grid=1, block=64), y, v, hits, 64)
    assert int(hits.item()) == 0


@pytest.mark.gpu
def test_gpu_an_array_on_another_gpu(cp, add_rows):
    from cuadv.device import current_device

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    here = current_device().ordinal
    other = 1 if here == 0 else 0
    with cp.cuda.Device(other):
        y_there = cp.zeros(64, cp.float32)
    _, v, hits = _gpu_args(cp)
    with pytest.raises(KernelArgumentError, match=rf"argument 0 \(float\* y\): the array is in the memory of GPU "
                                                  rf"{other}, but the kernel launches on GPU {here}"):
        launch(add_rows, LaunchConfig(grid=1, block=64), y_there, v, hits, 64)
