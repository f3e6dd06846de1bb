"""`process` backend: the server is a local command in its own process group.

Output (stdout and stderr) goes straight into the arm's log file, so nothing is lost if
the runner itself dies; the runner scrubs the file of every known secret value when the
arm stops (`run.serverwatch.captures_after`). `${NAME}` in the argv is expanded from the
runner's environment only when the process is started. Stop sends SIGTERM to the whole
group, waits, then SIGKILL
(`campaign.procgroup.stop_process`): no grandchild survives an arm.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx

from campaign import secrets
from campaign.campaignfile import ProcessLaunch
from campaign.errors import ServerError
from campaign.markers import ARM_ENV, PAIR_ENV, RUN_ENV, RUNNER_PID_ENV
from campaign.procgroup import stop_process
from campaign.servers.protocol import ArmContext, ServerContext
from campaign.textfiles import sha256_file, tail_lines


def child_env(extra: dict[str, str], ctx: ArmContext | None) -> dict[str, str]:
    """The environment of a child: ours + the launch's, with this Python's bin first on
    PATH (so `spec-ab`/`aiperf` in a command resolve to the runner's own environment),
    and the run id + runner pid that `spec-ab clean` uses to find leftovers."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update(secrets.expand(extra))
    if ctx is not None:
        env[RUN_ENV] = ctx.run_id
        env[RUNNER_PID_ENV] = str(os.getpid())
        env[ARM_ENV] = ctx.arm
        env[PAIR_ENV] = str(ctx.pair)
    return env


def describe_status(returncode: int | None) -> str | None:
    if returncode is None:
        return None
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


class ProcessServer(ServerContext):
    """A server started as a local command (`backend: process`)."""

    def __init__(self, launch: ProcessLaunch, ctx: ArmContext, *,
                 popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen) -> None:
        self.launch = launch
        self.ctx = ctx
        self._popen = popen
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @property
    def cwd(self) -> Path:
        cwd = self.launch.cwd
        if cwd is None:
            return self.ctx.campaign_dir
        return cwd if cwd.is_absolute() else self.ctx.campaign_dir / cwd

    def start(self) -> None:
        self.ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.ctx.log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self._proc = self._popen(
                secrets.expand_argv(self.launch.argv),  # `${NAME}` read only here
                cwd=self.cwd,
                env=child_env(self.launch.env, self.ctx),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except FileNotFoundError:
            self._close_log()
            raise ServerError(
                f"cannot start {self.ctx.arm}: command '{self.launch.argv[0]}' not found",
                hint="check server.command in the campaign file (or the arm's args)",
            ) from None
        except OSError as exc:
            self._close_log()
            raise ServerError(f"cannot start {self.ctx.arm}: {exc}") from None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def owns(self, pid: int) -> bool:
        """Whether a local process belongs to this server: its process group (the command
        and every child it started, `start_new_session`)."""
        if self._proc is None:
            return False
        try:
            return os.getpgid(pid) == self._proc.pid
        except OSError:
            return False

    def exit_status(self) -> str | None:
        if self._proc is None:
            return "never started"
        return describe_status(self._proc.poll())

    def logs(self, tail: int = 40) -> list[str]:
        """The log's last lines, scrubbed of every known secret value (a failure message
        quotes them before the arm's end scrubs the file)."""
        values = secrets.launch_values(self.launch)
        return [secrets.scrub(line, values=values)
                for line in tail_lines(self.ctx.log_path, tail)]

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc, self.launch.stop_timeout_s)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def describe(self) -> list[str]:
        env = " ".join(secrets.shell_word(k, v) for k, v in self.launch.env.items())
        argv = secrets.shell_join(self.launch.argv)
        return [f"cd {shlex.quote(str(self.cwd))} && {env + ' ' if env else ''}{argv}"]

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"backend": "process", "argv": self.launch.argv,
                                 "pid": self._proc.pid if self._proc else None,
                                 "cwd": str(self.cwd)}
        if self.alive():
            version = server_version(self.base_url)
            if version is not None:
                facts["server_version"] = version
        model = model_folder_facts(self.launch.argv, self.cwd)
        if model is not None:
            facts["model"] = model
        return facts


MODEL_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")
"""Small files of a model folder that identify what was served (hashed whole)."""


def model_folder_facts(argv: list[str], cwd: Path) -> dict[str, Any] | None:
    """The model a `--model PATH` (or `vllm serve PATH`) argument names, when it is a local
    folder: the sha256 of its config files and weights index(es), and its weight files'
    names and sizes (hashing gigabytes of weights would cost minutes per arm)."""
    path: str | None = None
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            path = argv[i + 1]
        elif a.startswith("--model="):
            path = a.split("=", 1)[1]
        elif a == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            path = argv[i + 1]
    if path is None:
        return None
    folder = (cwd / path) if not Path(path).is_absolute() else Path(path)
    if not folder.is_dir():
        return None
    hashed = {f.name: sha256_file(f) for f in sorted(folder.iterdir())
              if f.is_file() and (f.name in MODEL_FILES or f.name.endswith(".index.json"))}
    weights = {f.name: f.stat().st_size for f in sorted(folder.iterdir())
               if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt", ".gguf")}
    return {"path": str(folder), "sha256": hashed, "weights_bytes": weights}


def server_version(base_url: str, *, client: httpx.Client | None = None,
                   timeout_s: float = 2.0) -> str | None:
    """What GET /version says (vLLM: {"version": "0.32.0"}), None when it does not answer."""
    try:
        if client is not None:
            r = client.get(base_url + "/version", timeout=timeout_s)
        else:
            r = httpx.get(base_url + "/version", timeout=timeout_s)
        if r.status_code != 200:
            return None
        body = r.json()
    except (httpx.HTTPError, ValueError):
        return None
    version = body.get("version") if isinstance(body, dict) else None
    return str(version) if version else None
