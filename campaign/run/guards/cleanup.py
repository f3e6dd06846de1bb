"""Leftovers of runs that are no longer alive: the core of `spec-ab clean`, and what
`spec-ab run` checks before it takes the lane.

A run marks everything it starts (the names are in `campaign.markers`). Containers carry
the run id, the runner's pid, the pid's start time and the runner's host
(`campaign.servers.docker.runner_labels`); process-backend children carry the run id and
the runner's pid in their environment (`campaign.servers.process.child_env`). Something is
a leftover when the runner that started it is gone: its pid no longer runs, or now belongs
to a younger process (pids are reused, so the start time is compared). Containers started
by a runner on another host are never judged from here: they are reported as notes, to be
cleaned on that host. AIPerf's private temp folders (`<tmp>/spec-ab-aiperf-<runner pid>-*`)
of dead runners are leftovers of `spec-ab clean` too (`include_tmpdirs`).

A runner with a leftover scope (`SPECAB_SCOPE`, `campaign.markers.SCOPE_ENV`) judges only the
containers and processes of its own scope: parallel jobs on one machine that share no GPU
(a test suite, CI jobs on the simulated lane) never take each other's runs for leftovers.

Each leftover says whose it is (run id, lane) and which TCP ports it listens on or
publishes: `spec-ab run` only says a leftover holds its lane when it is of that lane, or on
the lane's ports or remote docker hosts (`Leftover.on_lane`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import psutil
from docker.errors import DockerException, NotFound

from campaign.campaignfile import Campaign, DockerLaunch
from campaign.errors import PreflightError
from campaign.markers import (
    ARM_ENV,
    LABEL_ARM,
    LABEL_HOST,
    LABEL_LANE,
    LABEL_PAIR,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_RUN,
    LABEL_SCOPE,
    LANE_ENV,
    PAIR_ENV,
    RUN_ENV,
    RUNNER_PID_ENV,
    SCOPE_ENV,
    TMPDIR_PREFIX,
    scope,
)
from campaign.procgroup import stop_group
from campaign.servers.docker.daemon import ClientFactory, default_client, short_error
from campaign.servers.docker.launchplan import docker_hosts, parse_port

PID_START_SLACK_S = 1.0
"""create_time() is rounded differently by the label and by psutil: compare within this."""


@dataclass(frozen=True)
class Leftover:
    """One container or process whose run is no longer alive."""

    kind: Literal["container", "process", "tmpdir"]
    ident: str
    """Container id, pid, or the folder's path."""
    name: str
    """Container name, the process's command line, or the folder's name."""
    run_id: str
    why: str
    """Why it counts as a leftover, e.g. "runner pid 4242 is not running"."""
    docker_host: str | None = None
    pair: str | None = None
    arm: str | None = None
    lane: str | None = None
    ports: tuple[int, ...] = ()
    """TCP ports it listens on (process) or publishes (container)."""

    def describe(self) -> str:
        if self.kind == "tmpdir":
            return f"AIPerf temp folder {self.ident}: {self.why}"
        where = f" on {self.docker_host}" if self.docker_host else ""
        what = "container" if self.kind == "container" else "process"
        ident = self.ident[:12] if self.kind == "container" else f"pid {self.ident}"
        arm = f" (pair {self.pair}, arm {self.arm})" if self.arm else ""
        lane = f", lane {self.lane}" if self.lane else ""
        ports = f", port {', '.join(map(str, self.ports))}" if self.ports else ""
        return (f"{what} {self.name} [{ident}]{where} of run {self.run_id}{lane}{arm}{ports}: "
                f"{self.why}")

    def on_lane(self, lane: str, ports: set[int], hosts: set[str]) -> bool:
        """Does it hold `lane`: of that lane, on one of its ports, or on one of its remote
        docker hosts when its own lane is not known?"""
        if self.kind == "tmpdir":
            return False
        if self.lane == lane or ports & set(self.ports):
            return True
        return self.lane is None and self.docker_host is not None and self.docker_host in hosts

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class Unreachable:
    """A docker engine `find_leftovers` could not ask: its endpoint and why, in words."""

    endpoint: str
    """The engine's address: the campaign's `docker_host`, else DOCKER_HOST, else the
    local socket."""
    reason: str
    note: str = ""
    """The note `find_leftovers` made of it (in `Scan.notes`)."""

    def line(self, again: str) -> str:
        """One line for `spec-ab clean`: what, where, what to do (`again`: the command)."""
        return (f"no docker engine answers at {self.endpoint} ({self.reason}), so no "
                "container of this campaign was looked for; start Docker there (or set "
                "DOCKER_HOST to the engine the campaign uses) and run "
                f"`{again}` again")


