"""The command line without a GPU: caps fails cleanly, build compiles everything, run still runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GPU_REASON

ROOT = Path(__file__).resolve().parents[1]


def cuadv(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "cuadv", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=1800)


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_caps_without_gpu_is_one_line_and_exit_2():
    r = cuadv("caps")
    assert r.returncode == 2
    assert r.stderr.startswith("cuadv: no CUDA GPU") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_bench_without_gpu_is_one_line_and_exit_2():
    r = cuadv("bench", "vecscale")
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and "Traceback" not in r.stderr


def test_build_both_targets(tmp_path):
    out = tmp_path / "build.json"
    r = cuadv("build", "--arch", "sm_90a", "--arch", "sm_100a", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert {row["arch"] for row in rows} == {"sm_90a", "sm_100a"}
    assert all(not row["error"] for row in rows)
    assert any(row["lab"] == "vecscale" for row in rows)


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_run_without_gpu_runs_what_needs_none(tmp_path):
    r = cuadv("run", "--quick", "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no CUDA GPU" in r.stdout
    data = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert any(res["lab"] == "build" and res["status"] == "ok" for res in data["results"])
    assert any("vecscale" in s["what"] for s in data["skipped"])
    for name in ("report.md", "index.html"):
        assert (tmp_path / "rep" / name).stat().st_size > 0


def test_unknown_lab_is_a_clear_error():
    r = cuadv("bench", "nosuchlab")
    assert r.returncode != 0 and "no lab named 'nosuchlab'" in (r.stderr + r.stdout)


def test_peer_applies_to_domains_only():
    r = cuadv("bench", "vecscale", "--peer")
    assert r.returncode == 1 and "--peer applies to lab domains only" in r.stderr and "Traceback" not in r.stderr
