"""The docker backend without an engine: plans, `docker run` lines, volume rules, state
words, preflight messages and leftover detection against fake clients."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest
from docker.errors import DockerException, ImageNotFound, NotFound

from campaign.campaignfile import DockerLaunch, parse_volume
from campaign.markers import (
    LABEL_HOST,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_RUN,
    LABEL_SCOPE,
    SCOPE_ENV,
)
from campaign.run.guards import cleanup
from campaign.servers.docker import (
    DockerServer,
    create_kwargs,
    describe_state,
    docker_hosts,
    docker_run_line,
    extra_log_path,
    mount_facts,
    plan_containers,
    preflight,
    resolve_volume,
    runner_labels,
)
from campaign.servers.protocol import ArmContext

GB300 = {
    "backend": "docker", "image": "vllm/vllm-openai:v0.11.0", "port": 8000, "network": "host",
    "gpus": "all", "ipc": "host", "shm_size": "16g",
    "ulimits": {"memlock": -1, "stack": 67108864},
    "volumes": [
        "patches/spec_decode.py:/usr/local/lib/python3.12/dist-packages/vllm/spec_decode.py",
        "./cache:/root/.cache/huggingface",
        "hf-cache:/data",
    ],
    "env": {"VLLM_ONLINE_VC": "1", "NOTE": "two words"},
    "entrypoint": ["python3", "-m"],
    "command": ["vllm.entrypoints.openai.api_server"],
    "args": ["--model", "/models/ds", "--speculative-config",
             '{"method":"dspark","num_speculative_tokens":5}'],
    "extra_containers": [{
        "name": "ray-worker", "image": "vllm/vllm-openai:v0.11.0", "docker_host": "ssh://spark2",
        "network": "host", "gpus": [0, 1], "entrypoint": ["ray"],
        "command": ["start", "--block", "--address=10.0.0.1:6379"],
        "volumes": ["/models:/models:ro"],
        "ready": {"log_regex": "Ray runtime started", "timeout_s": 120},
    }],
}


@pytest.fixture
def campaign_dir(tmp_path: Path) -> Path:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "spec_decode.py").write_text("DEPTH = 6\n")
    (tmp_path / "cache").mkdir()
    return tmp_path


def _ctx(base: Path, arm: str = "candidate") -> ArmContext:
    return ArmContext(run_id="2026-11-29-gb300-ab12", pair=2, arm=arm,
                      log_path=base / "pairs" / "02" / arm / "server.log", campaign_dir=base)


def test_docker_run_lines_are_golden(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(GB300)
    plans = plan_containers(launch, _ctx(campaign_dir), launch_id="x", runner={})
    lines = [docker_run_line(p) for p in plans]
    patch = campaign_dir / "patches" / "spec_decode.py"
    assert lines == [
        "docker -H ssh://spark2 run -d --name specab-2026-11-29-gb300-ab12-p2-candidate-ray-worker"
        " --network host --gpus '\"device=0,1\"' -v /models:/models:ro --entrypoint ray"
        " vllm/vllm-openai:v0.11.0 start --block --address=10.0.0.1:6379",
        "docker run -d --name specab-2026-11-29-gb300-ab12-p2-candidate --network host"
        " --gpus all --ipc host --shm-size 16g --ulimit memlock=-1 --ulimit stack=67108864"
        f" -v {patch}:/usr/local/lib/python3.12/dist-packages/vllm/spec_decode.py:ro"
        f" -v {campaign_dir / 'cache'}:/root/.cache/huggingface -v hf-cache:/data"
        " -e VLLM_ONLINE_VC=1 -e 'NOTE=two words' --entrypoint python3"
        " vllm/vllm-openai:v0.11.0 -m vllm.entrypoints.openai.api_server --model /models/ds"
        " --speculative-config '{\"method\":\"dspark\",\"num_speculative_tokens\":5}'",
    ]
    assert [p.role for p in plans] == ["ray-worker", "server"]
    assert docker_hosts(launch) == ["ssh://spark2", None]


def test_remote_read_only_flag_is_kept(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(
        {**GB300, "extra_containers": [{**GB300["extra_containers"][0],  # type: ignore[dict-item]
                                        "volumes": ["/models/x.py:/x.py:ro"]}]})
    (worker, _) = plan_containers(launch, _ctx(campaign_dir), runner={})
    assert "-v /models/x.py:/x.py:ro" in docker_run_line(worker)


def test_labels_on_every_container(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(GB300)
    plans = plan_containers(launch, _ctx(campaign_dir), launch_id="abc")
    for plan in plans:
        assert plan.labels[LABEL_RUN] == "2026-11-29-gb300-ab12"
        assert plan.labels["spec-ab.pair"] == "2"
        assert plan.labels["spec-ab.arm"] == "candidate"
        assert plan.labels["spec-ab.launch"] == "abc"
        assert plan.labels[LABEL_PID] == str(os.getpid())
        assert float(plan.labels[LABEL_PID_START]) > 0
    assert {p.labels["spec-ab.role"] for p in plans} == {"ray-worker", "server"}


@pytest.mark.parametrize(
    ("text", "kind", "read_only", "source"),
    [
        ("patches/spec_decode.py:/x.py", "bind", True, "patches/spec_decode.py"),  # file: ro
        ("patches/spec_decode.py:/x.py:rw", "bind", False, "patches/spec_decode.py"),
        ("./cache:/c", "bind", False, "cache"),  # directory: rw
        ("./cache:/c:ro", "bind", True, "cache"),
        ("hf-cache:/data", "volume", False, "hf-cache"),  # named volume
        ("hf-cache:/data:ro", "volume", True, "hf-cache"),
    ],
)
def test_volume_rules(campaign_dir: Path, text: str, kind: str, read_only: bool,
                      source: str) -> None:
    m = resolve_volume(parse_volume(text), campaign_dir, remote=False)
    assert (m.kind, m.read_only) == (kind, read_only)
    expected = source if kind == "volume" else str(campaign_dir / source)
    assert m.source == expected
    assert m.is_file == (source.endswith(".py"))


def test_volume_absolute_and_remote(campaign_dir: Path) -> None:
    patch = campaign_dir / "patches" / "spec_decode.py"
    m = resolve_volume(parse_volume(f"{patch}:/x.py"), Path("/elsewhere"), remote=False)
    assert m.source == str(patch) and m.read_only
    remote = resolve_volume(parse_volume("/models:/models"), campaign_dir, remote=True)
    assert (remote.source, remote.read_only, remote.is_file) == ("/models", False, False)


@pytest.mark.parametrize("text", ["a", "a:b", "/a:/b:rx", ":/b", "/a:/b:ro:x"])
def test_bad_volumes_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_volume(text)


def test_ports_default_to_the_runner_port_on_loopback(tmp_path: Path) -> None:
    launch = DockerLaunch.model_validate({"backend": "docker", "image": "i", "port": 8123})
    (plan,) = plan_containers(launch, _ctx(tmp_path), runner={})
    assert plan.ports == [("127.0.0.1", 8123, 8123, "tcp")]
    assert "-p 127.0.0.1:8123:8123" in docker_run_line(plan)
    assert create_kwargs(plan)["ports"] == {"8123/tcp": [("127.0.0.1", 8123)]}
    explicit = DockerLaunch.model_validate({"backend": "docker", "image": "i", "port": 9000,
                                            "host": "10.0.0.5", "ports": ["9000:8000"]})
    (plan,) = plan_containers(explicit, _ctx(tmp_path), runner={})
    assert plan.ports == [(None, 9000, 8000, "tcp")]
    assert create_kwargs(plan)["ports"] == {"8000/tcp": [9000]}


def test_create_kwargs_carry_gpus_mounts_and_limits(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(GB300)
    worker, server = plan_containers(launch, _ctx(campaign_dir), runner={})
    kw = create_kwargs(server)
    assert kw["network_mode"] == "host" and "ports" not in kw
    assert kw["device_requests"][0]["Count"] == -1
    assert kw["ipc_mode"] == "host" and kw["shm_size"] == "16g"
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in kw["ulimits"]] == [
        ("memlock", -1, -1), ("stack", 67108864, 67108864)]
    assert [(m["Type"], m["ReadOnly"]) for m in kw["mounts"]] == [
        ("bind", True), ("bind", False), ("volume", False)]
    assert kw["entrypoint"] == ["python3", "-m"]
    assert create_kwargs(worker)["device_requests"][0]["DeviceIDs"] == ["0", "1"]


def test_state_words() -> None:
    assert describe_state({"Status": "running"}) is None
    assert describe_state({"Status": "exited", "ExitCode": 3}) == "exited with code 3"
    oom = describe_state({"Status": "exited", "ExitCode": 137, "OOMKilled": True})
    assert oom == "was OOM-killed (out of memory; exit code 137)"
    assert describe_state({"Status": "created"}) == "was created but never started"


def test_mount_facts_hash_bind_mounted_files(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(GB300)
    plans = plan_containers(launch, _ctx(campaign_dir), runner={})
    facts = mount_facts(plans[-1].mounts)
    patch = campaign_dir / "patches" / "spec_decode.py"
    assert facts[0]["sha256"] == hashlib.sha256(patch.read_bytes()).hexdigest()
    assert "sha256" not in facts[1] and "sha256" not in facts[2]


def test_extra_log_path() -> None:
    assert extra_log_path(Path("/r/server.log"), "ray worker") == Path("/r/server.ray-worker.log")


# --------------------------------------------------------------------------- fakes


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name: str) -> Any:
        if name not in self.present:
            raise ImageNotFound(name)
        return type("Img", (), {"id": "sha256:abc", "attrs": {"RepoDigests": []}})()


class FakeNetworks:
    def get(self, name: str) -> Any:
        raise NotFound(name)


class FakeClient:
    def __init__(self, images: set[str] = frozenset(), runtimes: dict[str, Any] | None = None,
                 containers: list[Any] | None = None) -> None:  # type: ignore[assignment]
        self.images = FakeImages(set(images))
        self.networks = FakeNetworks()
        self._runtimes = runtimes or {"runc": {}}
        self.containers = FakeContainers(containers or [])

    def ping(self) -> bool:
        return True

    def info(self) -> dict[str, Any]:
        return {"Runtimes": self._runtimes, "DefaultRuntime": "runc"}


class FakeContainers:
    def __init__(self, items: list[Any], vanished: int = 0) -> None:
        self.items = items
        self.vanished = vanished
        """Containers listed, then removed before the SDK inspects each (another run's
        stop): the SDK raises NotFound for them unless `ignore_removed`."""

    def list(self, all: bool = False, filters: dict[str, str] | None = None,
             ignore_removed: bool = False) -> list[Any]:
        if self.vanished and not ignore_removed:
            raise NotFound("No such container: gone")
        return list(self.items)


def _unreachable(host: str | None) -> Any:
    raise DockerException("Error while fetching server API version: connection refused")


def test_preflight_unreachable_engine_says_what_to_do(tmp_path: Path) -> None:
    launch = DockerLaunch.model_validate({"backend": "docker", "image": "i", "port": 8000})
    (problem,) = preflight(launch, client_factory=_unreachable)
    assert "cannot reach" in problem and "start dockerd" in problem
    assert "DOCKER_HOST" in problem


def test_preflight_missing_image_gpu_runtime_and_network(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate({
        "backend": "docker", "image": "spec-ab-sim:latest", "port": 8000, "gpus": "all",
        "network": "lab-net", "volumes": ["/no/such/file.py:/x.py"],
    })
    problems = preflight(launch, client_factory=lambda h: FakeClient(),
                         which=lambda name: None)
    text = "\n".join(problems)
    assert "image spec-ab-sim:latest is not present" in text
    assert "docker pull spec-ab-sim:latest (or scripts/build-sim-image" in text
    assert "nvidia-container-toolkit" in text
    assert "docker network create lab-net" in text
    assert len(problems) == 3  # the mount source is a campaign file: spec.files checks it


def test_preflight_passes_when_all_is_there(campaign_dir: Path) -> None:
    launch = DockerLaunch.model_validate(GB300)
    client = FakeClient(images={"vllm/vllm-openai:v0.11.0"}, runtimes={"nvidia": {}})
    assert preflight(launch, client_factory=lambda h: client) == []
    # pull: true → a missing image is not a problem (it will be pulled at start)
    pulled = DockerLaunch.model_validate({**GB300, "pull": True})
    gpus = FakeClient(runtimes={"nvidia": {}})
    assert preflight(pulled, client_factory=lambda h: gpus) == []


def test_start_failure_removes_what_was_created(tmp_path: Path) -> None:
    """A create that succeeds and a start that fails: stop() runs, the container goes."""
    from docker.errors import APIError

    removed: list[str] = []

    class Box:
        id = "c1"
        name = "box"
        status = "created"
        attrs: ClassVar[dict[str, Any]] = {"State": {"Status": "created"}}

        def start(self) -> None:
            raise APIError("boom", explanation="could not select device driver with caps gpu")

        def reload(self) -> None:
            pass

        def stop(self, timeout: int) -> None:
            raise AssertionError("never running, never stopped")

        def remove(self, force: bool = False, v: bool = False) -> None:
            removed.append(self.id)

    class Containers(FakeContainers):
        def create(self, image: str, **kwargs: Any) -> Any:
            return Box()

    client = FakeClient(images={"i"})
    client.containers = Containers([])
    launch = DockerLaunch.model_validate({"backend": "docker", "image": "i", "port": 8000})
    server = DockerServer(launch, _ctx(tmp_path), client_factory=lambda h: client)
    from campaign.errors import ServerError

    with pytest.raises(ServerError, match="could not select device driver"):
        server.start()
    assert removed == ["c1"]
    assert server.exit_status() == "stopped"


def test_missing_image_without_pull_is_a_server_error(tmp_path: Path) -> None:
    from campaign.errors import ServerError

    launch = DockerLaunch.model_validate({"backend": "docker", "image": "absent:1", "port": 8000})
    server = DockerServer(launch, _ctx(tmp_path), client_factory=lambda h: FakeClient())
    with pytest.raises(ServerError, match="docker pull absent:1"):
        server.start()


# --------------------------------------------------------------------------- cleanup


class FakeContainer:
    def __init__(self, cid: str, labels: dict[str, str]) -> None:
        self.id = cid
        self.name = f"name-{cid}"
        self.labels = labels


def test_find_leftovers_judges_by_runner_pid_and_host() -> None:
    live = {LABEL_RUN: "r1", LABEL_PID: "100", LABEL_PID_START: "5.0", LABEL_HOST: "me"}
    dead = {LABEL_RUN: "r2", LABEL_PID: "200", LABEL_PID_START: "5.0", LABEL_HOST: "me"}
    reused = {LABEL_RUN: "r3", LABEL_PID: "100", LABEL_PID_START: "99.0", LABEL_HOST: "me"}
    unlabelled = {LABEL_RUN: "r4"}
    foreign = {LABEL_RUN: "r5", LABEL_PID: "200", LABEL_HOST: "other-box"}
    client = FakeClient(containers=[FakeContainer(str(i), lab) for i, lab in
                                    enumerate([live, dead, reused, unlabelled, foreign])])

    def alive(pid: int, started: float | None) -> bool:
        return pid == 100 and (started is None or started == 5.0)

    scan = cleanup.find_leftovers(lambda h: client, include_processes=False, alive=alive,
                                  hostname="me", in_scope="")  # unscoped: a user's machine
    assert [x.run_id for x in scan] == ["r2", "r3", "r4"]
    assert "runner pid 200 is not running" in str(scan[0])
    assert "no runner pid label" in scan[2].why
    assert len(scan.notes) == 1 and "other-box" in scan.notes[0]


def test_a_container_removed_while_listed_is_not_an_unreachable_engine() -> None:
    """Another run on the machine removed one of its containers between the engine's list
    and the SDK's inspect of it: the scan goes on without it (it read the engine as
    unreachable before, and `run` refuses an unreachable engine of a docker campaign)."""
    dead = {LABEL_RUN: "r2", LABEL_PID: "200", LABEL_PID_START: "5.0", LABEL_HOST: "me"}
    client = FakeClient(containers=[FakeContainer("1", dead)])
    client.containers.vanished = 1
    scan = cleanup.find_leftovers(lambda h: client, include_processes=False,
                                  alive=lambda pid, started: False, hostname="me",
                                  in_scope="")
    assert [x.run_id for x in scan] == ["r2"]
    assert scan.unreachable == [] and scan.notes == []


def test_a_scoped_runner_judges_only_its_own_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """SPECAB_SCOPE set: only containers labelled with the same scope are judged (parallel
    jobs that share no GPU); unset, every container on the engine is, as before."""
    dead = {LABEL_PID: "200", LABEL_PID_START: "5.0", LABEL_HOST: "me"}
    client = FakeClient(containers=[
        FakeContainer("1", {LABEL_RUN: "mine", LABEL_SCOPE: "job-a", **dead}),
        FakeContainer("2", {LABEL_RUN: "theirs", LABEL_SCOPE: "job-b", **dead}),
        FakeContainer("3", {LABEL_RUN: "unscoped", **dead})])

    def find(**kw: str) -> list[str]:
        return [x.run_id for x in cleanup.find_leftovers(
            lambda h: client, include_processes=False, alive=lambda p, s: False,
            hostname="me", **kw)]

    assert find(in_scope="job-a") == ["mine"]
    assert find(in_scope="") == ["mine", "theirs", "unscoped"]
    monkeypatch.setenv(SCOPE_ENV, "job-b")
    assert find() == ["theirs"]
    assert runner_labels()[LABEL_SCOPE] == "job-b"  # what a scoped runner's containers carry
    monkeypatch.delenv(SCOPE_ENV)
    assert find() == ["mine", "theirs", "unscoped"]
    assert LABEL_SCOPE not in runner_labels()


def test_find_leftovers_survives_an_unreachable_engine() -> None:
    """No engine answering is said in words, not as docker's "Error while fetching server
    API version: …"; another docker error keeps docker's first line."""
    scan = cleanup.find_leftovers(_unreachable, include_processes=False)
    assert list(scan) == [] and scan.notes == [
        "the local docker engine does not answer, so no container was looked for (a "
        "process lane needs none; to clean containers, start the engine and run spec-ab "
        "clean again)"]

    def denied(host: str | None) -> Any:
        raise DockerException("permission denied on /var/run/docker.sock\nmore")

    (note,) = cleanup.find_leftovers(denied, include_processes=False).notes
    assert note == ("could not look for containers on the local docker engine: permission "
                    "denied on /var/run/docker.sock")


