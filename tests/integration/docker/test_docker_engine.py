"""The docker backend against a real Docker engine and the offline sim image.

Needs `scripts/start-dockerd && scripts/build-sim-image` (CI runs both); outside CI the
tests skip with that command, with CI=true a missing engine or image fails them.
Every test checks that nothing labelled with its run id is left behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from docker.models.containers import ContainerCollection

from campaign.campaignfile import DockerLaunch, merge
from campaign.errors import ServerError
from campaign.markers import LABEL_RUN
from campaign.run.guards import cleanup
from campaign.run.slot import readiness
from campaign.servers.docker import DockerServer, describe_state, runner_labels
from campaign.servers.protocol import ArmContext
from campaign.textfiles import tail_lines
from tests.runs import SIM_IMAGE, container_events, free_port

pytestmark = pytest.mark.docker

OVERRIDES_IN_IMAGE = "/usr/local/lib/python3.11/dist-packages/campaign/sim/overrides.yaml"
FAST_SIM = {
    "SPECAB_SIM_TIME_SCALE": "50",
    "SPECAB_SIM_SEED": "7",
    "SPECAB_SIM_DRIFT_SIGMA": "0",
    "SPECAB_SIM_STEP_NOISE": "0",
}
# A worker that answers SIGTERM at once (a plain `sleep` as PID 1 would ignore it).
WORKER = "trap 'echo worker stopping; exit 0' TERM; echo worker booting; sleep 1; {ready}; " \
         "sleep 600 & wait"



@pytest.fixture
def run_id(engine: docker.DockerClient) -> Iterator[str]:
    rid = f"test-{uuid.uuid4().hex[:10]}"
    yield rid
    for c in _labelled(engine, rid):  # never leave a failing test's containers around
        c.remove(force=True)


def _labelled(engine: docker.DockerClient, rid: str) -> list[Any]:
    return list(engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={rid}"}))


def _ctx(tmp_path: Path, rid: str, arm: str = "control") -> ArmContext:
    return ArmContext(run_id=rid, pair=1, arm=arm,
                      log_path=tmp_path / "pairs" / "01" / arm / "server.log",
                      campaign_dir=tmp_path)


def _launch(port: int, **override: Any) -> DockerLaunch:
    base = {
        "backend": "docker", "image": SIM_IMAGE, "port": port, "ports": [f"{port}:8000"],
        "env": dict(FAST_SIM), "stop_timeout_s": 3,
        "readiness": {"timeout_s": 60, "poll_interval_s": 0.05},
    }
    return DockerLaunch.model_validate(merge(base, override))



def _wait_ready(server: DockerServer, launch: DockerLaunch,
                sleep: Callable[[float], None] = time.sleep) -> float:
    with httpx.Client() as client:
        return readiness.wait_ready(server, launch.readiness, model="sim", endpoint_type="chat",
                                    arm=server.ctx.arm, client=client, sleep=sleep)


def _chat(base_url: str, content: str, max_tokens: int = 48) -> dict[str, Any]:
    body = {"model": "sim", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "ignore_eos": True}
    r = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=30)
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def _counter(text: str, name: str) -> float:
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M):
        total += float(m.group(1))
    return total


def _draft_depth(base_url: str) -> int:
    """The depth k the server really runs, read from its counters: positions of the
    per-position acceptance counter, checked against draft tokens per draft (a little
    under k, as drafts are cut short near max_tokens)."""
    metrics = httpx.get(base_url + "/metrics", timeout=10).text
    positions = set(re.findall(
        r'^vllm:spec_decode_num_accepted_tokens_per_pos_total{[^}]*position="(\d+)"', metrics,
        re.M))
    depth = len(positions)
    drafts = _counter(metrics, "vllm:spec_decode_num_drafts_total")
    tokens = _counter(metrics, "vllm:spec_decode_num_draft_tokens_total")
    assert drafts > 0, "no speculative steps were counted"
    assert depth - 1 < tokens / drafts <= depth
    return depth


def _boot_measure_stop(launch: DockerLaunch, ctx: ArmContext) -> tuple[int, DockerServer]:
    server = DockerServer(launch, ctx)
    try:
        server.start()
        _wait_ready(server, launch)
        for prompt in ("ls -la /var/log | grep err", "Tell me a story about a lighthouse."):
            _chat(server.base_url, prompt)
        return _draft_depth(server.base_url), server
    finally:
        server.stop()


# --------------------------------------------------------------------------- serving


def test_sim_image_serves_through_docker_server(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    port = free_port()
    launch = _launch(port)
    ctx = _ctx(tmp_path, run_id)
    server = DockerServer(launch, ctx)
    try:
        server.start()
        assert server.alive() and server.exit_status() is None
        _wait_ready(server, launch)
        assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
        reply = _chat(server.base_url, "echo hello", max_tokens=16)
        assert reply["usage"]["completion_tokens"] == 16
        (container,) = _labelled(engine, run_id)
        labels = container.labels
        assert labels["spec-ab.run"] == run_id
        assert labels["spec-ab.pair"] == "1" and labels["spec-ab.arm"] == "control"
        facts = server.facts()
        assert facts["containers"][0]["image_id"] == engine.images.get(SIM_IMAGE).id
        assert facts["containers"][0]["container_id"] == container.id
    finally:
        server.stop()
    assert _labelled(engine, run_id) == []
    assert server.facts()["containers"][0]["container_id"] == container.id  # kept after stop
    # The log was streamed into the results while it ran, not fetched at the end.
    log = "\n".join(tail_lines(ctx.log_path, 200))
    assert "Starting vLLM API server" in log
    assert "[spec-ab] starting server: docker run" in log
    assert not server.alive()


def test_env_var_and_bind_mounted_file_change_the_server(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    """The candidate's two levers, as on a GB300: an env var, and a patched file
    bind-mounted (read-only) over a file inside the image."""
    patched = tmp_path / "patches" / "overrides.yaml"
    patched.parent.mkdir()
    patched.write_text("# candidate patch\ndepth: 3\n")

    control, _ = _boot_measure_stop(_launch(free_port()), _ctx(tmp_path, run_id, "control"))
    by_env, _ = _boot_measure_stop(
        _launch(free_port(), env={"SPECAB_SIM_DEPTH": "8"}), _ctx(tmp_path, run_id, "env")
    )
    file_launch = _launch(free_port(), volumes=[f"patches/overrides.yaml:{OVERRIDES_IN_IMAGE}"])
    by_file, server = _boot_measure_stop(file_launch, _ctx(tmp_path, run_id, "file"))

    assert (control, by_env, by_file) == (5, 8, 3)
    (mount,) = server.plans[-1].mounts
    assert mount.read_only and mount.is_file and mount.source == str(patched)
    (fact,) = server.facts()["bind_mounts"]
    assert fact["sha256"] == hashlib.sha256(patched.read_bytes()).hexdigest()
    assert _labelled(engine, run_id) == []


def test_bind_mounted_file_is_read_only_in_the_container(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    patched = tmp_path / "overrides.yaml"
    patched.write_text("depth: 4\n")
    launch = _launch(free_port(), volumes=[f"{patched}:{OVERRIDES_IN_IMAGE}"])
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    try:
        server.start()
        (container,) = _labelled(engine, run_id)
        (mount,) = [m for m in container.attrs["Mounts"] if m["Destination"] == OVERRIDES_IN_IMAGE]
        assert mount["RW"] is False
        code, out = container.exec_run(["sh", "-c", f"echo x >> {OVERRIDES_IN_IMAGE}"])
        assert code != 0 and b"Read-only" in out
    finally:
        server.stop()
    assert patched.read_text() == "depth: 4\n"


# --------------------------------------------------------------------------- two nodes



def test_two_node_arm_starts_in_order_and_stops_in_reverse(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    """A Ray-head-like container ready by command, a worker ready by log line, then the
    server, which is only created once both are ready; stopped server first."""
    port = free_port()
    launch = _launch(port, extra_containers=[
        {"name": "head", "image": SIM_IMAGE, "command": ["sh", "-c", WORKER.format(
            ready="touch /tmp/ready")], "ready": {"command": ["test", "-f", "/tmp/ready"],
                                                  "timeout_s": 30}},
        {"name": "worker", "image": SIM_IMAGE, "command": ["sh", "-c", WORKER.format(
            ready="echo worker ready")], "ready": {"log_regex": r"^worker ready$",
                                                   "timeout_s": 30}},
    ])
    ctx = _ctx(tmp_path, run_id)
    since = time.time()
    server = DockerServer(launch, ctx)
    try:
        server.start()
        names = {c.labels["spec-ab.role"] for c in _labelled(engine, run_id)}
        assert names == {"head", "worker", "server"}
        _wait_ready(server, launch)
        _chat(server.base_url, "git status")
    finally:
        server.stop()
    assert _labelled(engine, run_id) == []
    events = container_events(engine, run_id, since)
    starts = [role for action, role in events if action == "start"]
    dies = [role for action, role in events if action == "die"]
    assert starts == ["head", "worker", "server"]
    assert dies == ["server", "worker", "head"]
    worker_log = ctx.log_path.with_name("server.worker.log").read_text()
    assert "worker ready" in worker_log and "worker stopping" in worker_log


def test_extra_container_that_dies_while_booting_fails_the_arm(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), extra_containers=[
        {"name": "worker", "image": SIM_IMAGE,
         "command": ["sh", "-c", "echo 'ray: cannot reach head at 10.0.0.1'; exit 7"],
         "ready": {"log_regex": "never printed", "timeout_s": 60}},
    ])
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    with pytest.raises(ServerError) as err:
        server.start()
    message = str(err.value)
    assert "extra container 'worker' exited with code 7 before it was ready" in message
    assert "cannot reach head" in message
    assert _labelled(engine, run_id) == []


def test_extra_container_never_ready_times_out_and_is_removed(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), extra_containers=[
        {"name": "worker", "image": SIM_IMAGE, "command": ["sh", "-c", WORKER.format(ready=":")],
         "ready": {"log_regex": "never printed", "timeout_s": 2}},
    ])
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    with pytest.raises(ServerError, match=r"not ready after 2 s \(no log line matched"):
        server.start()
    assert _labelled(engine, run_id) == []


# --------------------------------------------------------------------------- failures


def test_container_that_exits_during_boot_reports_code_and_log(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), command=[
        "python3", "-c",
        "import sys; print('error: unrecognized arguments: --bogus-flag'); sys.exit(3)",
    ])
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    try:
        server.start()
        with pytest.raises(ServerError) as err:
            _wait_ready(server, launch)
    finally:
        server.stop()
    message = str(err.value)
    assert "exited with code 3 while booting" in message
    assert "unrecognized arguments: --bogus-flag" in message
    assert _labelled(engine, run_id) == []


def test_container_that_never_becomes_ready_is_removed(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), command=["sh", "-c", "echo loading weights; sleep 600"],
                     readiness={"timeout_s": 2}, stop_timeout_s=1)
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    try:
        server.start()
        with pytest.raises(ServerError, match=r"not ready after 2 s \(stuck at: health"):
            _wait_ready(server, launch)
    finally:
        server.stop()
    assert _labelled(engine, run_id) == []


def _interrupt_after(calls: int) -> Callable[[float], None]:
    count = {"n": 0}

    def sleep(seconds: float) -> None:
        count["n"] += 1
        if count["n"] >= calls:
            raise KeyboardInterrupt
        time.sleep(min(seconds, 0.05))

    return sleep


def test_ctrl_c_while_waiting_for_an_extra_container_leaves_nothing(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), extra_containers=[
        {"name": "head", "image": SIM_IMAGE, "command": ["sh", "-c", WORKER.format(ready=":")],
         "ready": {"command": ["test", "-f", "/never"], "timeout_s": 60}},
    ])
    server = DockerServer(launch, _ctx(tmp_path, run_id), sleep=_interrupt_after(2))
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert _labelled(engine, run_id) == []


def test_ctrl_c_while_waiting_for_the_server_leaves_nothing(
    engine: docker.DockerClient, run_id: str, tmp_path: Path
) -> None:
    launch = _launch(free_port(), env={"SPECAB_SIM_BOOT_DELAY": "30"}, stop_timeout_s=2)
    server = DockerServer(launch, _ctx(tmp_path, run_id))
    try:
        server.start()
        with pytest.raises(KeyboardInterrupt):
            _wait_ready(server, launch, sleep=_interrupt_after(3))
    finally:
        server.stop()  # what the runner's `finally` does
    assert _labelled(engine, run_id) == []


def test_ctrl_c_between_create_and_its_reply_leaves_nothing(
    engine: docker.DockerClient, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container exists but the backend never learned its id: the label sweep finds it."""
    create = ContainerCollection.create
    created: list[str] = []

    def create_then_interrupt(self: ContainerCollection, *args: Any, **kwargs: Any) -> Any:
        created.append(create(self, *args, **kwargs).id)
        raise KeyboardInterrupt

    monkeypatch.setattr(ContainerCollection, "create", create_then_interrupt)
    server = DockerServer(_launch(free_port()), _ctx(tmp_path, run_id))
    with pytest.raises(KeyboardInterrupt):
        server.start()
    monkeypatch.undo()
    assert len(created) == 1
    assert _labelled(engine, run_id) == []


