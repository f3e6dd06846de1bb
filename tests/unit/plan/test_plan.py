"""`spec-ab plan`: the Monte Carlo against hand-worked and scipy-computed probabilities, the
vectorised rule against `verdict.judge_run`, pairs-for-power and the arm order under drift.

Every random draw is seeded, so each assertion is deterministic; tolerances are stated as
multiples of the Monte Carlo's own standard error.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as sps

from campaign import plan
from campaign.campaignfile import Campaign, load_campaign
from campaign.errors import UsageError
from campaign.verdict import rule as rl
from campaign.verdict import stats as st
from campaign.verdict.noise import NoiseModel

QUIET = NoiseModel(0.0, 0.0, 0.0, "no noise")


def campaign_file(tmp_path: Path, tokenizer_dir: Path, *, levels: tuple[int, ...] = (1,),
                  lanes: int = 0, **pre: Any) -> Campaign:
    """A small process-backend campaign written to a file (JSON is YAML) and loaded like a
    user's file; `lanes` > 0 shards it over that many lanes (a `lanes:` table)."""
    rule = {"margin": 0.10, "drift_band": 0.03, "rule": "point", "pairs": 2, "order": "AB",
            "seed": 3, "decision_cells": [{"workload": "knee", "level": "*"}], **pre}
    doc = {
        "name": "plan-test",
        "hypothesis": "the candidate is faster",
        "lane": "sim-plan-test",
        "preregistration": rule,
        "server": {"backend": "process", "command": ["spec-ab", "sim", "serve"],
                   "port": 18799, "env": {"SPECAB_SIM_TIME_SCALE": "8"}},
        "arms": {"control": {"description": "default"},
                 "cand": {"description": "faster", "env": {"SPECAB_SIM_EFFECT": "1.15"}}},
        "workloads": {"model": "m", "tokenizer": str(tokenizer_dir),
                      "knee": {"concurrency": list(levels), "requests_per_level": 8}},
    }
    if lanes:
        del doc["lane"]
        doc["lanes"] = {f"station-{i}": {"description": f"box {i}",
                                         "server": {"port": 18801 + i}}
                        for i in range(lanes)}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return load_campaign(path)


def spec_of(tmp_path: Path, tokenizer_dir: Path, **kw: Any) -> plan.RuleSpec:
    return plan.rule_spec(campaign_file(tmp_path, tokenizer_dir, **kw))


def within_mc(rate: plan.Rate, expected: float, sigmas: float = 4.0) -> bool:
    se = math.sqrt(max(expected * (1 - expected), 1e-12) / rate.n)
    return abs(rate.p - expected) <= sigmas * se + 1e-12


# --------------------------------------------------------------------------- zero noise


def test_zero_noise_rule_is_deterministic(tmp_path: Path, tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir)
    assert spec.cells == (("knee", "c1"),)
    # the bar itself adopts (the rule's epsilon), just below it does not
    for effect, expected in [(0.15, 1.0), (0.10, 1.0), (0.0999, 0.0), (0.05, 0.0),
                             (0.0, 0.0), (-0.10, 0.0)]:
        assert plan.adopt_rate(spec, QUIET, effect, sims=200).p == expected, effect


def test_zero_noise_ci_rule_never_adopts_with_one_pair(tmp_path: Path,
                                                       tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, rule="ci", pairs=2)
    assert plan.adopt_rate(spec, QUIET, 0.15, sims=100, pairs=1).p == 0.0
    # zero spread: the CI is the point; +15% clears +10%
    assert plan.adopt_rate(spec, QUIET, 0.15, sims=100, pairs=2).p == 1.0


# --------------------------------------------------------------------------- Gaussian noise


def test_one_pair_never_adopts(tmp_path: Path, tokenizer_dir: Path) -> None:
    """One pair shows neither the spread nor the window's stability: `verdict` gates it,
    and the plan says so (P(adopt) = 0 at any effect)."""
    spec = spec_of(tmp_path, tokenizer_dir, drift_band=0.0)
    noise = NoiseModel(0.02, 0.01, 0.0, "test")
    for effect in (0.05, 0.15, 0.50):
        assert plan.adopt_rate(spec, noise, effect, sims=2000, pairs=1, seed=1).k == 0


def test_two_pair_point_rule_matches_worked_integral(tmp_path: Path,
                                                     tokenizer_dir: Path) -> None:
    """Two pairs with independent d1, d2 ~ N(μ, s): adopt when (d1 + d2)/2 ≥ m and both
    ≥ b. Worked by numerical integration over d1 (scipy.integrate.quad)."""
    from scipy.integrate import quad

    spec = spec_of(tmp_path, tokenizer_dir)  # margin 10%, band 3%
    noise = NoiseModel(0.03, 0.0, 0.0, "test")
    mu, s = math.log(1.14), noise.pair_sd
    m, b = math.log(1.10), math.log(1.03)

    def integrand(d1: float) -> float:
        lower = max(b, 2 * m - d1)
        return float(sps.norm.pdf(d1, mu, s) * sps.norm.sf(lower, mu, s))

    expected = quad(integrand, b, mu + 10 * s)[0]
    rate = plan.adopt_rate(spec, noise, 0.14, sims=20000, seed=2)
    assert 0.5 < expected < 0.9
    assert within_mc(rate, expected), (rate.p, expected)


