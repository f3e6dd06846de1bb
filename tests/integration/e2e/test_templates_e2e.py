"""The sim template runs anywhere: `spec-ab init` into an empty folder (not the
repository), `spec-ab run`, `spec-ab report` — real simulated servers, real AIPerf."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.sim.testing import free_port
from tests.runs import ROOT

pytestmark = pytest.mark.integration

SPEC_AB = [sys.executable, "-m", "campaign"]


def test_sim_template_inits_runs_and_reports_in_an_empty_folder(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "160",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SPEC_AB, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)

    made = cli("init", "--template", "sim", "-o", "campaign.yaml")
    assert made.returncode == 0, made.stderr
    path = tmp_path / "campaign.yaml"
    path.write_text(path.read_text().replace("18767", str(free_port())))  # a free port here
    checked = cli("check", "campaign.yaml", timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = cli("run", "campaign.yaml", "--skip-preflight", "--run-dir-file", "run_dir.txt",
              timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    last = ran.stdout.strip().splitlines()[-1]
    assert last.startswith("run_dir=")
    run_dir = Path(last.removeprefix("run_dir="))
    assert (tmp_path / "run_dir.txt").read_text().strip() == str(run_dir)
    assert run_dir.parent == tmp_path / "results"
    assert "about" in ran.stdout and "in all" in ran.stdout  # the ETA from the start
    reported = cli("report", str(run_dir), timeout=120)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert "adopt" in reported.stdout or "keep-default" in reported.stdout
