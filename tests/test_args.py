"""Argument packing follows the kernel's parameter sizes; bad arguments raise before launch."""

import ctypes

import numpy as np
import pytest

from cuadv.args import PackedArguments, pack_argument
from cuadv.errors import KernelArgumentError


class FakeArray:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


def test_ints_and_floats_take_the_parameter_size():
    assert pack_argument(5, 4, 0) == np.int32(5).tobytes()
    assert pack_argument(-1, 8, 0) == np.int64(-1).tobytes()
    assert pack_argument(2**32 - 1, 4, 0) == np.uint32(2**32 - 1).tobytes()
    assert pack_argument(1.5, 4, 0) == np.float32(1.5).tobytes()  # never a double into a float parameter
    assert pack_argument(1.5, 8, 0) == np.float64(1.5).tobytes()


def test_arrays_pass_their_device_pointer():
    assert pack_argument(FakeArray(0xDEAD0000), 8, 0) == (0xDEAD0000).to_bytes(8, "little")


def test_structs_pass_as_bytes():
    class S(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_float)]

    assert pack_argument(S(1, 2.0), 8, 0) == bytes(S(1, 2.0))
    assert pack_argument(b"\x01" * 16, 16, 0) == b"\x01" * 16


@pytest.mark.parametrize("value, size, message", [
    (2**31 * 4, 4, "does not fit the kernel's 4-byte parameter"),
    (True, 4, "bool is ambiguous"),
    (np.zeros(3, np.float32), 8, "host memory"),
    (np.float64(1.0), 4, "4-byte parameter but got 8 bytes"),
    ("text", 8, "cannot pass str"),
])
def test_bad_arguments(value, size, message):
    with pytest.raises(KernelArgumentError, match=message):
        pack_argument(value, size, 0)


def test_argument_count_is_checked():
    with pytest.raises(KernelArgumentError, match="takes 2 arguments, got 1"):
        PackedArguments([1], [4, 8])
    packed = PackedArguments([np.int32(3), 7], [4, 8])
    assert packed.address != 0
    assert [int(v) for v in packed.as_scalars()] == [3, 7]
    assert PackedArguments([b"x" * 48], [48]).as_scalars() is None


# -- the repeated-launch packer: the same bytes as PackedArguments, plans per argument types ---------
from cuadv.args import ArgumentPacker  # noqa: E402


def _params_through_pointers(packer: ArgumentPacker) -> list[bytes]:
    """What the driver reads: follow the void* array to each parameter."""
    if not packer.sizes:
        return []
    slots = (ctypes.c_void_p * len(packer.sizes)).from_address(packer.address)
    return [ctypes.string_at(slots[i], size) for i, size in enumerate(packer.sizes)]


class ParamBytes:
    def __init__(self, data):
        self.data = data

    def kernel_param_bytes(self):
        return self.data


class DeviceArray:  # __cuda_array_interface__ on the class, as CuPy, PyTorch and cuadv's DeviceBuffer have it
    def __init__(self, ptr):
        self.ptr = ptr

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (1,), "typestr": "|u1", "version": 3}


class S(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_float)]


SIZES = (8, 4, 4, 8, 2, 1, 24, 8, 8, 8, 16, 4, 8, 4, 2)
CALLS = [
    # pointer, int32 param from int, float param from float, double from float, half, uint8, struct bytes,
    # interface array, instance interface, uint64, kernel_param_bytes, float32, int64 negative, NaN, int into 2 bytes
    (FakeArray(0x1000), 7, 1.5, 2.25, np.float16(0.5), np.uint8(200), b"\x01" * 24, DeviceArray(0xBEEF00),
     FakeArray(0x2000), np.uint64(2**64 - 1), ParamBytes(b"\x02" * 16), np.float32(-3.5), np.int64(-9), float("nan"),
     -2),
    (FakeArray(0x3000), -1, 1e-3, -0.0, np.float16(-2.0), np.uint8(0), bytes(range(24)), DeviceArray(0xCAFE00),
     FakeArray(0x4000), np.uint64(5), ParamBytes(b"\x03" * 16), np.float32(np.inf), np.int64(2**40), 3e38, 65535),
    (FakeArray(0x5000), 2**32 - 1, 1e39, 1e308, np.float16(np.nan), np.uint8(1), bytearray(24), DeviceArray(0),
     FakeArray(0x6000), np.uint64(0), ParamBytes(bytes(16)), np.float32(np.nan), np.int64(0), -1e-45, 0),
]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 1e39 into a float: inf, both paths
def test_packer_writes_the_bytes_of_the_uncached_path():
    packer = ArgumentPacker(SIZES)
    for args in CALLS + CALLS[::-1]:
        packer.pack(args)
        want = PackedArguments(args, SIZES).blobs
        assert packer.blobs() == want
        assert _params_through_pointers(packer) == want


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_packer_memory_stays_put_and_slots_are_aligned():
    packer = ArgumentPacker(SIZES)
    address = packer.address
    slots = list((ctypes.c_void_p * len(SIZES)).from_address(address))
    for args in CALLS:
        packer.pack(args)
    assert packer.address == address and list((ctypes.c_void_p * len(SIZES)).from_address(address)) == slots
    assert all(o % 8 == 0 for o in packer.offsets)
    assert ArgumentPacker(()).address == 0