def test_a_campaign_without_docker_says_nothing_about_a_missing_engine() -> None:
    # a process-backend campaign on a machine without Docker: no stray docker note
    scan = cleanup.find_leftovers(_unreachable, include_processes=False, quiet_hosts=(None,))
    assert list(scan) == [] and scan.notes == []
    loud = cleanup.find_leftovers(_unreachable, include_processes=False)
    assert any("does not answer" in n for n in loud.notes)


def test_process_leftovers_of_dead_runners_are_found_and_stopped() -> None:
    """A real child with the process backend's environment; its runner pid is dead."""
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    env = {**os.environ, "SPECAB_RUN_ID": "r-dead", "SPECAB_RUNNER_PID": str(dead_pid.pid),
           "SPECAB_ARM": "control", "SPECAB_PAIR": "1"}
    orphan = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    kept_env = {**env, "SPECAB_RUN_ID": "r-live", "SPECAB_RUNNER_PID": str(os.getpid())}
    kept = subprocess.Popen(["sleep", "60"], env=kept_env, start_new_session=True)
    try:
        scan = cleanup.find_leftovers(_unreachable, include_processes=True)
        mine = [x for x in scan if x.run_id in ("r-dead", "r-live")]
        assert [(x.kind, x.ident, x.arm) for x in mine] == [
            ("process", str(orphan.pid), "control")]
        report = cleanup.remove_leftovers(mine, grace_s=5)
        assert report[0].startswith("stopped process sleep 60")
        assert orphan.wait(timeout=10) is not None
        assert kept.poll() is None
    finally:
        for p in (orphan, kept):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_a_scoped_runner_leaves_another_scopes_orphan_alone() -> None:
    """A process left by a dead runner of scope job-a: job-b's runner does not judge it,
    job-a's and an unscoped one do (the marker is the inherited SPECAB_SCOPE)."""
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    env = {**os.environ, "SPECAB_RUN_ID": "r-scoped", "SPECAB_RUNNER_PID": str(dead_pid.pid),
           SCOPE_ENV: "job-a"}
    orphan = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        def seen(scope: str) -> bool:
            scan = cleanup.find_leftovers(_unreachable, include_processes=True,
                                          in_scope=scope)
            return any(x.run_id == "r-scoped" for x in scan)

        assert not seen("job-b")
        assert seen("job-a") and seen("")
    finally:
        orphan.kill()
        orphan.wait()


