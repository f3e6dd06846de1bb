"""The plan of a sequential design: its figures, the fixed design beside it, and its
cross-check through the real verdict (`judge_run`)."""

from __future__ import annotations

from campaign.campaignfile import Preregistration
from campaign.plan.sequential import plan_sequential
from campaign.verdict import rule as rl


def _rule(max_pairs: int) -> rl.Rule:
    pre = Preregistration(decision_cells=[{"workload": "knee", "level": "c1"}], guardrails=[],
                          sequential={"max_pairs": max_pairs})
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)


def test_the_design_of_the_example_beats_the_fixed_design_it_replaces() -> None:
    """examples/sim-sequential.yaml (max_pairs 6) on the assumed lane noise σ0: the same or
    better error rates than the fixed design that meets the targets (4 pairs), with fewer
    expected pairs at no change and at 2m."""
    r = _rule(6)
    plan = plan_sequential(r, r.pair_sd, sims=3000, seed=1, check=20)
    rows = {row.label: row for row in plan.rows}
    assert plan.fixed_pairs == 4
    assert rows["m/2"].adopt <= min(0.05, rows["m/2"].fixed_adopt + 0.005)
    assert rows["1.5m"].adopt >= max(0.90, rows["1.5m"].fixed_adopt)
    assert rows["0"].expected_pairs < plan.fixed_pairs
    assert rows["2m"].expected_pairs < plan.fixed_pairs
    assert rows["0"].adopt == 0.0
    for row in plan.rows:
        assert abs(row.adopt + row.keep_default + row.inconclusive - 1) < 1e-9
    assert plan.recommended_max_pairs is not None and plan.recommended_max_pairs <= 6
    assert plan.checked == 20 and plan.disagree == 0


def test_a_noisier_lane_needs_a_larger_max_pairs() -> None:
    r = _rule(6)
    quiet = plan_sequential(r, r.pair_sd, sims=1500, seed=2, check=0)
    noisy = plan_sequential(r, 2 * r.pair_sd, sims=1500, seed=2, check=0)
    assert quiet.recommended_max_pairs is not None and noisy.recommended_max_pairs is not None
    assert noisy.recommended_max_pairs > quiet.recommended_max_pairs
    rows = {row.label: row for row in noisy.rows}
    assert rows["m/2"].adopt <= 0.05  # valid whatever the noise; power is what it costs
    assert rows["1.5m"].adopt < 0.9


def test_plan_of_the_sequential_example_has_its_figures_in_json() -> None:
    from campaign.campaignfile import load_campaign
    from campaign.plan.campaign import plan_campaign
    from campaign.plan.render import plan_json
    from tests.runs import ROOT

    campaign = load_campaign(ROOT / "examples" / "sim-sequential.yaml")
    doc = plan_json(plan_campaign(campaign, effect=0.15, noise_run=None, drift=None,
                                  sims=400, pairs=4))
    rows = doc["sequential"]
    assert [r["name"] for r in rows] == ["0", "m/2", "m", "1.5m", "2m"]
    for r in rows:
        assert {"effect", "adopt", "keep_default", "inconclusive", "expected_pairs"} <= set(r)
        assert 2 <= r["expected_pairs"] <= 6
    design = doc["sequential_design"]
    assert design["max_pairs"] == 6 and design["judge_run_disagree"] == 0
    assert design["judge_run_checked"] > 0
    # the fixed table beside it is the fixed `bound` design (no sequential rule in it)
    assert doc["rule"]["used"] == "bound" and doc["table"][0]["pairs"] == 1


def test_plan_says_what_unequal_lane_noise_costs() -> None:
    """2 lanes, the second twice as noisy: the lanes-disagree flag (which assumes equal
    noise) fires on no change far beyond its share, and power falls; the false adopt at
    m/2 stays within the registered 5% (cross-checked through judge_run)."""
    from campaign.campaignfile import load_campaign
    from campaign.plan.campaign import plan_campaign
    from campaign.plan.render import plan_json
    from tests.runs import ROOT

    campaign = load_campaign(ROOT / "examples" / "sim-pair.yaml")
    result = plan_campaign(campaign, effect=0.15, noise_run=None, drift=None, sims=600,
                           pairs=2)
    u = result.unequal_lanes
    assert u is not None and u.noisier == 2.0 and u.disagree is not None
    assert u.disagree.p > 0.05 and u.false_adopt.p <= 0.05
    two = next(x for x in result.lanes if x.lanes == 2)
    assert u.power.p < two.power.p and u.exact_checked > 0
    assert plan_json(result)["lanes_unequal"]["second_lane_noise"] == 2.0
