"""Block traces as Chrome / Perfetto JSON, from synthetic records (no GPU)."""

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest

from cuadv.work_stealing import TRACE_DTYPE, Trace, to_chrome_trace
from cuadv.work_stealing.perfetto import assign_slots

UNWRITTEN = np.iinfo(np.uint64).max
BASE = 1_700_000_000_000_000_000  # %globaltimer is absolute nanoseconds


def _trace(n=5000, sms=132, per_sm=3, tile_ns=3000, step_ns=200, offset_ns=0, policy="steal"):
    """Tiles dealt round-robin over SMs; each SM gets a tile every sms * step_ns, each lasting
    tile_ns, so about tile_ns / (sms * step_ns) tiles overlap per SM."""
    rec = np.zeros(n, TRACE_DTYPE)
    rec["smid"], rec["block"] = np.arange(n) % sms, np.arange(n) // per_sm
    rec["start_ns"] = BASE + offset_ns + np.arange(n, dtype=np.uint64) * step_ns
    rec["end_ns"] = rec["start_ns"] + tile_ns
    return Trace(policy, (n, 1, 1), records=rec)


def _slices(doc, pid=None):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (pid is None or e["pid"] == pid)]


def _meta(doc, name):
    return [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == name]


def _ns(us):
    return round(us * 1000)


def _assert_tracks_disjoint(doc):
    tracks = defaultdict(list)
    for e in _slices(doc):
        tracks[e["pid"], e["tid"]].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start


def test_structure_counts_and_names():
    trace = _trace()  # 3000 ns tiles every 132 * 200 ns per SM: at most 1 at a time
    doc = trace.to_chrome_trace()
    assert len(_slices(doc)) == 5000
    assert [e["args"]["name"] for e in _meta(doc, "process_name")] == ["steal"]
    threads = {e["tid"]: e["args"]["name"] for e in _meta(doc, "thread_name")}
    assert len(threads) == 132 and threads[120] == "SM 12 slot 0"
    sort = {e["tid"]: e["args"]["sort_index"] for e in _meta(doc, "thread_sort_index")}
    assert sorted(sort, key=sort.get) == sorted(threads)  # SMs in order
    e = _slices(doc)[7]
    assert e["name"] == f"block {e['args']['block']}" and e["args"] == {"block": 2, "tile": 7}
    assert e["ts"] == pytest.approx(7 * 0.2) and e["dur"] == pytest.approx(3.0)
    assert min(s["ts"] for s in _slices(doc)) == 0.0  # from the earliest start
    rel = trace.records["start_ns"] - trace.records["start_ns"].min()
    assert all(_ns(s["ts"]) == rel[s["args"]["tile"]] for s in _slices(doc))  # exact nanoseconds
    assert "displayTimeUnit" not in doc  # Perfetto may take it as the unit of ts


def test_overlapping_tiles_get_slots_that_never_overlap():
    # 100 ns steps over 8 SMs: a tile every 800 ns per SM, each 3000 ns, so 4 overlap per SM.
    trace = _trace(n=4000, sms=8, tile_ns=3000, step_ns=100)
    doc = to_chrome_trace(trace)
    names = {e["args"]["name"] for e in _meta(doc, "thread_name")}
    assert names == {f"SM {sm} slot {s}" for sm in range(8) for s in range(4)}
    _assert_tracks_disjoint(doc)
    assert len(_slices(doc)) == 4000


def test_slot_assignment_is_lowest_free_slot():
    rng = np.random.default_rng(0)
    n = 3000
    smid = rng.integers(0, 5, n)
    start = rng.integers(0, 100_000, n)
    end = start + rng.integers(0, 2000, n)  # zero-length tiles too
    slot = assign_slots(smid, start, end)
    # The reference: a sweep in (SM, start, end) order, lowest slot whose tile has ended.
    expect = np.empty(n, np.int64)
    ends = defaultdict(list)
    for i in np.lexsort((end, start, smid)):
        free = ends[smid[i]]
        s = next((k for k, e in enumerate(free) if e <= start[i]), len(free))
        free[s:s + 1] = [end[i]]
        expect[i] = s
    np.testing.assert_array_equal(slot, expect)
    # Slot count per SM equals the most tiles it ran at once.
    for sm in range(5):
        m = smid == sm
        t = np.concatenate([start[m], end[m]])
        d = np.concatenate([np.ones(m.sum()), -np.ones(m.sum())])
        o = np.lexsort((d, t))  # an end before a start at the same time
        assert slot[m].max() + 1 == np.cumsum(d[o]).max()


