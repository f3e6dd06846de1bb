"""Small infrastructure pieces: atomic writes, the lane lock, the manifest's redaction,
the process and external backends (real child processes), readiness with fakes."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from campaign.campaignfile import ExternalLaunch, ProcessLaunch, Readiness
from campaign.errors import PreflightError, ServerError
from campaign.run.guards import lanelock
from campaign.run.measure import manifest
from campaign.run.slot.readiness import wait_ready
from campaign.servers import ArmContext
from campaign.servers.external import ExternalServer
from campaign.servers.process import ProcessServer
from campaign.textfiles import atomic_write, tail_lines
from tests.runs import ROOT


def ctx(tmp_path: Path, arm: str = "control") -> ArmContext:
    return ArmContext(run_id="r1", pair=1, arm=arm, log_path=tmp_path / arm / "server.log",
                      campaign_dir=tmp_path)


def test_atomic_write_never_overwrites_when_asked(tmp_path: Path) -> None:
    p = tmp_path / "a" / "x.json"
    atomic_write(p, "one", overwrite=False)
    with pytest.raises(FileExistsError):
        atomic_write(p, "two", overwrite=False)
    assert p.read_text() == "one"
    atomic_write(p, "three")
    assert p.read_text() == "three"
    assert [f.name for f in p.parent.iterdir()] == ["x.json"]  # no temp files left


def test_tail_lines(tmp_path: Path) -> None:
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_lines(p, 2) == ["line 98", "line 99"]
    assert tail_lines(tmp_path / "missing", 5) == []


def test_lane_lock(tmp_path: Path) -> None:
    with lanelock.hold("gb300 station", "run-a", lock_dir=tmp_path):
        with (pytest.raises(PreflightError, match="busy: run run-a"),
              lanelock.hold("gb300 station", "run-b", lock_dir=tmp_path)):
            pass
        with lanelock.hold("other-lane", "run-c", lock_dir=tmp_path):
            pass
    with lanelock.hold("gb300 station", "run-b", lock_dir=tmp_path):
        pass


def test_the_lane_holder_note_is_written_whole(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The note that names who holds a lane is written to a temp file, fsynced and renamed:
    a crash while it is written leaves the old note or none, never half of one, so the
    next run's "busy" message can still name the holder."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    with lanelock.hold("gb300 station", "run-a", lock_dir=tmp_path) as name:
        assert synced
        name("2026-12-04-run-a")
        note = tmp_path / "gb300_station.holder.json"
        assert json.loads(note.read_text())["run_id"] == "2026-12-04-run-a"
        assert note.stat().st_mode & 0o777 == 0o644
        assert sorted(p.name for p in tmp_path.iterdir()
                      if p.name.startswith(".")) == []  # no temp file left


def test_redaction() -> None:
    env = {"HF_TOKEN": "hf_x", "api_key": "k", "MY_SECRET_X": "s", "DB_PASSWORD": "p",
           "VLLM_LOGGING_LEVEL": "INFO"}
    red = manifest.redact(env)
    assert red["VLLM_LOGGING_LEVEL"] == "INFO"
    assert all(red[k] == manifest.REDACTED for k in env if k != "VLLM_LOGGING_LEVEL")


SLEEPER = """
import os, signal, subprocess, sys, time
# a grandchild that ignores SIGTERM: stop() must still take it down with the group
subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
print("booted", flush=True)
print("env", os.environ.get("SPECAB_RUN_ID"), os.environ.get("X"), flush=True)
time.sleep(60)
"""


def test_process_backend_streams_logs_and_kills_the_whole_group(tmp_path: Path) -> None:
    launch = ProcessLaunch(backend="process", command=[sys.executable, "-c", SLEEPER],
                           port=1, env={"X": "42"}, stop_timeout_s=0.5)
    server = ProcessServer(launch, ctx(tmp_path))
    server.start()
    try:
        deadline = time.monotonic() + 20
        while "env r1 42" not in "\n".join(server.logs()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.logs()[-1] == "env r1 42"
        assert server.alive()
        pid = server._proc.pid  # type: ignore[union-attr]
        group = [p for p in psutil.process_iter() if _pgid(p.pid) == pid]
        assert len(group) == 2
    finally:
        server.stop()
    assert not server.alive() and server.exit_status() == "killed by SIGTERM"
    time.sleep(0.1)
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in group)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_process_backend_missing_command(tmp_path: Path) -> None:
    launch = ProcessLaunch(backend="process", command=["no-such-binary-xyz"], port=1)
    with pytest.raises(ServerError, match="command 'no-such-binary-xyz' not found"):
        ProcessServer(launch, ctx(tmp_path)).start()


def test_external_backend_hooks(tmp_path: Path) -> None:
    launch = ExternalLaunch(backend="external", base_url="http://127.0.0.1:9",
                            start_hook="echo started > started.txt",
                            stop_hook="echo stopped > stopped.txt", args=["--flag"])
    server = ExternalServer(launch, ctx(tmp_path))
    server.start()
    assert (tmp_path / "started.txt").read_text().strip() == "started --flag"
    server.stop()
    assert (tmp_path / "stopped.txt").read_text().strip() == "stopped"
    assert "start hook" in "\n".join(server.logs())
    failing = ExternalServer(ExternalLaunch(backend="external", base_url="http://x:1",
                                            start_hook="exit 7"), ctx(tmp_path, "b"))
    with pytest.raises(ServerError, match="start hook exited with code 7"):
        failing.start()


class Fake:
    def __init__(self, port: int, alive_for: int = 10**9) -> None:
        self.port = port
        self.calls = 0
        self.alive_for = alive_for

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        self.calls += 1
        return self.calls <= self.alive_for

    def exit_status(self) -> str | None:
        return "exited with code 1"

    def logs(self, tail: int = 40) -> list[str]:
        return ["Traceback: CUDA out of memory"]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _handler(models: list[str], health: int = 200) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(health)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": m} for m in models]})
        return httpx.Response(200, json={})
    return httpx.MockTransport(handle)


@pytest.fixture()
def open_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port: int = sock.getsockname()[1]
    yield port  # type: ignore[misc]
    sock.close()


def test_ready_after_all_stages(open_port: int) -> None:
    clock = Clock()
    with httpx.Client(transport=_handler(["m"])) as client:
        took = wait_ready(Fake(open_port), Readiness(), model="m", endpoint_type="chat",  # type: ignore[arg-type]
                          arm="a", client=client, clock=clock, sleep=clock.sleep)
    assert took == 0.0  # every stage answered at once: no polling delay


def test_fail_fast_when_server_exits_while_booting(open_port: int) -> None:
    clock = Clock()
    with httpx.Client(transport=_handler(["m"], health=503)) as client, \
            pytest.raises(ServerError, match="exited with code 1 while booting") as info:
        wait_ready(Fake(open_port, alive_for=3), Readiness(), model="m",  # type: ignore[arg-type]
                   endpoint_type="chat", arm="a", client=client, clock=clock,
                   sleep=clock.sleep)
    assert "CUDA out of memory" in str(info.value)
    assert clock.t < 1.0


def test_timeout_names_the_stuck_stage(open_port: int) -> None:
    clock = Clock()
    with httpx.Client(transport=_handler(["m"], health=503)) as client, \
            pytest.raises(ServerError, match=r"not ready after 5 s \(stuck at: health"):
        wait_ready(Fake(open_port), Readiness(timeout_s=5), model="m",  # type: ignore[arg-type]
                   endpoint_type="chat", arm="a", client=client, clock=clock,
                   sleep=clock.sleep)


def test_wrong_model_is_named(open_port: int) -> None:
    clock = Clock()
    with httpx.Client(transport=_handler(["other"])) as client, \
            pytest.raises(ServerError, match=r"serves \['other'\], not the campaign's model 'm'"):
        wait_ready(Fake(open_port), Readiness(), model="m", endpoint_type="chat",  # type: ignore[arg-type]
                   arm="a", client=client, clock=clock, sleep=clock.sleep)


def test_preflight_runs_aiperf() -> None:
    import subprocess

    from campaign.run.checks.preflight import aiperf_runs

    def ok(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        assert argv[1] == "--version"
        return subprocess.CompletedProcess(argv, 0, "0.13.0\n", "")

    def broken(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "ImportError: zmq\n")

    def missing(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    assert aiperf_runs(ok) == ("0.13.0", None)
    version, problem = aiperf_runs(broken)
    assert version is None and problem is not None and "ImportError: zmq" in problem
    version, problem = aiperf_runs(missing)
    assert version is None and problem is not None and "pip install" in problem


def test_models_route_404_is_skipped_not_waited_for(open_port: int) -> None:
    # A server without /v1/models (404: no such route) used to be polled until the boot
    # timeout; the 1-token request still proves the model answers.
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, json={})

    clock = Clock()
    notes: list[str] = []
    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        took = wait_ready(Fake(open_port), Readiness(timeout_s=30), model="m",  # type: ignore[arg-type]
                          endpoint_type="chat", arm="a", client=client, clock=clock,
                          sleep=clock.sleep, notes=notes)
    assert took == 0.0
    assert notes and "404" in notes[0]


def test_preflight_fails_when_process_command_is_missing(tmp_path: Path) -> None:
    from campaign.campaignfile import load_campaign
    from campaign.run.checks.preflight import preflight

    text = (ROOT / "examples" / "sim-pair.yaml").read_text()
    text = text.replace("command: [spec-ab, sim, serve,", "command: [./no-such-server, sim, serve,")
    (tmp_path / "c.yaml").write_text(text.replace("../fixtures", str(ROOT / "fixtures")))
    campaign = load_campaign(tmp_path / "c.yaml")
    _, problems = preflight(campaign, in_use=lambda h, p: False)
    assert any("'./no-such-server' not found" in p for p in problems), problems
    text2 = text.replace("./no-such-server", "no-such-server-on-path")
    (tmp_path / "d.yaml").write_text(text2.replace("../fixtures", str(ROOT / "fixtures")))
    _, problems = preflight(load_campaign(tmp_path / "d.yaml"), in_use=lambda h, p: False)
    assert any("'no-such-server-on-path' not found" in p for p in problems), problems
    (tmp_path / "e.yaml").write_text(
        (ROOT / "examples" / "sim-pair.yaml").read_text().replace("../fixtures",
                                                                  str(ROOT / "fixtures")))
    _, problems = preflight(load_campaign(tmp_path / "e.yaml"), in_use=lambda h, p: False)
    assert not any("not found" in p for p in problems), problems


def test_process_server_version_from_get_version() -> None:
    from campaign.servers.process import server_version

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        return httpx.Response(404)

    with httpx.Client(transport=httpx.MockTransport(handle)) as client:
        assert server_version("http://x", client=client) == "0.32.0"
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404))) as client:
        assert server_version("http://x", client=client) is None


def test_clean_finds_processes_whose_environment_reads_empty(tmp_path: Path) -> None:
    # vLLM's EngineCore/Worker rename themselves (setproctitle), which overwrites what
    # /proc/<pid>/environ shows: their run markers read as empty. They share the session
    # the process backend started the server in; a child started with an empty
    # environment stands in for them here.
    import signal
    import subprocess

    from campaign.markers import RUN_ENV, RUNNER_PID_ENV
    from campaign.run.guards import cleanup

    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={})\n"
            f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
            "time.sleep(60)\n")
    env = dict(os.environ, **{RUN_ENV: "run-clean-test", RUNNER_PID_ENV: "999999"})
    leader = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pidfile.read_text())
        scan = cleanup.find_leftovers(docker_hosts=(), alive=lambda pid, started: False)
        found = {int(x.ident) for x in scan if x.run_id == "run-clean-test"}
        assert {leader.pid, child} <= found
        cleanup.remove_leftovers([x for x in scan if x.run_id == "run-clean-test"], grace_s=2)
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    finally:
        try:
            os.killpg(leader.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        leader.wait(timeout=10)


def test_the_manifest_identifies_a_local_model_folder(tmp_path: Path) -> None:
    from campaign.servers.process import model_folder_facts

    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 128}')
    (model / "model.safetensors.index.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "tiny"]
    facts = model_folder_facts(argv, tmp_path)
    assert facts is not None and facts["path"] == str(model)
    assert set(facts["sha256"]) == {"config.json", "model.safetensors.index.json"}
    assert facts["weights_bytes"] == {"model.safetensors": 1000}
    (model / "config.json").write_text('{"hidden_size": 256}')
    assert model_folder_facts(argv, tmp_path)["sha256"] != facts["sha256"]  # type: ignore[index]
    assert model_folder_facts(["serve", "--model", "hub/name"], tmp_path) is None
