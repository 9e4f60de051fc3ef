"""The on-disk compile cache without a GPU: location, size bound with LRU eviction, usage and clear."""

import os
from pathlib import Path

import pytest

from cuadv import cache

KIB = 1024


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUADV_CACHE", raising=False)
    monkeypatch.delenv("CUADV_CACHE_MAX_BYTES", raising=False)
    return tmp_path


def _store(name: str, size: int = KIB) -> str:
    key = cache.make_key(name)
    cache.store(key, {"name": name}, b"x" * size)
    return key


def _age(key: str, root: Path, seconds_ago: int) -> None:
    """Set an entry's last use explicitly, so ordering does not hang on timestamp granularity."""
    t = 1_700_000_000 - seconds_ago
    os.utime(root / f"{key}.bin", (t, t))


def _keys(root: Path) -> set[str]:
    return {p.stem for p in root.glob("*.bin")}


def test_round_trip_and_usage(root):
    key = _store("a", 3 * KIB)
    meta, payload = cache.load(key)
    assert meta == {"name": "a"} and payload == b"x" * (3 * KIB)
    u = cache.usage()
    assert u == cache.CacheUsage(root, 1, (root / f"{key}.bin").stat().st_size, 2 * 1024**3)
    assert u.bytes > 3 * KIB


def test_clear_removes_only_entries(root):
    for name in "abc":
        _store(name)
    (root / "notes.bin").write_text("not ours")  # a foreign file in a user-chosen directory stays
    assert cache.clear() == 3
    assert cache.usage().entries == 0 and cache.usage().bytes == 0
    assert (root / "notes.bin").exists()
    assert cache.clear() == 0


def test_bound_evicts_least_recently_used(root, monkeypatch):
    keys = [_store(name) for name in "abcd"]
    for i, key in enumerate(keys):
        _age(key, root, 100 - i)  # a oldest ... d newest
    entry = (root / f"{keys[0]}.bin").stat().st_size
    # Room for 4.5 entries: the fifth store crosses the bound; eviction goes down to 90% (4 entries).
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", str(int(entry * 4.5)))
    cache._tracked.clear()
    e = _store("e")
    assert _keys(root) == {keys[1], keys[2], keys[3], e}
    assert cache.usage().bytes <= cache.max_bytes()
    # Each further store evicts the oldest entry, never the one just stored.
    f = _store("f")
    assert _keys(root) == {keys[2], keys[3], e, f}
    g = _store("g")
    assert _keys(root) == {keys[3], e, f, g}
    assert cache.usage().bytes <= cache.max_bytes()


def test_load_refreshes_recency(root, monkeypatch):
    a, b, c = (_store(name) for name in "abc")
    for i, key in enumerate((a, b, c)):
        _age(key, root, 100 - i)
    assert cache.load(a) is not None  # a is now the most recently used
    entry = (root / f"{a}.bin").stat().st_size
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", str(int(entry * 3.5)))
    cache._tracked.clear()
    d = _store("d")
    assert _keys(root) == {a, c, d}  # b, the least recently used, went; a survived


def test_scan_only_when_bound_may_be_exceeded(root, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "100K")
    cache._tracked.clear()
    _store("first")  # the process's first store into this root scans once
    scans = []
    real_scan = cache._scan
    monkeypatch.setattr(cache, "_scan", lambda r: scans.append(r) or real_scan(r))
    for i in range(20):
        _store(f"small{i}")
    assert scans == []  # about 23 KB tracked: below the bound, no directory walk
    big = _store("big", 80 * KIB)
    assert scans == [root]  # the tracked total crossed the bound: one scan, then eviction
    assert big in _keys(root) and cache.usage().bytes <= 90 * KIB


def test_entry_larger_than_bound_is_not_kept(root, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "10K")
    cache._tracked.clear()
    key = _store("huge", 64 * KIB)
    assert cache.load(key) is None and cache.usage().entries == 0


