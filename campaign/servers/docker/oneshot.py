"""A one-shot container: run a Python script inside an image, offline, and read what it
prints (what `docker run --rm --pull never --network none --entrypoint python3 IMAGE -c
SCRIPT` does). `spec-ab check` reads vLLM's flags this way, without booting a server.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound

from campaign.markers import LABEL_ROLE
from campaign.servers.docker.daemon import ENGINE_ERRORS, short_error

PROBE_ROLE = "engine-probe"


class OneShotError(Exception):
    """The script could not run in the image, or failed there; the message says why."""


@dataclass(frozen=True)
class ImageInfo:
    """What an image says of itself: its id (content-addressed) and its entrypoint."""

    image_id: str
    entrypoint: list[str]
    command: list[str]


def image_info(client: docker.DockerClient, image: str) -> ImageInfo:
    """The image's id, entrypoint and command. Raises OneShotError (absent image, engine)."""
    try:
        img = client.images.get(image)
    except ImageNotFound:
        raise OneShotError(f"image {image} is not present") from None
    except ENGINE_ERRORS as exc:
        raise OneShotError(f"cannot inspect image {image}: {short_error(exc)}") from None
    config: dict[str, Any] = img.attrs.get("Config") or {}
    return ImageInfo(image_id=str(img.id), entrypoint=list(config.get("Entrypoint") or []),
                     command=list(config.get("Cmd") or []))


def run_python(client: docker.DockerClient, image: str, script: str, *,
               env: dict[str, str] | None = None, timeout_s: float = 300) -> str:
    """Run `script` with the image's `python3`, no network, nothing pulled; its stdout.
    The container is removed whatever happens. Raises OneShotError with the reason (the
    script's last stderr line when it fails)."""
    try:
        container = client.containers.create(
            image, entrypoint=["python3"], command=["-c", script], environment=env or {},
            network_mode="none", labels={LABEL_ROLE: PROBE_ROLE}, detach=True)
    except ImageNotFound:
        raise OneShotError(f"image {image} is not present (nothing is pulled)") from None
    except ENGINE_ERRORS as exc:
        raise OneShotError(f"cannot create a container of {image}: {short_error(exc)}") from None
    try:
        container.start()
        try:
            status = container.wait(timeout=timeout_s)
        except ENGINE_ERRORS:
            raise OneShotError(f"python3 in {image} did not finish in {timeout_s:.0f} s") from None
        code = int(status.get("StatusCode", -1)) if isinstance(status, dict) else -1
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        if code != 0:
            err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
            last = ([x for x in err.splitlines() if x.strip()] or ["no output"])[-1]
            raise OneShotError(f"python3 in {image} exited with code {code}: {last.strip()}")
        return str(stdout)
    except DockerException as exc:
        raise OneShotError(f"running python3 in {image}: {short_error(exc)}") from None
    finally:
        with contextlib.suppress(*ENGINE_ERRORS):
            container.remove(force=True)


__all__ = ["PROBE_ROLE", "ImageInfo", "OneShotError", "image_info", "run_python"]
