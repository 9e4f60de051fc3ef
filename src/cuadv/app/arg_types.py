"""argparse types of the CLI's options: a bad value is a usage error (exit 2) before any work."""

from __future__ import annotations

import argparse
from pathlib import Path


def output_file(text: str) -> str:
    """A file cuadv will write (argparse type): its folder must exist and it must not be a folder, checked before
    the work that fills it (a usage error, exit 2, not a traceback after minutes of building or checking)."""
    path = Path(text)
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file" if text else "an empty file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: folder {path.parent} does not exist")
    return text


def positive_int(text: str) -> int:
    """A count such as --jobs (argparse type): a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value