def test_ci_rule_matches_noncentral_t(tmp_path: Path, tokenizer_dir: Path) -> None:
    """`ci`, one cell, n pairs: adopt when mean − t·sd/√n ≥ ln(1 + margin), i.e. when the t
    statistic of (mean − ln 1.1) exceeds t(0.975, n − 1): a noncentral t tail."""
    spec = spec_of(tmp_path, tokenizer_dir, rule="ci", pairs=4)
    noise = NoiseModel(0.02, 0.0, 0.0, "test")
    n = 4
    for effect in (0.12, 0.16):
        nc = (math.log1p(effect) - math.log(1.10)) / (noise.pair_sd / math.sqrt(n))
        expected = float(sps.nct.sf(st.t_critical(0.975, n - 1), n - 1, nc))
        rate = plan.adopt_rate(spec, noise, effect, sims=20000, seed=3)
        assert within_mc(rate, expected), (effect, rate.p, expected)


def test_shared_boot_drift_correlates_cells(tmp_path: Path, tokenizer_dir: Path) -> None:
    """With only per-boot drift, every cell of a pair sees the same d: three cells decide
    exactly like one (no extra chances to fail); with only pass noise they do not."""
    one = spec_of(tmp_path / "a", tokenizer_dir, levels=(1,))
    three = spec_of(tmp_path / "b", tokenizer_dir, levels=(1, 4, 16))
    assert len(three.cells) == 3
    boot_only = NoiseModel(0.04, 0.0, 0.0, "test")
    assert (plan.adopt_rate(one, boot_only, 0.13, sims=4000).k
            == plan.adopt_rate(three, boot_only, 0.13, sims=4000).k)
    pass_only = NoiseModel(0.0, 0.04, 0.0, "test")
    assert (plan.adopt_rate(three, pass_only, 0.13, sims=4000).p
            < plan.adopt_rate(one, pass_only, 0.13, sims=4000).p - 0.05)


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("rule,levels", [("point", (1,)), ("point", (1, 4, 16)),
                                         ("ci", (1,)), ("ci", (1, 4, 16)),
                                         ("bound", (1,)), ("bound", (1, 4, 16))])
def test_vectorised_rule_agrees_with_judge_run(tmp_path: Path, tokenizer_dir: Path,
                                               rule: str, levels: tuple[int, ...]) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, rule=rule, pairs=4, levels=levels)
    rng = np.random.default_rng(11)
    # true effects spread from +0% to +35% so both decisions occur often
    loc = rng.uniform(0.0, math.log(1.35), size=(300, 1, 1))
    d = loc + rng.normal(0.0, 0.03, size=(300, 4, len(levels)))
    fast = plan.adopts(d, spec.rule)
    assert 0 < fast.sum() < len(fast)
    slow = np.array([plan.exact_adopts(d[i], spec) for i in range(len(d))])
    assert (fast == slow).all()


def test_lower_is_better_metric_is_judged_on_its_gain(tmp_path: Path,
                                                      tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, primary_metric="itl_p50", pairs=2)
    assert spec.rule.prereg.metric_direction == "lower"
    d = np.full((1, 2, 1), math.log(1.2))  # 20% better = 1/1.2 of the control's latency
    assert plan.exact_adopts(d[0], spec) and bool(plan.adopts(d, spec.rule)[0])


# --------------------------------------------------------------------------- power


def test_pairs_for_power_is_monotone(tmp_path: Path, tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, rule="ci", pairs=4)
    noise = NoiseModel(0.03, 0.01, 0.0, "test")
    n80, r80 = plan.pairs_for_power(spec, noise, 0.18, 0.80, sims=1500)
    n90, r90 = plan.pairs_for_power(spec, noise, 0.18, 0.90, sims=1500)
    n90_big, _ = plan.pairs_for_power(spec, noise, 0.25, 0.90, sims=1500)
    assert n80 is not None and n90 is not None and n90_big is not None
    assert 2 <= n80 <= n90
    assert n90_big <= n90
    assert r80.p >= 0.80 and r90.p >= 0.90
    # the count just below the answer does not reach the target
    prev = max(k for k in plan.PAIR_STEPS if k < n90)
    if prev >= 2:
        assert plan.adopt_rate(spec, noise, 0.18, sims=1500, pairs=prev).p < 0.90
    # ci power grows with pairs
    rates = [plan.adopt_rate(spec, noise, 0.18, sims=1500, pairs=n).p for n in (2, 4, 8, 16)]
    assert rates == sorted(rates)


