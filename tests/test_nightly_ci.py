"""The example nightly workflow (examples/ci/nightly-github-actions.yml), driven step by
step against the simulated lane: its `run:` scripts in order, with GitHub's step outputs,
`if:` conditions and `${{ ... }}` expressions played by this test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from campaign.sim.testing import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "ci" / "nightly-github-actions.yml"


def tiny_campaign(port: int) -> str:
    return f"""
name: nightly-sim
hypothesis: a deeper draft helps (simulated)
lane: ci-{port}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
  gates: {{retries: 0, pair_retries: 0, min_completed_requests: 2, pass_timeout_s: 120}}
server:
  backend: process
  command: [spec-ab, sim, serve, --port, "{port}"]
  port: {port}
  env: {{SPECAB_SIM_MODEL: ci-model, SPECAB_SIM_TIME_SCALE: "40", SPECAB_SIM_SEED: "1"}}
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  deeper: {{env: {{SPECAB_SIM_DEPTH: "7"}}}}
workloads:
  model: ci-model
  tokenizer: builtin:tokenizer
  warmup: []
  knee: {{concurrency: [1, 2], input_tokens: 64, output_tokens: 32, requests_per_level: 6}}
"""


def _outputs(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


def _expr(text: str, steps: dict[str, dict[str, str]]) -> str:
    def sub(m: re.Match[str]) -> str:
        ref = m.group(1).strip()
        hit = re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+)", ref)
        assert hit, f"the test does not play `${{{{ {ref} }}}}`"
        return steps.get(hit.group(1), {}).get(hit.group(2), "")
    return re.sub(r"\$\{\{(.*?)\}\}", sub, text)


def _runs(cond: str | None, failed: bool, steps: dict[str, dict[str, str]]) -> bool:
    if cond is None:
        return not failed
    cond = cond.replace("always()", "True")
    cond = re.sub(r"steps\.(\w+)\.outputs\.(\w+)",
                  lambda m: repr(steps.get(m.group(1), {}).get(m.group(2), "")), cond)
    return bool(eval(cond.replace("&&", " and ").replace("||", " or ")))


def test_nightly_workflow_steps_in_order(tmp_path: Path) -> None:
    flow: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    steps = flow["jobs"]["campaign"]["steps"]
    work = tmp_path / "repo"
    (work / ".venv" / "bin").mkdir(parents=True)
    exe = Path(sys.executable).parent / "spec-ab"
    (work / ".venv" / "bin" / "spec-ab").symlink_to(exe)
    (work / "campaigns").mkdir()
    (work / "campaigns" / "nightly.yaml").write_text(tiny_campaign(free_port()))
    history = tmp_path / "history"
    # last night's directory, newer on disk than tonight's will be: `ls -dt` would pick it
    decoy = history / "2020-01-01T000000Z-nightly-sim-old"
    decoy.mkdir(parents=True)
    summary = tmp_path / "summary.md"
    env = {**os.environ, "CAMPAIGN": "campaigns/nightly.yaml", "HISTORY": str(history),
           "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "160",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    outputs: dict[str, dict[str, str]] = {}
    ran: list[tuple[str, int, str]] = []
    failed = False
    for i, step in enumerate(steps):
        if "run" not in step or step["run"].strip() == "scripts/setup":
            continue
        if not _runs(step.get("if"), failed, outputs):
            continue
        out_file = tmp_path / f"output-{i}"
        out_file.touch()
        step_env = {**env, "GITHUB_OUTPUT": str(out_file),
                    **{k: _expr(str(v), outputs) for k, v in step.get("env", {}).items()}}
        os.utime(decoy, (time.time() + 3600, time.time() + 3600))
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=work,
                              env=step_env, capture_output=True, text=True, timeout=900)
        ran.append((step["name"], proc.returncode, proc.stdout + proc.stderr))
        if "id" in step:
            outputs[step["id"]] = _outputs(out_file)
        failed = failed or proc.returncode != 0
    names = [n for n, _, _ in ran]
    log = "\n".join(f"## {n} → {c}\n{o[-3000:]}" for n, c, o in ran)
    assert names[0].startswith("Free the lane") and names[-1].startswith("Free the lane"), log
    run_dir = Path(outputs["run"]["run_dir"])
    assert run_dir.parent == history and run_dir != decoy and run_dir.is_dir(), log
    assert (work / "run_dir.txt").read_text().strip() == str(run_dir)
    assert outputs["run"]["run_status"] in ("0", "4"), log
    for name in ("report.json", "report.html"):
        assert (run_dir / name).is_file(), log
    assert (work / "history.json").is_file() and (work / "history.html").is_file(), log
    verdict = outputs["verdict"]["verdict"].split()
    assert verdict and set(verdict) <= {"adopt", "incomplete", "unstable", "loss",
                                        "keep-default"}, log
    code = dict((n, c) for n, c, _ in ran)
    step = next(n for n in code if n.startswith("Verdict"))
    assert code[step] == (0 if verdict == ["adopt"] else 1), log
    assert "verdict:" in summary.read_text()
