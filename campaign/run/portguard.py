"""The port of a server spec-ab starts is that server's, or the slot measures nothing.

Another server can take a campaign's port between two slots (vLLM binds its API port only
once its model is loaded, so the port is free for minutes of every boot). Readiness then
succeeds against the squatter at once and both arms of a pair would be measured on it. Two
checks make that a lane fault (the pair is invalid and redone, `runner`), never a
measurement:

- `busy_before_boot`: before a `process` or `docker` server starts, nothing may accept a
  connection on its host and port;
- `foreign_listener`: once a `process` server is ready, the local process that listens on
  its port belongs to the server's own process group (`ProcessServer.owns`). A listener
  the host does not let us see (another user's, a remote host) is not judged.

An `external` server is not started by spec-ab: its port is busy by design. A `docker`
server's port is published by the engine (its proxy, not the container, listens on the
host), so only the check before boot applies to it.
"""

from __future__ import annotations

import contextlib
from typing import Protocol, runtime_checkable

import psutil

from campaign.campaignfile import DockerLaunch, ProcessLaunch
from campaign.campaignfile.launch import LaunchModel
from campaign.run.readiness import port_open

CONNECT_TIMEOUT_S = 1.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "::"}


@runtime_checkable
class Owner(Protocol):
    """A server that can tell whether a local process is its own (`ProcessServer`)."""

    def owns(self, pid: int) -> bool: ...


def busy_before_boot(launch: LaunchModel, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the port of a server about to start is not free (None: it is, or spec-ab does
    not start this server)."""
    if not isinstance(launch, ProcessLaunch | DockerLaunch):
        return None
    host, port = launch.host, launch.port
    if not port_open(host, port, timeout=timeout_s):
        return None
    who = _who(port) if host in LOCAL_HOSTS else ""
    return (f"port {port} on {host} was busy before the server's boot{who}: another "
            "process holds the campaign's port, so whatever answers there is not this arm's "
            "server (a lane fault: the pair is redone; free the port)")


def foreign_listener(launch: LaunchModel, server: object) -> str | None:
    """Why the listener on a ready `process` server's port is not that server (None: it
    is, or it cannot be seen, or the server cannot tell its own processes)."""
    if (not isinstance(launch, ProcessLaunch) or launch.host not in LOCAL_HOSTS
            or not isinstance(server, Owner)):
        return None
    pids = listener_pids(launch.port)
    if not pids:
        return None
    if any(server.owns(pid) for pid in pids):
        return None
    return (f"port {launch.port} is answered by {describe(pids[0])}, not by the server "
            "spec-ab started: another process took the campaign's port (a lane fault: the "
            "pair is redone; free the port)")


def listener_pids(port: int) -> list[int]:
    """The local processes listening on a TCP port ([] when none can be seen)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted({c.pid for c in conns
                   if c.status == psutil.CONN_LISTEN and c.pid is not None
                   and c.laddr and c.laddr.port == port})


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
