"""What a run was measured with: versions, host, GPU facts, file hashes, environment.

Secrets never reach the results: an arm's env values whose name contains TOKEN, KEY,
SECRET or PASSWORD (any case) are replaced by `<redacted>` (`campaign.secrets`). The
runner's own environment (`runner_env`: the variables under SPECAB_, CUDA_, VLLM_, HF_,
NCCL_) keeps a value only when its name is on `RUNNER_ENV_ALLOWED` and is not
secret-looking; every other such variable is listed as `<not recorded>` (that it was set
is a fact worth keeping, its value is not), and a URL's password is redacted in any value
kept (`HF_ENDPOINT=https://u:<redacted>@mirror`).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

from campaign import __version__, secrets
from campaign.campaignfile import Campaign, DockerLaunch, local_files
from campaign.run.measure.loadgen import aiperf_version
from campaign.textfiles import sha256_file

SECRET_RE = secrets.SECRET_RE
REDACTED = secrets.REDACTED
NOT_RECORDED = "<not recorded>"
RUNNER_ENV_PREFIXES = ("SPECAB_", "CUDA_", "VLLM_", "HF_", "NCCL_")
RUNNER_ENV_ALLOWED = re.compile(
    r"CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|CUDA_LAUNCH_BLOCKING|CUDA_HOME"
    r"|HF_HUB_OFFLINE|HF_DATASETS_OFFLINE|HF_HUB_ENABLE_HF_TRANSFER|HF_ENDPOINT|HF_HOME"
    r"|HF_HUB_CACHE|VLLM_[A-Z0-9_]+|SPECAB_[A-Z0-9_]+|NCCL_[A-Z0-9_]+")
"""Runner variables whose value the manifest keeps (a secret-looking name never)."""


def redact(env: dict[str, str]) -> dict[str, str]:
    return secrets.redact(env)


def runner_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's variables under `RUNNER_ENV_PREFIXES`: allowed values kept (a URL's
    password redacted), every other one `<not recorded>`."""
    source = dict(os.environ) if environ is None else environ
    return {k: (secrets.redact_url(v) if RUNNER_ENV_ALLOWED.fullmatch(k)
                and not secrets.is_secret(k) else NOT_RECORDED)
            for k, v in sorted(source.items()) if k.startswith(RUNNER_ENV_PREFIXES)}


def gpu_facts() -> list[dict[str, str]] | None:
    """GPUs as `nvidia-smi` reports them; None where there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    fields = "index,name,driver_version,memory.total,memory.used,utilization.gpu"
    try:
        out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        return [{"error": str(exc)}]
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False))
            for line in out.splitlines() if line.strip()]


def bind_mount_hashes(campaign: Campaign) -> dict[str, dict[str, str]]:
    """arm → {host file: sha256} for every bind-mounted local file (docker arms)."""
    mounts = [f for f in local_files(campaign) if f.kind == "mount" and f.resolved.is_file()]
    return {
        arm: {str(f.resolved): sha256_file(f.resolved) for f in mounts if f.arm == arm}
        for arm, launch in campaign.launches.items() if isinstance(launch, DockerLaunch)
    }


def collect(campaign: Campaign) -> dict[str, Any]:
    envs: dict[str, dict[str, str]] = {}
    for arm, launch in campaign.launches.items():
        envs[arm] = redact(dict(launch.env))
    return {
        "tool": {"name": "spec-ab", "version": __version__},
        "aiperf": aiperf_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "gpus": gpu_facts(),
        "campaign": {"name": campaign.name, "lane": campaign.lane,
                     **({"lanes": campaign.lane_names} if campaign.sharded else {}),
                     "source": str(campaign.source), "hypothesis": campaign.hypothesis},
        "bind_mounts": bind_mount_hashes(campaign),
        "arm_env": envs,
        "runner_env": runner_env(),
    }