def test_pairs_for_power_unreachable_says_none(tmp_path: Path, tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir)
    n, best = plan.pairs_for_power(spec, NoiseModel(0.03, 0.0, 0.0, "t"), 0.05, 0.9,
                                   sims=300, max_pairs=8)
    assert n is None and best.p < 0.9


# --------------------------------------------------------------------------- arm order


def test_abba_cancels_a_linear_drift(tmp_path: Path, tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, pairs=4)
    ab = plan.drift_offsets(4, spec.arms, "AB", 0)
    abba = plan.drift_offsets(4, spec.arms, "ABBA", 0)
    # 8 slots: each AB pair's candidate runs one slot (1/7 of the window) after its control
    assert ab == pytest.approx([1 / 7] * 4)
    assert abba == pytest.approx([1 / 7, -1 / 7, 1 / 7, -1 / 7])
    assert abba.sum() == pytest.approx(0.0)
    # no noise, the lane speeding up 35% across the window, a true +8% (below the bar):
    # AB reads each pair as +8% plus 1/7 of the drift and adopts; ABBA's pairs average to
    # exactly +8% and it keeps the default.
    drift = NoiseModel(0.0, 0.0, 0.35, "test")
    assert plan.adopt_rate(spec, drift, 0.08, sims=100, order="AB").p == 1.0
    assert plan.adopt_rate(spec, drift, 0.08, sims=100, order="ABBA").p == 0.0


# --------------------------------------------------------------------------- the whole plan


def test_plan_of_the_default_rule(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Replaces the old grid/power-search test: the plan is now a table by pairs at 0, m/2,
    m and 1.5m (with invalid passes), a recommendation, guardrails and flags."""
    c = campaign_file(tmp_path, tokenizer_dir)
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=500)
    assert result.rule == "point" and result.margin == 0.10 and result.band == 0.03
    assert [n for n, _ in result.effects] == ["0", "m/2", "m", "1.5m"]
    assert [r.pairs for r in result.rows] == list(range(1, 9))
    for row in result.rows:
        ps = [r.p for r in row.adopt]
        assert ps == sorted(ps)  # more effect, more adoptions (common random numbers)
    assert result.rate("0").hi <= 0.05
    assert result.exact_checked > 0
    again = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=500)
    assert [[r.k for r in row.adopt] for row in again.rows] == \
        [[r.k for r in row.adopt] for row in result.rows]  # seeded

    console = Console(record=True, width=200)
    plan.print_plan(console, result, full=True)
    text = console.export_text()
    for needle in ("P(adopt) by pairs", "1.5m (+15.0%)", "m/2 (+5.0%)", "recommended:",
                   "ttft_p99 lets through +50%", "flag false alarm", "ABBA", "wall clock"):
        assert needle in text, needle


def test_invalid_passes_cost_adoptions(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Without a redo budget every invalid pass leaves its campaign short."""
    spec = spec_of(tmp_path, tokenizer_dir, pairs=4, gates={"redo_budget": 0})
    noise = NoiseModel(0.0, 0.0, 0.0, "none")
    (clean,), lost0, *_ = plan.campaign_rates(spec, noise, [0.15], sims=400, seed=0,
                                              invalid_rate=0.0)
    (lossy,), lost, *_ = plan.campaign_rates(spec, noise, [0.15], sims=400, seed=0,
                                             invalid_rate=0.05)
    assert clean.p == 1.0 and lost0.k == 0
    # 4 pairs × 2 arms × 1 cell: P(all valid) = 0.95^8
    assert within_mc(lossy, 0.95**8) and lossy.k + lost.k == 400


def test_lower_is_better_effect_is_a_reduction(tmp_path: Path, tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir, primary_metric="itl_p50", pairs=2)
    # a 10% reduction clears a 10% margin; log1p(0.10) (a 9.1% reduction) does not
    assert plan.adopt_rate(spec, QUIET, 0.10, sims=100).p == 1.0
    assert plan.adopt_rate(spec, QUIET, 0.095, sims=100).p == 0.0


# --------------------------------------------------------------------------- recommendation


def test_recommend_picks_the_fewest_pairs_meeting_both_bars() -> None:
    r = plan.Rate
    rows = [(1, r(950, 1000), r(120, 1000)),   # powerful but false-adopts 12%
            (2, r(880, 1000), r(40, 1000)),    # power short
            (3, r(910, 1000), r(30, 1000)),    # both bars: the answer
            (4, r(930, 1000), r(10, 1000))]
    assert plan.recommend(rows) == 3
    assert plan.recommend(list(reversed(rows))) == 3


def test_recommend_says_none_when_nothing_qualifies(tmp_path: Path,
                                                    tokenizer_dir: Path) -> None:
    r = plan.Rate
    assert plan.recommend([(1, r(950, 1000), r(60, 1000)), (2, r(800, 1000), r(10, 1000))]) \
        is None
    c = campaign_file(tmp_path, tokenizer_dir)
    noisy = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.06, sims=200, pairs=3)
    assert noisy.recommended is None
    assert {a.change.split(" (")[0] for a in noisy.alternatives} >= {"rule ci"}
    console = Console(record=True, width=200)
    plan.print_plan(console, noisy, full=True)
    assert "recommended: none up to 3 pairs" in console.export_text()


