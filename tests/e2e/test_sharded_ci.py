"""The sharded-campaign drivers (examples/ci/sharded-github-actions.yml and
examples/ci/sharded-slurm.sh), driven against two simulated lanes on this machine: each
lane's shard at the same time, then the pooling step, whose JSON report must hold one
verdict over both lanes' pairs.

The workflow is played as test_nightly_ci plays the nightly one (its `drive_job`), plus
the matrix (one job per `matrix.lane`, in threads) and the artifacts: upload and download
are copied between folders with actions/upload-artifact@v4's and download-artifact@v4's
rules (the least common ancestor of the paths is the artifact's root; `pattern` picks
artifacts; `merge-multiple` unpacks them side by side, else one folder per artifact).
The Slurm script runs with plain bash, SLURM_ARRAY_TASK_ID set by hand.

The check that both files parse and name `--lane` where they must starts nothing: it is
tests/unit/scripts/test_ci_examples.py."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from campaign.sim.testing import free_port
from tests.e2e.test_nightly_ci import (
    StepRun,
    _expr,
    _runs,
    drive_job,
    job_log,
    stop_group,
)
from tests.runs import ROOT
from tests.unit.scripts.test_ci_examples import SLURM, WORKFLOW, slurm_lanes

CAMPAIGN = "campaigns/sharded.yaml"
CONDITIONS = {"incomplete", "unstable", "loss", "keep-default"}
STEP_TIMEOUT = 300.0


def sharded_campaign(ports: dict[str, int]) -> str:
    """test_nightly_ci's tiny campaign with a `lanes:` table: one pair per lane."""
    lanes = "\n".join(f'  {lane}: {{description: sim on {port}, '
                      f'server: {{port: {port}, command: [--port, "{port}"]}}}}'
                      for lane, port in ports.items())
    return f"""
name: sharded-sim
hypothesis: a deeper draft helps (simulated)
lanes:
{lanes}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
  # what is tested is the drivers: the two lanes' 2 pooled pairs of 6 requests cannot show
  # a p99 guardrail (`check` would refuse it), so the failure share guards alone
  guardrails: [{{metric: error_rate, max_worsening: 0.0, absolute: true}}]
  gates: {{retries: 0, pair_retries: 0, min_completed_requests: 2, pass_timeout_s: 120}}
server:
  backend: process
  command: [spec-ab, sim, serve]
  port: {next(iter(ports.values()))}
  env: {{SPECAB_SIM_MODEL: ci-model, SPECAB_SIM_TIME_SCALE: "40", SPECAB_SIM_SEED: "1"}}
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  deeper: {{env: {{SPECAB_SIM_DEPTH: "7"}}}}
workloads:
  model: ci-model
  tokenizer: builtin:tokenizer
  warmup: []
  knee: {{concurrency: [1], input_tokens: 64, output_tokens: 32, requests_per_level: 6}}
"""


def _checkout(path: Path, campaign: str) -> Path:
    """A runner's checkout: the campaign file and `.venv/bin/spec-ab` (this interpreter's,
    running this worktree's code through PYTHONPATH)."""
    (path / ".venv" / "bin").mkdir(parents=True)
    (path / ".venv" / "bin" / "spec-ab").symlink_to(Path(sys.executable).parent / "spec-ab")
    (path / "campaigns").mkdir()
    (path / CAMPAIGN).write_text(campaign)
    return path


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "CAMPAIGN": CAMPAIGN, "COLUMNS": "160",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            **extra}


@pytest.fixture
def cleanup(tmp_path: Path) -> Iterator[list[Path]]:
    """Checkouts whose campaign's leftovers `spec-ab clean` removes at the end, pass or
    fail (a killed runner's simulated servers)."""
    checkouts: list[Path] = []
    yield checkouts
    for work in checkouts:
        subprocess.run([str(work / ".venv" / "bin" / "spec-ab"), "clean", CAMPAIGN],
                       cwd=work, env=_env(), capture_output=True, timeout=120)


