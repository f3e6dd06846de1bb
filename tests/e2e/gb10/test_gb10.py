"""The GB10 pair's layout for real, on one machine: the server and a "Ray head" on the local
engine, a "Ray worker" as an extra container on `docker_host: ssh://spec-ab-box2`, served by
a private loopback sshd (tests/sshbox.py). Both endpoints are the same engine here, so the
container names and run labels keep them apart, and the sshd's session log (the commands
it ran, `docker system dial-stdio` for the docker SDK) proves what went through ssh.

Campaign: tests/docker/sim-gb10-pair.yaml (examples/gb10-pair-depth.yaml in miniature).
Every test must leave no container of these tests on either endpoint (checked at teardown).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from ruamel.yaml import YAML

from campaign.campaignfile import load_campaign
from campaign.markers import LABEL_PID, LABEL_RUN
from campaign.servers.docker import DockerServer, default_client
from campaign.servers.protocol import ArmContext
from tests.runs import ROOT, SIM_IMAGE, container_events
from tests.sshbox import URL, SSHBox, free_port

pytestmark = pytest.mark.gb10

TEMPLATE = ROOT / "tests" / "docker" / "sim-gb10-pair.yaml"
SPEC_AB = [sys.executable, "-m", "campaign"]
PREFIX = "gb10t-"
"""Every run id of these tests contains it (campaign names and DockerServer run ids)."""



@pytest.fixture(scope="module")
def box2(sshbox: SSHBox, engine: docker.DockerClient) -> Iterator[docker.DockerClient]:
    """The second box's engine, reached through ssh (the backend's own client factory:
    `docker.DockerClient(base_url='ssh://spec-ab-box2', use_ssh_client=True)` + its fixes)."""
    before = sshbox.dial_count()
    client = default_client(URL)
    assert client.version()["Version"]
    assert sshbox.dial_count() > before, "the ssh client did not dial through the sshd"
    yield client
    client.close()


def _ours(client: docker.DockerClient) -> list[Any]:
    found = client.containers.list(all=True, filters={"label": LABEL_RUN}, ignore_removed=True)
    return [c for c in found if PREFIX in c.labels.get(LABEL_RUN, "")]


_NAMES: list[str] = []
"""The run names (campaign names, DockerServer run ids) the running test made: its
teardown judges only their containers."""


def _describe(c: Any) -> str:
    """A leftover, with what tells where it came from (for the failure message)."""
    labels = c.labels
    return (f"{c.name} ({c.status}, created {c.attrs.get('Created', '?')}, runner pid "
            f"{labels.get(LABEL_PID, '?')})")


@pytest.fixture
def endpoints(sshbox: SSHBox, engine: docker.DockerClient,
              box2: docker.DockerClient) -> Iterator[tuple[docker.DockerClient, SSHBox]]:
    """Yields (local engine, ssh box); at teardown: the box runs again, and no container
    of this test's runs is left on either endpoint (removed, then the test fails).

    Containers of an earlier test of this module found then are removed too, and fail
    nothing here: the test that started them checked its own at its teardown, so they
    are named on stderr instead of being charged to a test that never made them."""
    _NAMES.clear()
    yield engine, sshbox
    if sshbox.proc is None or sshbox.proc.poll() is not None:
        sshbox.start()
    via_ssh = default_client(URL)
    found = {"local": _ours(engine), URL: _ours(via_ssh)}
    for client in (engine, via_ssh):
        for c in _ours(client):
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
    via_ssh.close()

    def mine(c: Any) -> bool:
        return any(name in c.labels.get(LABEL_RUN, "") for name in _NAMES)

    left = {where: [_describe(c) for c in cs if mine(c)] for where, cs in found.items()}
    earlier = {where: [_describe(c) for c in cs if not mine(c)] for where, cs in found.items()}
    if any(earlier.values()):
        print(f"containers of an earlier gb10 test removed: {earlier}", file=sys.stderr)
    assert not any(left.values()), f"containers left behind: {left}"


def _campaign(tmp_path: Path, *, pairs: int = 1, mode: str = "ok",
              requests: int = 6) -> tuple[Path, str]:
    yaml = YAML()
    data = yaml.load(TEMPLATE.read_text())
    name = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    _NAMES.append(name)
    port = free_port()
    data["name"] = name
    data["lane"] = name
    data["preregistration"]["pairs"] = pairs
    server = data["server"]
    server["port"] = port
    server["ports"] = [f"{port}:8000"]
    worker = server["extra_containers"][1]
    assert worker["docker_host"] == URL
    worker["env"]["WORKER_MODE"] = mode
    worker["env"]["SERVER_PORT"] = str(port)
    flags = tmp_path / "flags"
    flags.mkdir(exist_ok=True)
    worker["volumes"] = [f"{flags}:/flags"]
    data["workloads"]["tokenizer"] = str(ROOT / "fixtures" / "tokenizer")
    data["workloads"]["knee"]["requests_per_level"] = requests
    buf = io.StringIO()
    yaml.dump(data, buf)
    path = tmp_path / "campaign.yaml"
    path.write_text(buf.getvalue())
    return path, name


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SPECAB_LOCK_DIR": str(tmp_path / "locks"), "COLUMNS": "250"}


LANE_HELD = "leftover(s) of earlier runs hold the lane"


def _foreign_leftovers(stderr: str) -> bool:
    """`run` refused because of another test session's leftovers on this shared machine
    (`run` checks the whole machine); ours would name this module's run-id prefix."""
    return LANE_HELD in stderr and PREFIX not in stderr