def test_json_holds_the_table(tmp_path: Path, tokenizer_dir: Path) -> None:
    from typer.testing import CliRunner

    from campaign.cli import app

    campaign_file(tmp_path, tokenizer_dir)
    res = CliRunner().invoke(app, ["plan", str(tmp_path / "c.yaml"), "--format", "json",
                                   "--pairs", "3", "--sims", "200", "--rule", "ci"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["rule"] == {**doc["rule"], "registered": "point", "used": "ci",
                           "exploratory": True}
    assert [row["pairs"] for row in doc["table"]] == [1, 2, 3]
    row = doc["table"][1]
    assert set(row["adopt"]) == {"0", "m/2", "m", "1.5m"}
    assert set(row["adopt"]["m"]) == {"p", "lo", "hi", "k", "n"}
    assert row["false_adopt_half_margin"]["candidates"] == 3
    assert [g["metric"] for g in row["guardrails"]] == ["ttft_p99"]
    assert set(row["flags"]) >= {"any_false_alarm", "high_variance_power",
                                 "window_drift_power"}
    assert doc["table"][0]["flags"]["any_false_alarm"] is None  # one pair: no test
    assert set(doc["recommendation"]) >= {"pairs", "alternatives", "power_at", "false_at"}
    assert doc["effects"][3] == {"name": "1.5m", "effect": pytest.approx(0.15)}
    assert [x["lanes"] for x in doc["lanes"]] == [1, 2, 4]
    assert set(doc["lanes"][1]) == {"lanes", "pairs_total", "night_s",
                                    "false_adopt_half_margin", "power_at_1_5m", "campaign",
                                    "sims", "exact_checked"}
    assert [x["campaign"] for x in doc["lanes"]] == [True, False, False]
    assert [x["pairs_total"] for x in doc["lanes"]] == [2, 4, 8]
    assert set(doc["lanes"][2]["power_at_1_5m"]) == {"p", "lo", "hi", "k", "n"}
    assert doc["lanes"][2]["night_s"] == doc["lanes"][0]["night_s"] > 0


# --------------------------------------------------------------------------- what is modelled


def test_multi_candidate_false_adopt_no_higher(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The bar's correction: with 3 candidates the campaign-level false adopt at m/2 is no
    higher than one candidate's (up to the Monte Carlo's error)."""
    for rule in ("point", "ci"):
        spec = spec_of(tmp_path / rule, tokenizer_dir, rule=rule, pairs=3)
        noise = plan.noise_for(campaign_file(tmp_path / rule, tokenizer_dir, rule=rule,
                                             pairs=3), noise_run=None, drift=None, band=0.03)
        (one,), *_ = plan.campaign_rates(spec.at(candidates=1), noise, [0.05], sims=3000,
                                         seed=1, invalid_rate=0.0)
        (three,), *_ = plan.campaign_rates(spec.at(candidates=3), noise, [0.05], sims=3000,
                                           seed=1, invalid_rate=0.0)
        se = math.sqrt(max(one.p * (1 - one.p), 1e-4) / one.n)
        assert three.p <= one.p + 3 * se, (rule, three.p, one.p)


def test_guardrail_rarely_holds_at_twice_its_limit(tmp_path: Path,
                                                   tokenizer_dir: Path) -> None:
    spec = spec_of(tmp_path, tokenizer_dir)
    (g,) = [g for g in spec.guardrails if not g.absolute]
    noise = NoiseModel(math.log(1.03), 0.01, 0.0, "default")
    lr = plan.guardrail_log_ratios(g, spec, noise, 2 * g.max_worsening, pairs=2, sims=2000,
                                   rng=np.random.default_rng(5))
    holds = plan.rate_of(plan.guardrail_holds(lr, g, spec))
    assert holds.p < 0.15
    assert all(plan.exact_guardrail_holds(lr[i], g, spec) == bool(
        plan.guardrail_holds(lr[i:i + 1], g, spec)[0]) for i in range(40))


def test_flag_false_alarm_at_most_five_percent(tmp_path: Path, tokenizer_dir: Path) -> None:
    for levels in ((1,), (1, 4)):
        spec = spec_of(tmp_path / str(len(levels)), tokenizer_dir, pairs=4, levels=levels)
        noise = NoiseModel(math.log(1.03), 0.01, 0.0, "default")
        f = plan.flag_rates(spec, noise, sims=2000, seed=2)
        assert f.any_false is not None and f.high_variance_power is not None
        se = math.sqrt(0.05 * 0.95 / f.any_false.n)
        assert f.any_false.p <= 0.05 + 3 * se
        assert f.high_variance_power.p > f.any_false.p
        assert f.window_drift_power is not None and f.window_drift_power.p > 0.1


@pytest.mark.parametrize("rule,k", [("point", 1), ("point", 3), ("ci", 1), ("ci", 3),
                                    ("bound", 1), ("bound", 3)])
def test_kernel_agrees_with_judge_run_candidates(tmp_path: Path, tokenizer_dir: Path,
                                                 rule: str, k: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates, invalid passes, window drift: the vectorised decision of every candidate
    equals `judge_run`'s on a sample (rule registered with the simulated pair count)."""
    monkeypatch.setattr(plan.exact, "EXACT_SAMPLE", 40)
    base = spec_of(tmp_path, tokenizer_dir, rule=rule, pairs=2, levels=(1, 4))
    seen = set()
    for n in (2, 4):
        spec = base.at(pairs=n, candidates=k)
        slots = plan.schedule_slots(n, spec.arms, spec.order, spec.prereg.seed)
        noise = NoiseModel(0.03, 0.01, 0.08, "test")
        draws = plan.simulate_arms(noise, pairs=n, cells=2, candidates=k, sims=40,
                                   slots=slots, invalid_rate=0.05,
                                   rng=np.random.default_rng(n))
        for effect in (0.05, 0.15, 0.25):
            shift = math.log1p(effect)
            fast = plan.decide(draws, shift, spec)
            seen |= set(fast.ravel().tolist())
            assert plan.exact._cross_check(spec, draws, shift, fast, "test") == 40
    assert seen == {True, False}


def test_plan_uses_given_drift_and_refuses_both_sources(tmp_path: Path,
                                                        tokenizer_dir: Path) -> None:
    c = campaign_file(tmp_path, tokenizer_dir)
    calm = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.01, sims=500)
    rough = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.08, sims=500)
    assert calm.noise.boot_sd == pytest.approx(math.log(1.01))
    assert calm.at_effect.p > rough.at_effect.p
    with pytest.raises(UsageError):
        plan.plan_campaign(c, effect=0.15, noise_run=tmp_path, drift=0.01, sims=500)
    with pytest.raises(UsageError):
        plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=10)