class Scan(list[Leftover]):
    """What `find_leftovers` saw: a list of the leftovers, plus `notes` on what it could not
    judge (engines it could not reach, containers of runners on other hosts) and the
    engines it could not reach (`unreachable`)."""

    def __init__(self, items: Iterable[Leftover] = ()) -> None:
        super().__init__(items)
        self.notes: list[str] = []
        self.unreachable: list[Unreachable] = []


def runner_alive(pid: int, started: float | None = None) -> bool:
    """Is the process `pid` running and (when known) the one that started at `started`?"""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # A different start time: the pid was reused by another process.
        return started is None or abs(proc.create_time() - started) <= PID_START_SLACK_S
    except psutil.Error:
        return False


def uses_docker(campaign: Campaign) -> bool:
    return any(isinstance(launch, DockerLaunch) for launch in campaign.every_launch())


def campaign_docker_hosts(campaign: Campaign) -> list[str | None]:
    """Every docker engine a campaign uses (None = the local one, always looked at)."""
    hosts: list[str | None] = [None]
    for launch in campaign.every_launch():
        if isinstance(launch, DockerLaunch):
            hosts += [h for h in docker_hosts(launch) if h not in hosts]
    return hosts


def lane_endpoints(campaign: Campaign) -> tuple[set[int], set[str]]:
    """The TCP ports a campaign's servers use (their URLs' and published host ports) and
    its remote docker hosts."""
    ports: set[int] = set()
    hosts: set[str] = set()
    for launch in campaign.launches.values():
        try:
            port = urlsplit(launch.base_url).port
        except ValueError:
            port = None
        if port:
            ports.add(port)
        if isinstance(launch, DockerLaunch):
            hosts.update(h for h in docker_hosts(launch) if h is not None)
            for text in launch.ports:
                try:
                    ports.add(parse_port(text, None)[1])
                except (ValueError, IndexError):
                    continue
    return ports, hosts


def find_leftovers(
    client_factory: ClientFactory = default_client,
    *,
    docker_hosts: Sequence[str | None] = (None,),
    include_processes: bool = True,
    include_tmpdirs: bool = False,
    alive: Callable[[int, float | None], bool] = runner_alive,
    processes: Callable[[], Iterable[Any]] | None = None,
    hostname: str | None = None,
    quiet_hosts: Sequence[str | None] = (),
    tmp_root: Path | None = None,
    in_scope: str | None = None,
) -> Scan:
    """Containers (on each docker host) and processes of runs whose runner is gone.

    `docker_hosts`: engines to look at (None = the local one / DOCKER_HOST); a campaign's
    hosts come from `campaign_docker_hosts(campaign)`. An unreachable engine
    is a note, not an error, so `spec-ab clean` still handles process leftovers; hosts in
    `quiet_hosts` are looked at but their unreachability goes unsaid (the local engine of a
    campaign that uses no Docker: a machine without Docker is no news). `in_scope` (default:
    this process's `SPECAB_SCOPE`): when not empty, only the containers and processes of
    that scope are judged.
    """
    scan = Scan()
    me = hostname or socket.gethostname()
    want = scope() if in_scope is None else in_scope
    for host in docker_hosts:
        notes, unreachable = len(scan.notes), len(scan.unreachable)
        _scan_containers(client_factory, host, me, alive, scan, want)
        if host in quiet_hosts:
            del scan.notes[notes:]
            del scan.unreachable[unreachable:]
    if include_processes:
        _scan_processes(processes, alive, scan, want)
    if include_tmpdirs:
        _scan_tmpdirs(tmp_root or Path(tempfile.gettempdir()), alive, scan)
    return scan


