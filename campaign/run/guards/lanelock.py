"""One campaign per lane at a time.

A lane (the campaign's `lane` label: one GB300 station, one GB10 pair, the local sim) is
locked with an OS file lock for the whole run, so a second `spec-ab run` on the same lane
fails at once instead of silently measuring two servers fighting over one GPU. The lock
dies with the process (no stale lock after a crash); a side file says who holds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from campaign.errors import PreflightError, ResultsError
from campaign.textfiles import atomic_write, read_capped

LOCK_DIR_ENV = "SPECAB_LOCK_DIR"
MAX_SLUG = 64
"""A lock file's name is the lane's, cut to this many characters (a file name may have 255
bytes; a lane name has no limit)."""


def default_lock_dir() -> Path:
    """$SPECAB_LOCK_DIR, or spec-ab-locks in the temp folder (also when it is set empty)."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "spec-ab-locks")


def _slug(lane: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", lane) or "lane"
    if len(slug) <= MAX_SLUG:
        return slug
    # a long lane keeps a readable head and a digest of the whole name: two lanes that
    # share their first characters still get two locks
    return f"{slug[:MAX_SLUG - 13]}-{hashlib.sha256(lane.encode()).hexdigest()[:12]}"


def _lock_dir_error(folder: Path, exc: OSError) -> PreflightError:
    where = (f"{LOCK_DIR_ENV}={os.environ[LOCK_DIR_ENV]}" if os.environ.get(LOCK_DIR_ENV)
             else "the lane lock folder")
    return PreflightError(
        f"cannot take the lane lock in {folder} ({where}): {exc.strerror or exc}",
        hint=f"point {LOCK_DIR_ENV} at a writable folder (e.g. export {LOCK_DIR_ENV}="
        "$HOME/.cache/spec-ab-locks), or unset it for the default in the temp folder")


def _refuse_unwritable(folder: Path, path: Path) -> None:
    """A lock file that cannot even be opened (a read-only folder) is the folder's fault,
    not another run's."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as exc:
        raise _lock_dir_error(folder, exc) from None


@contextmanager
def hold(lane: str, run_id: str, *,
         lock_dir: Path | None = None) -> Iterator[Callable[[str], None]]:
    """Hold the lane for the block; yields a function that renames the holder (a run
    takes the lane before its run directory, so before it knows its id)."""
    folder = lock_dir or default_lock_dir()
    path = folder / f"{_slug(lane)}.lock"
    info = folder / f"{_slug(lane)}.holder.json"
    lock = FileLock(str(path))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=0)
    except Timeout:
        _refuse_unwritable(folder, path)  # filelock reads "cannot create" as "held"
        holder = {}
        try:
            holder = json.loads(read_capped(info, 1 << 16, "lane holder note"))
        except (OSError, ValueError, ResultsError):
            pass
        who = f"run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')})"
        raise PreflightError(
            f"lane '{lane}' is busy: {who} holds {path}",
            hint="wait for it to finish, or stop it (Ctrl-C) before starting another",
        ) from None
    except OSError as exc:  # missing parent, a file, read-only, a symlink loop, too long
        # (after Timeout, which is an OSError too: a busy lane)
        raise _lock_dir_error(folder, exc) from None

    def name(holder: str) -> None:
        try:
            atomic_write(info, json.dumps({"run_id": holder, "pid": os.getpid()}), mode=0o644)
        except OSError:
            pass  # the side file only names the holder in a "busy" message

    try:
        name(run_id)
        yield name
    finally:
        try:
            info.unlink()
        except OSError:
            pass
        lock.release()
