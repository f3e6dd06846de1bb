"""The docker part of the preflight: engines reachable, images and networks present, a GPU
runtime where GPUs are asked for. Starts nothing. One part of the preflight of a run
(`campaign.run.checks.preflight`), which calls it for a docker lane."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import docker
from docker.errors import DockerException, ImageNotFound, NotFound

from campaign.campaignfile import DockerLaunch, ExtraContainer
from campaign.servers.docker.daemon import (
    ClientFactory,
    default_client,
    has_gpu_runtime,
    short_error,
)
from campaign.servers.docker.launchplan import docker_hosts


def preflight(
    launch: DockerLaunch,
    *,
    client_factory: ClientFactory = default_client,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str]:
    """Problems that would stop this launch, each with what to do. Starts nothing.

    Bind-mount sources are files of the campaign: `campaign.run.checks.preflight` checks them with
    every other file (`spec.files`).
    """
    problems: list[str] = []
    containers: list[tuple[str, DockerLaunch | ExtraContainer]] = [
        *((f"extra container '{e.name}'", e) for e in launch.extra_containers),
        ("server", launch),
    ]
    clients: dict[str | None, docker.DockerClient | None] = {}
    for host in docker_hosts(launch):
        where = host or os.environ.get("DOCKER_HOST") or "the local docker engine"
        try:
            reached = client_factory(host)
            reached.ping()
            clients[host] = reached
        except (DockerException, OSError) as exc:
            clients[host] = None
            hint = ("start dockerd (scripts/start-dockerd) / check DOCKER_HOST" if host is None
                    else f"check that `docker -H {host} info` works from this machine")
            problems.append(f"cannot reach docker on {where}: {short_error(exc)} → {hint}")
    gpu_checked: set[str | None] = set()
    for what, c in containers:
        client = clients.get(c.docker_host)
        on = f" on {c.docker_host}" if c.docker_host else ""
        if client is None:
            continue
        if not launch.pull:
            try:
                client.images.get(c.image)
            except ImageNotFound:
                problems.append(
                    f"{what}: image {c.image} is not present{on} → docker "
                    f"{'-H ' + c.docker_host + ' ' if c.docker_host else ''}pull {c.image} "
                    "(or scripts/build-sim-image for spec-ab-sim), or set `pull: true`"
                )
            except DockerException as exc:
                problems.append(f"{what}: cannot inspect image {c.image}{on}: {short_error(exc)}")
        if c.network and c.network not in ("host", "bridge", "none"):
            try:
                client.networks.get(c.network)
            except NotFound:
                problems.append(f"{what}: docker network {c.network} does not exist{on} → "
                                f"docker network create {c.network}")
            except DockerException as exc:
                problems.append(f"{what}: cannot inspect network {c.network}: {short_error(exc)}")
        if c.gpus is not None and c.docker_host not in gpu_checked:
            gpu_checked.add(c.docker_host)
            if not has_gpu_runtime(client, local=c.docker_host is None, which=which):
                problems.append(
                    f"{what}: GPUs requested but the docker engine{on} has no NVIDIA "
                    "runtime → install nvidia-container-toolkit and run "
                    "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd"
                )
    return problems


__all__ = ["preflight"]