# --------------------------------------------------------------------------- intervals


def test_rate_interval_is_clopper_pearson() -> None:
    for k, n in [(0, 100), (3, 100), (50, 100), (100, 100), (917, 1000)]:
        ci = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        r = plan.Rate(k, n)
        assert r.lo == pytest.approx(ci.low, abs=1e-12)
        assert r.hi == pytest.approx(ci.high, abs=1e-12)


def test_count_interval_for_a_few_real_campaigns() -> None:
    assert plan.count_interval(plan.Rate(0, 4000), 3) == (0, 0)
    assert plan.count_interval(plan.Rate(4000, 4000), 3) == (3, 3)
    lo, hi = plan.count_interval(plan.Rate(2000, 4000), 10)
    assert lo == 2 and hi == 8
    assert rl.EPS > 0  # the rule's tolerance the kernel shares


def test_cli_plan_prints_the_plan(tmp_path: Path, tokenizer_dir: Path) -> None:
    from typer.testing import CliRunner

    from campaign.cli import app

    campaign_file(tmp_path, tokenizer_dir)
    res = CliRunner().invoke(app, ["plan", str(tmp_path / "c.yaml"), "--effect", "20%",
                                   "--drift", "2%", "--sims", "300"])
    assert res.exit_code == 0, res.output
    assert "1.5m (+15.0%)" in res.output and "recommended:" in res.output
    assert "per-boot sd 1.98%" in res.output
    bad = CliRunner().invoke(app, ["plan", str(tmp_path / "c.yaml"), "--sims", "5"])
    assert bad.exit_code == 2


# --------------------------------------------------------------------------- lanes


