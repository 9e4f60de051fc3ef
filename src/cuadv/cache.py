"""On-disk cache of compiled modules.

Entries are keyed by a SHA-256 over everything that decides the machine code (target, options,
NVRTC's version and library file, source, the caller's own headers (include paths, --pre-include), the contents
of cuadv's headers and the identity of the CCCL/cudart headers, and a format version; a linked module: the linker's
file or the driver's version). Writes are atomic (temporary file, then rename); a corrupt entry is detected
by its checksum and ignored.

Where it lives: the platform's user cache directory, subfolder ``cuadv`` (Linux and other Unixes:
``$XDG_CACHE_HOME/cuadv`` or ``~/.cache/cuadv``; macOS: ``~/Library/Caches/cuadv``; Windows:
``%LOCALAPPDATA%\\cuadv``). ``CUADV_CACHE_DIR`` moves the cache, ``CUADV_CACHE=0`` disables it.

Size bound: ``CUADV_CACHE_MAX_BYTES`` (default 2 GiB; a byte count, or with a ``K``/``M``/``G``
suffix in powers of 1024, e.g. ``500M``; 0 means no bound; a value that is neither warns once and
keeps the default). After a store that takes the cache over the bound, the
least recently used entries are removed until it holds at most 90% of the bound (so the next
stores do not each trigger a scan). "Used" is the entry's modification time, which every load
refreshes. The total is tracked from the sizes this process stores and the directory is scanned
only when that total may exceed the bound, or when this process has stored half the bound since it last
scanned (other processes store into the same directory), so stores stay cheap however big the tree is. The entry
just stored is never the one evicted, and one larger than 90% of the bound is not stored (it would empty the
cache of everything else). Several processes may share the cache: a file that vanishes under a load or
an eviction is a miss, never an error; entries are readable as the umask allows (not owner-only). ``usage()``
and ``clear()`` back the ``cuadv cache`` command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

FORMAT_VERSION = 1
_MAGIC = b"CUADV1\n"
DEFAULT_MAX_BYTES = 2 * 1024**3
_warned_bound: list[bool] = []  # the invalid-bound warning is given once per process
_LOW_WATER = 0.9  # eviction empties the cache down to this fraction of the bound
_STALE_TMP_S = 3600  # a temporary file this old belongs to a writer that died
_ENTRY = re.compile(r"[0-9a-f]{64}\.bin")  # only cuadv's own files are ever counted or removed
_SIZE = re.compile(r"(\d+)\s*([kmg]?)(?:i?b)?", re.IGNORECASE)

_lock = threading.Lock()
_tracked: dict[Path, int] = {}  # per cache root: this process's upper estimate of its total bytes
_since_scan: dict[Path, int] = {}  # per cache root: bytes this process stored since it last scanned it
_RESCAN_FRACTION = 0.5  # of the bound: stores by this process after which it scans again (others store too)


def _process_umask() -> int:
    mask = os.umask(0o022)  # read by setting: once, at import
    os.umask(mask)
    return mask


_UMASK = _process_umask()


@dataclass(frozen=True)
class CacheUsage:
    path: Path | None  # None when the cache is disabled
    entries: int
    bytes: int
    limit_bytes: int


def cache_dir() -> Path | None:
    if os.environ.get("CUADV_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    root = os.environ.get("CUADV_CACHE_DIR")
    if root:  # "~/x" is the user's; a relative one is fixed now, not followed through later chdirs
        return Path(os.path.expanduser(root)).resolve()
    return _platform_cache_home() / "cuadv"


def _platform_cache_home() -> Path:
    home = Path(os.path.expanduser("~"))
    if sys.platform == "darwin":
        return home / "Library" / "Caches"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return Path(local) if local else home / "AppData" / "Local"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else home / ".cache"


def max_bytes() -> int:
    """The size bound from ``CUADV_CACHE_MAX_BYTES`` (default 2 GiB)."""
    raw = os.environ.get("CUADV_CACHE_MAX_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    m = _SIZE.fullmatch(raw)
    if m is None:
        raise ValueError("CUADV_CACHE_MAX_BYTES must be a byte count, optionally with a K, M or G "
                         f"suffix (powers of 1024), e.g. 2G or 500M (got {raw!r})")
    return int(m.group(1)) * 1024 ** " kmg".index((m.group(2) or " ").lower())


def make_key(*parts: str | bytes) -> str:
    h = hashlib.sha256(f"format={FORMAT_VERSION}".encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def load(key: str) -> tuple[dict, bytes] | None:
    """Return (metadata, payload) for a key, or None if absent, unreadable or corrupt.

    A hit refreshes the entry's modification time, which is what eviction orders by.
    """
    root = cache_dir()
    if root is None:
        return None
    path = root / f"{key}.bin"
    try:
        blob = path.read_bytes()
    except OSError:  # absent, or evicted by another process a moment ago
        return None
    entry = _decode(blob)
    if entry is not None:
        _touch(path)
    return entry


def store(key: str, meta: dict, payload: bytes) -> None:
    root = cache_dir()
    if root is None:
        return
    try:
        limit = max_bytes()
    except ValueError as exc:  # a mistyped bound must not break compilation: say so once, keep the default
        if not _warned_bound:
            warnings.warn(f"{exc}; using the default bound of {DEFAULT_MAX_BYTES} bytes", stacklevel=2)
            _warned_bound.append(True)
        limit = DEFAULT_MAX_BYTES
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    body = len(meta_bytes).to_bytes(8, "little") + meta_bytes + payload
    blob = _MAGIC + hashlib.sha256(body).digest() + body
    if limit and len(blob) > limit * _LOW_WATER:  # kept, it would evict every other entry; not kept, a miss later
        return
    path = root / f"{key}.bin"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-")
        try:
            if hasattr(os, "fchmod"):  # mkstemp makes it owner-only: a shared cache directory's users read it too
                os.fchmod(fd, 0o666 & ~_UMASK)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except OSError:
            _unlink(Path(tmp))
            raise
    except OSError:
        # A read-only or full cache directory must not break compilation.
        return
    _account(root, len(blob), limit, keep=path)


def usage() -> CacheUsage:
    """Where the cache is, how many entries and bytes it holds, and its bound."""
    root = cache_dir()
    limit = max_bytes()
    if root is None:
        return CacheUsage(None, 0, 0, limit)
    entries = _scan(root) + _tool_builds(root)
    return CacheUsage(root, len(entries), sum(size for _, size, _ in entries), limit)


def clear() -> int:
    """Remove every entry (and dead writers' temporary files); return the number of entries removed."""
    root = cache_dir()
    if root is None:
        return 0
    with _lock:
        removed = sum(_unlink(path) for _, _, path in _scan(root) + _tool_builds(root))
        _tracked[root] = 0
    return removed


TOOL_BUILDS = "peers"  # shared libraries the labs build with nvcc (the CUB peer), beside the compiled kernels


def _tool_builds(root: Path) -> list[tuple[int, int, Path]]:
    """The builds in ``root/peers`` (only what a lab named so: a user's files stay): counted and cleared with
    the cache, not evicted by its bound (a lab keeps one per GPU target and nvcc)."""
    return _matching(root / TOOL_BUILDS, _TOOL_BUILD)


_TOOL_BUILD = re.compile(r"[a-z_]+-sm_\d+[a-z]?-[0-9a-f]{24}\.so")  # labs/peers: name-target-hash.so


# --- helpers -------------------------------------------------------------------------------------

def _decode(blob: bytes) -> tuple[dict, bytes] | None:
    if not blob.startswith(_MAGIC):
        return None
    body = blob[len(_MAGIC):]
    digest, body = body[:32], body[32:]
    if hashlib.sha256(body).digest() != digest:
        return None
    meta_len = int.from_bytes(body[:8], "little")
    try:
        meta = json.loads(body[8:8 + meta_len])
    except ValueError:
        return None
    return meta, body[8 + meta_len:]


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # evicted meanwhile, or a read-only cache: still a hit
        pass


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:  # already gone (another process), or in use (Windows)
        return False


def _scan(root: Path) -> list[tuple[int, int, Path]]:
    """(mtime_ns, size, path) of every entry; removes temporary files left by dead writers."""
    return _matching(root, _ENTRY, sweep=True)


def _matching(folder: Path, name: re.Pattern, sweep: bool = False) -> list[tuple[int, int, Path]]:
    """(mtime_ns, size, path) of every file in ``folder`` whose name matches; ``sweep``: also remove the
    temporary files a dead writer left there."""
    found = []
    now = time.time()
    try:
        it = os.scandir(folder)
    except OSError:
        return found
    with it:
        for e in it:
            try:
                if name.fullmatch(e.name):
                    st = e.stat(follow_symlinks=False)
                    found.append((st.st_mtime_ns, st.st_size, Path(e.path)))
                elif (sweep and e.name.startswith(".tmp-")
                      and now - e.stat(follow_symlinks=False).st_mtime > _STALE_TMP_S):
                    _unlink(Path(e.path))
            except OSError:  # vanished between listing and stat
                continue
    return found


def _account(root: Path, added: int, limit: int, keep: Path | None = None) -> None:
    """Add a store's size to the tracked total; scan and evict only when it may exceed the bound. Other processes
    store into the same directory unseen, so once this one has added half the bound since its last scan it
    scans again. ``keep``: the entry just stored, never the one evicted for it."""
    with _lock:
        total = _tracked.get(root)
        since = _since_scan.get(root, 0) + added
        if total is None:  # first store of this process into this root: one scan
            total, since = sum(size for _, size, _ in _scan(root)), 0
        else:
            total += added  # an overestimate when the store replaced an entry: errs towards a scan
        if limit and total <= limit and since > limit * _RESCAN_FRACTION:  # 0: no bound
            total, since = sum(size for _, size, _ in _scan(root)), 0  # what the other processes stored meanwhile
        if limit and total > limit:
            total, since = _evict(root, int(limit * _LOW_WATER), keep), 0
        _tracked[root], _since_scan[root] = total, since


def _evict(root: Path, target: int, keep: Path | None = None) -> int:
    """Remove least recently used entries (never ``keep``) until at most ``target`` bytes remain; return the
    total."""
    entries = sorted(_scan(root), key=lambda e: (e[0], e[2].name))
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= target:
            break
        if path == keep:
            continue
        if _unlink(path) or not path.exists():  # removed here, or by another process meanwhile
            total -= size
    return total
