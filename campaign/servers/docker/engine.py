"""Talking to docker engines: the client per docker host, and what an engine says about
images, containers and GPUs (facts for the manifest and the preflight)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound

from campaign.servers.docker.plan import MountPlan
from campaign.textfiles import sha256_file

ClientFactory = Callable[[str | None], docker.DockerClient]
"""docker host (`ssh://spark2`, `tcp://…`; None = the local engine / DOCKER_HOST) → client."""


def default_client(docker_host: str | None) -> docker.DockerClient:
    """A client for one docker host; ssh:// uses the system ssh (keys, ~/.ssh/config)."""
    if docker_host is None:
        return docker.from_env()
    return docker.DockerClient(
        base_url=docker_host, use_ssh_client=docker_host.startswith("ssh://")
    )


def describe_state(state: dict[str, Any]) -> str | None:
    """A container's `State` → how it ended, in words; None while it runs."""
    status = state.get("Status", "")
    if status in ("running", "restarting", "paused"):
        return None
    code = state.get("ExitCode")
    if state.get("OOMKilled"):
        return f"was OOM-killed (out of memory; exit code {code})"
    if status == "created":
        return "was created but never started"
    error = state.get("Error") or ""
    return f"exited with code {code}" + (f" ({error})" if error else "")


def mount_facts(mounts: Iterable[MountPlan]) -> list[dict[str, Any]]:
    """Every bind mount, with the sha256 of each bind-mounted host FILE (the patches)."""
    out = []
    for m in mounts:
        item: dict[str, Any] = {"source": m.source, "target": m.target, "kind": m.kind,
                                "read_only": m.read_only}
        if m.is_file:
            try:
                item["sha256"] = sha256_file(Path(m.source))
            except OSError as exc:
                item["sha256"] = None
                item["error"] = str(exc)
        out.append(item)
    return out


def image_facts(client: docker.DockerClient | None, image: str) -> dict[str, Any]:
    """The image's id and registry digests (RepoDigests: empty for a local build)."""
    if client is None:
        return {"image_id": None, "repo_digests": [], "error": "docker engine unreachable"}
    try:
        img = client.images.get(image)
    except ImageNotFound:
        return {"image_id": None, "repo_digests": [], "error": "image not present"}
    except DockerException as exc:
        return {"image_id": None, "repo_digests": [], "error": str(exc)}
    return {"image_id": img.id, "repo_digests": list(img.attrs.get("RepoDigests") or [])}


def has_gpu_runtime(
    client: docker.DockerClient, *, local: bool, which: Callable[[str], str | None]
) -> bool:
    """Can this engine run `--gpus` containers (an NVIDIA runtime, CDI or the hook)?"""
    try:
        info = client.info()
    except DockerException:
        return False
    runtimes = info.get("Runtimes") or {}
    if "nvidia" in runtimes or info.get("DefaultRuntime") == "nvidia":
        return True
    if info.get("CDISpecDirs") and local and which("nvidia-ctk"):
        return True
    # `--gpus` works through the toolkit's hook even without a registered runtime.
    return local and which("nvidia-container-runtime-hook") is not None


def short_error(exc: BaseException) -> str:
    """The first line of an error, at most 200 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


__all__ = [
    "ClientFactory",
    "default_client",
    "describe_state",
    "has_gpu_runtime",
    "image_facts",
    "mount_facts",
    "short_error",
]