def _spec_ab(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    for _ in range(10):
        proc = subprocess.run([*SPEC_AB, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, env=_env(tmp_path), check=False,
                              stdin=subprocess.DEVNULL)
        if not _foreign_leftovers(proc.stderr):
            break
        time.sleep(3)
    return proc


def _start_run(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`spec-ab run` in the background, its output piped (read it with communicate())."""
    for _ in range(10):
        proc = subprocess.Popen([*SPEC_AB, "run", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env=_env(tmp_path), start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=8)
        except subprocess.TimeoutExpired:
            return proc  # past the leftover check: running
        if not _foreign_leftovers(stderr):
            raise AssertionError(f"spec-ab run exited {proc.returncode}: {stderr}")
        time.sleep(3)
    raise AssertionError("the lane stayed held by another session's leftovers")


def _journal(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _run_dir(out: Path) -> Path:
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir



# --------------------------------------------------------------------------- one arm


def test_arm_starts_head_locally_worker_through_ssh_in_order_and_stops_in_reverse(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    engine, box = endpoints
    campaign = load_campaign(_campaign(tmp_path)[0])
    launch = campaign.launches["control"]
    rid = f"{PREFIX}arm-{uuid.uuid4().hex[:6]}"
    _NAMES.append(rid)
    ctx = ArmContext(run_id=rid, pair=1, arm="control", campaign_dir=campaign.base_dir,
                     log_path=tmp_path / "pairs" / "01" / "control" / "server.log")
    server = DockerServer(launch, ctx)
    since = time.time()
    dials = box.dial_count()
    try:
        server.start()
        # The worker is seen through the ssh endpoint, by name and role.
        via_ssh = default_client(URL)
        (worker,) = [c for c in via_ssh.containers.list(filters={"label": f"{LABEL_RUN}={rid}"})
                     if c.labels["spec-ab.role"] == "ray-worker"]
        assert worker.status == "running" and worker.name.endswith("-ray-worker")
        # The backend reached it through ssh: its client for the worker's host is an ssh
        # one, and the sshd served `docker system dial-stdio` sessions meanwhile.
        assert server._clients[URL].api.base_url == "http+docker://ssh"
        assert server._clients[None].api.base_url != "http+docker://ssh"
        assert box.dial_count() > dials
    finally:
        server.stop()
    assert _ours(engine) == []
    events = container_events(engine, rid, since)
    assert [r for a, r in events if a == "start"] == ["ray-head", "ray-worker", "server"]
    assert [r for a, r in events if a == "die"] == ["server", "ray-worker", "ray-head"]
    # The worker's log was followed through ssh into the results, to its last line.
    worker_log = ctx.log_path.with_name("server.ray-worker.log").read_text()
    assert "joining the head" in worker_log and "Ray runtime started." in worker_log
    assert "ray worker: stopping" in worker_log
    assert "docker -H ssh://spec-ab-box2 run" in ctx.log_path.read_text()


# --------------------------------------------------------------------------- runs


def test_worker_dying_while_booting_fails_the_arm_with_its_last_log_lines(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    path, _ = _campaign(tmp_path, mode="boot-fail")
    out = tmp_path / "results"
    proc = _spec_ab(tmp_path, "run", str(path), "--out", str(out))
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    # found by the boot check before the first pair: nothing measured, no run folder kept
    assert "boot check: 1 of 1 launch(es) did not become ready (adaptive)" in proc.stderr
    assert not out.exists() or not any(out.iterdir())
    text = proc.stdout
    assert "extra container 'ray-worker' exited with code 1 before it was ready" in text, text
    assert "could not reach the GCS at 127.0.0.1:6379" in text
    assert "joining the head" in text


def test_worker_dying_mid_pass_gets_the_pair_redone(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    path, _ = _campaign(tmp_path, mode="die-mid-pass")
    out = tmp_path / "results"
    # no boot check: the adaptive launch booting alone first is the boot-fail test's
    proc = _spec_ab(tmp_path, "run", str(path), "--out", str(out), "--skip-boot-check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "flags" / "died").exists()
    journal = _journal(_run_dir(out))
    (invalid,) = [e for e in journal if e["event"] == "pair_invalid"]
    assert "extra container 'ray-worker' exited with code 1 during knee" in invalid["reason"]
    done = [e for e in journal if e["event"] == "pair_done"]
    assert [(e["pair"], e["pair_attempt"]) for e in done] == [(1, 2)]
    assert journal[-1]["event"] == "finished" and journal[-1]["complete"] is True


def test_clean_removes_leftovers_on_both_endpoints_after_sigkill(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    engine, box = endpoints
    path, _ = _campaign(tmp_path, requests=40)
    proc = _start_run(tmp_path, str(path), "--out", str(tmp_path / "results"))
    try:
        deadline = time.monotonic() + 120
        while not {"ray-head", "ray-worker", "server"} <= {
                c.labels["spec-ab.role"] for c in _ours(engine) if c.status == "running"}:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(_ours(default_client(URL))) == 3  # left behind, seen through ssh too
    dials = box.dial_count()
    clean = _spec_ab(tmp_path, "clean", str(path))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert box.dial_count() > dials  # the second box was looked at through ssh
    lines = clean.stdout.splitlines()
    assert any("ray-worker" in x and f"on {URL}" in x for x in lines), clean.stdout
    assert any(x.startswith("removed ") for x in lines), clean.stdout
    assert _ours(engine) == [] and _ours(default_client(URL)) == []
    again = _spec_ab(tmp_path, "clean", str(path))
    assert "no leftovers" in again.stdout


@pytest.mark.parametrize("where", ["unresolvable", "refused"])
def test_preflight_says_an_unreachable_endpoint_in_one_line(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path, where: str
) -> None:
    path, _ = _campaign(tmp_path)
    host = ("ssh://nohost.invalid" if where == "unresolvable"
            else f"ssh://root@127.0.0.1:{free_port()}")
    path.write_text(path.read_text().replace(URL, host))
    proc = _spec_ab(tmp_path, "check", str(path), timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    reason = ("Could not resolve hostname nohost.invalid" if where == "unresolvable"
              else "Connection refused")
    (line,) = [x for x in output.splitlines() if f"cannot reach docker on {host}" in x]
    assert f"cannot reach docker on {host}: " in line and reason in line, line
    assert not [x for x in output.splitlines() if x.lstrip().startswith("ssh:")], output
    assert output.count(reason) == 1, output


def test_check_passes_with_the_ssh_endpoint_up(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    path, _ = _campaign(tmp_path)
    proc = _spec_ab(tmp_path, "check", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cannot reach" not in proc.stdout + proc.stderr


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sshd_stopped_mid_run_is_a_clear_error_and_resume_completes(
    endpoints: tuple[docker.DockerClient, SSHBox], tmp_path: Path
) -> None:
    engine, box = endpoints
    path, _ = _campaign(tmp_path, pairs=2)
    out = tmp_path / "results"
    # no boot check: the adaptive launch booting alone first is the boot-fail test's
    proc = _start_run(tmp_path, str(path), "--out", str(out), "--skip-boot-check")
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "pair 1 never finished"
            runs = [d for d in out.iterdir() if d.is_dir()] if out.exists() else []
            if runs and any(e["event"] == "pair_done" for e in _journal(runs[0])):
                break
            time.sleep(0.2)
        run_dir = runs[0]
        pair1 = _hashes(run_dir / "pairs" / "01")
        box.stop()  # the second box goes away in the middle of the night
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        box.start()
    assert proc.returncode == 3, stdout[-3000:] + stderr[-3000:]
    # Said once, in words: which endpoint, ssh's reason, what to check, how to go on.
    assert f"cannot reach docker on {URL}: " in stderr or f"{URL}" in stderr, stderr
    assert f"docker -H {URL} info" in stderr or "spec-ab clean" in stderr, stderr
    assert "Traceback" not in stderr
    assert not [x for x in stderr.splitlines() if x.lstrip().startswith("ssh:")], stderr
    journal = _journal(run_dir)
    assert any(e["event"] == "aborted" for e in journal)
    assert _hashes(run_dir / "pairs" / "01") == pair1  # nothing measured is lost
    # Back up: clean what the dead box kept, then resume.
    clean = _spec_ab(tmp_path, "clean", str(path))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    resumed = _spec_ab(tmp_path, "run", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    journal = _journal(run_dir)
    assert journal[-1]["event"] == "finished" and journal[-1]["complete"] is True
    assert journal[-1]["pairs_valid"] == [1, 2]
    assert _hashes(run_dir / "pairs" / "01") == pair1
    # The worker's log was collected through ssh, to its last line, in every arm.
    for arm in ("control", "adaptive"):
        log = (run_dir / "pairs" / "01" / arm / "server.ray-worker.log").read_text()
        assert "Ray runtime started." in log and "ray worker: stopping" in log
    # The manifest records each endpoint's engine and each container's image.
    facts = json.loads((run_dir / "manifest.json").read_text())["servers"]["01/control"]
    version = engine.version()["Version"]
    assert facts["engines"]["local"]["version"] == version
    assert facts["engines"][URL]["version"] == version  # the same engine, reached by ssh
    by_role = {c["role"]: c for c in facts["containers"]}
    assert by_role["ray-worker"]["docker_host"] == URL
    image_id = engine.images.get(SIM_IMAGE).id
    assert all(c["image_id"] == image_id for c in by_role.values())
