"""The compile cache under concurrency, without a GPU: a compile killed in the middle of writing its entry
leaves a miss (never a corrupt entry) and a later compile works; threads compiling the same and different
sources at once get correct modules and leave no partial file."""

import os
import selectors
import signal
import subprocess
import sys
import threading
from pathlib import Path

from cuadv import cache
from cuadv.compiler import compile_source

ROOT = Path(__file__).resolve().parents[1]

SOURCE = r"""extern "C" __global__ void killed_mid_write(int* x) { x[threadIdx.x] += 1; }"""

# The child compiles SOURCE; its cache write stops half way (flushed to the file) and says so, then
# waits to be killed. The write goes through the cache's own code path: only the file object is wrapped.
CHILD = r'''
import os, sys, threading
from cuadv.compiler import compile_source

real_fdopen = os.fdopen


class HalfThenStall:
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.f.__exit__(*exc)

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        print("half written", len(data), flush=True)
        threading.Event().wait()  # until killed


def fdopen(fd, mode="r", *args, **kwargs):
    f = real_fdopen(fd, mode, *args, **kwargs)
    return HalfThenStall(f) if "w" in mode else f


os.fdopen = fdopen
compile_source(sys.argv[1], name="killed", arch="sm_90a")
print("not reached", flush=True)
'''


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The child's first line of output, or '' if it ended or said nothing within the timeout."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return proc.stdout.readline()


def test_a_compile_killed_mid_write_leaves_a_miss_and_a_later_compile_works(tmp_path, monkeypatch):
    env = dict(os.environ, CUADV_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, SOURCE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = _read_line(proc, timeout_s=300)
        assert line.startswith("half written"), line + (proc.stderr.read() if proc.poll() is not None else "")
        full = int(line.split()[-1])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
    partial = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < full  # the write really stopped half way
    assert not list(tmp_path.glob("*.bin"))  # no entry under its final name

    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    first = compile_source(SOURCE, name="killed", arch="sm_90a")
    assert not first.from_cache  # a miss, not a corrupt entry
    again = compile_source(SOURCE, name="killed", arch="sm_90a")
    assert again.from_cache and again.cubin == first.cubin and again.ptx == first.ptx
    assert cache.usage().entries == 1
    assert partial[0].exists()  # a dead writer's file is left to the sweep (after an hour), never read


KERNELS = [rf"""extern "C" __global__ void threaded_{k}(int* x) {{ x[threadIdx.x] += {k + 1}; }}""" for k in range(3)]


def test_threads_compiling_at_once_get_correct_modules_and_leave_no_partial_file(tmp_path, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    threads_n, rounds = 4, 2
    start = threading.Barrier(threads_n)
    modules: dict[int, list] = {k: [] for k in range(len(KERNELS))}
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            start.wait(timeout=120)
            for r in range(rounds):
                for i in range(len(KERNELS)):  # each thread in its own order: same and different sources at once
                    k = (i + offset + r) % len(KERNELS)
                    modules[k].append(compile_source(KERNELS[k], name=f"threaded_{k}", arch="sm_90a"))
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors and not any(t.is_alive() for t in threads)
    for k, made in modules.items():
        assert len(made) == threads_n * rounds
        assert all(m.cubin == made[0].cubin and m.ptx == made[0].ptx for m in made)
        assert f".entry threaded_{k}(" in made[0].ptx
        assert made[0].kernel_names() == [f"threaded_{k}"]
        assert any(m.from_cache for m in made)  # later rounds read the entries the first wrote
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in names if n.startswith(".tmp-")]  # every write finished and was renamed
    assert len(names) == len(KERNELS) and all(n.endswith(".bin") for n in names)
    for p in tmp_path.iterdir():
        assert cache._decode(p.read_bytes()) is not None  # each entry whole (its checksum holds)


def test_stores_of_one_key_from_many_threads_leave_one_whole_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    writers = 8
    key = cache.make_key("one key")
    payload = bytes(range(256)) * 4096  # 1 MiB: long enough for the writes to overlap
    start = threading.Barrier(writers)

    def store() -> None:
        start.wait(timeout=60)
        cache.store(key, {"n": 1}, payload)

    threads = [threading.Thread(target=store) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert cache.load(key) == ({"n": 1}, payload)
    assert [p.name for p in tmp_path.iterdir()] == [f"{key}.bin"]
