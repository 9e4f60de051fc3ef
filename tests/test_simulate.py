"""The block-scheduler simulator without a GPU: exact small cases, every tile once, priorities,
the trade-off table of the CUDA Programming Guide 4.12, workloads, errors, the CLI and the report part."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_presence import GPU_REASON
from cuadv.simulate import (POLICIES, KernelSpec, Machine, SimulationError, Variant, high_priority_kernel,
                            ideal_ns, make_workload, preemption, seed_table, simulate, simulator_result,
                            spin_kernel, study, verdicts)

ROOT = Path(__file__).resolve().parents[1]
FREE = dict(launch_ns=0.0, claim_ns=0.0, cancel_ns=0.0, exit_ns=0.0)  # a machine whose mechanisms cost nothing


def one(machine, durations, policy, prologue=0.0, quantum=math.inf):
    return simulate(machine, KernelSpec(np.asarray(durations, dtype=float), policy, prologue, quantum_ns=quantum))


# ------------------------------------------------------------------------------ exact small cases


def test_fixed_work_two_waves_by_hand():
    m = Machine(2, 1, **FREE)
    r = one(m, [10, 10, 10, 10], "fixed_work", prologue=5)
    k = r.kernels[0]
    assert k.makespan_ns == 30  # two waves of (prologue 5 + tile 10)
    assert (k.blocks_launched, k.prologues, k.claims) == (4, 4, 0)
    assert sorted(r.records["smid"].tolist()) == [0, 0, 1, 1]  # breadth-first over the SMs


def test_fixed_blocks_grid_stride_by_hand():
    m = Machine(2, 1, **FREE)
    r = one(m, [1, 2, 3, 4, 5], "fixed_blocks", prologue=10)
    by_block = {b: sorted(r.records["tile"][r.records["block"] == b].tolist()) for b in (0, 1)}
    assert by_block == {0: [0, 2, 4], 1: [1, 3]}  # block b takes tiles b, b+G, ...
    assert r.kernels[0].makespan_ns == 10 + 1 + 3 + 5
    assert r.kernels[0].prologues == 2


def test_launch_cost_is_paid_per_block():
    m = Machine(1, 1, launch_ns=100.0, claim_ns=0.0, cancel_ns=0.0, exit_ns=0.0)
    assert one(m, [10, 10, 10], "fixed_work").kernels[0].makespan_ns == 3 * 110
    assert one(m, [10, 10, 10], "fixed_blocks").kernels[0].makespan_ns == 100 + 30


def test_steal_claims_before_the_prologue_and_extra_blocks_exit_at_once():
    m = Machine(1, 2, launch_ns=0.0, claim_ns=1.0, cancel_ns=0.0, exit_ns=2.0)
    r = one(m, [10, 10, 10, 10], "steal", prologue=5)
    k = r.kernels[0]
    assert k.blocks_launched == 4  # the full grid launches
    assert k.prologues == 2  # only the two blocks that got a first ticket ran the prologue
    # Each block: claim 1, prologue 5, then (claim 1 + tile 10) x 2, then exit 2.
    assert k.makespan_ns == 1 + 5 + 2 * 11 + 2 + (1 + 2)  # + the two late blocks' failed claim and exit
    assert k.claims == 2 + 2 * 2 + 2  # first tickets, one per tile, the late blocks' failed claims


def test_steal_quantum_shorter_than_the_prologue_gives_one_tile_per_block():
    m = Machine(4, 2, **FREE)
    r = one(m, np.full(100, 10.0), "steal", prologue=50, quantum=20)
    k = r.kernels[0]
    assert k.prologues == 100  # the quantum counts from the block's start: one tile per block
    assert k.blocks_launched == 100


def test_clc_cancelled_blocks_never_launch():
    m = Machine(2, 2, **FREE)
    r = one(m, np.full(50, 10.0), "clc", prologue=3)
    k = r.kernels[0]
    assert k.blocks_launched == 4 and k.prologues == 4  # the first wave took every other block's tile
    assert k.claims == 50  # one cancellation per tile: 46 succeed, one failure per running block
    assert k.makespan_ns == pytest.approx(3 + math.ceil(50 / 4) * 10, abs=10)


def test_clc_cancellation_fails_while_a_higher_priority_kernel_waits():
    m = Machine(4, 1, **FREE)
    low = KernelSpec(np.full(400, 10.0), "clc", name="low")
    high = KernelSpec(np.full(4, 10.0), "fixed_work", priority=-1, launch_at_ns=55.0, name="high")
    r = simulate(m, [low, high])
    # At 50 each low block cancelled a block for the tile it runs at 60..70 (the high kernel was not
    # launched yet); its request at 60 fails, so it exits after that tile and the high wave runs 70..80.
    assert r.kernels[1].end_ns == 80.0
    assert r.kernels[0].blocks_launched == 8  # after the high kernel, four fresh low blocks resume
    assert sorted(r.records["tile"][r.records["kernel"] == 0].tolist()) == list(range(400))


def test_priority_fifo_and_fixed_blocks_does_not_yield():
    m = Machine(2, 1, **FREE)
    low = KernelSpec(np.full(20, 10.0), "fixed_blocks", name="low")
    high = KernelSpec(np.full(2, 1.0), "fixed_work", priority=-1, launch_at_ns=5.0, name="high")
    r = simulate(m, [low, high])
    assert r.kernels[1].end_ns == 100 + 1  # it waits for the whole low kernel: fixed blocks never yield
    r = simulate(m, [KernelSpec(np.full(20, 10.0), "fixed_work", name="low"), high])
    assert r.kernels[1].end_ns == 10 + 1  # fixed work: the next free slot goes to the higher priority


def test_equal_priorities_run_in_launch_order():
    m = Machine(1, 1, **FREE)
    a = KernelSpec(np.full(3, 10.0), "fixed_work", launch_at_ns=0.0, name="a")
    b = KernelSpec(np.full(3, 10.0), "fixed_work", launch_at_ns=1.0, name="b")
    r = simulate(m, [b, a][::-1])
    assert r.kernels[0].end_ns == 30 and r.kernels[1].end_ns == 60


def test_stop_after_ends_the_run_when_that_kernel_is_done():
    m = Machine(2, 1, **FREE)
    low = KernelSpec(np.full(100, 10.0), "fixed_work")
    high = KernelSpec(np.full(2, 1.0), "fixed_work", priority=-1, launch_at_ns=5.0)
    r = simulate(m, [low, high], stop_after=1)
    assert r.kernels[1].end_ns == 11
    assert len(r.records) < 100


# ------------------------------------------------------------------------------ general properties


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("tiles", [0, 1, 2, 97, 1000])
@pytest.mark.parametrize("workload", ["uniform", "pareto:1.5", "triangular", "periodic"])
def test_every_tile_exactly_once_and_never_faster_than_ideal(policy, tiles, workload):
    m = Machine(7, 3)
    d = make_workload(workload, tiles, 1000.0, m, seed=3)
    r = one(m, d, policy, prologue=100.0, quantum=2500.0 if policy == "steal" else math.inf)
    assert sorted(r.records["tile"].tolist()) == list(range(tiles))
    assert (r.records["end_ns"] >= r.records["start_ns"]).all()
    assert (r.records["smid"] < 7).all() and (r.records["slot"] < 3).all()
    k = r.kernels[0]
    assert k.makespan_ns >= ideal_ns(d, m.slots) - 1e-6
    # No slot ever runs two tiles at once.
    for slot in range(m.slots):
        mine = r.records[(r.records["smid"] + 7 * r.records["slot"]) == slot]
        mine = np.sort(mine, order="start_ns")
        assert (mine["start_ns"][1:] >= mine["end_ns"][:-1] - 1e-6).all()


def test_trace_adapter_plots(tmp_path):
    m = Machine(4, 2)
    r = one(m, make_workload("pareto", 300, 1000.0, m), "steal", prologue=200.0, quantum=3000.0)
    trace = r.trace()
    assert trace.written.all() and trace.makespan_ns == pytest.approx(r.kernels[0].tile_span_ns)
    trace.plot(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------- the trade-off


@pytest.fixture(scope="module")
def small_study():
    # A small GPU (16 SMs x 4 slots) so the test is quick; the shape of the trade-off is the same.
    return study(Machine(16, 4), workload="periodic", tiles=16 * 4 * 40, tile_us=20.0, prologue_us=5.0,
                 heavy_prologue_us=100.0, quantum_us=50.0, sweep_quanta_us=(5.0, math.inf))


def test_reproduces_the_seeds_trade_off_table(small_study):
    v = verdicts(small_study)
    assert v["fixed_work"] == {"overhead": False, "preemption": True, "balance": True}
    assert v["fixed_blocks"] == {"overhead": True, "preemption": False, "balance": False}
    assert v["clc"] == {"overhead": True, "preemption": True, "balance": True}
    assert v["steal Q=inf"]["overhead"] and not v["steal Q=inf"]["preemption"]
    assert v["steal Q=50us"]["preemption"]  # the quantum buys back preemption
    table = seed_table(small_study)
    assert [row[0] for row in table.rows] == ["fixed_work", "fixed_blocks", "steal Q=50us", "steal Q=inf", "clc"]


def test_quantum_trades_prologue_cost_against_preemption(small_study):
    (q5, heavy5, p5), (qinf, heavy_inf, pinf) = small_study.sweep
    assert heavy5 > heavy_inf  # a short quantum pays the prologue more often
    assert p5.latency_ns < pinf.latency_ns  # and lets the high-priority kernel in sooner


def test_preemption_latency_orders_as_in_the_brief():
    m = Machine(16, 4)
    low = make_workload("uniform", 16 * 4 * 30, 20e3, m)
    lat = {v.label: preemption(m, low, v, 5e3, 20e3).latency_ns
           for v in [Variant("fixed_work", "fixed_work"), Variant("fixed_blocks", "fixed_blocks"),
                     Variant("steal Q=20us", "steal", 20e3), Variant("steal Q=inf", "steal")]}
    assert lat["fixed_work"] < lat["steal Q=20us"] < lat["fixed_blocks"]
    assert lat["steal Q=20us"] < lat["steal Q=inf"]
    alone = simulate(m, high_priority_kernel(m, 20e3)).kernels[0].makespan_ns
    assert lat["fixed_work"] >= alone


# ------------------------------------------------------------------------------------- workloads


def test_workload_shapes():
    m = Machine(10, 2)
    assert np.all(make_workload("uniform", 5, 7.0, m) == 7.0)
    p = make_workload("pareto:3", 200_000, 1000.0, m, seed=1)
    assert p.mean() == pytest.approx(1000.0, rel=0.03) and p.min() >= 1000.0 * 2 / 3 - 1e-9
    t = make_workload("triangular", 1001, 10.0, m)
    assert t.mean() == pytest.approx(10.0) and np.all(np.diff(t) > 0)
    d = make_workload("periodic", 100, 1.0, m)  # default period: the slot count (20), factor 120
    assert d[0] == 120 and d[20] == 120 and d[1] == 1 and (d == 120).sum() == 5
    d = make_workload("periodic:7:3", 15, 2.0, m)
    assert d.tolist() == [6.0 if i % 7 == 0 else 2.0 for i in range(15)]
    assert len(make_workload("uniform", 0, 1.0, m)) == 0


def test_workload_from_files(tmp_path):
    m = Machine()
    np.save(tmp_path / "d.npy", np.array([1.0, 2.5, 4.0]))
    (tmp_path / "d.txt").write_text("1\n2.5\n4\n")
    for name in ("d.npy", "d.txt"):
        assert make_workload(str(tmp_path / name), 999, 1.0, m).tolist() == [1000.0, 2500.0, 4000.0]


@pytest.mark.parametrize("spec, match", [("zipf", "unknown workload 'zipf'"), ("pareto:1", "alpha > 1"),
                                         ("pareto:x", "unknown workload"), ("periodic:0", "period that is a whole "
                                                                                            "number >= 1, got 0"),
                                         ("periodic:nan", "got nan"), ("periodic:inf", "got inf"),
                                         ("periodic:1.5", "whole number >= 1, got 1.5"),
                                         ("periodic:4:nan", "finite factor >= 0, got nan"),
                                         ("missing.npy", "does not exist")])
def test_bad_workloads(spec, match):
    with pytest.raises(SimulationError, match=match):
        make_workload(spec, 10, 1.0, Machine())


def test_bad_file_contents(tmp_path):
    (tmp_path / "neg.txt").write_text("1\n-2\n")
    with pytest.raises(SimulationError, match="finite duration >= 0"):
        make_workload(str(tmp_path / "neg.txt"), 1, 1.0, Machine())
    np.save(tmp_path / "words.npy", np.array(["a", "b"]))  # no durations: named, not a NumPy traceback
    with pytest.raises(SimulationError, match=r"cannot read durations from .*words\.npy"):
        make_workload(str(tmp_path / "words.npy"), 1, 1.0, Machine())


@pytest.mark.parametrize("kwargs, match", [(dict(sms=0), "sms must be a positive integer"),
                                           (dict(slots_per_sm=2.5), "slots_per_sm must be"),
                                           (dict(claim_ns=-1.0), "claim_ns must be a finite number >= 0")])
def test_bad_machine(kwargs, match):
    with pytest.raises(SimulationError, match=match):
        Machine(**kwargs)


def test_bad_kernels():
    with pytest.raises(SimulationError, match="policy must be one of"):
        KernelSpec(np.ones(3), "greedy")
    with pytest.raises(SimulationError, match="applies to policy 'steal' only"):
        KernelSpec(np.ones(3), "fixed_work", quantum_ns=10.0)
    with pytest.raises(SimulationError, match="quantum_ns must be > 0"):
        KernelSpec(np.ones(3), "steal", quantum_ns=0.0)
    with pytest.raises(SimulationError, match="finite and >= 0"):
        KernelSpec(np.array([1.0, np.nan]), "steal")
    with pytest.raises(SimulationError, match="at least one kernel"):
        simulate(Machine(), [])


# ------------------------------------------------------------------------- the GPU kernel compiles


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("policy", ["fixed_work", "fixed_blocks", "steal", "auto"])
def test_spin_kernel_compiles(arch, policy):
    module = spin_kernel(policy, 50.0).compile(arch)
    assert module.resources


# ---------------------------------------------------------------------------- CLI and the report


def cuadv(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "cuadv", *args], capture_output=True, text=True, env=env, timeout=600,
                          cwd=cwd)


def test_cli_simulate(tmp_path):
    r = cuadv("simulate", "--workload", "periodic", "--tiles", "2000", "--sms", "8", "--slots", "4",
              "--quantum-us", "20", "--sweep", "5", "--sweep", "inf", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Simulated trade-off" in r.stdout and "the trade-off table of the CUDA Programming Guide 4.12" in r.stdout
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert "sim_timeline_fixed_blocks.png" in pngs and "sim_timeline_preemption_steal_Q_20us.png" in pngs
    tables = json.loads((tmp_path / "simulate.json").read_text())
    assert any("quantum" in t["title"] for t in tables)


def test_cli_simulate_one_policy_and_a_file(tmp_path):
    np.save(tmp_path / "w.npy", np.full(500, 3.0))
    r = cuadv("simulate", "--workload", str(tmp_path / "w.npy"), "--sms", "4", "--slots", "2",
              "--policy", "fixed_work", "--policy", "clc", "--out", "")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "500 tiles" in r.stdout and "fixed_blocks" not in r.stdout


def test_cli_simulate_a_file_refuses_tiles(tmp_path):
    """A workload file's values are the tiles: --tiles with one is a usage error, not a count ignored without a
    word. A workload name wins over a file of that name, as make_workload reads it."""
    np.savetxt(tmp_path / "w.csv", np.full(50, 3.0), delimiter=",")
    r = cuadv("simulate", "--workload", str(tmp_path / "w.csv"), "--tiles", "5", "--out", "")
    assert r.returncode == 2 and "--tiles does not apply to a workload file" in r.stderr and "w.csv" in r.stderr
    assert not r.stdout
    r = cuadv("simulate", "--workload", str(tmp_path / "w.csv"), "--sms", "4", "--policy", "steal", "--out", "")
    assert r.returncode == 0 and "50 tiles" in r.stdout, r.stdout + r.stderr
    (tmp_path / "uniform").write_text("1\n")
    r = cuadv("simulate", "--workload", "uniform", "--tiles", "200", "--sms", "4", "--policy", "steal", "--out", "",
              cwd=tmp_path)
    assert r.returncode == 0 and "200 tiles" in r.stdout, r.stdout + r.stderr


def test_cli_simulate_bad_input_is_one_clear_line():
    r = cuadv("simulate", "--workload", "zipf", "--out", "")
    assert r.returncode == 2 and "unknown workload 'zipf'" in r.stderr and not r.stdout  # errors go to stderr
    assert "Traceback" not in r.stderr


def test_simulator_result_for_the_report(tmp_path):
    result = simulator_result(tmp_path)
    assert result.status == "ok" and result.lab == "simulate"
    assert all("simulat" in (t.title + t.note).lower() for t in result.tables)
    assert any(t.title == "Simulator model parameters" for t in result.tables)
    assert result.plots and all((tmp_path / p).is_file() for p in result.plots)
    assert result.checks and result.notes


@pytest.mark.skipif(GPU_REASON is None, reason="this machine has a GPU")
def test_run_without_gpu_has_the_simulator_and_an_explained_selection_matrix(tmp_path):
    r = cuadv("run", "--quick", "--only", "scheduling", "--out", str(tmp_path))  # the simulator comes with it
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    sim = next(res for res in data["results"] if res["lab"] == "simulate")
    assert sim["status"] == "ok" and all((tmp_path / p).is_file() for p in sim["plots"])
    matrix = next(t for t in data["extra_tables"] if t["title"].startswith("Selection matrix"))
    assert all(row[1].startswith("not measured (") for row in matrix["rows"])
    assert "no CUDA GPU" in matrix["rows"][0][1] or "was not run" in matrix["rows"][0][1]


def test_study_needs_work():
    with pytest.raises(SimulationError, match="at least one tile"):
        study(Machine(2, 1), workload="uniform", tiles=0)


def test_cli_simulate_bad_seed_sweep_and_out_are_usage_errors(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for args, says in ((["--seed", "-1"], "argument --seed: must be a whole number >= 0"),
                       (["--sweep", "-1"], "argument --sweep: must be a number of microseconds > 0 or inf"),
                       (["--sweep", "nan"], "argument --sweep: must be a number of microseconds > 0 or inf"),
                       (["--out", str(a_file)], "is a file, not a directory")):
        r = cuadv("simulate", "--tiles", "200", *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_the_simulator_imports_nothing_above_it():
    """simulate sits below the CLI (cuadv.app) and the labs: importing it, its command line included, loads neither."""
    import subprocess
    import sys

    code = ("import sys, cuadv.simulate, cuadv.simulate.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('cuadv.app', 'cuadv.labs'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_seed_reaches_every_random_workload_and_the_tables(tmp_path, monkeypatch):
    """--seed moves the pareto workload and the preemption scenario alike: the timeline of the preemption (whose
    title gives the wait) is simulated on the trade-off table's workload of the same seed, and the parameters table
    names the seed."""
    from cuadv.simulate import tables

    s = study(Machine(4, 2), workload="pareto:1.5", tiles=400, tile_us=20.0, prologue_us=5.0, seed=7)
    assert ["seed of the random workloads", 7] in tables.parameters_table(s).rows
    seeds = []
    real = tables.preemption_workload
    monkeypatch.setattr(tables, "preemption_workload", lambda *a: seeds.append(a[2:]) or real(*a))
    tables.write_timelines(s, tmp_path)
    assert seeds == [(7,)]


def test_a_study_reports_each_simulation_before_it_runs_and_once_at_the_end():
    calls = []
    s = study(Machine(4, 2), workload="pareto:1.5", tiles=200, tile_us=20.0, prologue_us=5.0,
              sweep_quanta_us=(5.0, math.inf), progress=lambda what, done, total: calls.append((what, done, total)))
    total = calls[0][2]
    loads = len(s.rows[0].balance) - 1  # the standard workloads besides the given one
    assert total == len(s.rows) * (3 + loads) + 2 * len(s.sweep)
    assert [done for _, done, _ in calls] == list(range(total + 1)) and {t for *_, t in calls} == {total}
    assert calls[-1][0] == "done" and calls[0][0] == f"{s.rows[0].variant.label}, pareto:1.5"
    assert sum("preemption" in what for what, *_ in calls) == len(s.rows) + len(s.sweep)


def test_a_long_study_off_a_terminal_prints_a_line_at_most_every_ten_seconds_and_a_short_one_none(capsys):
    from cuadv.simulate.cli import StudyProgress

    now = [0.0]
    progress = StudyProgress(clock=lambda: now[0])
    for done, t in enumerate((1.0, 9.0, 10.5, 12.0, 25.0)):
        now[0] = t
        progress("steal Q=inf, uniform", done, 10)
    now[0] = 40.0
    progress("done", 10, 10)  # the end prints nothing: the tables follow
    err = capsys.readouterr().err.splitlines()
    assert err == ["cuadv simulating: steal Q=inf, uniform (2 of 10 simulations done), 10 s",
                   "cuadv simulating: steal Q=inf, uniform (4 of 10 simulations done), 25 s"]

    class Status:
        texts = []

        def update(self, text):
            self.texts.append(text)

    status = Status()
    StudyProgress(status)("fixed_work, pareto:1.5", 0, 3)
    assert status.texts == ["simulating: fixed_work, pareto:1.5 (0 of 3 simulations done)"]
    assert capsys.readouterr().err == ""
