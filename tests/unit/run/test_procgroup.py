"""campaign.procgroup against real, short-lived process groups (each ends by itself within
30 s even if a test fails) and against a recorded killpg."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from campaign.procgroup import signal_group, stop_group, stop_process


@contextmanager
def group(script: str) -> Iterator[subprocess.Popen[bytes]]:
    """`sh -c script` leading its own process group; killed at the end whatever happens."""
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def _wait_for_sleep(pgid: int) -> None:
    deadline = time.monotonic() + 10
    while not any(_name(p) == "sleep" for p in _members(pgid)):
        assert time.monotonic() < deadline, f"group {pgid} never ran sleep"
        time.sleep(0.02)


def _name(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return ""


def test_obedient_group_ends_on_the_first_signal() -> None:
    with group("sleep 30") as proc:
        t0 = time.monotonic()
        result = stop_group(proc.pid, first=signal.SIGTERM, grace_s=10, wait=proc)
        assert time.monotonic() - t0 < 5
        assert result.delivered and not result.killed and not result.stragglers
        assert result.sent == [signal.SIGTERM]
        assert proc.returncode is not None and proc.returncode != -signal.SIGKILL


def test_group_that_ignores_sigint_is_killed_after_the_grace() -> None:
    with group('trap "" INT; sleep 30') as proc:
        time.sleep(0.2)  # let the shell install its trap
        t0 = time.monotonic()
        result = stop_group(proc.pid, first=signal.SIGINT, grace_s=0.5, wait=proc)
        took = time.monotonic() - t0
        assert 0.4 < took < 5
        assert result.killed and result.sent == [signal.SIGINT, signal.SIGKILL]
        assert proc.returncode == -signal.SIGKILL


def test_stop_process_sweeps_a_grandchild_that_ignores_sigterm() -> None:
    # The leader obeys SIGTERM; its background child ignores it and would outlive it.
    with group('(trap "" TERM; sleep 30) & wait') as proc:
        _wait_for_sleep(proc.pid)  # the trap is set once the subshell runs `sleep`
        result = stop_process(proc, grace_s=5)
        assert result.delivered and not result.killed
        assert result.stragglers  # the sweep's SIGKILL reached the ignoring members
        assert proc.returncode is not None
        deadline = time.monotonic() + 5
        while _members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _members(proc.pid) == []


def test_stop_process_on_an_ended_child_only_sweeps() -> None:
    with group("exit 3") as proc:
        proc.wait(timeout=10)
        result = stop_process(proc, grace_s=5)
        assert not result.delivered and not result.killed and not result.stragglers
        assert proc.returncode == 3


def test_group_already_gone() -> None:
    with group("exit 0") as proc:
        proc.wait(timeout=10)
        assert signal_group(proc.pid, signal.SIGTERM) is False
        result = stop_group(proc.pid, grace_s=1, wait=proc)
        assert not result.delivered and result.sent == []


def test_recorded_killpg_and_wait() -> None:
    sent: list[tuple[int, int]] = []
    waits: list[float] = []

    def killpg(pid: int, sig: int) -> None:
        sent.append((pid, sig))

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) > 1  # ignores the first signal, dies of the SIGKILL

    result = stop_group(42, first=signal.SIGINT, grace_s=15, wait=wait, killpg=killpg,
                        kill_wait_s=3, sweep=True)
    assert sent == [(42, signal.SIGINT), (42, signal.SIGKILL), (42, signal.SIGKILL)]
    assert waits == [15, 3]
    assert result.killed and result.stragglers


def test_permission_error_is_gone_unless_strict() -> None:
    def denied(pid: int, sig: int) -> None:
        raise PermissionError("not ours")

    assert signal_group(1, signal.SIGTERM, killpg=denied) is False
    with pytest.raises(PermissionError):
        stop_group(1, grace_s=1, wait=lambda s: True, killpg=denied, strict=True)