def test_max_bytes_parsing(monkeypatch):
    for raw, expected in [("2048", 2048), ("500M", 500 * 1024**2), ("2G", 2 * 1024**3),
                          ("64KiB", 64 * 1024), ("1 gb", 1024**3)]:
        monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", raw)
        assert cache.max_bytes() == expected
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"CUADV_CACHE_MAX_BYTES .* \(got 'lots'\)"):
        cache.max_bytes()
    monkeypatch.delenv("CUADV_CACHE_MAX_BYTES")
    assert cache.max_bytes() == 2 * 1024**3


def test_corrupt_or_vanishing_entry_is_a_miss(root, monkeypatch):
    key = _store("a")
    path = root / f"{key}.bin"
    blob = path.read_bytes()
    path.write_bytes(blob[:-1] + b"y")  # checksum mismatch
    assert cache.load(key) is None
    path.write_bytes(b"garbage")  # no magic
    assert cache.load(key) is None
    path.unlink()
    assert cache.load(key) is None
    # The file disappears between the read and the touch (another process evicted it).
    key = _store("b")
    real_utime = os.utime
    monkeypatch.setattr(cache.os, "utime", lambda p, *a: (Path(p).unlink(), real_utime(p, *a)))
    assert cache.load(key) is not None


def test_eviction_tolerates_concurrent_removal(root, monkeypatch):
    keys = [_store(name) for name in "abcd"]
    for i, key in enumerate(keys):
        _age(key, root, 100 - i)
    entry = (root / f"{keys[0]}.bin").stat().st_size
    real_scan = cache._scan

    def scan_then_lose_oldest(r):
        found = real_scan(r)
        (root / f"{keys[0]}.bin").unlink(missing_ok=True)  # another process evicts it first
        return found

    monkeypatch.setattr(cache, "_scan", scan_then_lose_oldest)
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", str(int(entry * 4.5)))
    cache._tracked[root] = 4 * entry
    e = _store("e")
    assert _keys(root) == {keys[1], keys[2], keys[3], e}


def test_stale_temp_files_are_removed_fresh_ones_kept(root):
    _store("a")
    stale, fresh = root / ".tmp-dead", root / ".tmp-writing"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (1, 1))
    assert cache.usage().entries == 1
    assert not stale.exists() and fresh.exists()


