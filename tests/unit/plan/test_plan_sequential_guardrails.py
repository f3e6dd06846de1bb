"""`spec-ab plan` of a sequential design with its guardrails (issue "Guardrails that
protect", items 6 and 7): the design adopts at a look only when the rule has crossed and
every guardrail is shown within its limit, an unresolved guardrail keeps the night going to
max_pairs, a guardrail shown beyond its limit stops it. The plan's sequential table, its
per-guardrail rates and its recommended max_pairs must say so, and its sequences agree
with `verdict.judge_run` one by one.

Error rates: every rate here is a share of simulated sequences (600 per row unless said),
so its Monte Carlo sd is at most 2 points; each bound below leaves at least 4 sd of room
(or is exact: with common random numbers a guarded adoption is always a rule-alone one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from campaign.campaignfile import load_campaign
from campaign.plan import guards
from campaign.plan import sequential as seq
from campaign.plan.campaign import plan_campaign
from tests.cli import invoke
from tests.runs import ROOT

EXAMPLE = ROOT / "examples" / "sim-sequential.yaml"
PAIR = ROOT / "examples" / "sim-pair.yaml"
GUARD = "    - {metric: ttft_p99, max_worsening: 0.25}\n"


def _file(tmp_path: Path, old: str, new: str, src: Path = EXAMPLE) -> Path:
    text = src.read_text()
    assert old in text
    path = tmp_path / src.name
    path.write_text(text.replace(old, new))
    return path


def _plan(path: Path, sims: int = 600) -> dict[str, Any]:
    r = invoke("plan", str(path), "--sims", str(sims), "--pairs", "2", "--format", "json")
    assert r.code == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_the_sequential_rows_include_the_guardrails_and_keep_the_rule_alone() -> None:
    """examples/sim-sequential.yaml: each row's P(adopt) is the design with its p99
    guardrail (never above the rule alone, sequence by sequence), the rule alone is kept
    beside it, and the guardrail has its two rates in the design, re-judged by judge_run."""
    doc = _plan(EXAMPLE)
    design = doc["sequential_design"]
    assert design["guardrails_modelled"] is True
    for row in doc["sequential"]:
        alone = row["rule_only"]
        assert row["adopt"] <= alone["adopt"] + 1e-12, row
        assert abs(row["adopt"] + row["keep_default"] + row["inconclusive"] - 1) < 1e-9
        # an unresolved guardrail keeps the night going (a false break, ≤ 5%, could stop
        # it sooner)
        assert row["expected_pairs"] >= alone["expected_pairs"] - 0.1
        assert 0.0 <= row["guardrail_stops"] <= 1.0
    (g,) = design["guardrails"]
    assert g["metric"] == "ttft_p99" and g["limit"] == 0.25
    assert g["cells"] == ["agentfix prose"] and len(g["deterioration_cells"]) == 4
    for key in ("break_at_0", "stops_at_0", "passes_at_2x"):
        assert set(g[key]) == {"p", "lo", "hi", "k", "n"} and g[key]["n"] == 600
    # the bars at the registered design under the plan's assumed noise
    assert g["passes_at_2x"]["p"] <= 0.10
    assert g["break_at_0"]["p"] <= 0.05
    # Bonferroni over the design's looks, as the verdict judges each look (10 looks: pairs
    # 3 to 12), and over the candidate's 6 checks (the p99 at its cell and 4 others, the
    # error rate)
    assert g["alpha_shown"] == pytest.approx(0.05 / 10)
    assert g["alpha_each"] == pytest.approx(0.05 / 10 / 6)
    assert design["judge_run_checked_guardrails"] >= 40
    assert design["judge_run_disagree"] == 0


def test_an_unresolvable_guardrail_keeps_the_night_going_and_costs_power(
        tmp_path: Path) -> None:
    """A p99 limit of +10% from 200 requests per pass is rarely shown within 12 pairs: the
    design with it adopts a true 1.5m far less often than the rule alone, spends more pairs
    (the night goes on to max_pairs while it is unresolved) and ends inconclusive; the
    recommended max_pairs counts the guardrail."""
    path = _file(tmp_path, GUARD, "    - {metric: ttft_p99, max_worsening: 0.10}\n")
    doc = _plan(path)
    row = next(r for r in doc["sequential"] if r["name"] == "1.5m")
    alone = row["rule_only"]
    assert alone["adopt"] >= 0.90
    assert row["adopt"] <= alone["adopt"] - 0.30
    assert row["expected_pairs"] >= alone["expected_pairs"] + 2.0
    assert row["inconclusive"] >= 0.20
    assert row["guardrail_stops"] >= 0.30
    design = doc["sequential_design"]
    assert design["recommended_max_pairs_rule_only"] is not None
    rec = design["recommended_max_pairs"]
    assert rec is None or rec > design["recommended_max_pairs_rule_only"]
    (g,) = design["guardrails"]
    assert g["stops_at_0"]["p"] >= 0.30
    assert design["judge_run_disagree"] == 0


def test_the_text_leads_with_the_design_and_its_guardrails(tmp_path: Path) -> None:
    """The sequential table's title says it is the design with its guardrails, a column
    keeps the rule alone, each guardrail has a line of its rates in the design, and the
    recommended max_pairs is the guardrails' one."""
    r = invoke("plan", str(EXAMPLE), "--sims", "300", "--pairs", "2",
               env={"COLUMNS": "1000"})
    assert r.code == 0, r.stderr
    out = r.stdout
    title = next(x for x in out.splitlines() if x.startswith("the registered design"))
    assert "with its guardrails" in title and "the rule alone" not in title
    assert "P(adopt), rule alone" in out
    line = next(x for x in out.splitlines()
                if x.startswith("in the design: guardrail ttft_p99"))
    assert "lets a candidate truly +50% worse through" in line
    assert "stops adoption with no change" in line
    rec = next(x for x in out.splitlines() if x.startswith("recommended max_pairs"))
    assert "with its guardrails" in rec and "the rule alone would need" in rec
    assert "sequences re-judged by verdict.judge_run" in rec


