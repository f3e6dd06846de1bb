"""Both error rates of the rule and of the noise flags, measured through the real verdict
(`judge_run`) on simulated campaigns under the lane's assumed noise: per-boot drift sd
ln 1.03 and 1% within-pass noise (pair sd σ0 = √2·√(ln²1.03 + 0.01²) = 4.4%)."""

from __future__ import annotations

import math

import numpy as np

from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from tests.unit.verdict import synth as sy

CAMPAIGNS = 300
SIGMA0 = math.sqrt(2) * math.hypot(math.log(1.03), 0.01)
M = 0.10


def _rule(pairs: int) -> rl.Rule:
    return sy.rule(pairs, guardrails=[], decision_cells=[{"workload": "knee", "level": "c1"}])


def test_bound_never_adopts_an_aa_campaign() -> None:
    rng = np.random.default_rng(1)
    tables = sy.paired_tables(rng, CAMPAIGNS, 2, 0.0, SIGMA0)
    adopted, _ = sy.adopt_rate(tables, _rule(2))
    assert adopted == 0


def test_bound_adopts_the_demos_plus_25_percent_with_two_pairs() -> None:
    """The demo's lane is steady (a measured A/A stays within ±0.8%): pair sd 1%."""
    rng = np.random.default_rng(2)
    tables = sy.paired_tables(rng, CAMPAIGNS, 2, 0.25, 0.01)
    adopted, _ = sy.adopt_rate(tables, _rule(2))
    assert adopted >= CAMPAIGNS - 3, adopted


def test_bound_false_adopts_at_half_the_margin_stay_low_and_power_grows_with_pairs() -> None:
    """P(adopt | +5%) ≤ 5% at every pair count; P(adopt | +15%) rises with pairs (research:
    34%, 72%, 92%, 99% at 2, 3, 4, 6 pairs)."""
    power = []
    for pairs in (2, 3, 4, 6):
        r = _rule(pairs)
        rng = np.random.default_rng(10 + pairs)
        false, _ = sy.adopt_rate(sy.paired_tables(rng, CAMPAIGNS, pairs, M / 2, SIGMA0),
                                 r)
        assert false <= 0.05 * CAMPAIGNS, (pairs, false)
        hits, _ = sy.adopt_rate(sy.paired_tables(rng, CAMPAIGNS, pairs, 1.5 * M, SIGMA0),
                                r)
        power.append(hits)
    assert power == sorted(power) and power[-1] >= 0.9 * CAMPAIGNS, power
    assert power[0] < 0.6 * CAMPAIGNS < power[2]


def test_bound_corrects_for_several_candidates_with_its_bound() -> None:
    """The best of 3 candidates truly at +5% adopts no more often than one does alone."""
    rng = np.random.default_rng(20)
    arms = (sy.CONTROL, sy.CAND, f"{sy.CAND}2", f"{sy.CAND}3")
    tables = sy.paired_tables(rng, CAMPAIGNS, 4, M / 2, SIGMA0, candidates=3)
    adopted, _ = sy.adopt_rate(tables, _rule(4), arms)
    assert adopted <= 0.05 * CAMPAIGNS, adopted


def test_loss_is_rare_on_aa_campaigns_and_found_when_true() -> None:
    """`loss` needs evidence: ≤ 5% of 2-pair A/A campaigns (research: 3.0%); a true −10%
    change is a loss most of the time at 4 pairs (research: 97%)."""
    rng = np.random.default_rng(30)
    _, loss = sy.adopt_rate(sy.paired_tables(rng, CAMPAIGNS, 2, 0.0, SIGMA0),
                            _rule(2))
    assert loss <= 0.05 * CAMPAIGNS, loss
    _, loss = sy.adopt_rate(sy.paired_tables(rng, CAMPAIGNS, 4, -0.10, SIGMA0),
                            _rule(4))
    assert loss >= 0.85 * CAMPAIGNS, loss


# --------------------------------------------------------------------------- noise flags


def test_noise_flags_stay_within_5_percent_over_candidates_and_lanes() -> None:
    """All noise flags of all decision cells of all candidates together fire on at most
    5% of A/A campaigns (Bonferroni over cells × candidates × flags in play), with 1 and 3
    candidates and 1 and 2 lanes (before: 6.9% with three candidates, 7.2% pooled)."""
    for candidates, lanes in ((1, 1), (3, 1), (1, 2), (3, 2)):
        rng = np.random.default_rng(40 + candidates * 10 + lanes)
        arms = [sy.CONTROL, *(f"cand{j}" for j in range(candidates))]
        r = sy.rule(2 * lanes, guardrails=[])
        flagged = 0
        for _ in range(CAMPAIGNS):
            v = vd.judge_run(sy.aa_flag_table(rng, 2, 2, candidates, lanes), r, arms,
                             levels={"knee": ["c1", "c2"]}, metrics=[])
            flagged += sy.flagged(v)
        assert flagged <= 0.05 * CAMPAIGNS, (candidates, lanes, flagged)
