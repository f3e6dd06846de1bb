"""What the runner reads from a running server beside the load: `/metrics` scrapes around
a pass (the raw text kept), `/health` after it (an engine dead inside a live process), and
the named log captures of an arm."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from campaign import secrets
from campaign.campaignfile import Campaign, LaunchModel
from campaign.run import metrics
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
    try:
        yield
    except BaseException:
        try:
            write_captures(campaign, log_path, arm_dir)
        except OSError:
            pass  # the block's own failure is the news (a full disk fails both)
        raise
    write_captures(campaign, log_path, arm_dir)


def write_captures(campaign: Campaign, log_path: Path, arm_dir: Path) -> None:
    """Copy server log lines matching each named regex into captures/<name>.log."""
    if not campaign.log_captures or not log_path.exists():
        return
    patterns = {name: re.compile(rx) for name, rx in campaign.log_captures.items()}
    found: dict[str, list[str]] = {name: [] for name in patterns}
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            for name, rx in patterns.items():
                if rx.search(line):
                    found[name].append(secrets.scrub(line))
    for name, lines in found.items():
        atomic_write(arm_dir / "captures" / f"{name}.log", "".join(lines))
