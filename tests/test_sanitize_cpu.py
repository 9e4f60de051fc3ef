"""Finding compute-sanitizer for `cuadv check` without a GPU: wheel, then PATH, then the toolkit."""

import io
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from cuadv.app import sanitize

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fake executables are POSIX files")


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


class _FakeDist:
    def __init__(self, root: Path):
        self.root = root

    def locate_file(self, rel):
        return self.root / rel


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Every place a compute-sanitizer can come from, each holding one; a test removes some."""
    wheel_root = tmp_path / "site-packages"
    wheel = _exe(wheel_root / "nvidia/cu13/bin/compute-sanitizer")
    on_path = _exe(tmp_path / "path-bin/compute-sanitizer")
    toolkit = _exe(tmp_path / "cuda/bin/compute-sanitizer")
    by_pathfinder = str(tmp_path / "conda/bin/compute-sanitizer")

    def distribution(name):
        if name == "nvidia-cuda-sanitizer-api" and wheel_root.exists():
            return _FakeDist(wheel_root)
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    pathfinder = SimpleNamespace(result=by_pathfinder)
    monkeypatch.setattr(sanitize, "_sanitizer_by_pathfinder", lambda: pathfinder.result)
    return SimpleNamespace(wheel_root=wheel_root, wheel=wheel, on_path=on_path, toolkit=toolkit,
                           pathfinder=pathfinder)


def test_discovery_order(places, monkeypatch):
    assert sanitize.find_sanitizer() == str(places.wheel)
    places.wheel.unlink()
    assert sanitize.find_sanitizer() == str(places.on_path)
    places.on_path.unlink()
    assert sanitize.find_sanitizer() == str(places.toolkit)
    places.toolkit.unlink()
    assert sanitize.find_sanitizer() == places.pathfinder.result
    places.pathfinder.result = None
    assert sanitize.find_sanitizer() is None


def test_wheel_layouts(places):
    # 13.5: bin/compute-sanitizer is a shell script beside the real executable; either is found.
    real = _exe(places.wheel_root / "nvidia/cu13/compute-sanitizer/compute-sanitizer")
    assert sanitize.find_sanitizer() == str(places.wheel)
    places.wheel.unlink()
    assert sanitize.find_sanitizer() == str(real)
    real.chmod(0o644)  # not executable: not a candidate
    assert sanitize.find_sanitizer() == str(places.on_path)


def test_toolkit_from_cuda_path(places, monkeypatch, tmp_path):
    places.wheel.unlink()
    places.on_path.unlink()
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    assert sanitize.find_sanitizer() == str(places.toolkit)


def test_pathfinder_failure_is_not_found(monkeypatch, tmp_path):
    import cuda.pathfinder

    def broken(name):
        raise RuntimeError("no such utility")

    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_binary_utility", broken)
    assert sanitize._sanitizer_by_pathfinder() is None


def test_missing_sanitizer_message_names_the_wheel_and_extra(monkeypatch, capsys):
    import cuadv.app.runner as runner

    monkeypatch.setattr(runner, "gpu_or_reason", lambda: None)  # a GPU is there: check names the missing sanitizer
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    out = io.StringIO()
    console = Console(file=out, width=300)
    args = SimpleNamespace(lab=None, tool=None, jobs=1, timeout=1, log=None, require_gpu=False, json=False)
    assert sanitize.cmd_check(args, console) != 0  # nothing checked is not a success
    text = capsys.readouterr().err  # an error message: on stderr, nothing on the console
    assert ("compute-sanitizer not found: pip install 'cuadv[sanitize]' (the nvidia-cuda-sanitizer-api wheel) "
            "or install the CUDA toolkit") in text and out.getvalue() == ""
    assert "ships with the CUDA toolkit" not in text


def test_sanitize_extra_declared():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["sanitize"] == ["nvidia-cuda-sanitizer-api>=13.0,<14"]


def test_a_hazard_fails_the_check_with_its_log_on_stderr(monkeypatch, capsys):
    import cuadv.app.runner as runner
    import cuadv.device as device
    import cuadv.labs as labs
    from cuadv.app.exit_codes import EXIT_FAILED

    lab = SimpleNamespace(name="fake", smoke=lambda: None, supported=lambda caps: None)
    monkeypatch.setattr(runner, "gpu_or_reason", lambda: None)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/bin/compute-sanitizer")
    monkeypatch.setattr(device, "current_device", lambda: SimpleNamespace(caps=SimpleNamespace(name="stand-in")))
    monkeypatch.setattr(labs, "all_labs", lambda: [lab])
    monkeypatch.setattr(sanitize, "run_check", lambda name, tool, *rest: sanitize.CheckOutcome(
        name, tool, "hazards" if tool == "racecheck" else "clean", int(tool == "racecheck"),
        "========= Error: Race reported between Write access ... and Read access ..."))
    out = io.StringIO()
    args = SimpleNamespace(lab=None, tool=None, jobs=2, timeout=1, log=None, json=False)
    assert sanitize.cmd_check(args, Console(file=out, width=300)) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "cuadv check: fake / racecheck: hazards\n========= Error: Race reported" in err
    assert "memcheck" not in err  # clean runs print no log
    assert "Race reported" not in out.getvalue() and "racecheck" in out.getvalue()  # the table stays on the console


def _fake_sanitizer(tmp_path, body: str) -> str:
    """An executable standing in for compute-sanitizer: a Python script (its arguments ignored)."""
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!{sys.executable}\nimport os, subprocess, sys, time\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("printed, code, status, hazards", [
    ("========= ERROR SUMMARY: 1 error", 99, "hazards", 1),
    ("========= ERROR SUMMARY: 3 errors", 99, "hazards", 3),
    ("========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)", 0, "hazards", 1),
    ("========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)", 0, "hazards", 2),
    ("========= ERROR SUMMARY: 0 errors", 0, "clean", 0),
])
def test_one_finding_counts_as_many_do(tmp_path, printed, code, status, hazards):
    """compute-sanitizer writes one finding in the singular ("1 error", "1 hazard"): it counts as a finding, as two
    do, whatever the exit status."""
    fake = _fake_sanitizer(tmp_path, f"print({printed!r}); sys.exit({code})")
    outcome = sanitize.run_check("vecscale", "racecheck", fake, timeout=60)
    assert (outcome.status, outcome.hazards) == (status, hazards)


@pytest.mark.parametrize("users, seen", [(None, "54"), ("600", "54"), ("inf", "54"), (" ", "54"), ("5", "5"),
                                         ("soon", "soon"), ("nan", "nan")])
def test_the_childs_gpu_waits_end_before_the_run_is_killed(tmp_path, monkeypatch, users, seen):
    """The child's CUADV_TIMEOUT_S is at most 90% of the run's bound; a shorter one of the user's stays, a blank
    one is unset (as the child reads it), and one that cannot be read is passed on for the child to reject."""
    if users is None:
        monkeypatch.delenv("CUADV_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("CUADV_TIMEOUT_S", users)
    fake = _fake_sanitizer(tmp_path, "print('CUADV_TIMEOUT_S', os.environ['CUADV_TIMEOUT_S'], flush=True)\n"
                                     "print('========= ERROR SUMMARY: 0 errors')")
    outcome = sanitize.run_check("vecscale", "memcheck", fake, timeout=60)
    assert outcome.status == "clean" and f"CUADV_TIMEOUT_S {seen}\n" in outcome.log, outcome.log


def test_a_timed_out_check_kills_the_whole_run_and_keeps_its_output(tmp_path):
    """On a timeout the sanitizer and the process it runs both go (a session of their own), and what was printed
    until then is in the log; the child's own GPU waits time out first (CUADV_TIMEOUT_S below the kill)."""
    import os
    import time

    pid_file = tmp_path / "child.pid"
    fake = _fake_sanitizer(tmp_path, (
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('========= Invalid __global__ read of size 4', flush=True)\n"
        "print('CUADV_TIMEOUT_S', os.environ['CUADV_TIMEOUT_S'], flush=True)\n"
        "time.sleep(60)"))
    started = time.monotonic()
    outcome = sanitize.run_check("vecscale", "memcheck", fake, timeout=3)
    assert time.monotonic() - started < 30
    assert outcome.status == "failed" and "timed out after 3 s" in outcome.log
    assert "Invalid __global__ read of size 4" in outcome.log and "CUADV_TIMEOUT_S 2" in outcome.log
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is delivered at once; reaping by init may take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{child}/stat").read().split()[2] == "Z":  # killed, waiting to be reaped
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the sanitized process {child} outlived the timeout")
