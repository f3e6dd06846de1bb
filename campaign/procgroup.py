"""Stopping a process group: signal it, wait, escalate to SIGKILL.

Every child spec-ab starts (a process-backend server, AIPerf with its services) leads its
own process group, so one signal reaches the grandchildren too. The escalation is the same
everywhere: send a first signal (SIGTERM for a server, SIGINT for AIPerf so it writes its
partial exports), give the group `grace_s` to end, SIGKILL it if it did not, and optionally
sweep the group with a last SIGKILL (a member that ignored the first signal while the
leader exited). `killpg` and `wait` are parameters, so tests drive the clock and record the
signals. A leaf module: it imports nothing from `campaign`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Killpg = Callable[[int, int], None]
Wait = Callable[[float], bool]
"""`wait(seconds)` → True once the group's leader has ended (within `seconds`)."""


class Waitable(Protocol):
    """A child process handle: `subprocess.Popen` (or a test's stand-in)."""

    def wait(self, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class StopResult:
    """What `stop_group` did."""

    first: int
    """The first signal (SIGTERM, SIGINT, ...)."""
    delivered: bool
    """False when the group was already gone (nothing was signalled)."""
    killed: bool
    """The leader outlived `grace_s` and the group got SIGKILL."""
    stragglers: bool
    """The final sweep found members still in the group (a member that exited but is not
    yet reaped also counts)."""

    @property
    def sent(self) -> list[int]:
        """The signals sent, in order (the sweep's SIGKILL included when it hit)."""
        out = [self.first] if self.delivered else []
        out += [signal.SIGKILL] if self.killed else []
        return out + ([signal.SIGKILL] if self.stragglers else [])


def signal_group(pid: int, sig: int, *, killpg: Killpg = os.killpg,
                 strict: bool = False) -> bool:
    """Send `sig` to the process group `pid`. False when the group is gone, or (unless
    `strict`) when it may not be signalled (EPERM: on some systems a group of zombies)."""
    try:
        killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        if strict:
            raise
        return False
    return True


def popen_wait(proc: Waitable) -> Wait:
    """`wait` for a child we started: True once it has exited (and is reaped)."""

    def wait(seconds: float) -> bool:
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    return wait


def stop_group(
    pid: int,
    *,
    first: int = signal.SIGTERM,
    grace_s: float,
    wait: Wait | Waitable,
    killpg: Killpg = os.killpg,
    kill_wait_s: float | None = None,
    sweep: bool = False,
    strict: bool = False,
) -> StopResult:
    """`first` to the group `pid`; after `grace_s` without the leader ending, SIGKILL to the
    group and wait up to `kill_wait_s` (default `grace_s`) more; with `sweep`, a last
    SIGKILL to whatever is left in the group.

    `wait` is a Popen-like handle of our child or `wait(seconds) -> ended`. With `strict`, a
    PermissionError on the first signal propagates (a caller that reports failures);
    otherwise it counts as "already gone".
    """
    waiter = wait if callable(wait) else popen_wait(wait)
    if not signal_group(pid, first, killpg=killpg, strict=strict):
        return StopResult(first, delivered=False, killed=False, stragglers=False)
    killed = False
    if not waiter(grace_s):
        killed = True
        signal_group(pid, signal.SIGKILL, killpg=killpg)
        waiter(grace_s if kill_wait_s is None else kill_wait_s)
    stragglers = sweep and signal_group(pid, signal.SIGKILL, killpg=killpg)
    return StopResult(first, delivered=True, killed=killed, stragglers=stragglers)


def stop_process(
    proc: subprocess.Popen[Any],
    grace_s: float,
    *,
    first: int = signal.SIGTERM,
    killpg: Killpg = os.killpg,
) -> StopResult:
    """Stop a child that leads its own process group (`start_new_session=True`) and
    everything in that group: `first`, up to `grace_s`, SIGKILL; no grandchild survives
    (the group is swept with SIGKILL even when the leader obeyed). The child is reaped."""
    if proc.poll() is not None:
        stragglers = signal_group(proc.pid, signal.SIGKILL, killpg=killpg)
        return StopResult(first, delivered=False, killed=False, stragglers=stragglers)
    result = stop_group(proc.pid, first=first, grace_s=grace_s, wait=proc, killpg=killpg,
                        kill_wait_s=10, sweep=True, strict=True)
    if not result.delivered:
        return result
    if proc.poll() is None:  # the leader left its group
        proc.kill()
    proc.wait(timeout=10)
    return result


__all__ = ["StopResult", "Waitable", "popen_wait", "signal_group", "stop_group", "stop_process"]