def test_a_plan_per_type_signature_and_a_new_one_when_types_change():
    packer = ArgumentPacker((4, 8))
    packer.pack((np.int32(3), FakeArray(0x10)))
    packer.pack((np.int32(4), FakeArray(0x20)))
    assert len(packer._plans) == 1
    packer.pack((5, FakeArray(0x30)))  # int instead of np.int32: another plan, the right bytes
    assert len(packer._plans) == 2
    assert packer.blobs() == [np.int32(5).tobytes(), (0x30).to_bytes(8, "little")]
    packer.pack((np.int32(-6), 7))  # an int into the pointer-sized parameter
    assert packer.blobs() == [np.int32(-6).tobytes(), np.uint64(7).tobytes()]
    packer.pack((np.int32(8), FakeArray(0x40)))  # back to the first signature
    assert len(packer._plans) == 3
    assert packer.blobs() == [np.int32(8).tobytes(), (0x40).to_bytes(8, "little")]


@pytest.mark.parametrize("first, bad, message", [
    ((np.int32(1),), (np.int64(1),), "4-byte parameter but got 8 bytes"),  # the size changes with the type
    ((1,), (2**32,), "does not fit the kernel's 4-byte parameter"),  # same type, value out of range
    ((1,), (-(2**31) - 1,), "does not fit the kernel's 4-byte parameter"),
    ((b"abcd",), (b"abc",), "4-byte parameter but got 3 bytes"),  # same type, another length
    ((bytearray(4),), (bytearray(5),), "4-byte parameter but got 5 bytes"),
    ((1,), (True,), "bool is ambiguous"),
    ((1,), ("x",), "cannot pass str"),
    ((1,), (np.zeros(1, np.int32),), "host memory"),
    ((1,), (1, 2), "takes 1 arguments, got 2"),
    ((1,), (), "takes 1 arguments, got 0"),
])
def test_repeated_calls_raise_the_uncached_errors(first, bad, message):
    packer = ArgumentPacker((4,))
    packer.pack(first)
    with pytest.raises(KernelArgumentError, match=message):
        packer.pack(bad)
    with pytest.raises(KernelArgumentError, match=message):
        PackedArguments(bad, (4,))
    packer.pack(first)  # still usable after the error
    assert packer.blobs() == PackedArguments(first, (4,)).blobs


def test_struct_instances_are_packed_each_call():
    packer = ArgumentPacker((8,))
    s = S(1, 2.0)
    packer.pack((s,))
    s.a = 9  # a mutable argument: its current value, not the first one
    packer.pack((s,))
    assert packer.blobs() == [bytes(S(9, 2.0))]


class GradTensor:
    """What cuadv reads of a torch CUDA tensor that requires grad: torch refuses its __cuda_array_interface__
    (RuntimeError, not AttributeError), while its detached alias, the same memory, gives it."""

    __module__ = "torch"

    def __init__(self, ptr=0xBEEF0000, requires_grad=True):
        self.ptr, self.requires_grad = ptr, requires_grad
        self.shape = (4,)

    @property
    def __cuda_array_interface__(self):
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad. If gradients "
                               "aren't required, use var.detach() to get Variable that doesn't require grad.")
        return {"data": (self.ptr, False), "shape": self.shape, "typestr": "<f4", "version": 2}

    def detach(self):
        return GradTensor(self.ptr, requires_grad=False)

    def __dlpack_device__(self):
        return (2, 0)


def test_a_tensor_that_requires_grad_passes_its_memory():
    """Kernel arguments, the array reader and the histogram's input check take a tensor that requires grad (as
    torch.histc does) through its detached alias: same address, no autograd involvement."""
    from cuadv.histograms.launcher import device_array as histogram_input
    from cuadv.interop import cuda_array_interface, device_array, device_pointer

    t = GradTensor()
    assert cuda_array_interface(t)["data"][0] == 0xBEEF0000
    assert device_pointer(t) == 0xBEEF0000
    assert pack_argument(t, 8, 0) == (0xBEEF0000).to_bytes(8, "little")
    arr = device_array(t)
    assert (arr.ptr, arr.shape, arr.owner) == (0xBEEF0000, (4,), t)
    assert histogram_input(t, "x").ptr == 0xBEEF0000
    assert PackedArguments([t], (8,), device=0).blobs == [(0xBEEF0000).to_bytes(8, "little")]
    packer = ArgumentPacker((8,), device=0)
    for ptr in (0xBEEF0000, 0xBEEF0100):  # the plan made for the type, then the cached plan
        packer.pack((GradTensor(ptr),))
        assert packer.blobs() == [ptr.to_bytes(8, "little")]


def test_other_runtime_errors_of_the_interface_propagate():
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("broken producer")

    from cuadv.interop import cuda_array_interface

    with pytest.raises(RuntimeError, match="broken producer"):
        cuda_array_interface(Broken())
