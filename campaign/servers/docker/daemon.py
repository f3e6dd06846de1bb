"""Talking to docker engines: the client per docker host, and what an engine says about
images, containers and GPUs (facts for the manifest and the preflight)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import docker
import requests
from docker.errors import DockerException, ImageNotFound
from docker.transport import sshconn

from campaign.servers.docker.launchplan import MountPlan
from campaign.textfiles import sha256_file

ClientFactory = Callable[[str | None], docker.DockerClient]
"""docker host (`ssh://spark2`, `tcp://…`; None = the local engine / DOCKER_HOST) → client."""


ENGINE_ERRORS: tuple[type[BaseException], ...] = (
    DockerException, requests.exceptions.RequestException, OSError)
"""What a call to a docker engine can raise when the engine or its transport goes away: the
SDK's own errors, and the HTTP layer's (an ssh transport that died mid-call surfaces as
`requests.ConnectionError`, not as a DockerException)."""

SSH_CONNECT_TIMEOUT_S = 15
_ssh_stderr: dict[str, tuple[IO[bytes], subprocess.Popen[bytes]]] = {}
"""ssh host → (stderr file, process) of the latest ssh started for it (see _SystemSSHSocket)."""


class _SystemSSHSocket(sshconn.SSHSocket):  # type: ignore[misc]
    """The docker SDK's socket over the system `ssh`, with fixes for unattended runs:

    - no `-p 22`: the SDK turns `ssh://spark2` into `ssh://spark2:22`, and `-p 22` beats the
      `Port` of the host's block in ~/.ssh/config (so `:22` itself is never passed);
    - `BatchMode=yes` and a `ConnectTimeout`: never a password prompt or an endless wait;
    - ssh's stderr goes to a file, not the terminal: `default_client` quotes it in one line;
    - `close()` of a dead ssh raises no BrokenPipeError (printed at exit) and reaps ssh.
    """

    def connect(self, *args_: Any, **kwargs: Any) -> None:  # type: ignore[override]
        args = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"]
        if self.user:
            args += ["-l", self.user]
        if self.port and str(self.port) != "22":
            args += ["-p", str(self.port)]
        args += ["--", self.host, "docker system dial-stdio"]
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_LIBRARY_PATH", "SSL_CERT_FILE")}
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open: read on failure)
        self.proc = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stdin=subprocess.PIPE, stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        _ssh_stderr[str(self.host)] = (stderr, self.proc)

    def close(self) -> None:
        """The SDK's close, minus a BrokenPipeError traceback when ssh already died (the
        box went away), and reaping the ssh process."""
        with contextlib.suppress(OSError):
            super().close()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)


def ssh_error(docker_host: str) -> str | None:
    """The last thing the latest ssh to this host said on stderr, without `ssh: `."""
    found = _ssh_stderr.get(urllib.parse.urlparse(docker_host).hostname or "")
    if found is None:
        return None
    stderr, proc = found
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
    stderr.seek(0)
    lines = [x.strip() for x in stderr.read().decode(errors="replace").splitlines() if x.strip()]
    return re.sub(r"^ssh: ", "", lines[-1]) if lines else None


def default_client(docker_host: str | None) -> docker.DockerClient:
    """A client for one docker host; ssh:// uses the system ssh (keys, ~/.ssh/config).

    A failure to reach an ssh:// host is a DockerException whose message is ssh's own
    reason (e.g. "connect to host 10.0.0.2 port 22: Connection refused"), in one line.
    """
    if docker_host is None:
        return docker.from_env()
    if not docker_host.startswith("ssh://"):
        return docker.DockerClient(base_url=docker_host)
    sshconn.SSHSocket = _SystemSSHSocket  # type: ignore[misc]  # SSHConnection.connect's
    try:
        return docker.DockerClient(base_url=docker_host, use_ssh_client=True)
    except DockerException as exc:
        reason = ssh_error(docker_host)
        raise DockerException(reason or short_error(exc)) from None


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


def engine_facts(client: docker.DockerClient | None) -> dict[str, Any]:
    """One docker endpoint's engine: its version, API version, OS/arch and kernel."""
    if client is None:
        return {"version": None, "error": "docker engine unreachable"}
    try:
        v = client.version()
    except ENGINE_ERRORS as exc:
        return {"version": None, "error": short_error(exc)}
    return {"version": v.get("Version"), "api_version": v.get("ApiVersion"),
            "os": v.get("Os"), "arch": v.get("Arch"), "kernel": v.get("KernelVersion")}


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
    "engine_facts",
    "has_gpu_runtime",
    "image_facts",
    "mount_facts",
    "short_error",
    "ssh_error",
]
