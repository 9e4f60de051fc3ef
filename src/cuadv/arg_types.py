"""argparse types of the command lines (cuadv's CLI and ``cuadv simulate``): a bad value is a usage error (exit 2)
before any work. Imports nothing of cuadv, so the command line of any layer may use it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable


def output_file(text: str) -> str:
    """A file cuadv will write (argparse type): its folder must exist and it must not be a folder, checked before
    the work that fills it (a usage error, exit 2, not a traceback after minutes of building or checking)."""
    path = Path(text)
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file" if text else "an empty file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: folder {path.parent} does not exist")
    return text


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
