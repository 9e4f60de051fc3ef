"""The command line without a GPU: caps fails cleanly, build compiles everything, run still runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_presence import GPU_REASON

ROOT = Path(__file__).resolve().parents[1]


def cuadv(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "cuadv", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=1800)


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_caps_without_gpu_is_one_line_and_exit_3():
    r = cuadv("caps")
    assert r.returncode == 3
    assert r.stderr.startswith("cuadv: no CUDA GPU") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_bench_without_gpu_is_one_line_and_exit_3():
    r = cuadv("bench", "vecscale")
    assert r.returncode == 3 and "no CUDA GPU" in r.stderr and "Traceback" not in r.stderr


def test_build_both_targets(tmp_path):
    out = tmp_path / "build.json"
    r = cuadv("build", "--arch", "sm_90a", "--arch", "sm_100a", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert {row["arch"] for row in rows} == {"sm_90a", "sm_100a"}
    assert all(not row["error"] for row in rows)
    assert [w for row in rows for w in row["warnings"]] == []  # the shipped device code compiles without warnings
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


# --- issue 19, item 1: the CLI (version, help, exit codes, JSON without a GPU, pipes, progress, cache) ---

import io

from cuadv.app import cli
from cuadv.errors import NoGpuError
from cuadv.report.results import LabResult, Table

NO_GPU = "no CUDA GPU: (test) no driver"


def _no_gpu(monkeypatch):
    """Make every GPU lookup of the CLI fail as on a machine without a GPU (also on a GPU machine)."""
    import cuadv.app.runner as runner
    import cuadv.device as device

    def raise_no_gpu(*args, **kwargs):
        raise NoGpuError(NO_GPU)

    monkeypatch.setattr(device, "current_device", raise_no_gpu)
    monkeypatch.setattr(runner, "gpu_or_reason", lambda: NO_GPU)


def _gpu_running(monkeypatch, *results):
    """A GPU is present and run_labs returns these results (no lab runs, nothing is built)."""
    import cuadv.app.runner as runner
    from cuadv.report.writer import Report

    monkeypatch.setattr(runner, "gpu_or_reason", lambda: None)
    monkeypatch.setattr(runner, "run_labs", lambda labs, *a, **k: Report(caps=None, results=list(results)))


def test_exit_codes_are_distinct_and_in_the_readme():
    codes = [cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_NO_GPU, cli.EXIT_NOTHING_RAN]
    assert codes == [0, 1, 2, 3, 4] and sorted(cli.EXIT_CODES) == codes
    readme = (ROOT / "README.md").read_text().replace("`", "")
    for code, meaning in cli.EXIT_CODES.items():
        assert f"\n| {code} | {meaning} |\n" in readme  # --help's list and the README's table agree
    assert "--version" in readme and "--require-gpu" in readme


def test_version(capsys):
    from cuadv import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"cuadv {__version__}\n"


def test_version_from_the_command_line():
    r = cuadv("--version")
    assert r.returncode == 0 and r.stdout.strip().startswith("cuadv ") and r.stdout.split()[1][0].isdigit()


def test_usage_errors_exit_2(capsys):
    assert cli.main(["bench"]) == cli.EXIT_USAGE  # the lab is missing
    assert cli.main(["no-such-command"]) == cli.EXIT_USAGE
    assert "usage: cuadv" in capsys.readouterr().err
    for command in ("run", "check", "simulate"):  # an unknown option: that command's usage, not the command list
        assert cli.main([command, "--no-such-option"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert f"usage: cuadv {command} [-h]" in err and f"cuadv {command}: error: unrecognized arguments: " \
            "--no-such-option" in err, err
    for bad in (["--arch", "sm_9x"], ["--jobs", "0"], ["--arch", "sm_99a"]):  # the form; --jobs; what NVRTC takes
        assert cli.main(["build", *bad]) == cli.EXIT_USAGE
        out, err = capsys.readouterr()
        assert "cuadv build" in err and "Traceback" not in out + err


def test_every_command_help_has_a_description_and_an_example(capsys):
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert {"caps", "build", "run", "bench", "check", "simulate", "cache"} <= set(commands)
    for name, parser in commands.items():
        assert parser.description and len(parser.description) > 40, name
        assert cli.main([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert parser.description.splitlines()[0] in out, name
        assert "example:" in out and f"cuadv {name}" in out.split("example:")[1], name
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "exit codes:" in out
    for code, meaning in cli.EXIT_CODES.items():
        assert f"  {code}  {meaning}" in out


def test_bench_help_lists_every_lab_one_line_each(capsys):
    from cuadv.labs import all_labs

    assert cli.main(["bench", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for lab in all_labs():
        assert sum(1 for line in lines if line.split()[:1] == [lab.name] and line.rstrip().endswith(lab.title)) == 1


def test_labs_are_imported_only_for_bench_help():
    # Building the parser (every command line) must not import the labs; `bench --help` does.
    code = ("import sys; from cuadv.app.cli import build_parser; build_parser(); "
            "print(any(m.startswith('cuadv.labs.') and m != 'cuadv.labs.base' for m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_caps_json_without_gpu_prints_json_and_exits_3(monkeypatch, capsys):
    _no_gpu(monkeypatch)
    assert cli.main(["caps", "--json"]) == cli.EXIT_NO_GPU
    out, err = capsys.readouterr()
    assert json.loads(out) == {"gpu": None, "reason": NO_GPU}
    assert err.strip() == f"cuadv: {NO_GPU}"


def test_caps_without_gpu_exits_3_with_nothing_on_stdout(monkeypatch, capsys):
    _no_gpu(monkeypatch)
    assert cli.main(["caps"]) == cli.EXIT_NO_GPU
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == f"cuadv: {NO_GPU}"


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_caps_json_without_gpu_from_the_command_line():
    r = cuadv("caps", "--json")
    assert r.returncode == 3
    data = json.loads(r.stdout)
    assert data["gpu"] is None and data["reason"].startswith("no CUDA GPU")
    assert r.stderr.startswith("cuadv: no CUDA GPU") and "Traceback" not in r.stderr


def test_bench_without_gpu_exits_3(monkeypatch, capsys, tmp_path):
    _no_gpu(monkeypatch)
    assert cli.main(["bench", "vecscale", "--out", str(tmp_path / "rep")]) == cli.EXIT_NO_GPU
    assert NO_GPU in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_run_require_gpu_without_gpu_exits_3_before_building(monkeypatch, capsys, tmp_path):
    _no_gpu(monkeypatch)
    monkeypatch.setattr(cli, "_build", lambda *a, **k: pytest.fail("--require-gpu must not build"))
    assert cli.main(["run", "--quick", "--require-gpu", "--out", str(tmp_path / "rep")]) == cli.EXIT_NO_GPU
    assert NO_GPU in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_bench_of_a_skipped_lab_exits_4(monkeypatch, capsys, tmp_path):
    _gpu_running(monkeypatch, LabResult("vecscale", "t", status="skipped", reason="needs compute capability 10.0"))
    assert cli.main(["bench", "vecscale", "--out", str(tmp_path)]) == cli.EXIT_NOTHING_RAN
    assert "nothing ran" in capsys.readouterr().err


def test_run_where_every_lab_was_skipped_exits_4(monkeypatch, capsys, tmp_path):
    _gpu_running(monkeypatch, LabResult("vecscale", "t", status="skipped", reason="x"),
                 LabResult("tma", "t", status="skipped", reason="y"))
    monkeypatch.setattr(cli, "_gpu_free_results", lambda console, out=None, labs=None: [])
    assert cli.main(["run", "--quick", "--only", "vecscale", "--only", "tma", "--out", str(tmp_path)]) == 4


def test_bench_exit_0_when_the_lab_ran_and_1_when_it_failed(monkeypatch, capsys, tmp_path):
    _gpu_running(monkeypatch, LabResult("vecscale", "t"))
    assert cli.main(["bench", "vecscale", "--out", str(tmp_path / "a")]) == cli.EXIT_OK
    capsys.readouterr()
    _gpu_running(monkeypatch, LabResult("vecscale", "t", status="failed", reason="boom"))
    assert cli.main(["bench", "vecscale", "--out", str(tmp_path / "b")]) == cli.EXIT_FAILED
    out, err = capsys.readouterr()
    assert "cuadv bench: failed: vecscale" in err and "failed: vecscale" not in out  # an error: on stderr


def test_check_exit_codes_without_gpu_or_sanitizer(monkeypatch, capsys):
    from cuadv.app import sanitize

    _no_gpu(monkeypatch)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: None)
    assert cli.main(["check"]) == cli.EXIT_NO_GPU  # the missing GPU is named first
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/opt/cuda/bin/compute-sanitizer")
    assert cli.main(["check"]) == cli.EXIT_NO_GPU
    out, err = capsys.readouterr()
    assert NO_GPU in err and "Traceback" not in out + err


def _long_table() -> Table:
    cells = ["fixed_blocks with a long name that would not fit in eighty columns " * 2,
             "steal Q=50us, quantum learned from the previous launch", 123456789.5]
    return Table("a wide table", ["policy " * 4, "what it does " * 3, "value"], [cells, cells[::-1]],
                 note="a note that is long enough to be wrapped at eighty columns, which must not happen " * 2)


def test_print_table_to_a_file_crops_no_cell():
    from cuadv.report.console import make_console, print_table

    buf = io.StringIO()
    console = make_console(file=buf)
    assert not console.is_terminal
    table = _long_table()
    print_table(console, table)
    text = buf.getvalue()
    assert "…" not in text
    for cell in [table.columns[0].strip(), table.columns[1].strip(), table.rows[0][0].strip(), table.rows[0][1],
                 table.note.strip()]:
        assert cell in text


def test_simulate_in_a_pipe_crops_no_cell():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("COLUMNS", None)
    r = subprocess.run([sys.executable, "-m", "cuadv", "simulate", "--tiles", "2000", "--sweep", "20", "--out", ""],
                       capture_output=True, text=True, env=env, timeout=600)  # stdout is a pipe
    assert r.returncode == 0, r.stdout + r.stderr
    assert "…" not in r.stdout
    for cell in ("fixed_blocks", "steal Q=200us", "steal Q=inf", "heavy prologue (100 us): makespan / ideal",
                 "speed-up vs fixed_work", "high-priority kernel latency us"):
        assert cell in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) > 80  # the tables were not squeezed into 80 columns
    assert r.stderr == ""  # no progress bar or status where stderr is not a terminal


def test_progress_goes_to_stderr_and_only_on_a_terminal():
    from cuadv.report.console import make_console, progress_bar

    bar = progress_bar(make_console(file=io.StringIO()))
    assert bar.console.stderr and bar.disable  # pytest's stderr is not a terminal


def test_build_all_reports_each_lab_done_per_arch(monkeypatch):
    from cuadv.app.buildcheck import build_all

    class FakeLab:
        def __init__(self, name):
            self.name = name

        def build(self, arch):
            if self.name == "bad":
                raise RuntimeError("no such target")
            return []

    started, done = [], []
    rows = build_all(["sm_90a", "sm_100a"], [FakeLab("a"), FakeLab("bad")], progress=started.append,
                     done=lambda lab, arch, rows: done.append((lab, arch, len(rows))))
    assert started == ["a for sm_90a", "a for sm_100a", "bad for sm_90a", "bad for sm_100a"]
    assert done == [("a", "sm_90a", 0), ("a", "sm_100a", 0), ("bad", "sm_90a", 1), ("bad", "sm_100a", 1)]
    assert [(r.lab, r.arch) for r in rows] == [("bad", "sm_90a"), ("bad", "sm_100a")] and rows[0].error


def test_build_all_in_parallel_builds_the_labs_it_is_given():
    """Workers find labs again by name in a spawned process: labs the caller made (not the registry's) are built
    here, with jobs > 1 as with 1, instead of failing the lookup ("no lab named ...")."""
    from cuadv.app.buildcheck import build_all

    class MyLab:
        def __init__(self, name):
            self.name = name

        def build(self, arch):
            raise RuntimeError(f"{self.name} built here for {arch}")

    rows = build_all(["sm_90a"], [MyLab("mine_a"), MyLab("mine_b")], jobs=2)
    assert [r.error for r in rows] == ["mine_a built here for sm_90a", "mine_b built here for sm_90a"]


def test_build_command_prints_the_table_with_progress_callbacks(monkeypatch, capsys, tmp_path):
    from cuadv.app import buildcheck
    from cuadv.compiler import KernelResources

    calls = []

    def fake_build_all(archs, labs=None, progress=lambda m: None, jobs=1, done=lambda lab, arch, rows: None):
        rows = []
        for arch in archs:
            progress(f"vecscale for {arch}")
            chunk = [buildcheck.BuildRow("vecscale", arch, "kernel_with_a_rather_long_name<true, 256>",
                                         KernelResources("k", registers=32))]
            done("vecscale", arch, chunk)
            calls.append(arch)
            rows += chunk
        return rows

    monkeypatch.setattr(buildcheck, "build_all", fake_build_all)
    assert cli.main(["build", "--arch", "sm_90a", "--json", str(tmp_path / "b.json")]) == 0
    out, err = capsys.readouterr()
    assert calls == ["sm_90a"] and "kernel_with_a_rather_long_name<true, 256>" in out and "…" not in out
    assert err == ""


def test_run_labs_prints_one_line_per_lab_on_stdout(monkeypatch, tmp_path):
    from cuadv.app.runner import run_labs
    from cuadv.report.console import make_console

    class SkippedLab:
        name, title = "needs_blackwell", "t"

        def supported(self, caps):
            return "needs compute capability 10.0 (got 9.0)"

    _fake_gpu(monkeypatch, lambda: type("Ceiling", (), {"tb_per_s": 1.0})())
    buf = io.StringIO()
    report = run_labs([SkippedLab(), SkippedLab()], tmp_path, True, make_console(file=buf))
    assert [r.status for r in report.results] == ["skipped", "skipped"]
    lines = [line for line in buf.getvalue().splitlines() if line.startswith("needs_blackwell: skipped in")]
    assert len(lines) == 2 and lines[0].endswith("(needs compute capability 10.0 (got 9.0))")


def _fake_gpu(monkeypatch, ceiling):
    """run_labs on a fake GPU whose copy ceiling is ``ceiling()`` (no GPU touched)."""
    import cuadv.device as device
    import cuadv.timing as timing

    class Caps:
        name, sm_count = "Fake GPU [x]", 2

        def cc_string(self):
            return "9.0"

        def as_dict(self):
            return {"name": self.name}

    monkeypatch.setattr(device, "current_device", lambda: type("Dev", (), {"caps": Caps()})())
    monkeypatch.setattr(timing, "copy_ceiling", ceiling)


def test_a_failed_copy_ceiling_skips_the_labs_naming_why(monkeypatch, tmp_path):
    """The copy ceiling (2 x 2 GiB) failing, out of memory say, skips every lab with the reason instead of ending the
    run without a report; it is measured under the run's timeout."""
    from cuadv import waiting
    from cuadv.app.runner import run_labs
    from cuadv.errors import CudaDriverError
    from cuadv.report.console import make_console

    timeouts = []

    def ceiling():
        timeouts.append(waiting.resolve_timeout())
        raise CudaDriverError("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY")

    class Lab:
        name, title = "vecscale", "t"

        def supported(self, caps):
            pytest.fail("a lab ran without its ceiling")

    _fake_gpu(monkeypatch, ceiling)
    buf = io.StringIO()
    report = run_labs([Lab()], tmp_path, True, make_console(file=buf), timeout_s=300)
    assert timeouts == [300.0] and report.results == []
    assert report.skipped == [("lab vecscale", "the copy ceiling, which every lab divides by, failed: "
                                               "cuadv.errors.CudaDriverError: cuMemAlloc failed: "
                                               "CUDA_ERROR_OUT_OF_MEMORY")]
    assert "Fake GPU [x]" in buf.getvalue()  # the name is printed as it is


def test_after_a_gpu_timeout_the_later_labs_are_skipped_not_blamed(monkeypatch, tmp_path):
    """A wait that timed out leaves the context busy with that lab's work: the labs after it are skipped saying
    so, instead of each timing out in turn under its own name."""
    from cuadv import waiting
    from cuadv.app.runner import run_labs
    from cuadv.report.console import make_console
    from cuadv.report.results import LabResult

    ran = []

    class Lab:
        title = "t"

        def __init__(self, name, hangs=False):
            self.name, self.hangs = name, hangs

        def supported(self, caps):
            return None

        def run(self, ctx):
            ran.append(self.name)
            if self.hangs:
                monkeypatch.setattr(waiting, "timed_out", lambda: True)
                return LabResult(self.name, self.title, status="failed", reason="GpuTimeoutError: ...")
            return LabResult(self.name, self.title)

    _fake_gpu(monkeypatch, lambda: type("Ceiling", (), {"tb_per_s": 1.0})())
    report = run_labs([Lab("a"), Lab("b", hangs=True), Lab("c")], tmp_path, True, make_console(file=io.StringIO()))
    assert ran == ["a", "b"]
    assert [(r.lab, r.status) for r in report.results] == [("a", "ok"), ("b", "failed"), ("c", "skipped")]
    assert report.results[2].reason == "the GPU is still busy with the work of lab b, whose wait timed out"


class _FakeUsage:
    def __init__(self, path, entries, bytes, limit_bytes):
        self.path, self.entries, self.bytes, self.limit_bytes = path, entries, bytes, limit_bytes


def test_cache_command_shows_and_clears(monkeypatch, capsys, tmp_path):
    import cuadv.cache as cache

    cleared = []
    monkeypatch.setattr(cache, "usage", lambda: _FakeUsage(tmp_path, 3, 5 * 2**20, 2 * 2**30), raising=False)
    monkeypatch.setattr(cache, "clear", lambda: cleared.append(1) or 3, raising=False)
    assert cli.main(["cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(tmp_path), "entries": 3, "bytes": 5 * 2**20,
                                                    "limit_bytes": 2 * 2**30}
    assert cli.main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "5.0 MiB" in out and "2.0 GiB" in out and not cleared
    assert cli.main(["cache", "--clear"]) == 0
    assert cleared == [1] and f"removed 3 entries from {tmp_path}" in capsys.readouterr().out
    assert cli.main(["cache", "--clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(tmp_path), "removed": 3}


def test_cache_command_when_disabled(monkeypatch, capsys):
    import cuadv.cache as cache

    monkeypatch.setattr(cache, "usage", lambda: _FakeUsage(None, 0, 0, 2 * 2**30), raising=False)
    assert cli.main(["cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] is None
    assert cli.main(["cache"]) == 0
    assert "disabled (CUADV_CACHE=0)" in capsys.readouterr().out


def test_cache_command_on_a_real_cache_dir(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUADV_CACHE", raising=False)
    assert cli.main(["cache", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(tmp_path) and data["entries"] == 0 and data["bytes"] == 0


def test_json_commands_print_only_json_on_stdout(monkeypatch, capsys, tmp_path):
    """run --json (no GPU: the GPU-free parts, here stubbed) and simulate --json: stdout parses as JSON,
    the tables and messages went to stderr."""
    _no_gpu(monkeypatch)
    monkeypatch.setattr(cli, "_gpu_free_results", lambda console, out=None, labs=None: [
        LabResult("build", "Build check", tables=[Table("kernels", ["kernel"], [["k"]])])])
    assert cli.main(["run", "--quick", "--json", "--out", str(tmp_path / "rep")]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [r["lab"] for r in data["results"]] == ["build"] and "kernels" in err
    assert cli.main(["simulate", "--tiles", "500", "--policy", "steal", "--out", "", "--json"]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    tables = json.loads(out)
    assert tables and all({"title", "columns", "rows"} <= set(t) for t in tables) and "simulator" in err.lower()


def test_timeout_option_is_checked_and_passed_to_the_labs(monkeypatch, capsys):
    from cuadv.app import cli, runner

    for bad in ("0", "-3", "soon"):
        assert cli.main(["run", "--timeout", bad]) == cli.EXIT_USAGE
        assert "must be a number of seconds > 0" in capsys.readouterr().err
    seen = {}

    def fake_run_labs(labs, out, quick, console, command="", peer=False, timeout_s=None):
        seen["timeout_s"] = timeout_s
        raise SystemExit(0)

    monkeypatch.setattr(runner, "run_labs", fake_run_labs)
    monkeypatch.setattr(runner, "gpu_or_reason", lambda: None)
    with pytest.raises(SystemExit):
        cli.main(["bench", "tma", "--timeout", "2.5"])
    assert seen["timeout_s"] == 2.5


def test_bad_values_are_usage_errors_before_any_work(monkeypatch, capsys, tmp_path):
    """Targets NVRTC refuses for their suffix, output paths that cannot be written, and check's --jobs /
    --timeout: exit 2 with one line, before minutes of building, running or checking (not a traceback after)."""
    monkeypatch.setattr(cli, "_build", lambda *a, **k: pytest.fail("must not build"))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "report")
    for argv, says in ((["build", "--arch", "sm_89a"], "the 'a' suffix exists from sm_90 on"),
                       (["build", "--arch", "sm_90f"], "the 'f' suffix exists from sm_100 on"),
                       (["build", "--json", str(tmp_path / "no" / "b.json")], "does not exist"),
                       (["build", "--json", str(tmp_path)], "is a folder"),
                       (["check", "--jobs", "0"], "must be a whole number >= 1"),
                       (["check", "--timeout", "-5"], "must be a whole number >= 1"),
                       (["check", "--log", str(tmp_path / "no" / "check.log")], "does not exist"),
                       (["run", "--out", str(a_file)], "is a file, not a directory"),
                       (["bench", "vecscale", "--out", str(a_file)], "is a file, not a directory"),
                       (["run", "--out", ""], "an empty folder name"),
                       (["run", "--out", "/proc/cuadv-report/x"], "folder /proc takes no new file"),
                       (["bench", "vecscale", "--out", str(a_file / "x")], f"{a_file} is a file"),
                       (["build", "--json", "/proc/build.json"], "folder /proc takes no new file"),
                       (["run", "--out", str(tmp_path / "dangling")], "dangling is a broken symbolic link")):
        assert cli.main(argv) == cli.EXIT_USAGE, argv
        out, err = capsys.readouterr()
        assert says in err and "Traceback" not in out + err, argv
    assert cli.build_parser().parse_args(["build", "--arch", "sm_100f", "--arch", "sm_90a", "--arch", "sm_89"]).arch \
        == ["sm_100f", "sm_90a", "sm_89"]


def test_check_of_an_unknown_lab_names_the_labs(monkeypatch, capsys):
    from cuadv.app import runner, sanitize
    import cuadv.device as device

    monkeypatch.setattr(runner, "gpu_or_reason", lambda: None)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda: "/opt/cuda/bin/compute-sanitizer")
    monkeypatch.setattr(device, "current_device", lambda: type("D", (), {"caps": None})())
    monkeypatch.setattr(sanitize, "run_check", lambda *a, **k: pytest.fail("nothing must be checked"))
    assert cli.main(["check", "--lab", "nosuch"]) == cli.EXIT_FAILED
    assert "no lab named 'nosuch'; labs: " in capsys.readouterr().err


def test_a_file_that_cannot_be_written_is_one_line(monkeypatch, capsys, tmp_path):
    from cuadv.report import writer

    _no_gpu(monkeypatch)
    monkeypatch.setattr(cli, "_gpu_free_results", lambda console, out=None, labs=None: [])

    def disk_full(report, out_dir):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "write_report", disk_full)
    assert cli.main(["run", "--out", str(tmp_path / "rep")]) == cli.EXIT_FAILED
    out, err = capsys.readouterr()
    assert "cuadv run: [Errno 28] No space left on device" in err and "Traceback" not in out + err


def test_a_lab_that_does_not_compile_for_a_target_gets_one_line_of_nvrtc_errors():
    """cuadv build --arch sm_90 (TMA multicast needs sm_90a): NVRTC's error lines, not the numbered source of the
    whole file (hundreds of lines per lab)."""
    from cuadv.app.buildcheck import build_all
    from cuadv.compiler import compile_source
    from cuadv.errors import CompileError

    class Broken:
        name = "broken"

        def build(self, arch):
            return [compile_source('extern "C" __global__ void k() {\n  int a = ;\n  int b = ;\n}\n' + "// x\n" * 300,
                                   name="broken", arch=arch)]

    (row,) = build_all(["sm_90a"], [Broken()])
    assert row.error.startswith("NVRTC could not compile 'broken': broken.cu(2): error: expected an expression")
    assert row.error.count("error:") == 2 and "errors detected" not in row.error and "CUADV_DUMP_SOURCE" in row.error
    assert "\n" not in row.error and "// x" not in row.error and len(row.error) < 400
    with pytest.raises(CompileError, match=r"--- source"):  # compile_source itself still raises everything
        Broken().build("sm_90a")


def test_build_names_each_compile_warning_once_per_lab_and_target(monkeypatch, capsys, tmp_path):
    """A module of two kernels with one unused static function: both rows carry NVRTC's warning, `cuadv build`
    prints it once on stderr (without NVRTC's remark on suppressing it), writes it into --json, and exits 0."""
    from cuadv.app import buildcheck
    from cuadv.compiler import compile_source

    class Warns:
        name = "warns"

        def build(self, arch):
            return [compile_source('static __device__ int unused() { return 1; }  // warning: NVRTC echoes this\n'
                                   'extern "C" __global__ void a(int* p) { *p = 1; }\n'
                                   'extern "C" __global__ void b(int* p) { *p = 2; }\n', name="warns", arch=arch)]

    rows = buildcheck.build_all(["sm_90a"], [Warns()])
    assert [r.kernel for r in rows] == ["a", "b"]
    assert rows[0].warnings == rows[1].warnings and len(rows[0].warnings) == 1
    assert 'warning #177-D: function "unused" was declared but never referenced' in rows[0].warnings[0]
    monkeypatch.setattr(cli, "_build", lambda console, archs, jobs=1, labs=None: rows)
    out = tmp_path / "build.json"
    assert cli.main(["build", "--arch", "sm_90a", "--json", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"cuadv build: warns for sm_90a: {rows[0].warnings[0]}"]
    assert [row["warnings"] for row in json.loads(out.read_text())] == [list(rows[0].warnings)] * 2
    from cuadv.report.console import make_console

    (build,) = cli._gpu_free_results(make_console(file=io.StringIO()), None, [Warns()])  # `cuadv run`'s build check
    assert build.status == "ok" and build.notes == [f"compile warning: warns for sm_90a: {rows[0].warnings[0]}"]


def test_only_narrows_the_gpu_free_work_to_its_labs(monkeypatch):
    """cuadv run --only histogram builds the histogram lab's kernels, not every lab's, and runs the scheduling
    simulator only where the scheduling lab is selected."""
    import cuadv.simulate as simulate
    from cuadv.labs import lab_by_name
    from cuadv.report.console import make_console
    from cuadv.report.results import LabResult

    built = []
    monkeypatch.setattr(cli, "_build", lambda console, archs, jobs=1, labs=None: built.append(labs) or [])
    monkeypatch.setattr(simulate, "simulator_result", lambda out=None: LabResult("simulate", "t"))
    console = make_console(file=io.StringIO())
    histogram = [lab_by_name("histogram")]
    results = cli._gpu_free_results(console, None, histogram)
    assert built == [histogram] and [r.lab for r in results] == ["build"]
    assert results[0].title == "Build check: the kernels of histogram for sm_90a and sm_100a"
    both = [lab_by_name("histogram"), lab_by_name("scheduling")]
    assert [r.lab for r in cli._gpu_free_results(console, None, both)] == ["build", "simulate"]
    assert [r.lab for r in cli._gpu_free_results(console, None)] == ["build", "simulate"] and built[-1] is None