def _scan_tmpdirs(root: Path, alive: Callable[[int, float | None], bool], scan: Scan) -> None:
    """AIPerf's private TMPDIRs whose runner is gone (a SIGKILLed runner cannot remove
    them): `spec-ab-aiperf-<pid>-*`, judged like processes (pid running and older)."""
    try:
        entries = sorted(root.glob(f"{TMPDIR_PREFIX}*"))
    except OSError as exc:
        scan.notes.append(f"could not look for AIPerf temp folders in {root}: {exc}")
        return
    for path in entries:
        pid_text = path.name[len(TMPDIR_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or not path.is_dir() or path.is_symlink():
            continue  # an older version's folder: its runner is not known
        try:
            made = path.stat().st_mtime
        except OSError:
            continue
        if _runner_of(int(pid_text), made, alive):
            continue
        scan.append(Leftover(kind="tmpdir", ident=str(path), name=path.name, run_id="?",
                             why=f"runner pid {pid_text} is not running"))


LOCAL_SOCKET = "unix:///var/run/docker.sock"
"""Where the docker SDK looks without DOCKER_HOST."""


def engine_endpoint(host: str | None) -> str:
    """The address of the engine `host` names (None: DOCKER_HOST, else the local socket)."""
    return host or os.environ.get("DOCKER_HOST") or LOCAL_SOCKET


def _why_unreachable(exc: BaseException) -> str:
    """Why an engine did not answer, in words (docker's own are for those who know them)."""
    text = f"{exc!r} {exc}"
    for needles, words in (
            (("FileNotFoundError", "No such file"), "no socket there: is Docker installed "
             "and running?"),
            (("PermissionError", "ermission denied"), "permission denied: add your user to "
             "the docker group"),
            (("Connection refused", "ConnectionRefused"), "the connection is refused: is "
             "the engine running?"),
            (("gaierror", "Name or service not known", "not known"), "its host name is "
             "not known"),
            (("Invalid bind address", "URLSchemeUnknown", "Unsupported scheme"),
             "not an address docker understands: write unix:///PATH, tcp://HOST:PORT or "
             "ssh://HOST"),
            (("timed out", "Timeout"), "it did not answer in time")):
        if any(n in text for n in needles):
            return words
    return short_error(exc)


def _no_engine_note(where: str, exc: BaseException) -> str:
    """A note for a docker engine `clean` cannot ask: none answering is said in words
    (docker's own "Error while fetching server API version: ('Connection aborted.', …)"
    says it only to those who know it), anything else with docker's first line."""
    text = str(exc)
    if "Error while fetching server API version" in text or "Connection refused" in text:
        who = (f"no docker engine answers at {where}" if where.startswith(("ssh:", "tcp:",
               "unix:", "npipe:")) else f"{where} does not answer")
        return (f"{who}, so no container was looked for "
                "(a process lane needs none; to clean containers, start the engine and run "
                "spec-ab clean again)")
    return f"could not look for containers on {where}: {short_error(exc)}"


def _scan_containers(
    client_factory: ClientFactory,
    host: str | None,
    me: str,
    alive: Callable[[int, float | None], bool],
    scan: Scan,
    want: str,
) -> None:
    where = host or "the local docker engine"
    try:
        client = client_factory(host)
        # ignore_removed: another run on the machine may remove one of its containers
        # between the engine's list and the SDK's look at each (not an unreachable engine)
        found = client.containers.list(all=True, filters={"label": LABEL_RUN},
                                       ignore_removed=True)
    except Exception as exc:  # the SDK's transports raise their own (socket's, paramiko's)
        gone = Unreachable(engine_endpoint(host), _why_unreachable(exc))
        note = (_no_engine_note(where, exc) if isinstance(exc, DockerException) else
                f"no docker engine answers at {gone.endpoint} ({gone.reason}), so no "
                "container was looked for (a process lane needs none; to clean containers, "
                "start the engine and run spec-ab clean again)")
        scan.notes.append(note)
        scan.unreachable.append(Unreachable(gone.endpoint, gone.reason, note))
        return
    for c in found:
        labels: dict[str, str] = dict(c.labels or {})
        if want and labels.get(LABEL_SCOPE, "") != want:
            continue  # another scope's run: not ours to judge
        run_id = labels.get(LABEL_RUN, "?")
        runner_host = labels.get(LABEL_HOST)
        if runner_host and runner_host != me:
            scan.notes.append(
                f"container {c.name} of run {run_id} was started by a runner on "
                f"{runner_host}; run `spec-ab clean` there"
            )
            continue
        pid_text = labels.get(LABEL_PID, "")
        if not pid_text.isdigit():
            why = "no runner pid label (not started by a live `spec-ab run`)"
        else:
            pid = int(pid_text)
            started = _float(labels.get(LABEL_PID_START))
            if alive(pid, started):
                continue
            why = f"runner pid {pid} is not running"
        scan.append(Leftover(
            kind="container", ident=str(c.id), name=str(c.name), run_id=run_id, why=why,
            docker_host=host, pair=labels.get(LABEL_PAIR), arm=labels.get(LABEL_ARM),
            lane=labels.get(LABEL_LANE), ports=_published(c),
        ))


def _scan_processes(
    processes: Callable[[], Iterable[Any]] | None,
    alive: Callable[[int, float | None], bool],
    scan: Scan,
    want: str,
) -> None:
    mine = {os.getpid()}
    try:
        mine.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    procs = list(processes() if processes is not None else psutil.process_iter(
        ["pid", "environ", "cmdline", "create_time"]
    ))
    # A process that renames itself (setproctitle: vLLM's EngineCore and Worker) writes its
    # title over the memory /proc/<pid>/environ reads, so its markers read as empty. The
    # process backend starts each server in a session of its own: such a process is found
    # through its session's leader when the leader is marked, and inherits its markers
    # (only sessions a run started: never the shell session a runner ran in).
    by_session: dict[int, dict[str, str]] = {}
    for proc in procs:
        try:
            pid = proc.info["pid"]
            env = proc.info.get("environ") or {}
            if env.get(RUN_ENV) and pid not in mine and _sid(pid) == pid:
                by_session[pid] = env
        except (psutil.Error, KeyError):
            continue
    for proc in procs:
        try:
            info = proc.info
            env = info.get("environ") or {}
            if not env.get(RUN_ENV):
                sid = _sid(info["pid"])
                env = by_session.get(sid, {}) if sid is not None else {}
            run_id = env.get(RUN_ENV)
            if not run_id or info["pid"] in mine or (want and env.get(SCOPE_ENV, "") != want):
                continue
            runner_text = env.get(RUNNER_PID_ENV, "")
            if runner_text.isdigit():
                runner = int(runner_text)
                if _runner_of(runner, info.get("create_time"), alive):
                    continue
                why = f"runner pid {runner} is not running"
            else:
                why = f"no {RUNNER_PID_ENV} in its environment"
            cmd = " ".join(info.get("cmdline") or []).strip() or f"pid {info['pid']}"
            scan.append(Leftover(
                kind="process", ident=str(info["pid"]), name=cmd[:120], run_id=run_id,
                why=why, pair=env.get(PAIR_ENV), arm=env.get(ARM_ENV),
                lane=env.get(LANE_ENV), ports=_listening(proc),
            ))
        except (psutil.Error, KeyError):
            continue


def _published(container: Any) -> tuple[int, ...]:
    """Host ports a container publishes (`docker port`)."""
    try:
        bindings = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        found = {int(b["HostPort"]) for bs in bindings.values() for b in bs or []
                 if str(b.get("HostPort", "")).isdigit()}
    except (AttributeError, TypeError, ValueError, KeyError):
        return ()
    return tuple(sorted(found))


def _listening(proc: Any) -> tuple[int, ...]:
    """TCP ports a process listens on (needs the rights to see its sockets)."""
    try:
        conns = proc.net_connections(kind="tcp")
    except (psutil.Error, AttributeError, OSError):
        return ()
    return tuple(sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}))


