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