def test_two_traces_two_processes_one_time_base():
    low = _trace(n=2000, policy="steal")
    high = _trace(n=132, tile_ns=20_000, step_ns=0, offset_ns=150_000, policy="fixed_work")
    doc = to_chrome_trace([low, high], names=["low-priority steal", "high-priority"])
    procs = {e["pid"]: e["args"]["name"] for e in _meta(doc, "process_name")}
    assert procs == {1: "low-priority steal", 2: "high-priority"}
    assert len(_slices(doc, 1)) == 2000 and len(_slices(doc, 2)) == 132
    assert {e["ts"] for e in _slices(doc, 2)} == {150.0}  # relative to the low-priority kernel's start
    assert min(e["ts"] for e in _slices(doc, 1)) == 0.0
    # Defaults name processes by policy; a later start alone still begins at 0.
    assert [e["args"]["name"] for e in _meta(to_chrome_trace([low, high]), "process_name")] == \
        ["steal (0)", "fixed_work (1)"]
    assert min(e["ts"] for e in _slices(high.to_chrome_trace())) == 0.0
    with pytest.raises(ValueError, match="1 process names for 2 traces"):
        to_chrome_trace([low, high], names=["x"])


def test_unwritten_records_skipped():
    trace = _trace(n=1000)
    rec = trace.records
    rec["end_ns"][::4] = UNWRITTEN
    rec["start_ns"][0] = 0  # an unwritten record's start must not move the time base
    doc = to_chrome_trace(trace)
    slices = _slices(doc)
    assert len(slices) == 750
    assert all(e["args"]["tile"] % 4 for e in slices)
    ts = {e["args"]["tile"]: e["ts"] for e in slices}
    assert ts[1] == 0.0 and ts[2] == pytest.approx(0.2)  # from tile 1, the first written
    nothing = np.zeros(3, TRACE_DTYPE)
    nothing["end_ns"] = UNWRITTEN
    doc = to_chrome_trace(Trace("steal", (3, 1, 1), records=nothing))
    assert _slices(doc) == [] and len(_meta(doc, "process_name")) == 1


def test_tile_coordinates_for_a_2d_grid():
    rec = np.zeros(12, TRACE_DTYPE)
    rec["start_ns"] = np.arange(12) * 10
    rec["end_ns"] = rec["start_ns"] + 5
    doc = to_chrome_trace(Trace("fixed_work", (4, 3, 1), records=rec))
    assert _slices(doc)[6]["args"] == {"block": 0, "tile": 6, "x": 2, "y": 1, "z": 0}


def test_file_round_trips(tmp_path):
    trace = _trace(n=500)
    doc = trace.to_chrome_trace(tmp_path / "trace.json")
    with open(tmp_path / "trace.json") as f:
        assert json.load(f) == doc
    to_chrome_trace([trace], tmp_path / "sub" / "trace.json.gz")
    with gzip.open(tmp_path / "sub" / "trace.json.gz", "rt") as f:
        assert json.load(f) == doc


def test_half_a_million_tiles_convert(tmp_path):
    # 132 SMs x 8 slots of tiles of random length: a steal launch of 500,000 tiles.
    rng = np.random.default_rng(1)
    n, sms, slots = 500_000, 132, 8
    rec = np.zeros(n, TRACE_DTYPE)
    lane = np.arange(n) % (sms * slots)
    dur = rng.integers(1000, 30_000, n)
    rec["smid"], rec["block"] = lane // slots, lane
    ends = np.zeros(sms * slots, np.int64)
    start = np.empty(n, np.int64)
    for k in range(0, n, sms * slots):  # each lane runs its tiles back to back
        chunk = slice(k, min(k + sms * slots, n))
        start[chunk] = ends[lane[chunk]]
        ends[lane[chunk]] += dur[chunk]
    rec["start_ns"], rec["end_ns"] = BASE + start, BASE + start + dur
    slot = assign_slots(rec["smid"], rec["start_ns"], rec["end_ns"])
    assert slot.max() == slots - 1
    doc = to_chrome_trace(Trace("steal", (n, 1, 1), records=rec), tmp_path / "big.json")
    assert len(_slices(doc)) == n
