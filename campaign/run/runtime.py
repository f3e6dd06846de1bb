"""The runner's edges and its stop: what `run_campaign` is given (`Runtime`: the server
factory, the pass runner, the HTTP client, the clocks, the progress sink), and the check
every slow step makes for a Ctrl-C.

Tests pass fakes for the slow edges and run the real runner against them.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from campaign.campaignfile import LaunchModel
from campaign.errors import Interrupted
from campaign.results.journal import utcnow
from campaign.run.measure import loadgen
from campaign.servers import ArmContext, Server, make_server


class ProgressSink(Protocol):
    def __call__(self, event: str, **data: Any) -> None: ...


def _no_progress(event: str, **data: Any) -> None:
    return None


@dataclass
class Runtime:
    """The runner's edges; defaults are the real ones."""

    server_factory: Callable[[LaunchModel, ArmContext], Server] = make_server
    run_pass: Callable[..., loadgen.PassOutcome] = loadgen.run_pass
    http: Callable[[], httpx.Client] = lambda: httpx.Client(timeout=10.0)
    clock: Callable[[], dt.datetime] = utcnow
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: ProgressSink = _no_progress
    lock_dir: Path | None = None
    doing: str = ""
    """What the run waits for now, in words (what a Ctrl-C says it is stopping)."""


def check_cancel(rt: Runtime) -> None:
    if rt.cancel.is_set():
        raise Interrupted("interrupted; everything measured so far is kept")


def cancellable_sleep(rt: Runtime) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        check_cancel(rt)
        rt.sleep(seconds)
        check_cancel(rt)

    return sleep
