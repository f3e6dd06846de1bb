"""One campaign per lane at a time.

A lane (the campaign's `lane` label: one GB300 station, one GB10 pair, the local sim) is
locked with an OS file lock for the whole run, so a second `spec-ab run` on the same lane
fails at once instead of silently measuring two servers fighting over one GPU. The lock
dies with the process (no stale lock after a crash); a side file says who holds it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from campaign.errors import PreflightError


def default_lock_dir() -> Path:
    return Path(os.environ.get("SPECAB_LOCK_DIR", Path(tempfile.gettempdir()) / "spec-ab-locks"))


def _slug(lane: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", lane) or "lane"


@contextmanager
def hold(lane: str, run_id: str, *,
         lock_dir: Path | None = None) -> Iterator[Callable[[str], None]]:
    """Hold the lane for the block; yields a function that renames the holder (a run
    takes the lane before its run directory, so before it knows its id)."""
    folder = lock_dir or default_lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(lane)}.lock"
    info = folder / f"{_slug(lane)}.holder.json"
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = {}
        try:
            holder = json.loads(info.read_text())
        except (OSError, ValueError):
            pass
        who = f"run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')})"
        raise PreflightError(
            f"lane '{lane}' is busy: {who} holds {path}",
            hint="wait for it to finish, or stop it (Ctrl-C) before starting another",
        ) from None
    def name(holder: str) -> None:
        info.write_text(json.dumps({"run_id": holder, "pid": os.getpid()}))

    try:
        name(run_id)
        yield name
    finally:
        try:
            info.unlink()
        except OSError:
            pass
        lock.release()
