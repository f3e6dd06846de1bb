"""`portguard`: a squatter on the campaign's port is named, never measured."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from campaign.campaignfile import DockerLaunch, ExternalLaunch, ProcessLaunch
from campaign.run.guards import portguard
from campaign.servers.process import ProcessServer
from campaign.sim.testing import free_port
from tests.unit.servers.test_server_context import ctx


@contextmanager
def listening(port: int) -> Iterator[None]:
    """This test process listens on 127.0.0.1:port (the squatter)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    try:
        yield
    finally:
        sock.close()


def launch(port: int, *code: str) -> ProcessLaunch:
    return ProcessLaunch(backend="process", port=port, stop_timeout_s=2,
                         command=[sys.executable, "-c", "\n".join(code)])


def test_a_port_held_before_the_boot_is_named_with_its_holder() -> None:
    port = free_port()
    assert portguard.busy_before_boot(launch(port, "pass")) is None
    with listening(port):
        why = portguard.busy_before_boot(launch(port, "pass"))
        external = ExternalLaunch(backend="external", base_url=f"http://127.0.0.1:{port}")
        assert portguard.busy_before_boot(external) is None  # busy by design
    assert why is not None and f"port {port} on 127.0.0.1 was busy before" in why
    assert f"pid {os.getpid()}" in why and "lane fault" in why


