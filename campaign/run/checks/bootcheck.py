"""`spec-ab check --boot`: boot every distinct launch of the lane once, up to ready (the
runner's own readiness: port, /health, /v1/models, a 1-token request), then stop it.

The pre-flight a lab runs in the afternoon: a launch that cannot boot (an unknown flag, a
missing file inside the image, a model that does not load) is found before the night, not
when its first pair starts. Nothing is registered and no results folder is made: server
logs go to a temporary folder, removed afterwards (the failing boot's last log lines are
in its error). The lane lock is held throughout, like a run's.

`spec-ab run` boots the same way before the first measured pass of a new run (the runner,
under its own lane lock: `locked`), every launch but an external one (`skip_external`:
a server already running has nothing to boot).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from campaign import secrets
from campaign.campaignfile import Campaign, LaunchModel
from campaign.errors import ServerError
from campaign.markers import LABEL_LANE, LABEL_PID, run_labels
from campaign.run.guards import lanelock
from campaign.run.slot.readiness import wait_ready
from campaign.servers import ArmContext, Server, make_server
from campaign.servers.protocol import serving


@dataclass(frozen=True)
class Boot:
    """One distinct launch booted: the arms that share it, and how it went."""

    arms: list[str]
    seconds: float
    """Launch to ready (or to the failure)."""
    error: str | None = None
    """The first error, with the server's last log lines; None when it became ready."""

    @property
    def ok(self) -> bool:
        return self.error is None


def distinct_launches(campaign: Campaign, *, skip_external: bool = False
                      ) -> list[tuple[list[str], LaunchModel]]:
    """Each different launch of the lane once, with every arm that uses it (an A/A
    campaign's arms boot once), in arm order; with `skip_external`, none of the
    `external` backend."""
    out: list[tuple[list[str], LaunchModel]] = []
    for arm in campaign.arm_names:
        launch = campaign.launches[arm]
        if skip_external and launch.backend == "external":
            continue
        same = next((arms for arms, other in out if other == launch), None)
        if same is not None:
            same.append(arm)
        else:
            out.append(([arm], launch))
    return out


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM stops the boot check like Ctrl-C (its servers are stopped on the way out)."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def boot_all(
    campaign: Campaign,
    *,
    server_factory: Callable[[LaunchModel, ArmContext], Server] = make_server,
    http: Callable[[], httpx.Client] = lambda: httpx.Client(timeout=10.0),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_boot: Callable[[list[str]], None] = lambda arms: None,
    on_done: Callable[[Boot], None] = lambda boot: None,
    lock_dir: Path | None = None,
    locked: bool = False,
    skip_external: bool = False,
    skip_arms: Collection[str] = (),
) -> list[Boot]:
    """Boot each distinct launch of `campaign` (a lane chosen) once, one after the other;
    every one is tried, whatever the others did. `on_boot` is told before each boot,
    `on_done` after. Raises PreflightError when the lane is busy (unless the caller holds
    its lock: `locked`). `skip_external`: external launches are not booted; nor is a
    launch one of whose arms is in `skip_arms`."""
    run_id = f"check-boot-{uuid.uuid4().hex[:6]}"
    logs = Path(tempfile.mkdtemp(prefix="spec-ab-boot-"))
    boots: list[Boot] = []
    lock = (contextlib.nullcontext() if locked
            else lanelock.hold(campaign.lane, run_id, lock_dir=lock_dir))
    try:
        with lock, _sigterm_stops():
            for arms, launch in distinct_launches(campaign, skip_external=skip_external):
                if set(arms) & set(skip_arms):
                    continue
                on_boot(arms)
                ctx = ArmContext(
                    run_id=run_id, pair=0, arm=arms[0], log_path=logs / f"{arms[0]}.log",
                    campaign_dir=campaign.base_dir,
                    labels={**run_labels(run_id, 0, arms[0]), LABEL_PID: str(os.getpid()),
                            LABEL_LANE: campaign.lane})
                boot = _boot(campaign, arms, launch, server_factory(launch, ctx), http, clock,
                             sleep)
                boots.append(boot)
                on_done(boot)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    return boots


def _boot(campaign: Campaign, arms: list[str], launch: LaunchModel, server: Server,
          http: Callable[[], httpx.Client], clock: Callable[[], float],
          sleep: Callable[[float], None]) -> Boot:
    """One launch: start, wait until ready with a 1-token request, stop."""
    readiness = launch.readiness.model_copy(update={"probe_request": True})
    start = clock()
    try:
        with serving(server), http() as client:
            seconds = wait_ready(server, readiness, model=campaign.workloads.model,
                                 endpoint_type=campaign.workloads.endpoint_type,
                                 arm=", ".join(arms), client=client, clock=clock, sleep=sleep)
    except ServerError as exc:
        text = str(exc).removeprefix(f"{', '.join(arms)}: ")  # the arms are named already
        # the server's log lines it quotes, scrubbed of every value the launch reads in a
        # secret position, however short (a server's backend scrubs them too: a last guard)
        text = secrets.scrub(text, values=secrets.launch_values(launch))
        return Boot(arms=arms, seconds=clock() - start, error=text)
    return Boot(arms=arms, seconds=seconds)
