"""What a run was measured with: versions, host, GPU facts, file hashes, environment.

Secrets never reach the results: env values whose name contains TOKEN, KEY, SECRET or
PASSWORD (any case) are replaced by `<redacted>` (`campaign.secrets`).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from campaign import __version__, secrets
from campaign.campaignfile import Campaign, DockerLaunch, local_files
from campaign.run.loadgen import aiperf_version
from campaign.textfiles import sha256_file

SECRET_RE = secrets.SECRET_RE
REDACTED = secrets.REDACTED


def redact(env: dict[str, str]) -> dict[str, str]:
    return secrets.redact(env)


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
        "runner_env": redact({k: v for k, v in os.environ.items()
                              if k.startswith(("SPECAB_", "CUDA_", "VLLM_", "HF_", "NCCL_"))}),
    }
