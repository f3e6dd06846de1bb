"""Checks that start nothing: is this machine ready to run the campaign?

Each problem is one line saying what is wrong and what to do. `spec-ab check` and
`spec-ab run` both call `preflight`; any problem is exit 3.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator

from campaign.readiness import port_open
from campaign.spec import (
    Campaign,
    DockerLaunch,
    ExternalLaunch,
    ProcessLaunch,
    file_problems,
    format_yaml_path,
)


class Caution(str):
    """A preflight fact that is a warning: shown with `!`, not `✓`; not a problem."""

    __slots__ = ()


GPU_BUSY_MEMORY_MIB = 2048
GPU_BUSY_UTIL_PCT = 10


def aiperf_runs(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
                ) -> tuple[str | None, str | None]:
    """(version, problem): runs this environment's `aiperf --version`, as the runner will."""
    from campaign.loadgen import default_executable

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
            if isinstance(launch, DockerLaunch) and launch.docker_host is not None:
                continue
            key = (launch.host, launch.port)
            if key in checked:
                continue
            checked.add(key)
            if in_use(*key):
                problems.append(f"port {launch.port} on {launch.host} is already in use: stop "
                                "what listens there (`ss -ltnp`) or change server.port")
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
    with _stderr_kept() as said:  # ssh writes its reason to our stderr: keep it for the line
        for launch in launches:  # bind-mount sources: checked with the other files (`_files`)
            for p in docker_preflight(launch):
                if p not in problems:
                    problems.append(p)
    return _one_line_per_host(problems, said())


_UNREACHABLE = re.compile(r"^docker: cannot reach (\S+) \((.*)\) → (.*)$")


def _one_line_per_host(problems: list[str], stderr_text: str) -> list[str]:
    """`docker: cannot reach ssh://h (docker's words) → hint`, once per attempt, becomes
    one `cannot reach docker on ssh://h: <ssh's reason> → hint` per host. What ssh printed
    that names no host of the campaign goes back to stderr."""
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    used: set[str] = set()
    out: list[str] = []
    hosts_done: set[str] = set()
    for p in problems:
        m = _UNREACHABLE.match(p)
        if m is None or not m.group(1).startswith("ssh://"):
            out.append(p)
            continue
        host, docker_reason, hint = m.groups()
        if host in hosts_done:
            continue
        hosts_done.add(host)
        name = re.sub(r"^ssh://([^@/]*@)?", "", host).split(":")[0].split("/")[0]
        said = [ln for ln in lines if name and name in ln]
        used.update(said)
        reason = said[0].removeprefix("ssh: ") if said else docker_reason
        out.append(f"cannot reach docker on {host}: {reason} → {hint}")
    for ln in lines:
        if ln not in used:
            print(ln, file=sys.stderr)
    return out


@contextlib.contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """File descriptor 2 into a temporary file (child processes, e.g. ssh, included);
    yields a function returning what was written."""
    text = ""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield lambda: text
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stderr.flush()
        os.dup2(tmp.fileno(), 2)
        try:
            yield lambda: text
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")


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