def test_second_ctrl_c_during_stop_still_removes_everything(tmp_path: Path) -> None:
    removed: list[str] = []
    stopped: list[str] = []

    class Box:
        status = "running"
        attrs: ClassVar[dict[str, Any]] = {"State": {"Status": "running"}}

        def __init__(self, name: str) -> None:
            self.id = self.name = name

        def start(self) -> None:
            pass

        def logs(self, **kwargs: Any) -> Any:
            return iter([b"up\n"])

        def reload(self) -> None:
            pass

        def stop(self, timeout: int) -> None:
            stopped.append(self.name)
            raise KeyboardInterrupt  # Ctrl-C while waiting for the graceful stop

        def remove(self, force: bool = False, v: bool = False) -> None:
            removed.append(self.name)

    class Containers(FakeContainers):
        def create(self, image: str, **kwargs: Any) -> Any:
            return Box(kwargs["labels"]["spec-ab.role"])

    client = FakeClient(images={"i"})
    client.containers = Containers([])
    launch = DockerLaunch.model_validate({
        "backend": "docker", "image": "i", "port": 8000,
        "extra_containers": [{"name": "worker", "image": "i"}]})
    server = DockerServer(launch, _ctx(tmp_path), client_factory=lambda h: client)
    server.start()
    with pytest.raises(KeyboardInterrupt):
        server.stop()
    assert stopped == ["server"]  # no more graceful waits after the interrupt
    assert list(dict.fromkeys(removed)) == ["server", "worker"]  # server first


