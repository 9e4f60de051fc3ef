"""argparse types of the command lines (cuadv's CLI and ``cuadv simulate``): a bad value is a usage error (exit 2)
before any work. Imports nothing of cuadv, so the command line of any layer may use it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable


def output_file(text: str) -> str:
    """A file cuadv will write (argparse type): its folder must exist and take new files, and it must not be a
    folder, checked before the work that fills it (a usage error, exit 2, not a traceback after minutes of building
    or checking)."""
    path = Path(text)
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file" if text else "an empty file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: folder {path.parent} does not exist")
    why = unwritable_folder(path.parent)
    if why:
        raise argparse.ArgumentTypeError(f"cannot write {text}: {why}")
    return text


def output_folder_problem(text: str) -> str | None:
    """Why a report folder cuadv will fill (``--out``) cannot be, or None: it, or where it is missing the nearest
    folder above it that exists, must take a new file (tried, and nothing made: a run that fails leaves no folder),
    so that a bad one fails before the work, not after it."""
    if not text:
        return "an empty folder name"
    path = Path(text)
    if path.exists() and not path.is_dir():
        return f"{text} is a file, not a directory"
    full = path.absolute()
    for existing in (full, *full.parents):  # the nearest that exists; a link to nothing exists for mkdir only
        if existing.exists():
            break
        if os.path.lexists(existing):
            return f"cannot make folder {text}: {existing} is a broken symbolic link"
    if not existing.is_dir():
        return f"cannot make folder {text}: {existing} is a file"
    return unwritable_folder(existing)


def unwritable_folder(folder: Path) -> str | None:
    """None where a new file can be written in ``folder`` (tried: permission bits do not tell root or a read-only
    mount), else why not."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as exc:
        return f"folder {folder} takes no new file ({exc.strerror or exc})"


def whole_number(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``least`` (a count such as --jobs, a seed)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {least}, got {text!r}")
        return value

    return parse


positive_int = whole_number(1)