def test_store_is_atomic_and_leaves_no_temp_file(root, monkeypatch):
    key = _store("a")
    monkeypatch.setattr(cache.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    cache.store(cache.make_key("b"), {}, b"payload")  # a failing write does not raise
    assert _keys(root) == {key} and not list(root.glob(".tmp-*"))


def test_disabled(root, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE", "0")
    assert cache.cache_dir() is None
    key = _store("a")
    assert cache.load(key) is None and not list(root.iterdir())
    assert cache.usage() == cache.CacheUsage(None, 0, 0, 2 * 1024**3)
    assert cache.clear() == 0


@pytest.mark.parametrize("value", ["0", "False", "OFF", " no ", "off\n"])
def test_disabled_in_any_case_and_spacing(root, monkeypatch, value):
    monkeypatch.setenv("CUADV_CACHE", value)
    assert cache.cache_dir() is None


def test_cache_dir_overrides_platform_default(tmp_path, monkeypatch):
    monkeypatch.delenv("CUADV_CACHE", raising=False)
    monkeypatch.setenv("CUADV_CACHE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(cache.sys, "platform", "darwin")
    assert cache.cache_dir() == tmp_path / "elsewhere"


@pytest.mark.parametrize("platform, env, expected", [
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, Path("/xdg/cuadv")),
    ("linux", {}, Path("HOME/.cache/cuadv")),
    ("freebsd13", {}, Path("HOME/.cache/cuadv")),
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, Path("HOME/Library/Caches/cuadv")),
    ("win32", {"LOCALAPPDATA": "/local"}, Path("/local/cuadv")),
    ("win32", {}, Path("HOME/AppData/Local/cuadv")),
])
def test_platform_default(tmp_path, monkeypatch, platform, env, expected):
    for var in ("CUADV_CACHE", "CUADV_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(cache.os.path, "expanduser", lambda p: str(tmp_path) if p == "~" else p)
    monkeypatch.setattr(cache.sys, "platform", platform)
    assert cache.cache_dir() == Path(str(expected).replace("HOME", str(tmp_path)))


def test_zero_bound_keeps_everything(root, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "0")
    cache._tracked.clear()
    keys = [_store(f"z{i}", 4 * KIB) for i in range(4)]
    assert _keys(root) == set(keys) and all(cache.load(k) is not None for k in keys)


def test_a_mistyped_bound_warns_once_and_keeps_caching(root, monkeypatch):
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "1.5G")
    monkeypatch.setattr(cache, "_warned_bound", [])
    with pytest.warns(UserWarning, match="CUADV_CACHE_MAX_BYTES.*'1.5G'.*default bound"):
        key = _store("w")
    assert cache.load(key) is not None


def test_the_labs_tool_builds_are_counted_and_cleared(root):
    _store("a")
    peers = root / "peers"
    peers.mkdir()
    build = peers / f"cub_histogram-sm_90-{'0123456789abcdef01234567'}.so"
    build.write_bytes(b"\x7fELF" + b"\0" * 100)
    (peers / "mine.so").write_text("a user's file")  # not named as the labs name their builds: stays
    u = cache.usage()
    assert u.entries == 2 and u.bytes >= 104
    assert cache.clear() == 2
    assert not build.exists() and (peers / "mine.so").exists()


def test_an_entry_near_the_bound_leaves_the_others_and_the_newest_is_kept(root, monkeypatch):
    """An entry between 90% and 100% of the bound used to evict every entry, itself included: it is not stored,
    and an eviction never removes the entry whose store caused it."""
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "100K")
    cache._tracked.clear()
    small = [_store(f"s{i}") for i in range(5)]
    assert cache.load(_store("near", 95 * KIB)) is None
    assert set(small) <= _keys(root)
    for i, key in enumerate(small):
        _age(key, root, 100 - i)
    newest = _store("big", 88 * KIB)  # over the bound: eviction down to 90 KB takes the old ones, not this one
    assert newest in _keys(root) and cache.load(newest) is not None


def test_entries_are_readable_as_the_umask_allows_and_the_dir_is_expanded(root, monkeypatch, tmp_path):
    """A shared cache directory: entries get the umask's permissions, not mkstemp's owner-only 0600; '~' in
    CUADV_CACHE_DIR is the user's home, and a relative one is fixed when read."""
    import stat

    key = _store("shared")
    mode = stat.S_IMODE((root / f"{key}.bin").stat().st_mode)
    assert mode == 0o666 & ~cache._UMASK
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUADV_CACHE_DIR", "~/cuadv-cache")
    assert cache.cache_dir() == tmp_path / "home" / "cuadv-cache"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUADV_CACHE_DIR", "rel")
    assert cache.cache_dir() == (tmp_path / "rel").resolve()


def test_another_process_s_stores_are_counted_once_this_one_has_stored_half_the_bound(root, monkeypatch):
    """Stores by other processes are unseen: after half the bound of its own stores a process scans again, so a
    cache shared by several builders stays near its bound."""
    monkeypatch.setenv("CUADV_CACHE_MAX_BYTES", "100K")
    cache._tracked.clear()
    cache._since_scan.clear()
    _store("mine0")
    for i in range(90):  # another process's 90 KB, written behind this one's back
        (root / f"{cache.make_key(f'theirs{i}')}.bin").write_bytes(b"y" * KIB)
    for i in range(60):
        _store(f"mine{i + 1}")
    assert cache.usage().bytes <= 100 * KIB
