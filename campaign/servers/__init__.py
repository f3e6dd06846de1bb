"""Server backends behind one small protocol (`protocol`: `Server`, `ArmContext`).

`make_server(spec, ctx)` picks the backend from the merged launch of an arm:
`process` (a command in its own process group), `external` (a URL that is already
running, with optional start/stop hooks) and `docker` (containers via the docker SDK).
"""

from __future__ import annotations

from campaign.campaignfile import DockerLaunch, ExternalLaunch, LaunchModel, ProcessLaunch
from campaign.servers.protocol import ArmContext, Server


def make_server(launch: LaunchModel, ctx: ArmContext) -> Server:
    """The backend object for one arm's merged launch."""
    if isinstance(launch, ProcessLaunch):
        from campaign.servers.process import ProcessServer

        return ProcessServer(launch, ctx)
    if isinstance(launch, ExternalLaunch):
        from campaign.servers.external import ExternalServer

        return ExternalServer(launch, ctx)
    if isinstance(launch, DockerLaunch):
        from campaign.servers.docker import DockerServer

        return DockerServer(launch, ctx)
    raise TypeError(f"unknown launch {type(launch).__name__}")


__all__ = ["ArmContext", "Server", "make_server"]