def test_a_listener_outside_the_servers_process_group_is_foreign(tmp_path: Path) -> None:
    port = free_port()
    idle = launch(port, "import time", "time.sleep(30)")  # started, never listens
    with listening(port), ProcessServer(idle, ctx(tmp_path)) as server:
        why = portguard.foreign_listener(idle, server)
    assert why is not None and f"answered by pid {os.getpid()}" in why

    own = launch(port, "import socket, time", "s = socket.socket()",
                 f"s.bind(('127.0.0.1', {port}))", "s.listen()", "print('up', flush=True)",
                 "time.sleep(30)")
    with ProcessServer(own, ctx(tmp_path)) as server:
        deadline = time.monotonic() + 20
        while not portguard.listener_pids(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert portguard.listener_pids(port)
        assert portguard.foreign_listener(own, server) is None
        assert portguard.foreign_listener(own, object()) is None  # cannot tell: not judged


def test_a_squatter_on_the_servers_exact_address_is_foreign_beside_its_own_listener(
        tmp_path: Path) -> None:
    """The server listens on 0.0.0.0; another process on [::1] (IPv6 only) answers the
    runner that talks to ::1: the server's own listener elsewhere does not excuse it."""
    port = free_port()
    own = ProcessLaunch(backend="process", host="::1", port=port, stop_timeout_s=2, command=[
        sys.executable, "-c", "\n".join([
            "import socket, time", "s = socket.socket()",
            f"s.bind(('0.0.0.0', {port}))", "s.listen()", "time.sleep(30)"])])
    sock = socket.socket(socket.AF_INET6)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(("::1", port))
    sock.listen()
    try:
        with ProcessServer(own, ctx(tmp_path)) as server:
            deadline = time.monotonic() + 20
            while len(portguard.listener_pids(port)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(portguard.listener_pids(port)) == 2
            why = portguard.foreign_listener(own, server)
            v4 = own.model_copy(update={"host": "127.0.0.1"})
            assert portguard.foreign_listener(v4, server) is None  # 127.0.0.1 reaches its own
    finally:
        sock.close()
    assert why is not None and f"answered by pid {os.getpid()}" in why


def docker_launch(port: int, **kw: object) -> DockerLaunch:
    return DockerLaunch.model_validate({"backend": "docker", "image": "spec-ab-sim:latest",
                                        "port": port, **kw})


INIT, CHILD, PROXY, OTHER = 4000, 4001, 5000, 6000


def attrs(port: int | None = 18791, running: bool = True, ip: str = "127.0.0.1"
          ) -> dict[str, Any]:
    ports = {"8000/tcp": [{"HostIp": ip, "HostPort": str(port)}] if port else None}
    return {"Name": "/specab-r-p1-control", "State": {"Running": running, "Pid": INIT,
                                                      "Status": "running" if running
                                                      else "exited"},
            "NetworkSettings": {"Ports": ports,
                                "Networks": {"bridge": {"IPAddress": "172.17.0.2"}}}}


def judge(launch: DockerLaunch, data: dict[str, Any], pids: list[int], *,
          remote: bool = False, host: str = "127.0.0.1") -> str | None:
    published = [] if launch.network == "host" else [("127.0.0.1", launch.port, 8000, "tcp")]
    return portguard.judge_container(
        launch, data, published, remote=remote,
        found=[portguard.Listener(p, host, launch.port) for p in pids],
        inside=lambda pid: pid in (INIT, CHILD), proxy=lambda pid: pid == PROXY)


def test_a_published_container_is_judged_on_its_binding_and_the_ports_listeners() -> None:
    launch = docker_launch(18791, ports=["18791:8000"])
    assert judge(launch, attrs(), [PROXY]) is None
    assert judge(launch, attrs(), []) is None  # no userland proxy: nothing local to judge
    why = judge(launch, attrs(), [OTHER])
    assert why is not None and f"answered by pid {OTHER}" in why and "lane fault" in why
    why = judge(launch, attrs(port=18792), [PROXY])
    assert why is not None and "without the binding 127.0.0.1:18791->8000/tcp" in why
    assert "it reports 127.0.0.1:18792->8000/tcp" in why
    why = judge(launch, attrs(port=None), [PROXY])
    assert why is not None and "no published port" in why
    why = judge(launch, attrs(running=False), [PROXY])
    assert why is not None and "specab-r-p1-control exited" in why
    anywhere = [(None, 18791, 8000, "tcp")]  # asked on every address: any is the binding
    assert portguard.judge_container(launch, attrs(ip="0.0.0.0"), anywhere, remote=False,
                                     found=[], inside=bool, proxy=bool) is None
    # a remote engine: only what it reports counts (local listeners say nothing of the box)
    assert judge(launch, attrs(), [OTHER], remote=True) is None
    assert judge(launch, attrs(port=18792), [], remote=True) is not None


def test_a_host_network_container_must_own_the_listener() -> None:
    launch = docker_launch(18791, network="host")
    assert judge(launch, attrs(port=None), [INIT]) is None
    assert judge(launch, attrs(port=None), [CHILD]) is None
    why = judge(launch, attrs(port=None), [PROXY])  # no proxy on the host network
    assert why is not None and f"answered by pid {PROXY}" in why
    why = judge(launch, attrs(port=None), [CHILD, OTHER])
    assert why is not None and f"answered by pid {OTHER}" in why
    # a listener on another address does not answer the runner's 127.0.0.1
    assert judge(launch, attrs(port=None), [OTHER], host="10.9.9.9") is None
    assert judge(launch, attrs(port=None), [OTHER], remote=True) is None


def test_the_real_process_tree_and_proxy_lookups() -> None:
    me = os.getpid()
    data = {"State": {"Pid": os.getppid()}, "NetworkSettings": {}}
    assert portguard.in_container(me, data)  # a descendant of the "init"
    assert not portguard.in_container(me, {"State": {"Pid": 0}})
    assert not portguard.is_docker_proxy(me, data)


def test_a_remote_engine_skips_the_port_checks_before_boot_as_the_preflight_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    local = docker_launch(port)
    remote = docker_launch(port, docker_host="ssh://spark2")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert not portguard.remote_engine(local) and portguard.remote_engine(remote)
    with listening(port):
        assert portguard.busy_before_boot(local) is not None
        assert portguard.busy_before_boot(remote) is None  # e.g. an ssh tunnel's port
        monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.2:2375")
        assert portguard.busy_before_boot(local) is None
        monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
        assert portguard.busy_before_boot(local) is not None
        monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
        assert portguard.busy_before_boot(local) is not None


def served(models: list[dict[str, str]], version: str | None) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": models})
        if request.url.path == "/version" and version is not None:
            return httpx.Response(200, json={"version": version})
        return httpx.Response(404, json={})
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_an_external_servers_identity_is_its_model_ids_and_version() -> None:
    url = "http://lab:8000"
    with served([{"id": "m", "root": "/models/llama"}, {"id": "lora"}], "0.11.0") as c:
        vllm = portguard.fetch_identity(c, url, "/v1/models")
    assert vllm == {"models": ["lora", "m (/models/llama)"], "version": "0.11.0"}
    with served([{"id": "m", "root": "m"}], None) as c:
        plain = portguard.fetch_identity(c, url, "/v1/models")
    assert plain == {"models": ["m"]}  # no /version: model ids only
    with served([{"id": "m", "root": "/models/llama"}, {"id": "lora"}], "0.12.0") as c:
        newer = portguard.fetch_identity(c, url, "/v1/models")
    why = portguard.identity_change("cand", vllm, newer)
    assert why is not None and why.startswith("cand: the external server is not the one")
    assert ("it was model lora, m (/models/llama), version 0.11.0, it is now model lora, "
            "m (/models/llama), version 0.12.0") in why
    assert portguard.identity_change("cand", vllm, vllm) is None
    assert portguard.identity_change("cand", None, vllm) is None  # nothing recorded yet
    assert portguard.identity_change("cand", vllm, None) is None  # unreadable: not judged

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")
    with httpx.Client(transport=httpx.MockTransport(down)) as c:
        assert portguard.fetch_identity(c, url, "/v1/models") is None


def test_the_recorded_identity_is_the_first_ready_of_the_arm() -> None:
    events: list[dict[str, Any]] = [
        {"event": "slot_start", "slot": 0, "arm": "control"},
        {"event": "server_ready", "slot": 0, "identity": {"models": ["a"]}},
        {"event": "slot_start", "slot": 1, "arm": "cand"},
        {"event": "server_ready", "slot": 1, "identity": {"models": ["b"]}},
        {"event": "slot_start", "slot": 2, "arm": "control"},
        {"event": "server_ready", "slot": 2},
    ]
    assert portguard.recorded_identity(events, "control") == {"models": ["a"]}
    assert portguard.recorded_identity(events, "cand") == {"models": ["b"]}
    assert portguard.recorded_identity(events, "other") is None
