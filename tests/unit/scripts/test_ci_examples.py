"""The sharded-campaign examples as files (examples/ci/sharded-github-actions.yml and
examples/ci/sharded-slurm.sh): both parse, name `--lane` where they must and agree on the
lanes; the Slurm script refuses a task without a lane. Playing them against two simulated
lanes is tests/e2e/test_sharded_ci.py."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runs import ROOT

WORKFLOW = ROOT / "examples" / "ci" / "sharded-github-actions.yml"
SLURM = ROOT / "examples" / "ci" / "sharded-slurm.sh"


def slurm_lanes() -> list[str]:
    hit = re.search(r"^LANES=\(([^)]*)\)", SLURM.read_text(), re.M)
    assert hit, "no LANES=(...) array in the Slurm script"
    return hit.group(1).split()


def _commands(script: str, tool: str) -> list[str]:
    """Every command line of `script` that calls `tool` (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [line.strip() for line in joined.splitlines()
            if re.search(rf"{re.escape(tool)}\s+(-q\s+)?\w", line)
            and not line.lstrip().startswith("#")]


def _subcommand(line: str, tool: str) -> str:
    hit = re.search(rf"{re.escape(tool)}\s+(?:-q\s+)?(\w+)", line)
    assert hit, line
    return hit.group(1)


def test_example_files_parse_and_name_the_lane() -> None:
    flow: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    shard_job, pool_job = flow["jobs"]["shard"], flow["jobs"]["pool"]
    assert shard_job["strategy"]["fail-fast"] is False
    lanes = shard_job["strategy"]["matrix"]["lane"]
    assert isinstance(lanes, list) and len(lanes) >= 2
    assert "${{ matrix.lane }}" in shard_job["runs-on"]
    assert pool_job["needs"] == "shard" and pool_job["if"] == "always()"
    uses = {s["uses"].split("@")[0]: s for job in (shard_job, pool_job)
            for s in job["steps"] if "uses" in s}
    assert "actions/upload-artifact" in uses and "actions/download-artifact" in uses
    upload = next(s for s in shard_job["steps"] if "upload-artifact" in s.get("uses", ""))
    download = next(s for s in pool_job["steps"] if "download-artifact" in s.get("uses", ""))
    assert "${{ matrix.lane }}" in upload["with"]["name"]
    assert fnmatch.fnmatchcase(upload["with"]["name"].replace("${{ matrix.lane }}", lanes[0]),
                               download["with"]["pattern"])
    seen: dict[str, set[str]] = {"shard": set(), "pool": set()}
    for job_name, job in (("shard", shard_job), ("pool", pool_job)):
        for step in job["steps"]:
            for line in _commands(step.get("run", ""), "spec-ab"):
                sub = _subcommand(line, "spec-ab")
                seen[job_name].add(sub)
                if sub in ("run", "check"):
                    assert '--lane "$LANE"' in line, line
                if sub == "report":
                    assert "--lane" not in line, line
    assert seen["shard"] == {"clean", "check", "run"}
    assert seen["pool"] == {"report"}

    script = SLURM.read_text()
    assert slurm_lanes() == lanes, "the two examples name different lanes"
    assert "set -euo pipefail" in script and "--dependency=afterany:" in script
    subs = set()
    for line in _commands(script, '"$SPEC_AB"'):
        sub = _subcommand(line, '"$SPEC_AB"')
        subs.add(sub)
        if sub in ("run", "check"):
            assert '--lane "$lane"' in line, line
    assert subs == {"clean", "check", "run", "report"}
    proc = subprocess.run(["bash", "-n", str(SLURM)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("task", [None, "2"])
def test_slurm_script_refuses_a_task_without_a_lane(tmp_path: Path, task: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SHARDS=str(tmp_path / "shards"), SPEC_AB="false")
    if task is not None:
        env["SLURM_ARRAY_TASK_ID"] = task
    proc = subprocess.run(["bash", str(SLURM)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "array" in proc.stderr, proc.stderr
    proc = subprocess.run(["bash", str(SLURM), "pool"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "usage" in proc.stderr, proc.stderr