class Artifacts:
    """actions/upload-artifact@v4 and download-artifact@v4, as folder copies."""

    @staticmethod
    def flag(args: dict[str, str], key: str) -> bool:
        return args.get(key, "false").lower() == "true"  # YAML's true arrives as "True"

    def __init__(self, store: Path) -> None:
        self.store = store
        self.names: list[str] = []

    def play(self, action: str, args: dict[str, str], cwd: Path) -> None:
        if action == "actions/upload-artifact@v4":
            self.upload(args, cwd)
        elif action == "actions/download-artifact@v4":
            self.download(args, cwd)
        else:
            raise AssertionError(f"the test does not play {action}")

    def upload(self, args: dict[str, str], cwd: Path) -> None:
        name = args["name"]
        dest = self.store / name
        if dest.exists():
            assert self.flag(args, "overwrite"), f"artifact {name} uploaded twice"
            shutil.rmtree(dest)
        paths = [cwd / p.strip() for p in args["path"].splitlines() if p.strip()]
        root = Path(os.path.commonpath(paths))
        if root.is_file():
            root = root.parent
        hidden = self.flag(args, "include-hidden-files")
        files = 0
        for path in paths:
            for f in [path] if path.is_file() else sorted(path.rglob("*")):
                rel = f.relative_to(root)
                if not f.is_file() or (not hidden and any(
                        part.startswith(".") for part in rel.parts)):
                    continue
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest / rel)
                files += 1
        assert files, f"artifact {name}: no files in {args['path']}"
        self.names.append(name)

    def download(self, args: dict[str, str], cwd: Path) -> None:
        target = cwd / args.get("path", ".")
        picked = sorted(n for n in os.listdir(self.store)
                        if fnmatch.fnmatchcase(n, args.get("pattern", "*")))
        for name in picked:
            into = target if self.flag(args, "merge-multiple") else target / name
            shutil.copytree(self.store / name, into, dirs_exist_ok=True)


def _pooled_json_holds_both_lanes(rep: dict[str, Any], lanes: list[str]) -> None:
    assert rep["lanes"]["lanes"] == lanes
    assert sorted(s["lane"] for s in rep["lanes"]["shards"]) == sorted(lanes)
    assert rep["lanes"]["missing"] == []
    for shard in rep["lanes"]["shards"]:
        assert f"-sharded-sim-{shard['lane']}-" in shard["run_id"], shard
    cells = [c for c in rep["cells"] if c["decision_cell"]]
    assert len(cells) == 1, cells
    cell = cells[0]
    assert (cell["workload"], cell["level"]) == ("knee", "c1")
    assert cell["n"] == 1 * len(lanes), cell
    assert sorted(p["lane"] for p in cell["pairs"]) == sorted(lanes), cell["pairs"]


def _verdict_matches_json(verdict: list[str], rep: dict[str, Any]) -> None:
    """The conditions `--fail-on` named are the ones the pooled JSON shows."""
    assert verdict and (verdict == ["adopt"] or set(verdict) <= CONDITIONS), verdict
    decision = [c for c in rep["cells"] if c["decision_cell"]]
    holds = {
        "keep-default": rep["decision"] == "keep-default",
        "incomplete": bool(rep["run"]["incomplete"]),
        "loss": any(c["verdict"] == "loss" for c in decision),
        "unstable": any({"window-drift", "high-variance"} & set(c["flags"]) for c in decision),
    }
    assert {c for c, h in holds.items() if h} == set(verdict) - {"adopt"}, (verdict, holds)
    assert (verdict == ["adopt"]) == (rep["decision"] == "adopt")


def _overlap(a: StepRun, b: StepRun) -> bool:
    return a.start < b.end and b.start < a.end


