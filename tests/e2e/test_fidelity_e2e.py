"""The lossless check end to end: real sim servers, real AIPerf, the real CLI. One campaign,
two candidates twice as fast as the control: `lossy` is faster because its verifier accepts
drafts the target would not have produced (`SPECAB_SIM_LOSSY`) and is kept out by the
fidelity guardrail; `lossless`, the same candidate without that, adopts. Two pairs (one
pair cannot adopt), short passes; every wait is bounded. The finished run is built once
(both tests read it, on one xdist worker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from campaign.results.store import load_run
from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import (
    journal_events,
    lock_env,
    procs_of,
    run_cli,
    run_dir_of,
    write_campaign,
)
from tests.runs import ROOT

# one worker builds the run; its verdict rests on measured speed
pytestmark = [pytest.mark.xdist_group("fidelity-e2e"), pytest.mark.timing]


def fidelity_campaign(port: int) -> str:
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
  lossless:
    env: {{SPECAB_SIM_EFFECT: "2.0"}}
  lossy:
    env: {{SPECAB_SIM_EFFECT: "2.0", SPECAB_SIM_LOSSY: "0.02"}}
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


@pytest.fixture(scope="module")
def fidelity_run(tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[Path, dict[str, object]]]:
    """The campaign run once and reported (JSON); no process of it is left behind."""
    tmp_path = tmp_path_factory.mktemp("fidelity-e2e")
    out = tmp_path / "results"
    out.mkdir()
    path = write_campaign(tmp_path, fidelity_campaign(free_port()))
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path), timeout=600)
    run_dir = run_dir_of(out)
    left = procs_of(run_dir)
    for p in left:
        p.kill()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not left, left
    rep = run_cli("report", str(run_dir), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    yield run_dir, json.loads(rep.stdout)


def figures(run_dir: Path, arm: str) -> dict[str, list[float]]:
    """metric → its value in each pair, in pair order."""
    p = load_run(run_dir).passes
    rows = p[(p.workload == "fidelity") & (p.arm == arm)].sort_values("pair")
    assert set(rows.level) == {"c1"} and sorted(set(rows.pair)) == [1, 2]
    return {m: list(g.value) for m, g in rows.groupby("metric")}


def fidelity_guardrail(report: dict[str, object], arm: str) -> dict[str, object]:
    checks = [g for g in report["guardrails"]  # type: ignore[attr-defined]
              if g["metric"] == "fidelity_token_match" and g["arm"] == arm]
    assert len(checks) == 1, report["guardrails"]
    return checks[0]  # type: ignore[no-any-return]


def candidate(report: dict[str, object], arm: str) -> dict[str, object]:
    [found] = [c for c in report["candidates"] if c["arm"] == arm]  # type: ignore[attr-defined]
    return found  # type: ignore[no-any-return]


def test_lossless_candidate_adopts_with_full_match(
        fidelity_run: tuple[Path, dict[str, object]]) -> None:
    run_dir, report = fidelity_run
    for pair, arm, n in (("01", "control", 10), ("01", "lossless", 5), ("01", "lossy", 5),
                         ("02", "control", 5)):
        kept = (run_dir / "pairs" / pair / arm / "fidelity.jsonl").read_text().splitlines()
        assert len(kept) == n  # the first control answers twice: its reference on its boot
        assert all(len(json.loads(k)["text"].split()) == 128 for k in kept)
    assert figures(run_dir, "lossless")["fidelity_token_match"] == [1.0, 1.0]
    assert figures(run_dir, "lossless")["fidelity_identical_share"] == [1.0, 1.0]
    assert figures(run_dir, "control")["fidelity_token_match"] == [1.0, 1.0]
    events = journal_events(run_dir)
    answers = [(e["pair"], e["arm"], e["round"]) for e in events if e["event"] == "fidelity"]
    assert answers[:2] == [(1, "control", 1), (1, "control", 2)]  # its reference, then it
    assert sorted(answers[2:]) == [(1, "lossless", 1), (1, "lossy", 1), (2, "control", 1),
                                   (2, "lossless", 1), (2, "lossy", 1)]
    against = [(e["pair"], e["arm"], e["against"]) for e in events
               if e["event"] == "pass" and e.get("workload") == "fidelity"]
    assert (1, "control", "reference: against itself on the same boot") in against
    assert (2, "control", "reference: against the control of pair 1") in against
    assert fidelity_guardrail(report, "lossless")["state"] == "holds"
    assert candidate(report, "lossless")["decision"] == "adopt", report["reasons"]
    assert (report["decision"], report["adopt_arm"]) == ("adopt", "lossless"), report["reasons"]
    # the lossless check's own time is its own figure, not the runner's overhead
    slots = [e for e in events if e["event"] == "slot_done"]
    assert len(slots) == 6 and all(e["fidelity_s"] > 0 for e in slots)
    for e in slots:
        parts = e["boot_s"] + e["aiperf_s"] + e["fidelity_s"] + e["overhead_s"]
        assert e["wall_s"] == pytest.approx(parts, abs=0.01)


def test_lossy_candidate_keeps_default_on_the_fidelity_guardrail(
        fidelity_run: tuple[Path, dict[str, object]]) -> None:
    run_dir, report = fidelity_run
    lossy = figures(run_dir, "lossy")
    assert all(v < 0.99 for v in lossy["fidelity_token_match"])
    assert figures(run_dir, "control")["fidelity_token_match"] == [1.0, 1.0]
    g = fidelity_guardrail(report, "lossy")
    assert g["state"] == "broken"
    assert "control matches itself on 100.0%" in str(g["reason"])
    assert (candidate(report, "lossy")["decision"], candidate(report, "lossy")["reason"]) == (
        "keep-default", "guardrail"), report["candidates"]
    # faster all the same: the verdict is the guardrail's, not the throughput's
    p = load_run(run_dir).passes
    tput = p[(p.workload == "knee") & (p.metric == "output_token_throughput")]
    assert tput[tput.arm == "lossy"].value.mean() > tput[tput.arm == "control"].value.mean()
