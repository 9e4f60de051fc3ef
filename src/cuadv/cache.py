"""On-disk cache of compiled modules.

Entries are keyed by a SHA-256 over everything that decides the machine code (target, options,
NVRTC version, source, the contents of cuadv's headers and the identity of the CCCL/cudart headers,
and a format version). Writes are atomic (temporary file, then rename); a corrupt entry is detected
by its checksum and ignored. ``CUADV_CACHE_DIR`` moves the cache, ``CUADV_CACHE=0`` disables it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

FORMAT_VERSION = 1
_MAGIC = b"CUADV1\n"


def cache_dir() -> Path | None:
    if os.environ.get("CUADV_CACHE", "1") in ("0", "false", "no", "off"):
        return None
    root = os.environ.get("CUADV_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cuadv"


def make_key(*parts: str | bytes) -> str:
    h = hashlib.sha256(f"format={FORMAT_VERSION}".encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def load(key: str) -> tuple[dict, bytes] | None:
    """Return (metadata, payload) for a key, or None if absent, unreadable or corrupt."""
    root = cache_dir()
    if root is None:
        return None
    path = root / f"{key}.bin"
    try:
        blob = path.read_bytes()
    except OSError:
        return None
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


def store(key: str, meta: dict, payload: bytes) -> None:
    root = cache_dir()
    if root is None:
        return
    meta_bytes = json.dumps(meta, sort_keys=True).encode()
    body = len(meta_bytes).to_bytes(8, "little") + meta_bytes + payload
    blob = _MAGIC + hashlib.sha256(body).digest() + body
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, root / f"{key}.bin")
    except OSError:
        # A read-only or full cache directory must not break compilation.
        pass
