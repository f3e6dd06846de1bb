"""The launch plan of a docker arm, pure: no engine is asked anything here.

The merged `DockerLaunch` of an arm is turned into plain `ContainerPlan`s (one per
container, extras first): every decision about volumes, ports, GPUs and labels is made
here, once, so starting the containers, the `docker run` lines a person can paste and the
manifest facts cannot disagree, and unit tests check plans without an engine.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
from docker.types import DeviceRequest, Mount, Ulimit

from campaign import secrets
from campaign.campaignfile import DockerLaunch, ExtraContainer, ReadyCheck, Volume, parse_volume
from campaign.markers import (
    LABEL_ARM,
    LABEL_HOST,
    LABEL_LAUNCH,
    LABEL_PAIR,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SCOPE,
    scope,
)
from campaign.servers.protocol import ArmContext

SERVER_ROLE = "server"


@dataclass(frozen=True)
class MountPlan:
    """One volume as it will be mounted: a bind (host path) or a named volume."""

    source: str
    """Absolute host path (bind) or volume name."""
    target: str
    read_only: bool
    kind: Literal["bind", "volume"]
    is_file: bool = False
    """A bind-mounted regular file (hashed into the manifest)."""

    def flag(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ContainerPlan:
    """Everything needed to create one container (or print its `docker run` line)."""

    role: str
    """`server`, or the extra container's name."""
    name: str
    image: str
    entrypoint: list[str] | None
    command: list[str]
    env: dict[str, str]
    mounts: list[MountPlan]
    network: str | None
    ports: list[tuple[str | None, int, int, str]]
    """(host ip or None, host port, container port, protocol)."""
    gpus: str | list[int] | None
    ipc: str | None
    shm_size: str | None
    ulimits: dict[str, int]
    docker_host: str | None
    labels: dict[str, str]
    ready: ReadyCheck | None = None
    stop_timeout_s: float = 60.0


def resolve_volume(vol: Volume, base_dir: Path, *, remote: bool) -> MountPlan:
    """A parsed volume → how it is mounted.

    Relative host paths resolve against the campaign file's folder. Without `:ro`/`:rw`,
    a bind-mounted FILE is read-only (a patched file must not be changed by the server)
    and a directory or named volume is read-write (caches). On a remote docker host the
    source cannot be inspected from here: it is taken as written and read-write unless it
    says `:ro`.
    """
    if vol.is_named:
        ro = bool(vol.read_only)
        return MountPlan(vol.source, vol.target, ro, "volume")
    if remote:
        return MountPlan(vol.source, vol.target, bool(vol.read_only), "bind")
    src = Path(vol.source).expanduser()
    path = src if src.is_absolute() else base_dir / src
    path = Path(os.path.normpath(path.absolute()))
    is_file = path.is_file()
    ro = is_file if vol.read_only is None else vol.read_only
    return MountPlan(str(path), vol.target, ro, "bind", is_file=is_file)


def parse_port(text: str, default_ip: str | None) -> tuple[str | None, int, int, str]:
    """`[ip:]host:container[/proto]` → (ip, host port, container port, proto)."""
    proto = "tcp"
    if "/" in text:
        text, proto = text.split("/", 1)
    parts = text.split(":")
    ip = parts[0] if len(parts) == 3 else default_ip
    return ip, int(parts[-2]), int(parts[-1]), proto


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def safe_name(text: str) -> str:
    """`text` as a container-name / file-name piece."""
    return re.sub(r"[^a-zA-Z0-9_.]+", "-", text).strip("-.") or "x"


def runner_labels(pid: int | None = None) -> dict[str, str]:
    """Labels that let `spec-ab clean` tell whether the run that started a container lives:
    the runner's pid, its start time (pids are reused) and the host it runs on; its
    leftover scope when it has one (`campaign.markers.SCOPE_ENV`)."""
    pid = os.getpid() if pid is None else pid
    try:
        started = f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        started = ""
    labels = {LABEL_PID: str(pid), LABEL_PID_START: started, LABEL_HOST: socket.gethostname()}
    if scope():
        labels[LABEL_SCOPE] = scope()
    return labels


def plan_containers(
    launch: DockerLaunch, ctx: ArmContext, *, launch_id: str = "", runner: dict[str, str]
    | None = None
) -> list[ContainerPlan]:
    """The containers of one arm, in start order: extra containers, then the server."""
    labels = {
        **ctx.labels,
        LABEL_RUN: ctx.run_id,
        LABEL_PAIR: str(ctx.pair),
        LABEL_ARM: ctx.arm,
        **(runner if runner is not None else runner_labels()),
    }
    if launch_id:
        labels[LABEL_LAUNCH] = launch_id
    stem = safe_name(f"specab-{ctx.run_id}-p{ctx.pair}-{ctx.arm}")
    plans = [
        _plan(extra, extra.name, f"{stem}-{safe_name(extra.name)}", ctx, labels, [],
              launch.stop_timeout_s, extra.ready)
        for extra in launch.extra_containers
    ]
    default_ip = "127.0.0.1" if _is_loopback(launch.host) else None
    ports = [parse_port(p, default_ip) for p in launch.ports]
    if launch.network != "host" and not ports:
        # Nothing published and no host network: the runner could not reach the server.
        # Publish its port as the same port inside, the usual vLLM `--port` layout.
        ports = [(default_ip, launch.port, launch.port, "tcp")]
    plans.append(_plan(launch, SERVER_ROLE, stem, ctx, labels, ports,
                       launch.stop_timeout_s, None))
    return plans


