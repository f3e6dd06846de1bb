"""Load as agents send it, whole (issue 41): a campaign with a rate sweep, a short trace and
agent sessions on the simulated lane — real servers, real AIPerf 0.13, the real CLI.

What it shows: AIPerf replays each schedule file spec-ab wrote at its timestamps (the
achieved rate within 5% of the schedule's, send lag p99 well under the 250 ms gate), both
arms of the pair replay byte-identical files (the sha256 each pass journals is the one the
`registered` line recorded), a sessions pass journals its per-turn figures with the
simulated lane's acceptance by turn, and `report` reads the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.sim.testing import free_port
from tests.runs import ROOT

SPEC_AB = [sys.executable, "-m", "campaign"]

CAMPAIGN = """
name: open-loop
hypothesis: depth 7 against depth 5 under open-loop load
lane: sim
preregistration:
  primary_metric: output_token_throughput
  pairs: 1
  seed: 7
  decision_cells: [{workload: rate, level: r2}]
  guardrails: [{metric: error_rate, max_worsening: 0.0, absolute: true}]
  slo: {ttft_ms: 500}
  gates: {min_completed_requests: 2, pass_timeout_s: 120, retries: 0}
server:
  backend: process
  command: [spec-ab, sim, serve, --host, 127.0.0.1, --port, "PORT"]
  host: 127.0.0.1
  port: PORT
  env: {SPECAB_SIM_MODEL: sim, SPECAB_SIM_MAX_NUM_SEQS: "4", SPECAB_SIM_SEED: "7"}
arms:
  control: {}
  depth7: {env: {SPECAB_SIM_DEPTH: "7"}}
workloads:
  model: sim
  tokenizer: builtin:tokenizer
  warmup: []
  rate: {rates: [2, 6], requests_per_level: 10, input_tokens: 64, output_tokens: 16}
  trace: {files: {mini: mini.jsonl}}
  sessions:
    fixtures: {shell: builtin:sessions/shell}
    sessions: 2
    concurrency: 2
    output_tokens: 16
"""


@pytest.mark.e2e
def test_rate_trace_and_sessions_run_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "160",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN.replace("PORT", str(free_port())))
    (tmp_path / "mini.jsonl").write_text("".join(
        json.dumps({"timestamp": t, "input_length": 32, "output_length": 8 + t // 500}) + "\n"
        for t in (0, 100, 150, 200, 1200, 1300, 2500, 2600, 2650, 3000)))

    def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SPEC_AB, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)

    ran = cli("run", "campaign.yaml", timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_dir = next((tmp_path / "results").iterdir())
    events = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
    registered = events[0]["schedules"]
    assert sorted(registered) == ["rate-r2", "rate-r6", "trace-mini"]
    passes = [e for e in events if e["event"] == "pass"]
    assert passes and all(e["valid"] for e in passes), [e["problems"] for e in passes]
    for e in passes:
        if e["workload"] in ("rate", "trace"):
            assert e["schedule_sha256"] == registered[e["name"]]
            m = {r["metric"]: r["value"] for r in e["rows"]}
            assert m["achieved_rate"] == pytest.approx(m["offered_rate"], rel=0.05)
            assert m["send_lag_p99_ms"] < 100
            assert m["output_tokens"] > 0
    turns = [e["turns"]["shell"] for e in passes if e["workload"] == "sessions"]
    assert len(turns) == 2  # one per arm
    for entries in turns:
        assert [t["turn"] for t in entries][:3] == [0, 1, 2]
        assert all(t["acceptance"] is not None and 0 < t["acceptance"] <= 1 for t in entries)
    reported = cli("report", str(run_dir), timeout=120)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert "r2" in reported.stdout and "capacity at SLO" in reported.stdout
