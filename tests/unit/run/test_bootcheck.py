"""`spec-ab check --boot` with fake servers: each distinct launch booted once up to ready
(the runner's readiness, with its 1-token request), every one tried, each stopped, the
lane held, nothing left behind. The real thing on the simulated lane:
tests/e2e/test_check_boot.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from campaign.campaignfile import LaunchModel, load_campaign
from campaign.errors import PreflightError
from campaign.run.checks.bootcheck import Boot, boot_all, distinct_launches
from campaign.run.guards import lanelock
from campaign.servers import ArmContext
from tests.unit.run.test_launchcheck import SIM, write
from tests.unit.run.test_runner import FakeServer


@pytest.fixture()
def listening() -> Iterator[int]:
    """A port something listens on (the readiness's first stage)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def campaign(tmp_path: Path) -> Path:
    return write(tmp_path, SIM, """\
        control: {}
        again: {}
        broken: {args: [--bogus]}
        """)


def test_each_distinct_launch_boots_once_and_every_one_is_tried(
        tmp_path: Path, listening: int) -> None:
    c = load_campaign(campaign(tmp_path))
    assert [arms for arms, _ in distinct_launches(c)] == [["control", "again"], ["broken"]]
    events: list[str] = []
    probes: list[str] = []
    logs: list[Path] = []
    lock_dir = tmp_path / "locks"

    def factory(launch: LaunchModel, ctx: ArmContext) -> FakeServer:
        logs.append(ctx.log_path)
        with pytest.raises(PreflightError, match="busy"), \
                lanelock.hold(c.lane, "another", lock_dir=lock_dir):
            pass  # the lane is held meanwhile
        return FakeServer(listening, ctx, events, die_on_start="--bogus" in launch.argv)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if request.url.path.endswith("/completions"):
            probes.append(request.url.path)
        return httpx.Response(200, json={"choices": []})

    done: list[Boot] = []
    boots = boot_all(c, server_factory=factory, on_done=done.append, lock_dir=lock_dir,
                     http=lambda: httpx.Client(transport=httpx.MockTransport(handler)))
    assert boots == done and [b.arms for b in boots] == [["control", "again"], ["broken"]]
    assert boots[0].ok and boots[0].seconds >= 0
    assert not boots[1].ok and boots[1].error is not None
    assert boots[1].error.startswith("server exited with code 1 while booting")
    assert "| last line" in boots[1].error  # the server's own log lines
    assert events == ["start 0/control", "stop 0/control", "start 0/broken", "stop 0/broken"]
    assert probes == ["/v1/chat/completions"]  # ready means a request was answered
    assert not any(p.parent.exists() for p in logs)  # no folder left behind
    with lanelock.hold(c.lane, "next", lock_dir=lock_dir):
        pass  # released


def test_a_busy_lane_boots_nothing(tmp_path: Path) -> None:
    c = load_campaign(campaign(tmp_path))
    started: list[str] = []

    def factory(launch: LaunchModel, ctx: ArmContext) -> FakeServer:
        started.append(ctx.arm)
        raise AssertionError("nothing may boot on a busy lane")

    with lanelock.hold(c.lane, "a run", lock_dir=tmp_path), \
            pytest.raises(PreflightError, match="busy"):
        boot_all(c, server_factory=factory, lock_dir=tmp_path)
    assert started == []


def test_check_boot_prints_no_referenced_secret_however_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that prints its 5-character `${DB_PASSWORD}` and dies: the boot's error
    (what `check --boot` prints) quotes its log lines scrubbed."""
    monkeypatch.setenv("DB_PASSWORD", "pw123")
    c = load_campaign(write(tmp_path, SIM.replace(
        "env: {", 'env: {DB_PASSWORD: "${DB_PASSWORD}", '), "control: {}\ncand: {}\n"))

    class Talkative(FakeServer):
        def logs(self, tail: int = 40) -> list[str]:
            return ["connecting with password pw123"]

    def factory(launch: LaunchModel, ctx: ArmContext) -> FakeServer:
        return Talkative(1, ctx, [], die_on_start=True)

    [boot] = boot_all(c, server_factory=factory, lock_dir=tmp_path / "locks")
    assert boot.error is not None and "password <redacted>" in boot.error
    assert "pw123" not in boot.error