def test_one_lane_is_the_registered_row(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The lanes section's one-lane row is the table's registered row, draw for draw; the
    night does not grow with lanes (they run in parallel) but the pairs do."""
    c = campaign_file(tmp_path, tokenizer_dir, pairs=3)
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.02, sims=600)
    assert [x.lanes for x in result.lanes] == [1, 2, 4]
    one = result.lanes[0]
    assert one.campaign and not any(x.campaign for x in result.lanes[1:])
    reg = result.row(3)
    names = [n for n, _ in result.effects]
    # the lanes rows are the rule alone: the registered row without its guardrails
    assert (one.false_adopt.k, one.false_adopt.n) == \
        (reg.adopt_rule_only[names.index("m/2")].k, 600)
    assert (one.power.k, one.power.n) == (reg.adopt_rule_only[names.index("1.5m")].k, 600)
    assert 0 < one.power.k < 600  # not trivially equal
    assert [x.pairs_total for x in result.lanes] == [3, 6, 12]
    assert {x.night_s for x in result.lanes} == {result.estimate.total_s}


def test_pooling_lanes_buys_power_under_ci(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Under `ci` the pooled verdict's power at 1.5m rises with lanes (more pairs narrow the
    interval) and its false adopt at m/2 does not rise beyond the Monte Carlo's error."""
    spec = spec_of(tmp_path, tokenizer_dir, rule="ci", pairs=3)
    noise = NoiseModel(0.02, 0.01, 0.0, "test")
    m = spec.prereg.margin
    got = {n: plan.lane_rates(spec, noise, n, [0.5 * m, 1.5 * m], sims=2000, seed=1,
                              invalid_rate=0.0) for n in (1, 2, 4)}
    power = [got[n][1].p for n in (1, 2, 4)]
    assert power[0] + 0.05 < power[1] < power[2] - 0.02, power
    one = got[1][0]
    for n in (2, 4):
        se = math.sqrt(max(one.p * (1 - one.p), 1e-4) / one.n)
        assert got[n][0].p <= one.p + 3 * se, (n, got[n][0].p, one.p)


def test_lanes_disagree_gate_blocks_a_split_campaign(tmp_path: Path,
                                                     tokenizer_dir: Path) -> None:
    """Two lanes that both clear the rule but measure very different changes: pooled they
    would adopt, the lanes-disagree gate makes the cell inconclusive. A lane whose control
    drifts across its own window gates the pooled campaign too."""
    spec = spec_of(tmp_path, tokenizer_dir, pairs=3)
    lanes = plan.simulate_lanes(spec, QUIET, 2, sims=50, seed=0, invalid_rate=0.0)
    shift = plan.effect_d(0.15, spec.rule)
    assert plan.decide_lanes(lanes, shift, spec).all()
    split = [lanes[0], dataclasses.replace(lanes[1], cand=lanes[1].cand + 0.25)]
    assert not plan.decide_lanes(split, shift, spec).any()
    assert plan.decide(split[1], shift, spec).all()  # that lane alone would adopt
    # lane 2's control slides 30% across its window: its gate fires (at alpha / 2)
    slots = lanes[1].slots[0].astype(float)
    slide = np.log(1.3) * (slots - slots.mean()) / (slots.max() - slots.min())
    moved = dataclasses.replace(lanes[1], ctrl=lanes[1].ctrl + slide[None, :, None],
                                cand=lanes[1].cand + slide[None, :, None, None])
    assert not plan.decide_lanes([lanes[0], moved], shift, spec).any()


@pytest.mark.parametrize("d,lanes,disagree", [
    ([0.10, 0.12, 0.11, 0.09], ["a", "a", "b", "b"], False),
    ([0.10, 0.12, -0.05, -0.02], ["a", "a", "b", "b"], True),
    ([0.10, 0.12, 0.15, 0.00, -0.04, 0.30, 0.31], ["a", "b", "a", "c", "c", "b", "b"], True),
    ([0.10, 0.05, 0.12, 0.08, 0.11], ["b", "a", "b", "a", "a"], False),
    ([0.05, 0.06, 0.07], ["a", "a", "a"], None),
])
def test_kernel_lanes_test_agrees_with_stats(tmp_path: Path, tokenizer_dir: Path,
                                             d: list[float], lanes: list[str],
                                             disagree: bool | None) -> None:
    """`stats.lanes_test` and its vectorised twin: the same p and the same decision at the
    flag alpha, with the rule's pair sd (equal and unequal lanes; one lane: no test)."""
    rule = spec_of(tmp_path, tokenizer_dir).rule
    alpha = plan.flag_alpha(1)
    names = sorted(set(lanes))
    lane_of = np.array([names.index(x) for x in lanes])
    arr = np.array(d)[None, :, None]
    want = st.lanes_test(d, lanes, rule.pair_sd)
    got = plan.lanes_disagree_p(arr, lane_of, rule.pair_sd)
    flags = plan.lanes_disagree_flags(arr, lane_of, rule, alpha)
    if want is None:
        assert got is None and disagree is None and not flags.any()
        return
    assert got is not None and got[0, 0] == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert bool(flags[0, 0]) == (want < alpha) == disagree
    # many simulated campaigns at once: each row its own test
    rows = np.stack([arr[0], arr[0][::-1], arr[0] + 0.3])
    ps = plan.lanes_disagree_p(rows, lane_of, rule.pair_sd)
    assert ps is not None
    for i in range(3):
        flat = [float(v) for v in rows[i, :, 0]]
        assert ps[i, 0] == pytest.approx(st.lanes_test(flat, lanes, rule.pair_sd), rel=1e-9,
                                         abs=1e-15)


def test_sharded_campaign_plans_its_own_lanes(tmp_path: Path, tokenizer_dir: Path) -> None:
    c = campaign_file(tmp_path, tokenizer_dir, lanes=3)
    assert c.sharded and len(c.lane_names) == 3
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=200)
    assert [x.lanes for x in result.lanes] == [1, 2, 3, 4]
    assert [x.campaign for x in result.lanes] == [False, False, True, False]
    assert result.lanes[2].pairs_total == 6
    console = Console(record=True, width=200)
    plan.print_plan(console, result, full=True)
    text = console.export_text()
    assert "lanes (pairs per lane: 2; lanes run in parallel" in text
    own = [line for line in text.splitlines() if "this campaign" in line]
    assert len(own) == 1 and own[0].split()[:4] == ["3", "lanes", "6", "pairs"], own
    assert "for 2 pairs per lane" in text
    doc = plan.plan_json(result)
    assert [x["campaign"] for x in doc["lanes"]] == [False, False, True, False]


