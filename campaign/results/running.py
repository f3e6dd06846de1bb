"""Is a run still going? Its last session, read from the journal, and whether that
process is alive.

A run that has not finished is either still running, or was stopped (Ctrl-C, a crash, a
reboot) and waits for `--resume`. The journal tells its sessions apart: each starts with
`run_start` (`pid`, `host`) and ends with `finished`, `interrupted` or `aborted` — unless
it was killed. A session with no end whose process is alive on this host is running; one
on another host cannot be checked from here and is said so.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENDS = frozenset({"finished", "interrupted", "aborted"})


@dataclass(frozen=True)
class Session:
    pid: int
    host: str
    since: str
    alive: bool | None
    """True: its process runs on this host; None: another host, cannot tell."""

    def line(self, run_dir: Path) -> str:
        where = f"pid {self.pid}" + (f" on {self.host}" if self.host else "")
        if self.alive:
            return (f"RUNNING: {run_dir.name} is still being measured ({where}, since "
                    f"{self.since}); this verdict is provisional")
        return (f"maybe RUNNING: {run_dir.name}'s last session ({where}, since {self.since}) "
                "never ended, and its host is not this one")

    def settle(self, run_dir: Path) -> str:
        if self.alive:
            return f"wait for the run to finish, then: spec-ab report {run_dir}"
        return (f"if it is no longer running on {self.host}: "
                f"spec-ab run --resume {run_dir}")


def last_session(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The last `run_start` when no end follows it, else None."""
    for i in range(len(events) - 1, -1, -1):
        ev: Mapping[str, Any] = events[i]
        kind = str(ev.get("event"))
        if kind in ENDS:
            return None
        if kind == "run_start":
            return ev
    return None


def in_progress(events: Sequence[Mapping[str, Any]]) -> Session | None:
    """The session still measuring the run (or that may be, on another host); None when
    the run ended or its last session's process is gone."""
    ev = last_session(events)
    if ev is None or not isinstance(ev.get("pid"), int):
        return None
    pid, host = int(ev["pid"]), str(ev.get("host") or "")
    if host and host != socket.gethostname():
        return Session(pid, host, str(ev.get("t", "?")), None)
    return Session(pid, host, str(ev.get("t", "?")), True) if _alive(pid) else None


def _alive(pid: int) -> bool:
    """A live spec-ab process other than this one (a reused pid of another program is
    not)."""
    if pid == os.getpid():
        return False  # the reader itself: a session of this process has ended or crashed
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to tell: trust the pid
    return b"campaign" in cmdline or b"spec-ab" in cmdline or b"spec_ab" in cmdline
