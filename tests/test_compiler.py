"""Compilation without a GPU: targets, the resource report, errors with the NVRTC log, the cache."""

import pytest

from cuadv import cache as disk_cache
from cuadv._cuda import gpu_available
from cuadv.arch import arch_for, parse_arch
from cuadv.compiler import compile_source, parse_resource_report
from cuadv.errors import CompileError

SRC = r"""
#include <cuda/ptx>
#include <cooperative_groups.h>
template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; }
extern "C" __global__ void plain(int* x) { __shared__ int s[64]; s[threadIdx.x] = 1; __syncthreads(); x[threadIdx.x] = s[63 - threadIdx.x]; }
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_compiles_for_target_without_gpu(arch):
    m = compile_source(SRC, name="t", arch=arch, name_expressions=["scale<3>"])
    assert m.cubin[:4] == b"\x7fELF"
    assert f".target {arch}" in m.ptx
    assert "scale<3>" in m.lowered_names and m.lowered_names["scale<3>"].startswith("_Z")
    plain = m.resources_for("plain")
    assert plain.registers > 0 and plain.static_shared_bytes == 256
    assert m.resources_for("scale<3>").spill_store_bytes == 0


def test_arch_from_capability():
    assert arch_for((9, 0)) == "sm_90a"
    assert arch_for((10, 0)) == "sm_100a"
    assert arch_for((8, 6)) == "sm_86"
    assert parse_arch("sm_100a") == (10, 0)
    with pytest.raises(ValueError, match="sm_XY"):
        parse_arch("hopper")


def test_compile_error_carries_log_options_and_numbered_source():
    with pytest.raises(CompileError) as info:
        compile_source('extern "C" __global__ void k() { int x = ; }', name="broken", arch="sm_90a")
    err = info.value
    assert "expected an expression" in err.log
    assert "-arch=sm_90a" in err.options
    text = str(err)
    assert "broken" in text and "    1  extern" in text


def test_cache_hit_and_corrupt_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void k(int* x) { x[0] = 7; }'
    first = compile_source(src, name="cached", arch="sm_90a")
    second = compile_source(src, name="cached", arch="sm_90a")
    assert not first.from_cache and second.from_cache and second.cubin == first.cubin
    (entry,) = list(tmp_path.glob("*.bin"))
    entry.write_bytes(entry.read_bytes()[:-10] + b"corruption")
    third = compile_source(src, name="cached", arch="sm_90a")
    assert not third.from_cache and third.cubin == first.cubin
    assert compile_source(src + "\n", name="cached", arch="sm_90a").from_cache is False


def test_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUADV_CACHE", "0")
    compile_source('extern "C" __global__ void k() {}', name="nocache", arch="sm_90a")
    assert disk_cache.cache_dir() is None and not list(tmp_path.glob("*.bin"))


def test_resource_report_parser():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""
    r = parse_resource_report(log)["k"]
    assert (r.registers, r.static_shared_bytes, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes, r.barriers) \
        == (40, 1024, 8, 4, 12, 1)


def test_cache_key_follows_the_callers_own_headers(tmp_path, monkeypatch):
    """A header from an -I directory (and the files it includes) or from the working directory decides the code as
    the source does: editing one compiles again (the key named only cuadv's, CCCL's and cudart's headers, so the
    module built from the old text came back)."""
    import re

    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    inc, work = tmp_path / "inc", tmp_path / "work"
    (inc / "sub").mkdir(parents=True)
    work.mkdir()
    (inc / "sub" / "outer.cuh").write_text('#include "inner.cuh"\n')
    (inc / "sub" / "inner.cuh").write_text("#define INNER 5\n")
    (work / "local.cuh").write_text("#define LOCAL 1\n")
    monkeypatch.chdir(work)  # NVRTC looks for a quoted include of the source in the working directory
    src = ('#include "local.cuh"\n#include <sub/outer.cuh>\n'
           'extern "C" __global__ void k(int* x) { x[0] = LOCAL * 100 + INNER; }')

    def build():
        m = compile_source(src, name="own_headers", arch="sm_90a", options=[f"-I{inc}"])
        return m.from_cache, re.findall(r"mov\.u32\s+%r\d+, (\d+);", m.ptx)

    assert build() == (False, ["105"]) and build() == (True, ["105"])
    (work / "local.cuh").write_text("#define LOCAL 2\n")
    assert build() == (False, ["205"])
    (inc / "sub" / "inner.cuh").write_text("#define INNER 7\n")
    assert build() == (False, ["207"]) and build() == (True, ["207"])


def test_cache_key_follows_a_pre_included_header(tmp_path, monkeypatch):
    """A header given as an option (--pre-include) decides the code as an #include does: editing it compiles
    again instead of returning the module built from its old text."""
    import re

    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pre.h").write_text("#define VALUE 1\n")
    src = 'extern "C" __global__ void k(int* x) { x[0] = VALUE * 100 + 3; }'

    def build(option):
        m = compile_source(src, name="pre_included", arch="sm_90a", options=option)
        return m.from_cache, re.findall(r"mov\.u32\s+%r\d+, (\d+);", m.ptx)

    for option in (["--pre-include=pre.h"], ["-include", "pre.h"]):
        (tmp_path / "pre.h").write_text("#define VALUE 1\n")
        first = build(option)
        assert first[1] == ["103"] and build(option) == (True, ["103"])
        (tmp_path / "pre.h").write_text("#define VALUE 2\n")
        assert build(option) == (False, ["203"])


def test_cache_key_follows_the_nvrtc_library_file(tmp_path, monkeypatch):
    """A patch release of NVRTC keeps its major.minor version: the key holds which library file compiled the code
    (path, size, modification time), so an upgraded one compiles again."""
    from cuadv import compiler

    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "cache"))
    src = 'extern "C" __global__ void k(int* x) { x[0] = 1; }'
    monkeypatch.setattr(compiler, "library_identity", lambda name: f"/lib/lib{name}.so.13 100 1")
    assert not compile_source(src, name="nvrtc_file", arch="sm_90a").from_cache
    assert compile_source(src, name="nvrtc_file", arch="sm_90a").from_cache
    monkeypatch.setattr(compiler, "library_identity", lambda name: f"/lib/lib{name}.so.13 104 2")
    assert not compile_source(src, name="nvrtc_file", arch="sm_90a").from_cache


def test_nvrtc_writes_only_into_buffers_of_its_own(tmp_path, monkeypatch):
    """NVRTC fills the log, CUBIN and PTX buffers it is handed: each must be a writable buffer made for it (b" " * 1
    is the interpreter's one b" ", which a one-NUL log would overwrite for the whole process)."""
    from cuadv import compiler

    real = compiler.nvrtc()
    written = []

    class Recording:
        def __getattr__(self, name):
            call = getattr(real, name)
            if name not in ("nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX"):
                return call

            def checked(prog, buf):
                assert not memoryview(buf).readonly, f"{name} was given an immutable {type(buf).__name__}"
                written.append(name)
                return call(prog, buf)
            return checked

    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiler, "nvrtc", Recording)
    m = compile_source('extern "C" __global__ void k(int* x) { x[0] = 1; }', name="own_buffers", arch="sm_90a")
    assert written == ["nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX"]
    assert isinstance(m.cubin, bytes) and m.cubin[:4] == b"\x7fELF" and ".entry k" in m.ptx and b" " == bytes([32])


@pytest.mark.skipif(gpu_available(), reason="a GPU is present: the kernel loads")
def test_loading_a_kernel_without_a_gpu_raises_no_gpu_error_and_leaves_the_driver_usable():
    """Compiling for a named target works without a GPU (NoGpuError's own advice); loading its kernel then raises
    NoGpuError, not cuda.core's SystemError, and later calls still answer instead of hanging."""
    from cuadv import current_device
    from cuadv.errors import NoGpuError

    m = compile_source('extern "C" __global__ void k(int* x) { x[0] = 1; }', name="no_gpu_load", arch="sm_90a")
    for _ in range(2):
        with pytest.raises(NoGpuError, match="no CUDA GPU"):
            m.kernel("k")
    with pytest.raises(NoGpuError):
        current_device()