def test_unreachable_engine_at_start_says_so_and_stop_is_quiet(tmp_path: Path) -> None:
    from campaign.errors import ServerError

    launch = DockerLaunch.model_validate({"backend": "docker", "image": "i", "port": 8000})
    server = DockerServer(launch, _ctx(tmp_path), client_factory=_unreachable)
    with pytest.raises(ServerError) as err:
        server.start()
    assert "cannot reach docker on" in str(err.value)
    assert "scripts/start-dockerd" in str(err.value)
    assert not getattr(err.value, "__notes__", None)  # the cleanup had nothing to complain of
    server.stop()
    facts = server.facts()  # still describes the launch, says why there is no image id
    assert facts["containers"][0]["error"] == "docker engine unreachable"
    assert facts["docker_run"] == server.describe()
    assert facts["engines"] == {"local": {"version": None, "error": "docker engine unreachable"}}


def test_an_extra_containers_ready_command_reads_its_references(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${NAME}` is expanded wherever a launch runs a command (env, args, command,
    entrypoint, hooks): the readiness command of an extra container too, read at the exec,
    never written into the plan."""
    from campaign.servers.docker.backend import _Started

    monkeypatch.setenv("RAY_TOKEN", "tok-123")
    launch = DockerLaunch.model_validate({
        "backend": "docker", "image": "i", "port": 8000,
        "extra_containers": [{"name": "worker", "image": "i", "ready": {
            "command": ["ray", "status", "--token", "${RAY_TOKEN}"], "timeout_s": 5}}]})
    server = DockerServer(launch, _ctx(tmp_path), client_factory=lambda h: FakeClient())
    (plan,) = [p for p in server.plans if p.ready is not None]
    assert plan.ready is not None and "${RAY_TOKEN}" in plan.ready.command  # type: ignore[operator]
    ran: list[list[str]] = []

    class Container:
        def exec_run(self, cmd: list[str]) -> Any:
            ran.append(cmd)
            return type("R", (), {"exit_code": 0})()

    class Follower:
        def search(self, pattern: Any) -> bool:
            return False

    server._wait_extra_ready(_Started(plan, Container(), Follower()))  # type: ignore[arg-type]
    assert ran == [["ray", "status", "--token", "tok-123"]]