def test_the_guarded_cross_check_sees_a_wrong_guardrail_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-judging has teeth: a plan whose guardrail states are wrong (every check
    shown within its limit, whatever the draws) disagrees with judge_run on a tight
    limit's sequences."""
    path = _file(tmp_path, GUARD, "    - {metric: ttft_p99, max_worsening: 0.10}\n")
    campaign = load_campaign(path)
    honest = plan_campaign(campaign, effect=0.15, noise_run=None, drift=None, sims=200,
                           pairs=2).sequential
    assert honest is not None and honest.disagree == 0 and honest.guard_checked > 0
    real = guards.look_states

    def always_holds(gd: guards.GuardDraws, i: int) -> tuple[np.ndarray, np.ndarray]:
        states, beyond = real(gd, i)
        return np.zeros_like(states), np.zeros_like(beyond)

    monkeypatch.setattr(seq, "look_states", always_holds)
    wrong = plan_campaign(campaign, effect=0.15, noise_run=None, drift=None, sims=200,
                          pairs=2).sequential
    assert wrong is not None and wrong.disagree > 0


def test_a_relative_fidelity_guardrail_is_judged_as_the_verdict_does(tmp_path: Path) -> None:
    """A fidelity guardrail without `absolute: true` was drawn as a log-scale latency: the
    plan stopped with an internal error (its states disagreed with judge_run). The verdict
    judges it against the control's own agreement, with no pair-to-pair noise: a lossless
    candidate holds it, so the plan's P(adopt) is the absolute registration's, and it says
    the figure is not simulated."""
    old = "level: c1, absolute: true,"
    rel = _file(tmp_path, old, "level: c1,", PAIR)
    r = invoke("plan", str(rel), "--sims", "300", "--pairs", "3", "--format", "json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    ref = json.loads(invoke("plan", str(PAIR), "--sims", "300", "--pairs", "3",
                            "--format", "json").stdout)
    for mine, theirs in zip(doc["table"], ref["table"], strict=True):
        assert mine["adopt"] == theirs["adopt"]
        assert [g["metric"] for g in mine["guardrails"]] == ["ttft_p99"]
    note = next(n for n in doc["notes"] if "fidelity_token_match" in n)
    assert "the control's own agreement" in note and "not simulated" in note
    assert "fail no request" not in note


@pytest.mark.parametrize("metric", ["output_token_throughput_server", "request_latency_p50"])
def test_the_rule_alone_is_re_judged_on_the_campaigns_own_primary_metric(metric: str) -> None:
    """examples/vllm-cpu-ngram.yaml (primary `output_token_throughput_server`) printed "40
    sequences re-judged by verdict.judge_run, 32 disagree": the re-judged table carried
    `output_token_throughput`, so judge_run found no decision cell. A lower-is-better
    primary is re-judged with its own sense too."""
    from campaign.campaignfile import Preregistration
    from campaign.verdict import rule as rl

    pre = Preregistration(primary_metric=metric, decision_cells=[
        {"workload": "knee", "level": "c1"}], guardrails=[], sequential={"max_pairs": 6})
    rule = rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)
    plan = seq.plan_sequential(rule, rule.pair_sd, sims=300, seed=1, check=40)
    assert plan.checked == 40 and plan.disagree == 0
