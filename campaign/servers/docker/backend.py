"""`DockerServer`: one arm as containers (`backend: docker`) through the docker SDK: one
server container, optionally preceded by extra containers (a Ray head and a worker on two
docker hosts for a two-machine pair).

- The launch is planned first (`campaign.servers.docker.launchplan`); this module only carries
  the plans out, so `start()`, `describe()` and `facts()` cannot disagree.
- Everything started carries the run markers (`campaign.markers`: run, pair, arm, the
  runner's pid + its start time and host) and a per-arm launch id. `stop()` removes what
  it created *and* anything carrying its launch id, so a Ctrl-C that lands between
  "create" and its reply still leaves nothing behind; `campaign.run.guards.cleanup` uses the pid
  labels to tell leftovers of dead runs from containers of a live one.
- Logs are followed by a thread per container (`campaign.servers.docker.logs`).
- A slow edge (the docker client per docker host, the clock, sleeping) is passed in.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.models.containers import Container

from campaign import secrets
from campaign.campaignfile import DockerLaunch
from campaign.errors import ServerError
from campaign.markers import LABEL_LAUNCH
from campaign.servers.docker.daemon import (
    ENGINE_ERRORS,
    ClientFactory,
    default_client,
    describe_state,
    engine_facts,
    image_facts,
    mount_facts,
    short_error,
)
from campaign.servers.docker.launchplan import (
    SERVER_ROLE,
    ContainerPlan,
    create_kwargs,
    docker_hosts,
    docker_run_line,
    plan_containers,
)
from campaign.servers.docker.logs import LogFollower, extra_log_path, log_line
from campaign.servers.protocol import ArmContext, ServerContext
from campaign.textfiles import tail_lines

LOG_TAIL_ON_FAILURE = 25


@dataclass
class _Started:
    plan: ContainerPlan
    container: Container
    follower: LogFollower | None = None
    log_path: Path | None = None


class DockerServer(ServerContext):
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
            if isinstance(failure, ENGINE_ERRORS) and not isinstance(failure, ServerError):
                raise ServerError(f"{self.ctx.arm}: the docker engine went away while "
                                  f"starting: {short_error(failure)}",
                                  hint="check the engine (and the ssh link to a remote "
                                  "box), then `spec-ab run --resume RUN_DIR`") from None
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
            except ENGINE_ERRORS as exc:
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

    def server_attrs(self) -> dict[str, Any] | None:
        """The server container as its engine reports it now (`docker inspect`), None
        when it is gone or the engine cannot say (`campaign.run.guards.portguard`)."""
        server = self._server()
        if server is None:
            return None
        try:
            server.container.reload()
        except ENGINE_ERRORS:
            return None
        return dict(server.container.attrs)

    def published(self) -> list[tuple[str | None, int, int, str]]:
        """The bindings spec-ab asked the engine to publish for the server container."""
        return [p for plan in self.plans if plan.role == SERVER_ROLE for p in plan.ports]

    # ---------------------------------------------------------------- internals

    def _client_for(self, host: str | None, *, quiet: bool = False) -> docker.DockerClient | None:
        if host not in self._clients:
            try:
                self._clients[host] = self._client_factory(host)
            except ENGINE_ERRORS as exc:
                if quiet:
                    return None
                raise ServerError(
                    f"{self.ctx.arm}: cannot reach docker on {host or 'the local engine'}: "
                    f"{short_error(exc)}",
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
        log_line(self.ctx.log_path, f"[spec-ab] starting {plan.role}: {docker_run_line(plan)}")
        try:
            container.start()
        except APIError as exc:
            raise ServerError(
                f"{self.ctx.arm}: container {plan.name} did not start: "
                f"{exc.explanation or exc}",
                hint="a missing GPU runtime, a busy port or a bad entrypoint is the usual cause",
            ) from None
        started.follower = LogFollower(container, log_path,
                                       values=secrets.launch_values(self.launch))
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
                    # `${NAME}` read here, as for every command a launch runs
                    result = s.container.exec_run(secrets.expand_argv(ready.command))
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
                all=True, filters={"label": f"{LABEL_LAUNCH}={self.launch_id}"},
                ignore_removed=True,  # one gone meanwhile is one less to remove
            )
        except ENGINE_ERRORS as exc:
            return [f"cannot list containers on {host or '(local)'}: {exc}"]
        for c in found:
            try:
                c.remove(force=True, v=True)
            except NotFound:
                pass
            except ENGINE_ERRORS as exc:
                errors.append(f"{c.name}: {exc}")
        return errors


__all__ = ["LOG_TAIL_ON_FAILURE", "DockerServer"]
