"""Small, safe file primitives: atomic writes, the tail of a log, a file's sha256."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import deque
from pathlib import Path

from campaign.errors import UsageError


def atomic_write(path: Path, data: str | bytes, *, overwrite: bool = True) -> None:
    """Write via a temp file + fsync + rename, so a crash never leaves half a file.

    With `overwrite=False` an existing file is an error (results are never replaced).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not overwrite and path.exists():
        raise FileExistsError(f"{path} exists; results are never overwritten")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if not overwrite:
            os.link(tmp, path)  # fails if path appeared meanwhile
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # ENOSPC from write() names no file: say which
        raise


def tail_lines(path: Path, n: int) -> list[str]:
    """The last `n` lines of a text file ([] when it does not exist)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=n)]
    except FileNotFoundError:
        return []


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_output_path(path: Path, flag: str) -> None:
    """An output file named on the command line: its folder must exist and the path must
    not be a folder (UsageError, exit 2, naming `flag`)."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        what = "is a file" if path.parent.exists() else "does not exist"
        raise UsageError(f"{flag} {path}: the folder {path.parent} {what}",
                         hint=f"create it first (mkdir -p {path.parent}) or pick another path")


def write_output(path: Path, text: str, flag: str) -> None:
    """Write an output file named on the command line (`check_output_path`, then the
    text; a write error is a UsageError naming `flag`)."""
    check_output_path(path, flag)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
