"""`spec-ab check --boot` through the real CLI on the simulated lane (issue 25): a
candidate that passes an unknown flag to `spec-ab sim serve` fails the check (exit 3) with
the server's own error, before anything is registered; an A/A twin of the control boots
once with it; nothing is left running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from campaign.markers import RUN_ENV, SCOPE_ENV
from campaign.sim.testing import free_port
from tests.runs import ROOT


def campaign(port: int) -> str:
    return f"""
name: boot-check
hypothesis: a deeper draft helps (simulated)
lane: boot-check-{port}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
server:
  backend: process
  command: [spec-ab, sim, serve, --port, "{port}"]
  port: {port}
  env: {{SPECAB_SIM_MODEL: m, SPECAB_SIM_TIME_SCALE: "40", SPECAB_SIM_SEED: "1"}}
  readiness: {{timeout_s: 60}}
arms:
  control: {{}}
  twin: {{}}
  deeper: {{args: [--depht, "7"]}}
workloads:
  model: m
  tokenizer: builtin:tokenizer
  knee: {{concurrency: [1], input_tokens: 16, output_tokens: 8, requests_per_level: 2}}
"""


def leftovers() -> list[int]:
    """Processes this test's boot check started that still run (its leftover scope: a boot
    check of another test beside it is not this one's)."""
    out = []
    scope = os.environ[SCOPE_ENV]
    for p in psutil.process_iter(["pid", "environ"]):
        try:
            env = p.info.get("environ") or {}
            if (env.get(RUN_ENV) or "").startswith("check-boot-") and \
                    env.get(SCOPE_ENV) == scope:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


def test_check_boot_fails_on_an_unknown_flag_before_anything_is_registered(
        tmp_path: Path) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text(campaign(free_port()))
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "campaign", "check", str(path), "--boot"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "ready to run" in out  # the preflight passed first
    assert "boot check (each distinct launch once" in out
    ready = next(line for line in out.splitlines() if line.startswith("  ✓ control, twin: "))
    assert ready.endswith(" s, then stopped")
    failed = out[out.index("  ✗ deeper: failed after"):]
    assert "server exited with code 2 while booting" in failed
    assert "No such option: --depht" in failed  # the server's own log line
    assert "boot check: 1 of 2 launch(es) did not become ready (deeper); nothing was " \
        "registered" in out
    assert not (tmp_path / "results").exists()
    assert leftovers() == []
