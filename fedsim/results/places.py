"""Where results may be written: every folder and file a command will write is checked before
any work starts (``validate`` too), so that a read-only disk or a file in the way is one line
naming the path, not a traceback after an hour of training.

Writability is tried, not inferred from permission bits: a read-only mount, an immutable
folder or a pseudo file system refuses a file that the bits (and root) would allow.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def folder_problem(path: Path) -> str | None:
    """Why files cannot be written in a folder at ``path``: a file stands there or where a
    folder above it goes, or the nearest folder that exists refuses a new file; None if the
    folder is (or can be made) and takes files."""
    for place in (path, *path.parents):
        inside = "" if place == path else f", so the folder {path} cannot be made"
        if place.is_dir():
            refused = _refuses_files(place)
            return None if refused is None else f"{place} cannot be written ({refused}){inside}"
        if place.exists():
            return f"{place} is a file, not a folder{inside}"
    return None


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file: it is a folder, its folder is missing or
    refuses files, or the file is there and read-only; None if it can be written."""
    if path.is_dir():
        return f"{path} is a folder, not a file"
    if not path.parent.is_dir():
        return f"no folder {path.parent} to write into"
    refused = _refuses_files(path.parent)
    if refused is not None:
        return f"{path.parent} cannot be written ({refused})"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} cannot be written (read-only)"
    return None


def tree_problem(folder: Path, inside: Iterable[str]) -> str | None:
    """``folder_problem`` of ``folder``, then of each of the folders ``inside`` it that exist
    already (a run's folder that is kept but rewritten), and of the files directly in them."""
    for place in (folder, *(folder / name for name in inside)):
        if place != folder and not place.is_dir():
            continue
        problem = folder_problem(place)
        if problem is not None or not place.is_dir():
            return problem
        for entry in place.iterdir():
            if entry.is_file() and not os.access(entry, os.W_OK):
                return f"{entry} cannot be written (read-only)"
    return None


def _refuses_files(folder: Path) -> str | None:
    """The reason ``folder`` refuses a new file (tried with a temporary one), or None."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as error:
        return error.strerror or str(error)