def _runner_of(
    runner: int, child_started: float | None, alive: Callable[[int, float | None], bool]
) -> bool:
    """The runner lives when its pid runs and that process is older than the child (a
    process that started after the child cannot be the child's parent: a reused pid)."""
    if not alive(runner, None):
        return False
    if child_started is None:
        return True
    try:
        return psutil.Process(runner).create_time() <= child_started + PID_START_SLACK_S
    except psutil.Error:
        return False


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def remove_leftovers(
    leftovers: Iterable[Leftover],
    client_factory: ClientFactory = default_client,
    *,
    stop_timeout_s: float = 10,
    grace_s: float = 10,
) -> list[str]:
    """Stop and remove each leftover; one line per item saying what was done (or why not)."""
    done: list[str] = []
    clients: dict[str | None, Any] = {}
    for item in leftovers:
        try:
            if item.kind == "tmpdir":
                shutil.rmtree(item.ident)
                done.append(f"removed {item.describe()}")
            elif item.kind == "container":
                if item.docker_host not in clients:
                    clients[item.docker_host] = client_factory(item.docker_host)
                container = clients[item.docker_host].containers.get(item.ident)
                if container.status in ("running", "restarting", "paused"):
                    container.stop(timeout=max(1, round(stop_timeout_s)))
                container.remove(force=True, v=True)
                done.append(f"removed {item.describe()}")
            else:
                done.append(_kill(item, grace_s))
        except NotFound:
            done.append(f"already gone: {item.describe()}")
        except (DockerException, psutil.Error, OSError) as exc:
            done.append(f"FAILED to remove {item.describe()}: {exc}")
    return done


