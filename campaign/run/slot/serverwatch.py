"""What the runner reads from a running server beside the load: `/metrics` scrapes around
a pass (the raw text kept), `/health` after it (an engine dead inside a live process), and
the named log captures of an arm.

Secrets: when an arm ends (however it ends: stopped, failed, interrupted), every file of
its folder (`server.log`, an extra container's log, AIPerf's files, the scrapes) is
scrubbed of every known secret value (`campaign_secret_values`: the runner's secret
variables and the values the campaign's `${NAME}` references expand to) and of URL
passwords, before the captures are copied from the log. A runner killed outright leaves
its arm's log unscrubbed until the same pair is run again (`--resume` redoes it): an arm
first scrubs the logs its pair's folder already holds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from campaign import secrets
from campaign.campaignfile import Campaign, LaunchModel
from campaign.run.measure import metrics
from campaign.servers import Server
from campaign.textfiles import atomic_write


def scrape(client: httpx.Client, base_url: str, path: Path) -> metrics.Snapshot | None:
    """/metrics as a snapshot; None when unreadable. Unlike `metrics.scrape`, the raw text
    is kept beside the pass even when it does not parse (to see what the server said)."""
    try:
        r = client.get(base_url + "/metrics", timeout=10.0)
    except httpx.TransportError:
        return None
    if r.status_code != 200:
        return None
    atomic_write(path, r.text)
    try:
        return metrics.parse(r.text)
    except metrics.MetricsError:
        return None


def unhealthy(client: httpx.Client, server: Server, launch: LaunchModel,
               name: str) -> str | None:
    """Why the server counts as dead after a pass although its process runs: an engine
    that died inside a live API server (vLLM's EngineDeadError) answers /health 503."""
    path = launch.readiness.health_path
    try:
        r = client.get(server.base_url + path, timeout=10.0)
    except httpx.TransportError as exc:
        return f"server stopped answering {path} during {name} ({type(exc).__name__})"
    if r.status_code != 200:
        return f"server unhealthy ({path} → {r.status_code}) during {name}"
    return None


@contextmanager
def captures_after(campaign: Campaign, log_path: Path, arm_dir: Path) -> Iterator[None]:
    """Write the log captures when the block ends, however it ends (the server's log is
    complete once the server, started inside the block, is stopped)."""
    values = campaign_secret_values(campaign)
    try:
        for earlier in sorted(arm_dir.parent.glob("*/*.log")):  # a crashed attempt's log
            secrets.scrub_file(earlier, values)
    except OSError:
        pass  # unreadable: the arm's own end scrubs again
    try:
        yield
    except BaseException:
        try:
            _arm_ends(campaign, log_path, arm_dir, values)
        except OSError:
            pass  # the block's own failure is the news (a full disk fails both)
        raise
    _arm_ends(campaign, log_path, arm_dir, values)


def campaign_secret_values(campaign: Campaign) -> list[str]:
    """Every value a secret can have in this campaign's arms (`secrets.known_values`)."""
    return sorted({v for launch in campaign.launches.values()
                   for v in secrets.launch_values(launch)}, key=len, reverse=True)


def _arm_ends(campaign: Campaign, log_path: Path, arm_dir: Path, values: list[str]) -> None:
    secrets.scrub_tree(arm_dir, values)
    if not log_path.is_relative_to(arm_dir):
        secrets.scrub_file(log_path, values)
    write_captures(campaign, log_path, arm_dir, values)


def write_captures(campaign: Campaign, log_path: Path, arm_dir: Path,
                   values: list[str] | None = None) -> None:
    """Copy server log lines matching each named regex into captures/<name>.log (scrubbed
    of `values`, default: the campaign's known secret values)."""
    if not campaign.log_captures or not log_path.exists():
        return
    if values is None:
        values = campaign_secret_values(campaign)
    patterns = {name: re.compile(rx) for name, rx in campaign.log_captures.items()}
    found: dict[str, list[str]] = {name: [] for name in patterns}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            for name, rx in patterns.items():
                if rx.search(line):
                    found[name].append(secrets.scrub(line, values=values))
    for name, lines in found.items():
        atomic_write(arm_dir / "captures" / f"{name}.log", "".join(lines))
