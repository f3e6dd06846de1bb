"""`external` backend: a server that is already running, or that your own hook
commands start and stop (a lab script, `ssh node docker compose up`, ...).

The hooks run through the shell with a time limit; their output goes to the arm's log.
`${NAME}` in `base_url` (a password: `http://user:${PASSWORD}@host`) and in the hook's
`args` is expanded from the runner's environment only where it is used (connecting,
running the hook); what is written or shown keeps the reference.
"""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

from campaign import secrets
from campaign.campaignfile import ExternalLaunch
from campaign.errors import ServerError
from campaign.servers.process import child_env
from campaign.servers.protocol import ArmContext, ServerContext
from campaign.textfiles import tail_lines


class ExternalServer(ServerContext):
    """A running URL with optional start/stop hooks (`backend: external`)."""

    def __init__(self, launch: ExternalLaunch, ctx: ArmContext) -> None:
        self.launch = launch
        self.ctx = ctx
        self._started = False

    @property
    def base_url(self) -> str:
        """The URL connected to: its `${NAME}` expanded (files and screens see
        `launch.base_url`, the reference, or a URL with its password redacted)."""
        return secrets.expand_text(self.launch.base_url)

    def _hook(self, what: str, command: str, args: list[str] | None = None) -> None:
        full = command + (" " + shlex.join(args) if args else "")
        run = command + (" " + shlex.join(secrets.expand_argv(args)) if args else "")
        self.ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.ctx.log_path, "ab") as log:
            log.write(f"[spec-ab] {what} hook: {full}\n".encode())
            log.flush()
            try:
                proc = subprocess.run(
                    run, shell=True, cwd=self.ctx.campaign_dir, stdout=log,
                    stderr=subprocess.STDOUT, env=child_env(self.launch.env, self.ctx),
                    timeout=self.launch.hook_timeout_s, start_new_session=True, check=False,
                )
            except subprocess.TimeoutExpired:
                raise ServerError(
                    f"{self.ctx.arm}: {what} hook did not finish in "
                    f"{self.launch.hook_timeout_s:.0f} s: {full}"
                ) from None
        if proc.returncode != 0:
            raise ServerError(
                f"{self.ctx.arm}: {what} hook exited with code {proc.returncode}: {full}",
                hint=f"its output is in {self.ctx.log_path}",
            )

    def start(self) -> None:
        if self.launch.start_hook:
            self._hook("start", self.launch.start_hook, self.launch.args)
        self._started = True

    def alive(self) -> bool:
        return True  # nothing of ours to watch; readiness and passes find a dead server

    def exit_status(self) -> str | None:
        return None

    def logs(self, tail: int = 40) -> list[str]:
        """The log's last lines, scrubbed of every known secret value (a failure message
        quotes them before the arm's end scrubs the file)."""
        values = secrets.launch_values(self.launch)
        return [secrets.scrub(line, values=values)
                for line in tail_lines(self.ctx.log_path, tail)]

    def stop(self) -> None:
        if self._started and self.launch.stop_hook:
            self._started = False
            self._hook("stop", self.launch.stop_hook)
        self._started = False

    def describe(self) -> list[str]:
        lines = []
        if self.launch.start_hook:
            lines.append(self.launch.start_hook)
        lines.append(f"# then talk to {self.launch.base_url}")
        if self.launch.stop_hook:
            lines.append(self.launch.stop_hook)
        return lines

    def facts(self) -> dict[str, Any]:
        return {"backend": "external", "base_url": self.launch.base_url}