def test_a_sharded_campaign_is_planned_on_its_pooled_pairs(tmp_path: Path,
                                                           tokenizer_dir: Path) -> None:
    """`report RUN_A RUN_B` judges every lane's pairs as one campaign: the registered
    design the plan judges, with its guardrails, is pairs × lanes, not one lane's pairs
    (a 2-pairs-per-lane, 3-lane campaign is 6 pooled pairs), and a recommendation is a
    count each lane can register."""
    c = campaign_file(tmp_path, tokenizer_dir, lanes=3)
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=200)
    assert result.pairs == 6 and result.pooled_lanes == 3
    assert 6 in [row.pairs for row in result.rows]
    assert result.recommended is None or result.recommended % 3 == 0
    doc = plan.plan_json(result)
    assert doc["registered_pairs"] == 6 and doc["pooled_lanes"] == 3
    rec = doc["recommendation"]
    assert rec["pairs_per_lane"] is None or rec["pairs_per_lane"] * 3 == rec["pairs"]
    console = Console(record=True, width=200)
    plan.print_plan(console, result)
    text = console.export_text()
    assert "the registered design: 6 pairs pooled (2 per lane × 3 lanes)" in text
    assert "verdict on the registered design: 6 pairs pooled (2 per lane × 3 lanes)" in text
    # the lanes block still counts what each lane registers
    assert "lanes (pairs per lane: 2;" in plan_text(result)


def plan_text(result: Any) -> str:
    console = Console(record=True, width=200)
    plan.print_plan(console, result, full=True)
    return console.export_text()


# --------------------------------------------------------------------------- lanes, exactly