def test_stop_is_idempotent(engine: docker.DockerClient, run_id: str, tmp_path: Path) -> None:
    server = DockerServer(_launch(free_port()), _ctx(tmp_path, run_id))
    server.stop()  # before start: nothing to do
    server.start()
    assert server.alive()
    server.stop()
    server.stop()
    assert _labelled(engine, run_id) == []
    assert server.exit_status() == "stopped" and not server.alive()


# --------------------------------------------------------------------------- clean


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_clean_removes_containers_of_dead_runs_only(
    engine: docker.DockerClient, run_id: str
) -> None:
    """Plant containers as a killed runner would leave them (running and exited), and one
    of a live runner (this test process): clean removes the first two only."""
    me = socket.gethostname()
    dead = _dead_pid()
    planted = {}
    for name, pid, command in [
        ("dead-running", dead, ["sleep", "600"]),
        ("dead-exited", dead, ["true"]),
        ("live", os.getpid(), ["sleep", "600"]),
    ]:
        labels = {LABEL_RUN: run_id, "spec-ab.pair": "1", "spec-ab.arm": name,
                  **runner_labels(pid if pid == os.getpid() else None)}
        if pid != os.getpid():
            labels.update({"spec-ab.pid": str(pid), "spec-ab.pid-start": "1.0",
                           "spec-ab.runner-host": me})
        container = engine.containers.run(SIM_IMAGE, command, labels=labels, detach=True,
                                          name=f"{run_id}-{name}")
        planted[name] = container.id
    engine.containers.get(planted["dead-exited"]).wait(timeout=30)

    scan = cleanup.find_leftovers(include_processes=False)
    mine = [x for x in scan if x.run_id == run_id]
    assert sorted(x.arm or "" for x in mine) == ["dead-exited", "dead-running"]
    assert all(f"runner pid {dead} is not running" in str(x) for x in mine)
    report = cleanup.remove_leftovers(mine, stop_timeout_s=1)
    assert len(report) == 2 and all(line.startswith("removed container") for line in report)
    left = _labelled(engine, run_id)
    assert [c.id for c in left] == [planted["live"]]
    assert [x for x in cleanup.find_leftovers(include_processes=False) if x.run_id == run_id] \
        == []


def test_oom_kill_is_said_as_such(engine: docker.DockerClient, run_id: str) -> None:
    """The words for a real engine's OOM state (the launch model has no memory limit, so
    the container is made directly, labelled like the backend's)."""
    container = engine.containers.run(
        SIM_IMAGE, ["python3", "-c", "x = bytearray(512 * 1024 * 1024)"], detach=True,
        mem_limit="48m", memswap_limit="48m", labels={LABEL_RUN: run_id, **runner_labels()})
    container.wait(timeout=60)
    container.reload()
    assert describe_state(container.attrs["State"]) == \
        "was OOM-killed (out of memory; exit code 137)"
