"""The port of a server spec-ab starts is that server's, or the slot measures nothing.

Another server can take a campaign's port between two slots (vLLM binds its API port only
once its model is loaded, so the port is free for minutes of every boot). Readiness then
succeeds against the squatter at once and both arms of a pair would be measured on it. Each
check below makes that a lane fault (the pair is invalid and redone, `runner`), never a
measurement:

- `busy_before_boot`: before a `process` or `docker` server starts, nothing may accept a
  connection on its host and port (not for a container on a remote docker engine, like
  the preflight: its port may be an ssh tunnel's, busy by design — `remote_engine`);
- `foreign_listener`: once a `process` server is ready, every local process that would
  answer the runner on its address and port belongs to the server's own process group
  (`ProcessServer.owns`). A listener the host does not let us see (another user's, a
  remote host) is not judged;
- `container_mismatch`: once a `docker` server is ready, the engine reports its container
  running with the bindings spec-ab asked for (`ports`, or the campaign's port), and on a
  local engine every process that would answer on the port is docker's proxy for this
  container or a process inside it (`network: host`: the container's init or a
  descendant, or a process in its pid namespace). On a remote engine (`docker_host`, or a
  DOCKER_HOST that is not a local socket) the local processes say nothing about the box:
  only what the engine reports is checked;
- `identity_change`: an `external` server (spec-ab does not start it: its port is busy by
  design) has an identity — its model ids (`/v1/models`, each with its `root` when that
  differs) and, when served, its `/version` — recorded the first time each arm is ready
  (the `identity` of `server_ready`) and compared at every later slot of that arm.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

import httpx
import psutil

from campaign.campaignfile import DockerLaunch, ProcessLaunch
from campaign.campaignfile.launch import LaunchModel

CONNECT_TIMEOUT_S = 1.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "::"}
LANE_FAULT = "a lane fault: the pair is redone"

Binding = tuple[str | None, int, int, str]


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
"""(host ip or None, host port, container port, protocol), as `servers.docker.plan`."""
Identity = dict[str, Any]
"""An external server's identity: `models` (ids, `id (root)` when the root differs) and,
when it serves `/version`, `version`."""


@runtime_checkable
class Owner(Protocol):
    """A server that can tell whether a local process is its own (`ProcessServer`)."""

    def owns(self, pid: int) -> bool: ...


@runtime_checkable
class Containers(Protocol):
    """A server run as a container (`DockerServer`): what its engine says about it."""

    def server_attrs(self) -> Mapping[str, Any] | None: ...

    def published(self) -> list[Binding]: ...


@dataclass(frozen=True)
class Listener:
    """A local TCP listener: its process (None when the host hides it), address, port."""

    pid: int | None
    ip: str
    port: int


def remote_engine(launch: LaunchModel) -> bool:
    """A container on a docker engine of another machine (`docker_host`, or a DOCKER_HOST
    that is not this machine's): its port is the box's (or an ssh tunnel's), and this
    machine's processes say nothing about it."""
    if not isinstance(launch, DockerLaunch):
        return False
    where = launch.docker_host or os.environ.get("DOCKER_HOST") or ""
    if not where or where.startswith(("unix://", "npipe://", "fd://")):
        return False
    return (urlparse(where).hostname or "") not in LOCAL_HOSTS


def busy_before_boot(launch: LaunchModel, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the port of a server about to start is not free (None: it is, or spec-ab does
    not start this server, or starts it on a remote docker engine — like the preflight)."""
    if not isinstance(launch, ProcessLaunch | DockerLaunch) or remote_engine(launch):
        return None
    host, port = launch.host, launch.port
    if not port_open(host, port, timeout=timeout_s):
        return None
    who = _who(port) if host in LOCAL_HOSTS else ""
    return (f"port {port} on {host} was busy before the server's boot{who}: another "
            "process holds the campaign's port, so whatever answers there is not this arm's "
            f"server ({LANE_FAULT}; free the port)")


def foreign_listener(launch: LaunchModel, server: object) -> str | None:
    """Why a listener that answers on a ready `process` server's address and port is not
    that server (None: each is, or none can be seen, or the server cannot tell its own
    processes)."""
    if (not isinstance(launch, ProcessLaunch) or launch.host not in LOCAL_HOSTS
            or not isinstance(server, Owner)):
        return None
    for pid in _answering_pids(launch.host, launch.port, listeners()):
        if not server.owns(pid):
            return _foreign(launch.port, pid)
    return None


def _foreign(port: int, pid: int) -> str:
    return (f"port {port} is answered by {describe(pid)}, not by the server spec-ab "
            f"started: another process took the campaign's port ({LANE_FAULT}; free the "
            "port)")


def container_mismatch(launch: DockerLaunch, server: object) -> str | None:
    """Why what answers on a ready `docker` server's port is not its container (None: it
    is; see the module docstring). Reads the engine and this machine's listeners."""
    if not isinstance(server, Containers):
        return None
    attrs = server.server_attrs()
    if attrs is None:
        return (f"the docker engine no longer knows the server container of port "
                f"{launch.port} ({LANE_FAULT})")
    remote = remote_engine(launch)
    found = listeners() if not remote and launch.host in LOCAL_HOSTS else []
    return judge_container(launch, attrs, server.published(), remote=remote,
                           found=found, inside=lambda pid: in_container(pid, attrs),
                           proxy=lambda pid: is_docker_proxy(pid, attrs))


def judge_container(launch: DockerLaunch, attrs: Mapping[str, Any], published: Sequence[Binding],
                    *, remote: bool, found: list[Listener], inside: Callable[[int], bool],
                    proxy: Callable[[int], bool]) -> str | None:
    """The decision of `container_mismatch`, on data: the container's `attrs` (docker
    inspect), the bindings spec-ab asked for, whether the engine is remote, the local
    listeners, and whether a pid is inside the container / docker's proxy for it."""
    name = str(attrs.get("Name") or attrs.get("Id") or "?").lstrip("/")
    state = attrs.get("State") or {}
    if not state.get("Running"):
        return (f"the docker engine reports the server container {name} "
                f"{state.get('Status') or 'not running'}, yet port {launch.port} answered "
                f"({LANE_FAULT})")
    reported = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for want in published:
        if not _bound(reported, want):
            ip, hport, cport, proto = want
            return (f"the docker engine reports container {name} without the binding "
                    f"{ip + ':' if ip else ''}{hport}->{cport}/{proto} spec-ab asked for "
                    f"(it reports {_bindings_text(reported)}): what answers on port "
                    f"{launch.port} is not this container ({LANE_FAULT})")
    local = launch.host in LOCAL_HOSTS and not remote
    if local and launch.network != "host" and launch.port not in {b[1] for b in published}:
        return (f"container {name} does not publish the campaign's port {launch.port} "
                f"(it reports {_bindings_text(reported)}): what answers there is not this "
                f"container ({LANE_FAULT})")
    if not local:
        return None  # a remote engine: what it reports is all there is to check
    for pid in _answering_pids(launch.host, launch.port, found):
        if not inside(pid) and not (launch.network != "host" and proxy(pid)):
            return (f"port {launch.port} is answered by {describe(pid)}, not by container "
                    f"{name} spec-ab started (nor docker's proxy for it): another process "
                    f"took the campaign's port ({LANE_FAULT}; free the port)")
    return None


def _bound(reported: Mapping[str, Any], want: Binding) -> bool:
    ip, hport, cport, proto = want
    for b in reported.get(f"{cport}/{proto}") or []:
        if str(b.get("HostPort")) == str(hport) and (
                ip is None or b.get("HostIp") in (ip, "", None)):
            return True
    return False


def _bindings_text(reported: Mapping[str, Any]) -> str:
    out = [f"{b.get('HostIp') or ''}:{b.get('HostPort')}->{key}"
           for key, bs in sorted(reported.items()) for b in bs or []]
    return ", ".join(out) or "no published port"


def in_container(pid: int, attrs: Mapping[str, Any]) -> bool:
    """Whether a local process is the container's init (`State.Pid`), a descendant of it,
    or in its pid namespace (a `docker exec`)."""
    init = int((attrs.get("State") or {}).get("Pid") or 0)
    if init <= 0:
        return False
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        if proc.pid == init or any(p.pid == init for p in proc.parents()):
            return True
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid") == os.readlink(f"/proc/{init}/ns/pid")
    return False


def is_docker_proxy(pid: int, attrs: Mapping[str, Any]) -> bool:
    """Whether a local process is docker's userland proxy for this container (its
    `-container-ip` one of the container's addresses, when its command line says)."""
    try:
        proc = psutil.Process(pid)
        if proc.name() != "docker-proxy":
            return False
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    nets = ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).values()
    ips = {ip for n in nets for ip in (n.get("IPAddress"), n.get("GlobalIPv6Address")) if ip}
    if "-container-ip" in cmd[:-1] and ips:
        return cmd[cmd.index("-container-ip") + 1] in ips
    return True


def fetch_identity(client: httpx.Client, base_url: str, models_path: str,
                   timeout_s: float = 5.0) -> Identity | None:
    """An OpenAI-compatible server's identity (`Identity`), None when it cannot be read
    (a transport error, an answer that is not a model list)."""
    try:
        r = client.get(base_url + models_path, timeout=timeout_s)
        v = client.get(base_url + "/version", timeout=timeout_s)
    except httpx.HTTPError:
        return None
    identity: Identity = {}
    if r.status_code == 200:
        try:
            identity["models"] = sorted(
                str(m.get("id")) + (f" ({m['root']})" if m.get("root") not in (None, m.get("id"))
                                    else "")
                for m in r.json().get("data", []))
        except (ValueError, AttributeError, TypeError):
            return None
    if v.status_code == 200:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            version = v.json().get("version")
            if isinstance(version, str | int | float):
                identity["version"] = str(version)
    return identity or None


def identity_change(arm: str, recorded: Identity | None, now: Identity | None) -> str | None:
    """Why an external server is not the one the run recorded for this arm (None: it is,
    or either identity is unknown)."""
    if recorded is None or now is None or recorded == now:
        return None
    return (f"{arm}: the external server is not the one this run recorded for the arm: "
            f"it was {identity_text(recorded)}, it is now {identity_text(now)} (another "
            f"server answers on its URL; {LANE_FAULT} — restore the server)")


def identity_text(identity: Identity) -> str:
    models = identity.get("models") or []
    text = "model " + (", ".join(str(m) for m in models) if models else "(none listed)")
    return text + (f", version {identity['version']}" if identity.get("version") else "")


def recorded_identity(events: list[dict[str, Any]], arm: str) -> Identity | None:
    """The identity journaled the first time this arm's server was ready (`server_ready`
    with `identity`), as `--resume` reads it; None when none was."""
    arms = {e.get("slot"): e.get("arm") for e in events if e.get("event") == "slot_start"}
    for e in events:
        if (e.get("event") == "server_ready" and isinstance(e.get("identity"), dict)
                and arms.get(e.get("slot")) == arm):
            found: Identity = e["identity"]
            return found
    return None


def listeners() -> list[Listener]:
    """This machine's TCP listeners ([] when none can be seen)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return [Listener(c.pid, c.laddr.ip, c.laddr.port) for c in conns
            if c.status == psutil.CONN_LISTEN and c.laddr]


def listener_pids(port: int) -> list[int]:
    """The local processes listening on a TCP port ([] when none can be seen)."""
    return sorted({x.pid for x in listeners() if x.port == port and x.pid is not None})


def _answering_pids(host: str, port: int, found: list[Listener]) -> list[int]:
    """The visible processes a connection to host:port reaches: the listeners on that
    very address, else those on the wildcard address of its family."""
    target = _normal(host)
    on_port = [x for x in found if x.port == port]
    exact = [x for x in on_port if _normal(x.ip) == target]
    v6 = ":" in target
    wild = exact or [x for x in on_port if x.ip == "::" or (x.ip == "0.0.0.0" and not v6)]
    return sorted({x.pid for x in wild if x.pid is not None})


def _normal(ip: str) -> str:
    if ip in ("localhost", "0.0.0.0"):
        return "127.0.0.1"
    if ip == "::":
        return "::1"
    with contextlib.suppress(ValueError):
        addr = ipaddress.ip_address(ip)
        mapped = getattr(addr, "ipv4_mapped", None)
        return str(mapped or addr)
    return ip


def describe(pid: int) -> str:
    """`pid N (command line)`, shortened."""
    cmd = ""
    with contextlib.suppress(psutil.Error):
        cmd = " ".join(psutil.Process(pid).cmdline())
    cmd = cmd if len(cmd) <= 80 else cmd[:77] + "..."
    return f"pid {pid}" + (f" ({cmd})" if cmd else "")


def _who(port: int) -> str:
    pids = listener_pids(port)
    return f" ({describe(pids[0])} listens on it)" if pids else ""
