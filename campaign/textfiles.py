"""Small, safe file primitives: atomic writes, the tail of a log, a file's sha256, output
files named on the command line, and the one guarded reader of results files (regular
files only, a size cap per kind: `read_capped`, `open_regular`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
from collections import deque
from pathlib import Path
from typing import BinaryIO

from campaign.errors import ResultsError, StorageError, UsageError


def atomic_write(path: Path, data: str | bytes, *, overwrite: bool = True,
                 mode: int | None = None) -> None:
    """Write via a temp file + fsync + rename, so a crash never leaves half a file.

    With `overwrite=False` an existing file is an error (results are never replaced).
    `mode` sets the file's permission bits (else the temp file's 0600).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not overwrite and path.exists():
        raise FileExistsError(f"{path} exists; results are never overwritten")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
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
    not be a folder (UsageError, exit 2, naming `flag`); a path the system cannot even
    look up (too long, a symlink loop) is a StorageError (exit 3)."""
    try:
        path.parent.stat()
        path.is_dir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _output_error(path, flag, exc) from None
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        what = "is a file" if path.parent.exists() else "does not exist"
        raise UsageError(f"{flag} {path}: the folder {path.parent} {what}",
                         hint=f"create it first (mkdir -p {path.parent}) or pick another path")


def write_output(path: Path, text: str, flag: str) -> None:
    """Write an output file named on the command line (`check_output_path`, then the
    text; a write error is a StorageError, exit 3, naming `flag` and the path)."""
    check_output_path(path, flag)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _output_error(path, flag, exc) from None


def check_output_folder(folder: Path, flag: str, output: Path) -> None:
    """A folder written beside the output file `flag` names (`--format html`'s plots/),
    checked before anything is rendered, as the file itself is: an existing folder must
    be writable; a new one is made and removed again, since only making it tells (root may
    write anywhere by its permissions, yet /proc refuses every new entry). A refusal is a
    StorageError (exit 3) naming the folder."""
    try:
        if folder.is_dir():
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
            return
        folder.mkdir()
    except OSError as exc:
        raise output_folder_error(folder, flag, output, exc) from None
    with contextlib.suppress(OSError):
        folder.rmdir()  # a probe: the folder is made when its files are written


def make_output_folder(folder: Path, flag: str, output: Path) -> None:
    """Make the folder `check_output_folder` checked (a refusal now: a StorageError)."""
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise output_folder_error(folder, flag, output, exc) from None


def output_folder_error(folder: Path, flag: str, output: Path, exc: OSError, *,
                        writing: bool = False) -> StorageError:
    """`exc` while making the folder beside `flag`'s file (`writing`: a file into it)."""
    in_place = isinstance(exc, FileExistsError) and not folder.is_dir()
    reason = "a file is in its place" if in_place else exc.strerror or str(exc)
    what = (f"cannot write the plot file {exc.filename or folder}" if writing
            else f"cannot make the plots folder {folder}")
    return StorageError(f"{flag} {output}: {what} ({reason})",
                        hint=f"give {flag} a file in a folder where spec-ab can make and "
                        "write plots/ (not under /proc or /sys; no file named plots there; "
                        "check free space and permissions)")


def _output_error(path: Path, flag: str, exc: OSError) -> StorageError:
    return StorageError(f"{flag} {path}: cannot write ({exc.strerror or exc})",
                        hint=f"give {flag} a writable file in an existing folder (a short "
                        "path, no symlink loop, not under /proc or /sys; check free space "
                        "and permissions)")


MiB = 1 << 20
JOURNAL_CAP = 256 * MiB
"""journal.jsonl: a long night writes a few MB to 100 MB (a pass event holds its tidy rows);
256 MiB is 2.5 times that, and still fits in memory once parsed (~10 bytes of Python
objects per byte of JSON is ~2.5 GB). Beyond it the file is not a journal spec-ab wrote."""
PASSES_CAP = 256 * MiB
"""passes.csv: the journal's rows again, as CSV (smaller than the journal that holds them)."""
DOC_CAP = 16 * MiB
"""manifest.json and preregistration.json: a few KB each (the machine's facts, the rule)."""


def open_regular(path: Path, what: str = "results file") -> BinaryIO:
    """`path` opened for reading in binary, when it is a regular file: a FIFO (which would
    block the reader forever), a device (`/dev/zero`, endless) or a folder is refused with
    a ResultsError naming it. FileNotFoundError passes through (callers say what missing
    means); other OSErrors (ELOOP, EACCES, ENAMETOOLONG) become a ResultsError."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise _not_regular(path, what, "a folder") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read the {what}: {exc.strerror or exc}",
                           hint="check the path and its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a pipe (FIFO)" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise _not_regular(path, what, kind)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _not_regular(path: Path, what: str, kind: str) -> ResultsError:
    return ResultsError(f"{path}: the {what} is {kind}, not a regular file",
                        hint="replace it with the file spec-ab wrote (a results folder holds "
                        "only regular files), or report on another run")


def read_capped(path: Path, cap: int, what: str = "results file") -> bytes:
    """A results file's bytes, guarded as the campaign-file reader is: a regular file only
    (`open_regular`), at most `cap` bytes (more is a ResultsError: not a file spec-ab
    wrote), read with at most cap+1 bytes in memory. FileNotFoundError passes through."""
    with open_regular(path, what) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            raw = b"" if size > cap else f.read(cap + 1)
        except OSError as exc:
            raise ResultsError(f"{path}: cannot read the {what}: {exc.strerror or exc}",
                               hint="check the disk and the file's permissions") from None
    if size > cap or len(raw) > cap:
        unit, name = (MiB, "MiB") if cap >= MiB else (1024, "KiB")
        raise ResultsError(
            f"{path}: the {what} is over {cap // unit} {name} ({max(size, len(raw)) / unit:.0f}"
            f"{'+' if len(raw) > cap else ''} {name}); spec-ab writes far less",
            hint="this is not the file spec-ab wrote: restore it from a copy, or report on "
            "another run")
    return raw
