"""Servers as context managers: `with server:` (the backends) and `serving(server)` (any
`Server`) start the server and stop it always, also when the body or the start fails."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from campaign.campaignfile import ExternalLaunch, ProcessLaunch
from campaign.errors import ServerError
from campaign.servers import ArmContext
from campaign.servers.external import ExternalServer
from campaign.servers.process import ProcessServer
from campaign.servers.protocol import ServerContext, serving


def ctx(tmp_path: Path) -> ArmContext:
    return ArmContext(run_id="r1", pair=1, arm="control", log_path=tmp_path / "server.log",
                      campaign_dir=tmp_path)


class Boom(Exception):
    pass


@dataclass
class FakeServer:
    """The `Server` protocol with nothing behind it; records start/stop."""

    fail_start: bool = False
    events: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return "http://127.0.0.1:9"

    def start(self) -> None:
        self.events.append("start")
        if self.fail_start:
            raise ServerError("cannot start")

    def alive(self) -> bool:
        return "stop" not in self.events

    def exit_status(self) -> str | None:
        return None

    def logs(self, tail: int = 40) -> list[str]:
        return []

    def stop(self) -> None:
        self.events.append("stop")

    def describe(self) -> list[str]:
        return []

    def facts(self) -> dict[str, Any]:
        return {}


def test_serving_stops_when_the_body_raises() -> None:
    server = FakeServer()
    with pytest.raises(Boom), serving(server) as s:
        assert s is server and s.events == ["start"]
        raise Boom
    assert server.events == ["start", "stop"]


def test_serving_stops_when_start_fails() -> None:
    server = FakeServer(fail_start=True)
    with pytest.raises(ServerError, match="cannot start"), serving(server):
        raise AssertionError("the body must not run")
    assert server.events == ["start", "stop"]


def test_serving_stops_on_a_normal_exit() -> None:
    server = FakeServer()
    with serving(server):
        pass
    assert server.events == ["start", "stop"]


class Recording(ServerContext):
    def __init__(self, fail_start: bool = False) -> None:
        self.events: list[str] = []
        self.fail_start = fail_start

    def start(self) -> None:
        self.events.append("start")
        if self.fail_start:
            raise ServerError("cannot start")

    def stop(self) -> None:
        self.events.append("stop")


def test_server_context_mixin_stops_on_failed_start_and_on_errors() -> None:
    failing = Recording(fail_start=True)
    with pytest.raises(ServerError), failing:
        raise AssertionError("the body must not run")
    assert failing.events == ["start", "stop"]
    ok = Recording()
    with pytest.raises(KeyboardInterrupt), ok as entered:
        assert entered is ok
        raise KeyboardInterrupt
    assert ok.events == ["start", "stop"]


SERVER = "import time\nprint('up', flush=True)\ntime.sleep(30)\n"


def test_process_server_with_block_stops_the_process_when_the_body_raises(
        tmp_path: Path) -> None:
    launch = ProcessLaunch(backend="process", command=[sys.executable, "-c", SERVER],
                           port=1, stop_timeout_s=2)
    server = ProcessServer(launch, ctx(tmp_path))
    pid = None
    with pytest.raises(Boom), server as running:
        assert running is server and server.alive()
        pid = server.facts()["pid"]
        raise Boom
    assert pid is not None
    assert not server.alive()
    assert server.exit_status() == "killed by SIGTERM"
    time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_process_server_with_block_on_a_missing_command(tmp_path: Path) -> None:
    launch = ProcessLaunch(backend="process", command=["no-such-binary-xyz"], port=1)
    with pytest.raises(ServerError, match="not found"), ProcessServer(launch, ctx(tmp_path)):
        raise AssertionError("the body must not run")


def test_external_server_with_block_runs_the_stop_hook_when_the_body_raises(
        tmp_path: Path) -> None:
    launch = ExternalLaunch(backend="external", base_url="http://127.0.0.1:9",
                            start_hook="echo started > started.txt",
                            stop_hook="echo stopped > stopped.txt")
    with pytest.raises(Boom), ExternalServer(launch, ctx(tmp_path)):
        assert (tmp_path / "started.txt").exists()
        raise Boom
    assert (tmp_path / "stopped.txt").read_text().strip() == "stopped"
