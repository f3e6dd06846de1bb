"""The lossless check end to end: real sim servers, real AIPerf, the real CLI. A candidate
that is faster because its verifier accepts drafts the target would not have produced
(`SPECAB_SIM_LOSSY`) is kept out by the fidelity guardrail; the same candidate, lossless,
adopts. Two pairs each (one pair cannot adopt), short passes, a fast time scale; every
wait is bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.results.store import load_run
from campaign.sim.testing import free_port
from tests.integration.e2e.test_run_e2e import (
    journal_events,
    lock_env,
    out,  # noqa: F401  (the fixture: no process left behind)
    procs_of,
    run_cli,
    run_dir_of,
    write_campaign,
)
from tests.runs import ROOT

pytestmark = pytest.mark.integration


def fidelity_campaign(port: int, cand_env: str) -> str:
    fix = ROOT / "fixtures"
    return f"""
name: fidelity-e2e
hypothesis: test
lane: e2e-{port}
preregistration:
  pairs: 2
  rule: point
  margin: 0.05
  decision_cells: [{{workload: knee, level: c4}}]
  guardrails:
    - {{metric: fidelity_token_match, workload: fidelity, level: c1, absolute: true,
       max_worsening: 0.005}}
  gates: {{retries: 0, pair_retries: 0, min_completed_requests: 2,
          pass_timeout_s: 120, min_output_tokens: 10}}
server:
  backend: process
  command: [spec-ab, sim, serve, --port, "{port}"]
  port: {port}
  env:
    SPECAB_SIM_MODEL: e2e-model
    SPECAB_SIM_TIME_SCALE: "2"
    SPECAB_SIM_SEED: "1"
    SPECAB_SIM_DRIFT_SIGMA: "0"
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  cand:
    env:
      SPECAB_SIM_EFFECT: "2.0"{cand_env}
workloads:
  model: e2e-model
  tokenizer: {fix}/tokenizer
  warmup: []
  knee:
    concurrency: [4]
    input_tokens: 64
    output_tokens: 64
    requests_per_level: 48
  fidelity:
    prompts_per_class: 1
    output_tokens: 128
"""


def run_and_report(tmp_path: Path, out: Path,  # noqa: F811
                   cand_env: str) -> tuple[Path, dict[str, object]]:
    port = free_port()
    path = write_campaign(tmp_path, fidelity_campaign(port, cand_env))
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path), timeout=400)
    run_dir = run_dir_of(out)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    rep = run_cli("report", str(run_dir), "--format", "json")
    assert rep.returncode in (0, 1), rep.stderr
    assert not procs_of(run_dir)
    return run_dir, json.loads(rep.stdout)


def figures(run_dir: Path, arm: str) -> dict[str, list[float]]:
    """metric → its value in each pair, in pair order."""
    p = load_run(run_dir).passes
    rows = p[(p.workload == "fidelity") & (p.arm == arm)].sort_values("pair")
    assert set(rows.level) == {"c1"} and sorted(set(rows.pair)) == [1, 2]
    return {m: list(g.value) for m, g in rows.groupby("metric")}


def fidelity_guardrail(report: dict[str, object]) -> dict[str, object]:
    checks = [g for g in report["guardrails"]  # type: ignore[attr-defined]
              if g["metric"] == "fidelity_token_match"]
    assert len(checks) == 1, report["guardrails"]
    return checks[0]  # type: ignore[no-any-return]


def test_lossless_candidate_adopts_with_full_match(tmp_path: Path,
                                                  out: Path) -> None:  # noqa: F811
    run_dir, report = run_and_report(tmp_path, out, "")
    for pair, arm, n in (("01", "control", 10), ("01", "cand", 5), ("02", "control", 5)):
        kept = (run_dir / "pairs" / pair / arm / "fidelity.jsonl").read_text().splitlines()
        assert len(kept) == n  # the first control answers twice: its reference on its boot
        assert all(len(json.loads(k)["text"].split()) == 128 for k in kept)
    assert figures(run_dir, "cand")["fidelity_token_match"] == [1.0, 1.0]
    assert figures(run_dir, "cand")["fidelity_identical_share"] == [1.0, 1.0]
    assert figures(run_dir, "control")["fidelity_token_match"] == [1.0, 1.0]
    events = journal_events(run_dir)
    answers = [(e["pair"], e["arm"], e["round"]) for e in events if e["event"] == "fidelity"]
    assert answers == [(1, "control", 1), (1, "control", 2), (1, "cand", 1),
                       (2, "control", 1), (2, "cand", 1)]
    against = [(e["pair"], e["arm"], e["against"]) for e in events
               if e["event"] == "pass" and e.get("workload") == "fidelity"]
    assert (1, "control", "reference: against itself on the same boot") in against
    assert (2, "control", "reference: against the control of pair 1") in against
    g = fidelity_guardrail(report)
    assert g["state"] == "holds"
    assert report["decision"] == "adopt", report["reasons"]
    # the lossless check's own time is its own figure, not the runner's overhead
    slots = [e for e in events if e["event"] == "slot_done"]
    assert len(slots) == 4 and all(e["fidelity_s"] > 0 for e in slots)
    for e in slots:
        parts = e["boot_s"] + e["aiperf_s"] + e["fidelity_s"] + e["overhead_s"]
        assert e["wall_s"] == pytest.approx(parts, abs=0.01)


def test_lossy_candidate_keeps_default_on_the_fidelity_guardrail(tmp_path: Path,
                                                                 out: Path) -> None:  # noqa: F811
    run_dir, report = run_and_report(tmp_path, out, '\n      SPECAB_SIM_LOSSY: "0.02"')
    cand = figures(run_dir, "cand")
    assert all(v < 0.99 for v in cand["fidelity_token_match"])
    assert figures(run_dir, "control")["fidelity_token_match"] == [1.0, 1.0]
    g = fidelity_guardrail(report)
    assert g["state"] == "broken"
    assert "control matches itself on 100.0%" in str(g["reason"])
    assert report["decision"] == "keep-default"
    reason = report["candidates"][0]["reason"]  # type: ignore[index]
    assert reason == "guardrail", report["candidates"]
    # faster all the same: the verdict is the guardrail's, not the throughput's
    p = load_run(run_dir).passes
    tput = p[(p.workload == "knee") & (p.metric == "output_token_throughput")]
    assert tput[tput.arm == "cand"].value.mean() > tput[tput.arm == "control"].value.mean()
