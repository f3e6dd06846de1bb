"""Sharded campaigns end to end on this machine: two simulated lanes on two ports, their
shards run by two `spec-ab run --lane` processes at the same time, pooled by `spec-ab
report` into one verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from campaign.sim.testing import free_port
from tests.runs import ROOT

pytestmark = pytest.mark.timing  # verdicts on measured speed

SPEC_AB = [sys.executable, "-m", "campaign"]


def campaign(*, lanes: dict[str, dict[str, str]] | None, pairs: int, candidate_env: str,
             control_depth: int = 5, name: str = "lanes", scale: int = 1,
             requests: int = 16) -> str:
    """A small campaign deciding on knee c1; `lanes` maps a lane to its sim env (each lane
    gets its own free port), None makes it a plain one-lane campaign. The sim runs at real
    time (`scale` 1): a host running the suite in parallel then delays its tokens by a
    small share, where at 3× it took a third of the candidate's 30%."""
    port = free_port()
    if lanes is None:
        where = "lane: one\n"
        command = f'[spec-ab, sim, serve, --port, "{port}"]'
    else:
        rows = []
        for lane, env in lanes.items():
            p = free_port()
            env_text = ", ".join(f"{k}: {v}" for k, v in env.items())
            rows.append(f'  {lane}: {{server: {{port: {p}, command: [--port, "{p}"], '
                        f"env: {{{env_text}}}}}}}")
        where = "lanes:\n" + "\n".join(rows) + "\n"
        command = "[spec-ab, sim, serve]"
    return f"""name: {name}
hypothesis: the candidate decodes faster (simulated)
{where}preregistration:
  pairs: {pairs}
  decision_cells: [{{workload: knee, level: c1}}]
  guardrails: []
  gates: {{retries: 1, pair_retries: 0, min_completed_requests: 2, min_output_tokens: 0,
          pass_timeout_s: 120}}
server:
  backend: process
  command: {command}
  port: {port}
  env: {{SPECAB_SIM_MODEL: m, SPECAB_SIM_TIME_SCALE: "{scale}", SPECAB_SIM_SEED: "3",
        SPECAB_SIM_DRIFT_SIGMA: "0.003", SPECAB_SIM_DEPTH: "{control_depth}"}}
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  cand: {{env: {candidate_env}}}
workloads:
  model: m
  tokenizer: builtin:tokenizer
  warmup: []
  knee: {{concurrency: [1], input_tokens: 64, output_tokens: 96, requests_per_level: {requests}}}
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_shards(path: Path, lanes: list[str], out: Path) -> list[Path]:
    """Every lane's shard at the same time, one process each; their run directories."""
    out.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen(
        [*SPEC_AB, "run", str(path), "--lane", lane, "--out", str(out),
         "--run-dir-file", str(out / f"{lane}.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        for lane in lanes]
    try:
        logs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode in (0, 4), log[-3000:]
    return [Path((out / f"{lane}.txt").read_text().strip()) for lane in lanes]


def report_json(*dirs: Path) -> dict[str, Any]:
    done = subprocess.run([*SPEC_AB, "report", *map(str, dirs), "--format", "json"],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def decision(doc: dict[str, Any]) -> dict[str, Any]:
    (cell,) = [c for c in doc["cells"] if c["decision_cell"]]
    return cell


def test_two_lanes_in_parallel_pool_like_one_lane_of_as_many_pairs(tmp_path: Path) -> None:
    """A known effect (the candidate's sim runs 1.3× faster): two lanes of one pair each,
    run at the same time and pooled, judge it as one lane of two pairs does."""
    effect = '{SPECAB_SIM_EFFECT: "1.3"}'
    sharded = tmp_path / "sharded.yaml"
    sharded.write_text(campaign(lanes={"a": {}, "b": {"SPECAB_SIM_SEED": '"4"'}}, pairs=1,
                                candidate_env=effect))
    shards = run_shards(sharded, ["a", "b"], tmp_path / "shards")
    assert [d.name.split("-")[4] for d in shards] == ["a", "b"]  # <date>-lanes-<lane>-<id>
    pooled = report_json(*shards)
    cell = decision(pooled)
    assert cell["n"] == 2 and {p["lane"] for p in cell["pairs"]} == {"a", "b"}
    assert [s["lane"] for s in pooled["lanes"]["shards"]] == ["a", "b"]
    assert pooled["run"]["pairs_planned"] == 2 and pooled["lanes"]["missing"] == []

    single = tmp_path / "single.yaml"
    single.write_text(campaign(lanes=None, pairs=2, candidate_env=effect))
    done = subprocess.run([*SPEC_AB, "run", str(single), "--out", str(tmp_path / "one")],
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    (one_dir,) = (tmp_path / "one").iterdir()
    one_doc = report_json(one_dir)
    one = decision(one_doc)
    # the same decision, and the same change within the lanes' noise (a few percent here;
    # each pair of a lane is one same-window comparison, wherever it ran)
    assert (pooled["decision"], one_doc["decision"]) == ("adopt", "adopt"), (
        pooled["reasons"], one_doc["reasons"])
    assert abs(cell["change"] - one["change"]) < 0.06, (cell["change"], one["change"])
    assert 0.15 < cell["change"] < 0.40


def test_lanes_where_the_candidate_wins_and_loses_are_flagged(tmp_path: Path) -> None:
    """Deeper drafts (7 against 1) win on a lane whose prompts accept like shell output
    and lose on one whose prompts accept like prose: the pooled verdict says the lanes
    disagree instead of averaging them."""
    path = tmp_path / "het.yaml"
    path.write_text(campaign(
        lanes={"shell-box": {"SPECAB_SIM_FORCE_CLASS": "shell"},
               "prose-box": {"SPECAB_SIM_FORCE_CLASS": "prose"}},
        pairs=2, candidate_env='{SPECAB_SIM_DEPTH: "7"}', control_depth=1))
    doc = report_json(*run_shards(path, ["shell-box", "prose-box"], tmp_path / "shards"))
    cell = decision(doc)
    assert "lanes-disagree" in cell["flags"] and doc["decision"] == "keep-default"
    (by_cell,) = doc["lanes"]["decision_cells"]
    changes = {x["lane"]: x["change"] for x in by_cell["by_lane"]}
    assert changes["shell-box"] > 0.10 and changes["prose-box"] < 0, changes
    assert by_cell["agree"] is False