def test_sharded_workflow_matrix_then_pool(tmp_path: Path, cleanup: list[Path]) -> None:
    flow: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    shard_job, pool_job = flow["jobs"]["shard"], flow["jobs"]["pool"]
    lanes: list[str] = shard_job["strategy"]["matrix"]["lane"]
    campaign = sharded_campaign({lane: free_port() for lane in lanes})
    artifacts = Artifacts(tmp_path / "artifacts")
    artifacts.store.mkdir()
    github = {"github.run_id": "4242"}
    gh_env = {"GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1"}

    def lane_job(lane: str) -> tuple[list[StepRun], dict[str, dict[str, str]]]:
        runner = tmp_path / f"runner-{lane}"
        work = _checkout(runner / "work", campaign)
        cleanup.append(work)
        context = {**github, "matrix.lane": lane}
        env = _env(SHARDS=str(runner / "shards"), GITHUB_STEP_SUMMARY=str(runner / "summary"),
                   **gh_env, **{k: _expr(str(v), {}, context)
                                for k, v in shard_job.get("env", {}).items()})
        return drive_job(shard_job["steps"], cwd=work, env=env, scratch=runner / "outputs",
                         context=context, timeout=STEP_TIMEOUT,
                         uses=lambda action, args: artifacts.play(action, args, work))

    t0 = time.monotonic()
    with ThreadPoolExecutor(len(lanes)) as pool:  # the matrix: every lane at once
        jobs = dict(zip(lanes, pool.map(lane_job, lanes), strict=True))
    shards_s = time.monotonic() - t0
    logs = "\n".join(f"# lane {lane}\n{job_log(ran)}" for lane, (ran, _) in jobs.items())
    runs: list[StepRun] = []
    for lane, (ran, outputs) in jobs.items():
        names = [r.name for r in ran]
        assert names[0].startswith("Free the lane") and names[-1].startswith("Free the lane")
        assert all(r.code == 0 for r in ran), logs
        assert outputs["run"]["run_status"] in ("0", "4"), logs
        run_dir = Path(outputs["run"]["run_dir"])
        assert run_dir.parent == Path(outputs["run"]["out"]) and f"-{lane}-" in run_dir.name
        runs.append(next(r for r in ran if r.name == "Run this lane's shard"))
    assert _overlap(runs[0], runs[1]), f"the lanes' shards ran one after the other\n{logs}"
    assert sorted(artifacts.names) == sorted(f"shard-{lane}" for lane in lanes)

    # the pool job: `needs: shard` with `if: always()`
    any_failed = any(r.code for ran, _ in jobs.values() for r in ran)
    assert _runs(pool_job.get("if"), any_failed, {}, github)
    work = _checkout(tmp_path / "pool" / "work", campaign)
    summary = tmp_path / "pool" / "summary.md"
    ran, outputs = drive_job(pool_job["steps"], cwd=work,
                             env=_env(GITHUB_STEP_SUMMARY=str(summary), **gh_env),
                             scratch=tmp_path / "pool" / "outputs", context=github,
                             timeout=STEP_TIMEOUT,
                             uses=lambda action, args: artifacts.play(action, args, work))
    log = logs + "\n# pool\n" + job_log(ran)
    code = {r.name: r.code for r in ran}
    report = next(n for n in code if n.startswith("Pooled report"))
    assert code[report] == 0, log
    downloaded = sorted(p.name for p in (work / "shards").iterdir())
    assert downloaded == sorted(Path(o["run"]["run_dir"]).name for _, o in jobs.values()), log
    rep = json.loads((work / "pooled" / "report.json").read_text())
    _pooled_json_holds_both_lanes(rep, lanes)
    assert (work / "pooled" / "report.html").is_file()
    assert f"spec-ab-pooled-{github['github.run_id']}" in artifacts.names, log
    verdict = outputs["verdict"]["verdict"].split()
    _verdict_matches_json(verdict, rep)
    step = next(n for n in code if n.startswith("Verdict"))
    assert code[step] == (0 if verdict == ["adopt"] else 1), log
    text = summary.read_text()
    assert "verdict:" in text and "Lanes" in text, log
    print(f"\nshards (both lanes at once): {shards_s:.1f} s")


def _slurm(args: list[str], work: Path, env: dict[str, str], log: Path,
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", str(SLURM), *args], cwd=work, env=env, text=True,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait(proc: subprocess.Popen[str], deadline: float) -> int:
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop_group(proc)
        raise


def test_slurm_array_tasks_then_pool(tmp_path: Path, cleanup: list[Path]) -> None:
    lanes = slurm_lanes()
    work = _checkout(tmp_path / "work", sharded_campaign({lane: free_port() for lane in lanes}))
    cleanup.append(work)
    shards = tmp_path / "shards"
    env = _env(SHARDS=str(shards), SLURM_ARRAY_JOB_ID="777", SLURM_SUBMIT_DIR=str(work))
    logs = {i: tmp_path / f"task-{i}.log" for i in range(len(lanes))}
    procs = {i: _slurm([], work, {**env, "SLURM_ARRAY_TASK_ID": str(i)}, logs[i])
             for i in range(len(lanes))}  # the array's tasks, at the same time
    deadline = time.monotonic() + 2 * STEP_TIMEOUT
    try:
        codes = {i: _wait(p, deadline) for i, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                stop_group(p)
    text = "\n".join(f"# task {i}\n{logs[i].read_text()[-3000:]}" for i in logs)
    assert codes == dict.fromkeys(procs, 0), text
    run_dirs = {lane: Path((shards / "777" / f"{lane}.run_dir").read_text().strip())
                for lane in lanes}
    assert all(d.parent == shards / "777" and f"-{lane}-" in d.name
               for lane, d in run_dirs.items()), run_dirs

    pool_log = tmp_path / "pool.log"
    code = _wait(_slurm(["pool", "777"], work, env, pool_log), time.monotonic() + STEP_TIMEOUT)
    text += "\n# pool\n" + pool_log.read_text()
    pooled = shards / "777" / "pooled"
    rep = json.loads((pooled / "report.json").read_text())
    _pooled_json_holds_both_lanes(rep, lanes)
    assert (pooled / "report.md").is_file() and (pooled / "report.html").is_file()
    verdict = (pooled / "verdict.txt").read_text().removeprefix("verdict:").split()
    _verdict_matches_json(verdict, rep)
    assert code == (0 if verdict == ["adopt"] else 4), text