def _plan(
    c: DockerLaunch | ExtraContainer,
    role: str,
    name: str,
    ctx: ArmContext,
    labels: dict[str, str],
    ports: list[tuple[str | None, int, int, str]],
    stop_timeout_s: float,
    ready: ReadyCheck | None,
) -> ContainerPlan:
    remote = c.docker_host is not None
    mounts = [resolve_volume(parse_volume(v), ctx.campaign_dir, remote=remote)
              for v in c.volumes]
    return ContainerPlan(
        role=role, name=name, image=c.image, entrypoint=c.entrypoint, command=c.argv,
        env=dict(c.env), mounts=mounts, network=c.network, ports=ports, gpus=c.gpus,
        ipc=c.ipc, shm_size=c.shm_size, ulimits=dict(c.ulimits), docker_host=c.docker_host,
        labels={**labels, LABEL_ROLE: role}, ready=ready, stop_timeout_s=stop_timeout_s,
    )


def docker_hosts(launch: DockerLaunch) -> list[str | None]:
    """Every docker host an arm uses (None = local), without repeats, in start order."""
    out: list[str | None] = []
    for h in [*(e.docker_host for e in launch.extra_containers), launch.docker_host]:
        if h not in out:
            out.append(h)
    return out


def docker_run_line(plan: ContainerPlan) -> str:
    """The `docker run` command a person could paste to do the same launch by hand."""
    words: list[str] = ["docker"]
    if plan.docker_host:
        words += ["-H", plan.docker_host]
    words += ["run", "-d", "--name", plan.name]
    if plan.network:
        words += ["--network", plan.network]
    for ip, host_port, container_port, proto in plan.ports:
        spec = f"{host_port}:{container_port}" + ("" if proto == "tcp" else f"/{proto}")
        words += ["-p", f"{ip}:{spec}" if ip else spec]
    if plan.gpus == "all":
        words += ["--gpus", "all"]
    elif isinstance(plan.gpus, list):
        # The CLI parses --gpus as CSV: quotes keep "device=0,1" one field.
        words += ["--gpus", '"device=' + ",".join(str(g) for g in plan.gpus) + '"']
    if plan.ipc:
        words += ["--ipc", plan.ipc]
    if plan.shm_size:
        words += ["--shm-size", plan.shm_size]
    for limit, amount in plan.ulimits.items():
        words += ["--ulimit", f"{limit}={amount}"]
    for m in plan.mounts:
        words += ["-v", m.flag()]
    for key, value in plan.env.items():
        # A secret or a `${NAME}` reference: taken from the environment of whoever pastes it.
        if secrets.is_secret(key) or secrets.reference(value) is not None:
            words += ["-e", key]
        else:
            words += ["-e", f"{key}={value}"]
    command = list(plan.command)
    if plan.entrypoint is not None:
        # --entrypoint takes one word; the rest of a list entrypoint goes before the command.
        words += ["--entrypoint", plan.entrypoint[0] if plan.entrypoint else ""]
        command = [*plan.entrypoint[1:], *command]
    words.append(plan.image)
    words += command
    return secrets.shell_join(words)


def create_kwargs(plan: ContainerPlan) -> dict[str, Any]:
    """The docker SDK's `containers.create` arguments for a plan."""
    kwargs: dict[str, Any] = {
        "name": plan.name,
        "command": secrets.expand_argv(plan.command) or None,  # `${NAME}` read only here
        "environment": secrets.expand(plan.env),
        "labels": dict(plan.labels),
        "detach": True,
        "mounts": [
            Mount(target=m.target, source=m.source, type=m.kind, read_only=m.read_only)
            for m in plan.mounts
        ],
    }
    if plan.entrypoint is not None:
        kwargs["entrypoint"] = secrets.expand_argv(plan.entrypoint)
    if plan.network == "host":
        kwargs["network_mode"] = "host"
    elif plan.network:
        kwargs["network"] = plan.network
    if plan.ports:
        ports: dict[str, list[Any]] = {}
        for ip, host_port, container_port, proto in plan.ports:
            ports.setdefault(f"{container_port}/{proto}", []).append(
                (ip, host_port) if ip else host_port
            )
        kwargs["ports"] = ports
    if plan.gpus == "all":
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif isinstance(plan.gpus, list):
        kwargs["device_requests"] = [
            DeviceRequest(device_ids=[str(g) for g in plan.gpus], capabilities=[["gpu"]])
        ]
    if plan.ipc:
        kwargs["ipc_mode"] = plan.ipc
    if plan.shm_size:
        kwargs["shm_size"] = plan.shm_size
    if plan.ulimits:
        kwargs["ulimits"] = [Ulimit(name=k, soft=v, hard=v) for k, v in plan.ulimits.items()]
    return kwargs


__all__ = [
    "SERVER_ROLE",
    "ContainerPlan",
    "MountPlan",
    "create_kwargs",
    "docker_hosts",
    "docker_run_line",
    "parse_port",
    "plan_containers",
    "resolve_volume",
    "runner_labels",
    "safe_name",
]
