"""Start a real simulated lane from Python: `running_sim(...)` for tests and other modules.

The server runs as a subprocess (`python -m campaign.sim`) in its own process group, bound
to 127.0.0.1 on a free port, with its log in a file; the context manager waits for
/health 200 and always kills the whole group on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from campaign.procgroup import stop_process
from campaign.textfiles import tail_lines


class SimBootError(RuntimeError):
    """The simulated lane exited or never answered /health in time (log tail attached)."""


@dataclass
class SimHandle:
    base_url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(tail_lines(path, lines)) or "(no log)"


@contextlib.contextmanager
def running_sim(
    port: int | None = None,
    env: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    boot_timeout: float = 30,
    args: list[str] | None = None,
    wait_ready: bool = True,
    keep_log: bool = False,
) -> Iterator[SimHandle]:
    """Run `python -m campaign.sim` until the block ends.

    `env` adds/overrides environment variables (e.g. SPECAB_SIM_TIME_SCALE); `config` is
    written to a YAML file passed as --config; `args` are extra CLI options.  With
    `wait_ready=False` the handle is yielded as soon as the process started (boot-delay
    tests poll /health themselves).  The log and config live in a temporary folder that is
    removed on exit unless `keep_log` (then `handle.log_path` stays readable).
    """
    port = port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="specab-sim-"))
    log_path = workdir / "server.log"
    cmd = [sys.executable, "-m", "campaign.sim", "serve", "--host", "127.0.0.1",
           "--port", str(port)]
    if config is not None:
        cfg_path = workdir / "sim.yaml"
        # JSON is YAML: no YAML writer needed.
        cfg_path.write_text(json.dumps(config), encoding="utf-8")
        cmd += ["--config", str(cfg_path)]
    cmd += args or []
    child_env = dict(os.environ)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env.update(env or {})
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                env=child_env, start_new_session=True)
    handle = SimHandle(base_url=f"http://127.0.0.1:{port}", port=port, proc=proc,
                       log_path=log_path)
    try:
        if wait_ready:
            _wait_healthy(handle, boot_timeout)
        yield handle
    finally:
        stop_process(proc, 3.0)
        if not keep_log:
            shutil.rmtree(workdir, ignore_errors=True)


def _wait_healthy(handle: SimHandle, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if handle.proc.poll() is not None:
                raise SimBootError(f"simulated lane exited with {handle.proc.returncode} "
                                   f"while booting:\n{_tail(handle.log_path)}")
            try:
                if client.get(f"{handle.base_url}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise SimBootError(f"simulated lane not healthy after {timeout:g} s:\n"
                       f"{_tail(handle.log_path)}")


def sim_env(**knobs: object) -> dict[str, str]:
    """`sim_env(time_scale=50, seed=1)` → {"SPECAB_SIM_TIME_SCALE": "50", ...}."""
    return {f"SPECAB_SIM_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in knobs.items()}

