"""Checks that start nothing: is this machine ready to run the campaign?

Each problem is one line saying what is wrong and what to do. `spec-ab check` and
`spec-ab run` both call `preflight`; any problem is exit 3. A docker lane's own part of it
(engines, images, networks, GPU runtime) is `campaign.servers.docker.preflight`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from campaign.campaignfile import (
    Campaign,
    DockerLaunch,
    ExternalLaunch,
    ProcessLaunch,
    file_problems,
    format_yaml_path,
)
from campaign.run.guards.portguard import port_open, remote_engine


class Caution(str):
    """A preflight fact that is a warning: shown with `!`, not `✓`; not a problem."""

    __slots__ = ()


GPU_BUSY_MEMORY_MIB = 2048
GPU_BUSY_UTIL_PCT = 10


def aiperf_runs(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
                ) -> tuple[str | None, str | None]:
    """(version, problem): runs this environment's `aiperf --version`, as the runner will."""
    from campaign.run.measure.loadgen import default_executable

    exe = default_executable()
    try:
        proc = run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        return None, ("AIPerf is not installed in this environment: pip install "
                      "'aiperf>=0.13,<0.14' (scripts/demo sets everything up)")
    except subprocess.TimeoutExpired:
        return None, f"`{exe} --version` did not answer in 60 s: reinstall AIPerf"
    version = (proc.stdout.strip().splitlines() or [""])[-1].strip()
    if proc.returncode != 0 or not version:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"`{exe} --version` failed (exit {proc.returncode}: {tail}): reinstall AIPerf"
    return version, None


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port."""
    return port_open(host, port, timeout=0.3)


_WHAT_TO_DO: dict[str, str] = {
    "tokenizer": "copy the model's tokenizer.json + tokenizer_config.json there (AIPerf "
                 "loads it offline)",
    "fixture": "create it or fix the path",
    "mount": "create it or fix the volume",
    "cwd": "create it or fix the path",
}


def _files(campaign: Campaign) -> list[str]:
    """Every local file and folder the campaign names (absolute paths and bind-mount
    sources included): missing ones, each with where it is written and what to do."""
    problems = []
    for f, msg in file_problems(campaign):
        where = "" if f.declared == str(f.resolved) else f" ({f.resolved})"
        problems.append(f"{format_yaml_path(f.yaml_path)}: {msg}{where} → {_WHAT_TO_DO[f.kind]}")
    return problems


def _ports(campaign: Campaign, in_use: Callable[[str, int], bool]) -> list[str]:
    problems = []
    checked: set[tuple[str, int]] = set()
    for launch in campaign.launches.values():
        if isinstance(launch, ProcessLaunch | DockerLaunch):
            if remote_engine(launch):  # its port is the box's or a tunnel's, as per slot
                continue
            key = (launch.host, launch.port)
            if key in checked:
                continue
            checked.add(key)
            if in_use(*key):
                problems.append(f"port {launch.port} on {launch.host} is already in use: stop "
                                "what listens there (`ss -ltnp`) or change server.port")
    return problems


def launch_cwd(launch: ProcessLaunch, base_dir: Path) -> Path:
    """The working folder of a process launch (the campaign file's folder by default)."""
    cwd = launch.cwd if launch.cwd is not None else base_dir
    return cwd if cwd.is_absolute() else base_dir / cwd


def resolve_command(word: str, launch: ProcessLaunch, base_dir: Path) -> Path | None:
    """A word of a process launch's command as the backend will find it: against the
    working folder when it has a slash, else on the child's PATH (which starts with this
    Python's own folder); None when there is no such executable."""
    if "/" in word:
        path = Path(word) if Path(word).is_absolute() else launch_cwd(launch, base_dir) / word
        return path if path.is_file() and os.access(path, os.X_OK) else None
    search = launch.env.get("PATH", os.environ.get("PATH", ""))
    found = shutil.which(word, path=str(Path(sys.executable).parent) + os.pathsep + search)
    return Path(found) if found else None


def _commands(campaign: Campaign) -> list[str]:
    """A process backend's executable must exist before anything is registered: resolved
    as the backend will (`resolve_command`)."""
    problems: list[str] = []
    for arm, launch in campaign.launches.items():
        if not isinstance(launch, ProcessLaunch):
            continue
        exe = launch.argv[0]
        cwd = launch_cwd(launch, campaign.base_dir)
        found = resolve_command(exe, launch, campaign.base_dir) is not None
        if not found:
            problem = (f"arm {arm}: server command '{exe}' not found (from {cwd}): install it "
                       "or fix server.command")
            if problem not in problems:
                problems.append(problem)
    return problems


def _docker(campaign: Campaign) -> list[str]:
    launches = [lc for lc in campaign.launches.values() if isinstance(lc, DockerLaunch)]
    if not launches:
        return []
    try:
        from campaign.servers.docker.preflight import preflight as docker_preflight
    except ImportError as exc:
        return [f"the docker backend cannot be loaded ({exc}): pip install 'docker>=7'"]
    problems: list[str] = []
    for launch in launches:  # bind-mount sources: checked with the other files (`_files`)
        # an unreachable ssh:// engine is one line with ssh's own reason (the docker
        # backend keeps ssh's stderr off the terminal): said once, however many arms
        for p in docker_preflight(launch):
            if p not in problems:
                problems.append(p)
    return problems


def _gpus(campaign: Campaign) -> list[str]:
    wants_gpu = any(isinstance(lc, DockerLaunch) and lc.gpus for lc in campaign.launches.values())
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,memory.used,utilization.gpu",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        return [f"nvidia-smi failed ({exc}): check the driver"] if wants_gpu else []
    problems = []
    for line in out.splitlines():
        try:
            idx, mem, util = (x.strip() for x in line.split(","))
            if float(mem) > GPU_BUSY_MEMORY_MIB or float(util) > GPU_BUSY_UTIL_PCT:
                problems.append(f"GPU {idx} is busy ({mem} MiB used, {util}% util): stop what "
                                "runs there (`nvidia-smi`) — a shared GPU ruins an A/B")
        except ValueError:
            continue
    return problems


def preflight(campaign: Campaign, *,
              in_use: Callable[[str, int], bool] = port_in_use) -> tuple[list[str], list[str]]:
    """(facts, problems): facts to show ("AIPerf 0.13.0"), problems with what to do."""
    facts: list[str] = []
    problems: list[str] = []
    version, problem = aiperf_runs()
    if problem:
        problems.append(problem)
    elif version is not None:
        facts.append(f"AIPerf {version} runs")
        if not version.startswith("0.13"):
            problems.append(f"AIPerf {version} found; spec-ab is tested with 0.13.x: "
                            "pip install 'aiperf>=0.13,<0.14'")
    problems += _files(campaign)
    problems += _commands(campaign)
    problems += _ports(campaign, in_use)
    problems += _docker(campaign)
    problems += _gpus(campaign)
    wants_gpu = any(isinstance(lc, DockerLaunch) and lc.gpus
                    for lc in campaign.launches.values())
    if shutil.which("nvidia-smi"):
        facts.append("nvidia-smi found: GPUs checked idle")
    elif wants_gpu:
        facts.append(Caution("no nvidia-smi on this machine: GPU idleness NOT checked, yet "
                             "the campaign asks for GPUs (gpus: ...) — a busy GPU ruins an "
                             "A/B; install the NVIDIA driver tools or check by hand"))
    else:
        facts.append("no GPUs asked for: GPU idleness not checked")
    backends = sorted({lc.backend for lc in campaign.launches.values()})
    facts.append(f"backend: {', '.join(backends)}")
    if any(isinstance(lc, ExternalLaunch) for lc in campaign.launches.values()):
        facts.append("external server: readiness is checked when the run starts")
    return facts, problems
