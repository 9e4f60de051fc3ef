"""Many small tasks without a GPU: the three parts compile (two as relocatable device code), the
device-runtime linking helper finds cudadevrt or says where it looked, argument checks."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cuadv import linking
from cuadv.compiler import compile_source, kernel_source
from cuadv.errors import CompileError, LaunchConfigError
from cuadv.labs.launch_many import (SANITIZER_TOOL_ENV, TASK_DTYPE, CupyLaunches, HostLaunches, LaunchManyLab,
                                    build_modules, check_chunk, check_task_count, device_side_skip_reason, runs_for,
                                    sanitizer_tool, task_params)
from cuadv.linking import DeviceRuntimeNotFoundError, LinkError, find_cudadevrt, is_relocatable, link_device_runtime

PARTS = {0: {"lm_task", "lm_task_args", "lm_persistent"}, 1: {"lm_dp_parent", "lm_dp_child"},
         2: {"lm_graph_task", "lm_graph_launcher"}}


@pytest.fixture(scope="module", params=["sm_90a", "sm_100a"])
def modules(request):
    return build_modules(request.param)


def test_every_part_compiles(modules):
    for part, names in PARTS.items():
        assert names == set(modules[part].resources), part


def test_device_side_parts_are_relocatable(modules):
    assert not is_relocatable(modules[0])
    assert is_relocatable(modules[1]) and is_relocatable(modules[2])
    assert "-rdc=true" in modules[1].options


def test_device_runtime_calls_are_left_for_the_linker(modules):
    # The relocatable code calls into cudadevrt: its entry points are external functions here.
    externs = {part: {line.split()[-1] for line in modules[part].ptx.splitlines() if line.startswith(".extern .func")}
               for part in (0, 1, 2)}
    assert not externs[0]
    assert any("LaunchDevice" in name for name in externs[1])
    assert "cudaGraphLaunch" in externs[2]


def test_unknown_part_is_a_compile_error():
    with pytest.raises(CompileError, match="CUADV_LM_PART must be 0"):
        compile_source(kernel_source("launch_many.cu"), name="lm_bad", arch="sm_90a", defines={"CUADV_LM_PART": 7})


def test_task_params_layout():
    blob = task_params(0x1234_5678_9ABC, 42, 500)
    rec = np.frombuffer(blob, TASK_DTYPE)[0]
    assert len(blob) == 24 and rec["counts"] == 0x1234_5678_9ABC and rec["n"] == 42 and rec["task_ns"] == 500


def test_argument_checks():
    assert check_task_count(0) == 0 and check_chunk(16) == 16
    with pytest.raises(LaunchConfigError, match="task count -1 is outside"):
        check_task_count(-1)
    with pytest.raises(LaunchConfigError, match="tasks per ticket must be in"):
        check_chunk(0)


def test_host_launches_take_few_repeats_at_large_n():
    host = object.__new__(HostLaunches)
    peer = object.__new__(CupyLaunches)
    assert runs_for(host, 100_000, quick=False) == (1, 2) and runs_for(peer, 10, quick=True) == (1, 5)


def test_supported_names_capability_and_fallback():
    class Caps:
        compute_capability = (8, 6)

        def cc_string(self):
            return "8.6"

    reason = LaunchManyLab().supported(Caps())
    assert "compute capability >= 9.0 (got 8.6)" in reason and "fallback" in reason


# -- under compute-sanitizer ---------------------------------------------------------------------------
def test_graph_task_kernel_has_no_block_barrier(modules):
    # synccheck reported the old __syncthreads of lm_graph_task; the cursor now goes by shuffle.
    ptx = modules[2].ptx
    start = ptx.index(".entry lm_graph_task")
    end = ptx.find(".entry", start + 1)
    body = ptx[start:end if end > 0 else None]
    assert "bar.sync" not in body and "barrier.sync" not in body and "shfl.sync" in body


def test_sanitizer_tool_from_the_environment():
    assert sanitizer_tool({SANITIZER_TOOL_ENV: "initcheck"}) == "initcheck"
    assert sanitizer_tool({}) is None
    assert sanitizer_tool({"LD_PRELOAD": "/opt/cuda/compute-sanitizer/libsanitizer-collection.so"}) == ""


def test_device_side_mechanisms_run_only_under_tools_that_check_them():
    assert device_side_skip_reason(None) is None and device_side_skip_reason("memcheck") is None
    for tool in ("racecheck", "synccheck", "initcheck"):
        reason = device_side_skip_reason(tool)
        assert f"skipped under compute-sanitizer {tool}" in reason and "memcheck checks them" in reason
    assert "tool unknown" in device_side_skip_reason("")


# -- linking helper --------------------------------------------------------------------------------
def test_find_cudadevrt_here():
    path = find_cudadevrt()
    assert path.name == "libcudadevrt.a" and path.is_file()


def test_override_by_environment(tmp_path, monkeypatch):
    lib = tmp_path / "libcudadevrt.a"
    lib.write_bytes(b"!<arch>\n")
    monkeypatch.setenv("CUADV_CUDADEVRT", str(lib))
    assert find_cudadevrt() == lib


def test_missing_cudadevrt_names_every_place(monkeypatch, tmp_path):
    monkeypatch.setenv("CUADV_CUDADEVRT", str(tmp_path / "nope.a"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(linking, "_pathfinder_candidate",
                        lambda: (None, "cuda.pathfinder.find_static_lib('cudadevrt') (StaticLibNotFoundError)"))
    monkeypatch.setattr(linking, "_wheel_candidates", lambda: [tmp_path / "wheel" / "libcudadevrt.a"])
    real = linking._toolkit_candidates
    monkeypatch.setattr(linking, "_toolkit_candidates",
                        lambda roots: real([str(tmp_path / "cuda") if r == "/usr/local/cuda" else r for r in roots]))
    with pytest.raises(DeviceRuntimeNotFoundError) as info:
        find_cudadevrt()
    text = str(info.value)
    assert "libcudadevrt.a, which was not found" in text
    assert "nope.a (no such file)" in text and "find_static_lib" in text
    assert str(tmp_path / "cuda" / "lib64" / "libcudadevrt.a") in text
    assert str(tmp_path / "wheel" / "libcudadevrt.a") in text
    assert "CUADV_CUDADEVRT" in text and "nvidia-cuda-runtime" in text


def test_linking_a_missing_library_fails_before_the_linker(monkeypatch, modules):
    def missing():
        raise DeviceRuntimeNotFoundError("no cudadevrt")

    monkeypatch.setattr(linking, "find_cudadevrt", missing)
    with pytest.raises(DeviceRuntimeNotFoundError, match="no cudadevrt"):
        link_device_runtime(modules[1])


def test_linking_needs_relocatable_code(modules):
    with pytest.raises(LinkError, match="compile it with compile_source\\(..., rdc=True\\)"):
        link_device_runtime(modules[0])


def _nvlink_matching_nvrtc():
    """nvlink of a toolkit whose version is at least NVRTC's (an older one refuses newer cubins)."""
    from cuadv._cuda import nvrtc_version

    nvlink = shutil.which("nvlink") or next((p for p in ("/usr/local/cuda/bin/nvlink",) if Path(p).exists()), None)
    if nvlink is None:
        return None
    out = subprocess.run([nvlink, "--version"], capture_output=True, text=True).stdout
    for token in out.replace(",", " ").split():
        if token.startswith("V") and token[1:2].isdigit():
            major, minor = (int(x) for x in token[1:].split(".")[:2])
            return nvlink if (major, minor) >= nvrtc_version() else None
    return None


@pytest.mark.parametrize("part", [1, 2])
def test_offline_link_resolves_every_device_runtime_symbol(tmp_path, part):
    nvlink = _nvlink_matching_nvrtc()
    if nvlink is None:
        pytest.skip("no nvlink at least as new as NVRTC (an older nvlink refuses newer cubins)")
    module = build_modules("sm_90a")[part]
    obj = tmp_path / "in.cubin"
    obj.write_bytes(module.cubin)
    proc = subprocess.run([nvlink, "-arch=sm_90a", "-cpu-arch=X86_64", str(obj), str(find_cudadevrt()), "-o",
                           str(tmp_path / "out.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