def _kill(item: Leftover, grace_s: float) -> str:
    """SIGTERM the leftover's process group (the process backend starts each server as a
    group leader), then SIGKILL what is left after `grace_s`. A process that leads no
    group is signalled alone."""
    pid = int(item.ident)
    try:
        proc = psutil.Process(pid)
        group = os.getpgid(pid) == pid
    except (psutil.NoSuchProcess, ProcessLookupError):
        return f"already gone: {item.describe()}"
    members = [proc]
    if group:
        members += [p for p in proc.children(recursive=True) if _pgid(p.pid) == pid]

    def ended(seconds: float) -> bool:
        _, left = psutil.wait_procs(members, timeout=seconds)
        return not left

    stop_group(pid, first=signal.SIGTERM, grace_s=grace_s, wait=ended,
               killpg=os.killpg if group else os.kill, kill_wait_s=5, sweep=group,
               strict=True)
    return f"stopped {item.describe()}"


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _no_note(text: str) -> None:
    return None


def refuse_leftovers(campaign: Campaign, *, on_note: Callable[[str], None] = _no_note,
                     find: Callable[[Campaign], Scan] | None = None) -> None:
    """PreflightError when containers or processes of dead runs are still around (they
    hold the lane's GPUs and ports); notes on what could not be judged go to `on_note`."""
    if find is None:
        leftovers = find_leftovers(docker_hosts=campaign_docker_hosts(campaign),
                                   quiet_hosts=() if uses_docker(campaign) else (None,))
    else:
        leftovers = find(campaign)
    for note in leftovers.notes:
        on_note(note)
    found = [x for x in leftovers if x.kind != "tmpdir"]  # a folder holds nothing
    if not found:
        return
    ports, hosts = lane_endpoints(campaign)
    mine = [x for x in found if x.on_lane(campaign.lane, ports, hosts)]
    if mine:
        what = f"hold lane '{campaign.lane}'"
        shown = mine + [x for x in found if x not in mine]
    else:  # still refused: GPUs are shared machine-wide, and their pids may hold them
        what = ("are still running on this machine (not on this lane's ports or docker "
                "hosts, but they may hold its GPUs)")
        shown = found
    raise PreflightError(
        f"{len(found)} leftover(s) of earlier runs {what}: "
        + ", ".join(str(x) for x in shown[:5]),
        hint="remove them with `spec-ab clean`",
    )


__all__ = [
    "Leftover",
    "Scan",
    "Unreachable",
    "campaign_docker_hosts",
    "engine_endpoint",
    "find_leftovers",
    "refuse_leftovers",
    "remove_leftovers",
    "runner_alive",
]