@pytest.mark.parametrize("rule,k,n_lanes,pairs", [
    ("point", 1, 2, 2), ("point", 3, 2, 1), ("point", 3, 3, 2), ("ci", 1, 2, 2),
    ("ci", 3, 4, 1), ("bound", 1, 2, 2), ("bound", 3, 3, 2),
])
def test_pooled_kernel_agrees_with_judge_run(tmp_path: Path, tokenizer_dir: Path,
                                             rule: str, k: int, n_lanes: int, pairs: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates, invalid passes, each lane's window drift, lanes that disagree: the
    vectorised pooled decision of every candidate equals `judge_run`'s on the pooled table
    under the pooled rule, on a sample of 40 campaigns per effect."""
    monkeypatch.setattr(plan.exact, "EXACT_SAMPLE", 40)
    spec = spec_of(tmp_path, tokenizer_dir, rule=rule, pairs=pairs, levels=(1, 4)).at(
        candidates=k)
    noise = NoiseModel(0.03, 0.01, 0.08, "test")
    lanes = plan.simulate_lanes(spec, noise, n_lanes, sims=40, seed=2, invalid_rate=0.03)
    split = [*lanes[:-1], dataclasses.replace(lanes[-1], cand=lanes[-1].cand + 0.08)]
    seen = set()
    for draws in (lanes, split):
        for effect in (0.05, 0.15, 0.25):
            shift = plan.effect_d(effect, spec.rule)
            fast = plan.decide_lanes(draws, shift, spec)
            seen |= set(fast.ravel().tolist())
            assert plan.exact._cross_check_lanes(spec, draws, shift, fast, "test") == 40
    assert seen == {True, False}


def test_pooled_table_is_what_report_pools(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The re-judged pooled campaign: every lane's pairs numbered in start order (the lanes
    start together), each pair's lane and its own lane's slots, invalid passes left out."""
    spec = spec_of(tmp_path, tokenizer_dir, pairs=3)
    lanes = plan.simulate_lanes(spec, QUIET, 2, sims=3, seed=0, invalid_rate=0.0)
    lanes[1].ctrl_ok[1, 2, 0] = False
    ctrl, cand, ctrl_ok, cand_ok, slots, names = plan.exact.pooled_campaign(lanes, 1)
    assert names == ["lane-1", "lane-2"] * 3
    assert slots.tolist() == np.repeat(lanes[0].slots, 2, axis=1).tolist()
    assert ctrl[5, 0] == lanes[1].ctrl[1, 2, 0] and not ctrl_ok[5, 0]
    assert cand[2, 0, 0] == lanes[0].cand[1, 1, 0, 0]
    v = plan.exact_judge(spec.pooled(2), ctrl, cand + 0.2, ctrl_ok, cand_ok, slots, names)
    assert v.pairs_planned == 6
    cell = next(c for c in v.candidates[0].cells if c.decision_cell)
    assert [lo.pair for lo in cell.left_out] == [6] and "incomplete" in cell.flags
    assert v.decision == "keep-default"


def test_pooled_bar_of_several_candidates_is_the_pooled_pairs(tmp_path: Path,
                                                              tokenizer_dir: Path) -> None:
    """With several candidates the `point` bar is corrected with the pre-registered pairs'
    standard error: a pooled report's rule has pairs × L, so its bar is lower than one
    lane's, and a change between the two bars adopts pooled (as `judge_run` decides)."""
    spec = spec_of(tmp_path, tokenizer_dir, pairs=1).at(candidates=3)
    pooled = spec.pooled(2)
    assert pooled.pairs == 2 and pooled.rule.band == spec.rule.band
    low, high = pooled.rule.bar_d(3), spec.rule.bar_d(3)
    assert low < high
    lanes = plan.simulate_lanes(spec, QUIET, 2, sims=12, seed=0, invalid_rate=0.0)
    shift = (low + high) / 2
    decided = plan.decide_lanes(lanes, shift, spec)
    assert decided.all()
    assert plan.exact._cross_check_lanes(spec, lanes, shift, decided, "test") == 12


def test_lanes_rows_are_cross_checked(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Every lanes row's sample is re-judged (both effects), counted in the plan's total,
    and said so in the text and the JSON."""
    c = campaign_file(tmp_path, tokenizer_dir, lanes=2)
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=None, sims=200)
    assert [x.exact_checked for x in result.lanes] == [2 * plan.EXACT_SAMPLE] * 3
    assert result.exact_checked > sum(x.exact_checked for x in result.lanes)
    doc = plan.plan_json(result)
    assert [x["exact_checked"] for x in doc["lanes"]] == [2 * plan.EXACT_SAMPLE] * 3
    console = Console(record=True, width=200)
    plan.print_plan(console, result, full=True)
    text = console.export_text()
    assert "not yet re-judged" not in text
    assert (f"{6 * plan.EXACT_SAMPLE} re-judged by verdict.judge_run, two or more lanes as "
            "one pooled run, all agree") in text


def _split_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lanes after the first measure a change 0.25 (in d) larger: they disagree."""
    simulate = plan.lanes.simulate_lanes

    def split(*args: Any, **kw: Any) -> list[plan.Draws]:
        draws = simulate(*args, **kw)
        return [draws[0], *(dataclasses.replace(x, cand=x.cand + 0.25) for x in draws[1:])]

    monkeypatch.setattr(plan.lanes, "simulate_lanes", split)


def test_plan_refuses_when_the_lanes_kernel_drops_the_disagree_gate(
        tmp_path: Path, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lanes that disagree: the kernel's gate keeps the pooled campaign from adopting, as
    `judge_run` does, and the plan prints; a kernel without the gate is caught by the
    cross-check and the plan refuses (a bug)."""
    c = campaign_file(tmp_path, tokenizer_dir, lanes=2)
    _split_lanes(monkeypatch)
    result = plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.01, sims=200,
                                invalid_rate=0.0)
    assert result.lanes[0].power.k > 0
    assert all(x.power.k == 0 and x.false_adopt.k == 0 for x in result.lanes[1:])

    def never(d: np.ndarray, lane_of: np.ndarray, rule: rl.Rule,
              alpha: float) -> np.ndarray:
        return np.zeros((d.shape[0], d.shape[2]), dtype=bool)

    monkeypatch.setattr(plan.lanes, "lanes_disagree_flags", never)
    with pytest.raises(AssertionError, match=r"pooled rule disagrees with verdict\.judge_run"):
        plan.plan_campaign(c, effect=0.15, noise_run=None, drift=0.01, sims=200,
                           invalid_rate=0.0)


def test_plan_of_a_fixed_design_leads_with_its_registered_row() -> None:
    """Issue "The first night, for a newcomer", 5: a fixed design's plan leads with the row
    of the pairs it registers (and the recommended count's) and its verdict on them; the
    table by pairs waits for --all."""
    from tests.cli import invoke
    from tests.runs import ROOT

    example = ROOT / "examples" / "sim-pair.yaml"
    pairs = load_campaign(example).preregistration.pairs
    r = invoke("plan", str(example), "--sims", "100", env={"COLUMNS": "1000"})
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"plan sim-adaptive: {pairs} pairs registered")
    title = next(i for i, x in enumerate(lines) if x.startswith("the registered design"))
    assert lines[title].startswith(f"the registered design: {pairs} pairs, with guardrails "
                                   "and invalid passes")
    rows = [x for x in lines[title:] if x.startswith("│")]
    assert any(x.split("│")[1].strip() == str(pairs) for x in rows)
    assert len(rows) <= 2  # the registered count, and the recommended one when it differs
    assert any(x.startswith("verdict on the registered design: ") for x in lines)
    assert "P(adopt) by pairs" not in r.stdout and "arm order" not in r.stdout
    assert "P(adopt) by pairs" in invoke("plan", str(example), "--sims", "100",
                                         "--all").stdout
