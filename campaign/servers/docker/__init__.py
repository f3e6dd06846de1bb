"""`docker` backend: an arm is one server container, optionally preceded by extra
containers, through the docker SDK. One job per module:

- `launchplan`: the pure launch plan (volumes, ports, GPUs, labels, `docker run` lines);
- `daemon`: clients per docker host and what an engine says (images, mounts, GPU runtime);
- `logs`: following a container's output into the arm's log file;
- `backend`: `DockerServer`, which carries a plan out;
- `preflight`: what would stop a launch, checked without starting anything;
- `oneshot`: a one-shot container that runs a script inside an image, offline.

The names other modules use are re-exported here.
"""

from __future__ import annotations

from campaign.servers.docker.backend import DockerServer
from campaign.servers.docker.daemon import (
    ClientFactory,
    default_client,
    describe_state,
    engine_facts,
    image_facts,
    mount_facts,
)
from campaign.servers.docker.launchplan import (
    ContainerPlan,
    MountPlan,
    create_kwargs,
    docker_hosts,
    docker_run_line,
    parse_port,
    plan_containers,
    resolve_volume,
    runner_labels,
)
from campaign.servers.docker.logs import LogFollower, extra_log_path
from campaign.servers.docker.preflight import preflight

__all__ = [
    "ClientFactory",
    "ContainerPlan",
    "DockerServer",
    "LogFollower",
    "MountPlan",
    "create_kwargs",
    "default_client",
    "describe_state",
    "docker_hosts",
    "docker_run_line",
    "engine_facts",
    "extra_log_path",
    "image_facts",
    "mount_facts",
    "parse_port",
    "plan_containers",
    "preflight",
    "resolve_volume",
    "runner_labels",
]
