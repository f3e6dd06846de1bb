"""The example nightly workflow (examples/ci/nightly-github-actions.yml), driven step by
step against the simulated lane: its `run:` scripts in order, with GitHub's step outputs,
`if:` conditions and `${{ ... }}` expressions played by this test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from campaign.sim.testing import free_port
from tests.runs import ROOT

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
  knee: {{concurrency: [1, 2], input_tokens: 64, output_tokens: 32, requests_per_level: 6,
         one_process: true}}
"""


def _outputs(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


_REF = r"steps\.\w+\.outputs\.\w+|matrix\.\w+|github\.\w+|inputs\.\w+"


def _value(ref: str, steps: dict[str, dict[str, str]], context: dict[str, str] | None) -> str:
    """A `steps.ID.outputs.KEY` (from the steps run so far) or a `matrix.*`/`github.*`
    reference (from `context`, as the runner would fill it)."""
    hit = re.fullmatch(r"steps\.(\w+)\.outputs\.(\w+)", ref)
    if hit:
        return steps.get(hit.group(1), {}).get(hit.group(2), "")
    assert context is not None and ref in context, f"the test does not play `{ref}`"
    return context[ref]


def _expr(text: str, steps: dict[str, dict[str, str]],
          context: dict[str, str] | None = None) -> str:
    def sub(m: re.Match[str]) -> str:
        ref = m.group(1).strip()
        assert re.fullmatch(_REF, ref), f"the test does not play `${{{{ {ref} }}}}`"
        return _value(ref, steps, context)
    return re.sub(r"\$\{\{(.*?)\}\}", sub, text)


def _runs(cond: str | None, failed: bool, steps: dict[str, dict[str, str]],
          context: dict[str, str] | None = None) -> bool:
    if cond is None:
        return not failed
    cond = cond.replace("always()", "True")
    cond = re.sub(_REF, lambda m: repr(_value(m.group(0), steps, context)), cond)
    return bool(eval(cond.replace("&&", " and ").replace("||", " or ")))


@dataclass(frozen=True)
class StepRun:
    """One `run:` step as the runner ran it."""

    name: str
    code: int
    output: str
    start: float
    end: float


def run_script(script: str, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """`script` as a step's `run:` (bash -eo pipefail), in its own process group: on a
    timeout the group gets SIGTERM (spec-ab stops its servers), then SIGKILL."""
    proc = subprocess.Popen(["bash", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise
    return proc.returncode, out


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the process's group, SIGKILL after 60 s; reaps it."""
    for sig, wait in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def drive_job(steps: list[dict[str, Any]], *, cwd: Path, env: dict[str, str], scratch: Path,
              context: dict[str, str] | None = None,
              uses: Callable[[str, dict[str, str]], None] | None = None,
              before: Callable[[], None] | None = None, timeout: float = 900,
              ) -> tuple[list[StepRun], dict[str, dict[str, str]]]:
    """A job's steps in order, as GitHub's runner would: `if:` (default: only after
    success), `${{ }}` in `env:`/`with:`, `$GITHUB_OUTPUT` per step into `steps.ID.outputs`.
    `uses:` steps other than checkout go to `uses(action, with)` (skipped without it);
    `scripts/setup` is skipped (the test's interpreter is the set-up one)."""
    scratch.mkdir(parents=True, exist_ok=True)
    outputs: dict[str, dict[str, str]] = {}
    ran: list[StepRun] = []
    failed = False
    for i, step in enumerate(steps):
        action = str(step.get("uses", ""))
        if action.startswith("actions/checkout@") or (
                not action and str(step.get("run", "")).strip() in ("", "scripts/setup")):
            continue
        if not _runs(step.get("if"), failed, outputs, context):
            continue
        if action:
            if uses is not None:
                uses(action, {k: _expr(str(v), outputs, context)
                              for k, v in step.get("with", {}).items()})
            continue
        out_file = scratch / f"output-{i}"
        out_file.touch()
        step_env = {**env, "GITHUB_OUTPUT": str(out_file),
                    **{k: _expr(str(v), outputs, context) for k, v in step.get("env", {}).items()}}
        if before is not None:
            before()
        start = time.monotonic()
        code, output = run_script(step["run"], cwd, step_env, timeout)
        ran.append(StepRun(step["name"], code, output, start, time.monotonic()))
        if "id" in step:
            outputs[step["id"]] = _outputs(out_file)
        failed = failed or code != 0
    return ran, outputs


def job_log(ran: list[StepRun]) -> str:
    return "\n".join(f"## {r.name} → {r.code}\n{r.output[-3000:]}" for r in ran)


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
    ran, outputs = drive_job(
        steps, cwd=work, env=env, scratch=tmp_path / "outputs",
        before=lambda: os.utime(decoy, (time.time() + 3600, time.time() + 3600)))
    names = [r.name for r in ran]
    log = job_log(ran)
    assert names[0].startswith("Free the lane") and names[-1].startswith("Free the lane"), log
    check = ran[1]  # before the run: each launch booted once, up to ready, and stopped
    assert check.name.startswith("Check") and check.code == 0, log
    assert "--boot" in next(s["run"] for s in steps if s.get("name") == check.name)
    assert "✓ control: ready in" in check.output and "✓ deeper: ready in" in check.output, log
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
    code = {r.name: r.code for r in ran}
    step = next(n for n in code if n.startswith("Verdict"))
    assert code[step] == (0 if verdict == ["adopt"] else 1), log
    assert "verdict:" in summary.read_text()
