"""`docker` backend: an arm is one server container, optionally preceded by extra
containers (a Ray head and a worker on two docker hosts for the GB10 pair), through the
docker SDK.

Why it is shaped like this:

- The merged `DockerLaunch` of an arm is first turned into plain `ContainerPlan`s (one per
  container, extras first): every decision about volumes, ports, GPUs and labels is made
  there, once, so `start()`, `describe()` (the `docker run` lines a person can paste) and
  `facts()` cannot disagree, and unit tests check plans without an engine.
- Everything started carries the labels `spec-ab.run`, `spec-ab.pair`, `spec-ab.arm`, the
  runner's pid (+ its start time and host) and a per-arm launch id. `stop()` removes what it
  created *and* anything carrying its launch id, so a Ctrl-C that lands between "create"
  and its reply still leaves nothing behind; `campaign.cleanup` uses the pid labels to tell
  leftovers of dead runs from containers of a live one.
- Logs are followed by a thread from the moment a container starts (the engine keeps
  output from the first second), written to the arm's log file as they arrive, so a runner
  that dies keeps them and a boot failure can quote the last lines.
- A slow edge (the docker client per docker host, the clock, sleeping) is passed in.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import docker
import psutil
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.transport import sshconn
from docker.types import DeviceRequest, Mount, Ulimit

from campaign.errors import ServerError
from campaign.servers.base import ArmContext
from campaign.spec import DockerLaunch, ExtraContainer, ReadyCheck, Volume, parse_volume
from campaign.textfiles import sha256_file, tail_lines

LABEL_RUN = "spec-ab.run"
LABEL_PAIR = "spec-ab.pair"
LABEL_ARM = "spec-ab.arm"
LABEL_ROLE = "spec-ab.role"
LABEL_LAUNCH = "spec-ab.launch"
LABEL_PID = "spec-ab.pid"
LABEL_PID_START = "spec-ab.pid-start"
LABEL_HOST = "spec-ab.runner-host"
SERVER_ROLE = "server"
LOG_TAIL_ON_FAILURE = 25

ClientFactory = Callable[[str | None], docker.DockerClient]
"""docker host (`ssh://spark2`, `tcp://…`; None = the local engine / DOCKER_HOST) → client."""


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
        raise DockerException(reason or _short(exc)) from None


# --------------------------------------------------------------------------- plans


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


def _safe_name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.]+", "-", text).strip("-.") or "x"


def runner_labels(pid: int | None = None) -> dict[str, str]:
    """Labels that let `spec-ab clean` tell whether the run that started a container lives:
    the runner's pid, its start time (pids are reused) and the host it runs on."""
    pid = os.getpid() if pid is None else pid
    try:
        started = f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        started = ""
    return {LABEL_PID: str(pid), LABEL_PID_START: started, LABEL_HOST: socket.gethostname()}


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
    stem = _safe_name(f"specab-{ctx.run_id}-p{ctx.pair}-{ctx.arm}")
    plans = [
        _plan(extra, extra.name, f"{stem}-{_safe_name(extra.name)}", ctx, labels, [],
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


# --------------------------------------------------------------------------- describe


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
        words += ["-e", f"{key}={value}"]
    command = list(plan.command)
    if plan.entrypoint is not None:
        # --entrypoint takes one word; the rest of a list entrypoint goes before the command.
        words += ["--entrypoint", plan.entrypoint[0] if plan.entrypoint else ""]
        command = [*plan.entrypoint[1:], *command]
    words.append(plan.image)
    words += command
    return shlex.join(words)


# --------------------------------------------------------------------------- logs


class LogFollower:
    """Follows one container's output in a thread: appends it to a file as it arrives and
    keeps the last lines in memory (for log-line readiness and failure messages)."""

    def __init__(self, container: Container, path: Path, keep: int = 2000) -> None:
        self.container = container
        self.path = path
        self.lines: deque[str] = deque(maxlen=keep)
        self._partial = ""
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"logs-{container.name}", daemon=True
        )
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as out:
                stream: Iterator[bytes] = self.container.logs(
                    stream=True, follow=True, stdout=True, stderr=True
                )
                for chunk in stream:
                    out.write(chunk)
                    out.flush()
                    self._add(chunk.decode("utf-8", errors="replace"))
        except Exception as exc:  # the container was removed under us, the host went away
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._changed:
                if self._partial:
                    self.lines.append(self._partial)
                    self._partial = ""
                self._changed.notify_all()

    def _add(self, text: str) -> None:
        with self._changed:
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()
            self.lines.extend(p.rstrip("\r") for p in parts)
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def search(self, pattern: re.Pattern[str]) -> bool:
        with self._changed:
            return any(pattern.search(line) for line in [*self.lines, self._partial])

    def wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def finish(self, timeout: float = 3.0) -> None:
        """Wait for the stream to end (the container exited or was removed)."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def tail(self, n: int) -> list[str]:
        with self._changed:
            lines = [*self.lines, *([self._partial] if self._partial else [])]
        return lines[-n:]


def extra_log_path(log_path: Path, role: str) -> Path:
    """`server.log` → `server.<role>.log` next to it (an extra container's own log)."""
    return log_path.with_name(f"{log_path.stem}.{_safe_name(role)}{log_path.suffix or '.log'}")


# --------------------------------------------------------------------------- the backend


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


@dataclass
class _Started:
    plan: ContainerPlan
    container: Container
    follower: LogFollower | None = None
    log_path: Path | None = None


class DockerServer:
    """One arm as containers (`backend: docker`). See the module docstring."""

    def __init__(
        self,
        launch: DockerLaunch,
        ctx: ArmContext,
        *,
        client_factory: ClientFactory = default_client,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_interval_s: float = 0.2,
    ) -> None:
        self.launch = launch
        self.ctx = ctx
        self.launch_id = uuid.uuid4().hex[:12]
        self.plans = plan_containers(launch, ctx, launch_id=self.launch_id)
        self._client_factory = client_factory
        self._clients: dict[str | None, docker.DockerClient] = {}
        self._clock = clock
        self._sleep = sleep
        self._poll = poll_interval_s
        self._started: list[_Started] = []
        self._ids: dict[str, str] = {}
        """Container name → id of everything created (kept after stop, for the manifest)."""
        self._touched: set[str | None] = set()
        """Docker hosts asked to create a container: the ones stop() sweeps by label."""
        self._stopped = False
        self._last_check = -1e9
        self._dead: str | None = None

    # ---------------------------------------------------------------- protocol

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    def start(self) -> None:
        """Start the extra containers in order, each until ready, then the server.

        Any failure or interrupt (Ctrl-C included) removes what was started, then raises.
        """
        self._stopped, self._dead, self._last_check = False, None, -1e9
        try:
            for plan in self.plans:
                started = self._start_one(plan)
                if plan.ready is not None:
                    self._wait_extra_ready(started)
        except BaseException as failure:
            try:
                self.stop()
            except Exception as exc:  # the launch failure is the news; say this too
                failure.add_note(f"and while cleaning up: {exc}")
            raise

    def alive(self) -> bool:
        return self.exit_status() is None

    def exit_status(self) -> str | None:
        if self._stopped:
            return "stopped"
        if not self._started or self._started[-1].plan.role != SERVER_ROLE:
            return "never started"
        if self._dead is not None:
            return self._dead
        # Readiness polls fast; the engine is asked at most every poll interval.
        now = self._clock()
        if now - self._last_check < self._poll:
            return None
        self._last_check = now
        for s in reversed(self._started):
            try:
                s.container.reload()
                ended = describe_state(s.container.attrs.get("State", {}))
            except NotFound:
                ended = "was removed"
            except DockerException as exc:
                ended = f"cannot be inspected ({exc})"
            if ended is not None:
                if s.follower is not None:
                    s.follower.finish()
                who = "" if s.plan.role == SERVER_ROLE else f"extra container '{s.plan.role}' "
                self._dead = f"{who}{ended}".strip()
                return self._dead
        return None

    def logs(self, tail: int = 40) -> list[str]:
        server = self._server()
        if server is not None and server.follower is not None and not self.alive():
            server.follower.finish()
        lines = tail_lines(self.ctx.log_path, tail)
        if self._dead and self._dead.startswith("extra container"):
            # The arm died because of an extra container: its lines explain it.
            for s in self._started:
                if s.follower is not None and s.plan.role != SERVER_ROLE:
                    lines += [f"[{s.plan.role}] {x}" for x in s.follower.tail(tail)]
            lines = lines[-tail:]
        return lines

    def stop(self) -> None:
        """Server first, then the extras in reverse; graceful stop, then remove. Always
        removes what this arm created (also containers whose create reply was lost)."""
        self._stopped = True
        errors: list[str] = []
        interrupt: BaseException | None = None
        for s in reversed(self._started):
            try:
                if interrupt is None:
                    self._stop_container(s.container, s.plan.stop_timeout_s)
                else:
                    with contextlib.suppress(NotFound):
                        s.container.remove(force=True, v=True)
            except BaseException as exc:  # keep going: the rest must go too
                if isinstance(exc, Exception):
                    errors.append(f"{s.plan.name}: {exc}")
                else:  # a second Ctrl-C: no more graceful waits, but still remove
                    interrupt = interrupt or exc
                with contextlib.suppress(Exception):
                    s.container.remove(force=True)
            if s.follower is not None:
                s.follower.finish(timeout=0.1 if interrupt else 2.0)
        self._started.clear()
        for host in self._touched:
            errors += self._remove_labelled(host)
        if interrupt is not None:
            raise interrupt
        if errors:
            raise ServerError(
                f"{self.ctx.arm}: could not remove every container: " + "; ".join(errors),
                hint="run `spec-ab clean` to remove leftovers",
            )

    def describe(self) -> list[str]:
        return [docker_run_line(p) for p in self.plans]

    def facts(self) -> dict[str, Any]:
        containers = []
        ids = self._ids
        for plan in self.plans:
            containers.append({
                "role": plan.role,
                "name": plan.name,
                "docker_host": plan.docker_host,
                "image": plan.image,
                **image_facts(self._client_for(plan.docker_host, quiet=True), plan.image),
                "container_id": ids.get(plan.name),
            })
        return {
            "backend": "docker",
            "engines": {host or "local": engine_facts(self._client_for(host, quiet=True))
                        for host in docker_hosts(self.launch)},
            "containers": containers,
            "bind_mounts": mount_facts(m for p in self.plans for m in p.mounts),
            "docker_run": self.describe(),
        }

    # ---------------------------------------------------------------- internals

    def _client_for(self, host: str | None, *, quiet: bool = False) -> docker.DockerClient | None:
        if host not in self._clients:
            try:
                self._clients[host] = self._client_factory(host)
            except DockerException as exc:
                if quiet:
                    return None
                raise ServerError(
                    f"{self.ctx.arm}: cannot reach docker on {host or 'the local engine'}: "
                    f"{_short(exc)}",
                    hint="start dockerd (scripts/start-dockerd) / check DOCKER_HOST"
                    if host is None else f"check that `docker -H {host} info` works from this "
                    "machine (ssh key, ~/.ssh/config); a stopped run continues with "
                    "`spec-ab run --resume RUN_DIR`",
                ) from None
        return self._clients[host]

    def _client(self, host: str | None) -> docker.DockerClient:
        client = self._client_for(host)
        assert client is not None
        return client

    def _server(self) -> _Started | None:
        for s in self._started:
            if s.plan.role == SERVER_ROLE:
                return s
        return None

    def _ensure_image(self, client: docker.DockerClient, plan: ContainerPlan) -> None:
        try:
            client.images.get(plan.image)
            return
        except ImageNotFound:
            pass
        if not self.launch.pull:
            raise ServerError(
                f"{self.ctx.arm}: image {plan.image} is not present on "
                f"{plan.docker_host or 'the local engine'}",
                hint=f"docker pull {plan.image} (or scripts/build-sim-image for the sim "
                "image), or set `pull: true`",
            )
        try:
            client.images.pull(plan.image)
        except APIError as exc:
            raise ServerError(f"{self.ctx.arm}: cannot pull {plan.image}: {exc}") from None

    def _start_one(self, plan: ContainerPlan) -> _Started:
        client = self._client(plan.docker_host)
        self._ensure_image(client, plan)
        kwargs = create_kwargs(plan)
        self._touched.add(plan.docker_host)
        try:
            container = client.containers.create(plan.image, **kwargs)
        except APIError as exc:
            raise ServerError(
                f"{self.ctx.arm}: cannot create container {plan.name}: {exc.explanation or exc}",
                hint="check the launch with `spec-ab check` (the docker run lines)",
            ) from None
        log_path = (self.ctx.log_path if plan.role == SERVER_ROLE
                    else extra_log_path(self.ctx.log_path, plan.role))
        started = _Started(plan, container, log_path=log_path)
        self._started.append(started)
        self._ids[plan.name] = str(container.id)
        _log_line(self.ctx.log_path, f"[spec-ab] starting {plan.role}: {docker_run_line(plan)}")
        try:
            container.start()
        except APIError as exc:
            raise ServerError(
                f"{self.ctx.arm}: container {plan.name} did not start: "
                f"{exc.explanation or exc}",
                hint="a missing GPU runtime, a busy port or a bad entrypoint is the usual cause",
            ) from None
        started.follower = LogFollower(container, log_path)
        started.follower.start()
        return started

    def _wait_extra_ready(self, s: _Started) -> None:
        ready = s.plan.ready
        assert ready is not None and s.follower is not None
        pattern = re.compile(ready.log_regex) if ready.log_regex is not None else None
        deadline = self._clock() + ready.timeout_s
        while True:
            if pattern is not None and s.follower.search(pattern):
                return
            if ready.command is not None:
                try:
                    result = s.container.exec_run(ready.command)
                    if result.exit_code == 0:
                        return
                except APIError:
                    pass  # not running (yet / any more): the state check below says which
            s.container.reload()
            ended = describe_state(s.container.attrs.get("State", {}))
            if ended is not None:
                s.follower.finish()
                raise self._extra_failure(s, f"{ended} before it was ready")
            if self._clock() > deadline:
                what = (f"no log line matched /{ready.log_regex}/" if pattern is not None
                        else f"`{shlex.join(ready.command or [])}` never exited 0")
                raise self._extra_failure(
                    s, f"not ready after {ready.timeout_s:.0f} s ({what})",
                    hint="raise its ready.timeout_s if it is just slow",
                )
            if pattern is not None:
                s.follower.wait_change(self._poll)  # wakes at once on a new line
            self._sleep(self._poll if ready.command is not None else 0)

    def _extra_failure(self, s: _Started, what: str, hint: str | None = None) -> ServerError:
        lines = s.follower.tail(LOG_TAIL_ON_FAILURE) if s.follower else []
        tail = "\n".join(f"    | {x}" for x in lines)
        return ServerError(
            f"{self.ctx.arm}: extra container '{s.plan.role}' {what}"
            + (f"\n  last log lines ({s.log_path}):\n{tail}" if tail else ""),
            hint=hint or "read the log lines above; fix the extra container's launch",
        )

    def _stop_container(self, container: Container, timeout_s: float) -> None:
        try:
            container.reload()
            if container.status in ("running", "restarting", "paused"):
                # SIGTERM (the image's stop signal), SIGKILL after the timeout.
                container.stop(timeout=max(1, round(timeout_s)))
        except NotFound:
            return
        finally:
            with contextlib.suppress(NotFound):
                container.remove(force=True, v=True)

    def _remove_labelled(self, host: str | None) -> list[str]:
        """Remove anything carrying this arm's launch id that is still there."""
        client = self._client_for(host, quiet=True)
        if client is None:
            return [f"docker engine {host or '(local)'} unreachable"]
        errors = []
        try:
            found = client.containers.list(
                all=True, filters={"label": f"{LABEL_LAUNCH}={self.launch_id}"}
            )
        except DockerException as exc:
            return [f"cannot list containers on {host or '(local)'}: {exc}"]
        for c in found:
            try:
                c.remove(force=True, v=True)
            except NotFound:
                pass
            except DockerException as exc:
                errors.append(f"{c.name}: {exc}")
        return errors


def create_kwargs(plan: ContainerPlan) -> dict[str, Any]:
    """The docker SDK's `containers.create` arguments for a plan."""
    kwargs: dict[str, Any] = {
        "name": plan.name,
        "command": plan.command or None,
        "environment": dict(plan.env),
        "labels": dict(plan.labels),
        "detach": True,
        "mounts": [
            Mount(target=m.target, source=m.source, type=m.kind, read_only=m.read_only)
            for m in plan.mounts
        ],
    }
    if plan.entrypoint is not None:
        kwargs["entrypoint"] = plan.entrypoint
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


def _log_line(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


# --------------------------------------------------------------------------- manifest facts


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
    except DockerException as exc:
        return {"version": None, "error": _short(exc)}
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


# --------------------------------------------------------------------------- preflight


def preflight(
    launch: DockerLaunch,
    campaign_dir: Path | None = None,
    *,
    client_factory: ClientFactory = default_client,
    which: Callable[[str], str | None] = shutil.which,
) -> list[str]:
    """Problems that would stop this launch, each with what to do. Starts nothing.

    With `campaign_dir`, local bind-mount sources (server and extra containers; relative
    ones against that folder) must exist; without it they are left to the caller's own
    file checks. Sources on remote docker hosts are never checked from here.
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
            problems.append(f"cannot reach docker on {where}: {_short(exc)} → {hint}")
    gpu_checked: set[str | None] = set()
    for what, c in containers:
        client = clients.get(c.docker_host)
        on = f" on {c.docker_host}" if c.docker_host else ""
        for text in c.volumes if campaign_dir is not None else []:
            vol = parse_volume(text)
            if vol.is_named or c.docker_host is not None:
                continue
            m = resolve_volume(vol, campaign_dir or Path.cwd(), remote=False)
            if not Path(m.source).exists():
                problems.append(f"{what}: bind-mount source {m.source} does not exist "
                                "→ create it or fix the volume")
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
                problems.append(f"{what}: cannot inspect image {c.image}{on}: {_short(exc)}")
        if c.network and c.network not in ("host", "bridge", "none"):
            try:
                client.networks.get(c.network)
            except NotFound:
                problems.append(f"{what}: docker network {c.network} does not exist{on} → "
                                f"docker network create {c.network}")
            except DockerException as exc:
                problems.append(f"{what}: cannot inspect network {c.network}: {_short(exc)}")
        if c.gpus is not None and c.docker_host not in gpu_checked:
            gpu_checked.add(c.docker_host)
            if not _has_gpu_runtime(client, local=c.docker_host is None, which=which):
                problems.append(
                    f"{what}: GPUs requested but the docker engine{on} has no NVIDIA "
                    "runtime → install nvidia-container-toolkit and run "
                    "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd"
                )
    return problems


def _has_gpu_runtime(
    client: docker.DockerClient, *, local: bool, which: Callable[[str], str | None]
) -> bool:
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


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


__all__ = [
    "ClientFactory",
    "ContainerPlan",
    "DockerServer",
    "MountPlan",
    "default_client",
    "describe_state",
    "docker_hosts",
    "docker_run_line",
    "engine_facts",
    "image_facts",
    "mount_facts",
    "plan_containers",
    "preflight",
    "resolve_volume",
    "runner_labels",
]
