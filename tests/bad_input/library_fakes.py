"""Stand-ins the library corpus uses to make bad calls without a GPU: arrays that are only a
``__cuda_array_interface__`` (their memory is never touched), the capabilities of a chosen GPU, and a guard that
fails a test where a call reaches the GPU before its arguments are checked."""

from __future__ import annotations

import dataclasses
from typing import Any

from cuadv.device import DeviceCaps


class FakeArray:
    """A device array as far as the checks can tell: shape, element type, byte strides, address, read-only flag."""

    def __init__(self, shape: tuple = (100,), typestr: str = "<f4", strides: tuple | None = None,
                 address: int = 0x10000, readonly: bool = False):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "strides": strides,
                                         "data": (address, readonly), "version": 3}


class FakeCupy(FakeArray):
    """As CuPy's arrays: the library the output of a non-torch input lives in."""


FakeCupy.__module__ = "cupy"


def pitched(rows: int, cols: int, typestr: str = "<f4", address: int = 0x10000, readonly: bool = False) -> FakeArray:
    """A (rows, cols) array whose rows start 16 bytes apart, as TMA needs."""
    itemsize = int(typestr[2:])
    pitch = -(-cols * itemsize // 16) * 16
    return FakeArray((rows, cols), typestr, (pitch, itemsize), address, readonly)


H200 = DeviceCaps(
    ordinal=0, name="fake H200", compute_capability=(9, 0), arch="sm_90a", sm_count=132, l2_cache_bytes=50 << 20,
    persisting_l2_max_bytes=39_321_600, access_policy_max_window_bytes=134_213_632,
    shared_mem_per_block_optin=232_448, shared_mem_per_sm=233_472, max_threads_per_sm=2048, max_blocks_per_sm=32,
    cluster_launch=True, max_cluster_size_portable=8, max_cluster_size_nonportable=16, cooperative_launch=True,
    stream_priority_low=0, stream_priority_high=-5, mem_sync_domain_count=4, tma=True, pdl=True, clc=False,
    driver_version=13000, nvrtc_version=(13, 0))

A100 = dataclasses.replace(
    H200, name="fake A100", compute_capability=(8, 0), arch="sm_80", sm_count=108, shared_mem_per_block_optin=166_912,
    shared_mem_per_sm=167_936, cluster_launch=False, max_cluster_size_portable=0, max_cluster_size_nonportable=0,
    mem_sync_domain_count=1, tma=False, pdl=False)


def forbid(monkeypatch: Any, module: Any, *names: str) -> None:
    """Make each of ``module``'s ``names`` (its ways to the GPU) fail the test when called."""
    def reached(*_args, **_kwargs):
        raise AssertionError("reached the GPU before the arguments were checked")

    for name in names:
        monkeypatch.setattr(module, name, reached)
