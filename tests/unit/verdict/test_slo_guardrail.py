"""An SLO-attainment guardrail judged by the real verdict (`judge_run`): the share of a
pass's requests whose TTFT is within the registered bound may fall by at most 2 points.

The noise it is judged against is the pairs' own spread of the share's differences (a
share is compared by differences: `verdict.rule.ABSOLUTE_METRICS`; the test is
`guardstats.pairs_spread`, t on n − 1 degrees of freedom), so it holds whatever mixes the
share's sampling (200 requests a pass) and its pass-to-pass movement. Simulated campaigns
(8 pairs; TTFT lognormal, median 20 ms, sd 0.3 on ln; each pass's latencies × exp(N(0,
J²)) with J = 0.05, the p50 jitter measured on the simulated lane; bound 40 ms, so a
control meets it ~99% of the time; throughput +25%, so the rule itself adopts):

| true change of the share | bar | P(adopt), 300 campaigns |
|---|---|---|
| none (an A/A on the guardrail) | ≥ 90% | measured 98% |
| −2 points (at the limit) | ≤ 5% + MC slack | measured 5.7% |
| −4 points (2× the limit) | ≤ 10% | measured 0% |

The campaigns' shares are drawn, not fixed: each pass's requests are sampled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from campaign.campaignfile import Preregistration
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td

CONTROL, CAND = "control", "cand"
PAIRS, REQUESTS, BOUND_MS, JITTER = 8, 200, 40.0, 0.05
SIMS = 300
TPUT = "output_token_throughput"
SHARE = "ttft_slo_attainment"


def _rule() -> rl.Rule:
    pre = Preregistration(
        pairs=PAIRS, decision_cells=[{"workload": "agentfix", "level": "prose"}],
        slo={"ttft_ms": BOUND_MS},
        guardrails=[{"metric": SHARE, "max_worsening": 0.02},
                    {"metric": "error_rate", "max_worsening": 0.0, "absolute": True}])
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)


def _scale_for_drop(points: float) -> float:
    """The factor on the candidate's TTFT that lowers the share by `points` (J = 0)."""
    z0 = math.log(BOUND_MS / 20.0) / 0.3
    from statistics import NormalDist
    nd = NormalDist()
    z1 = nd.inv_cdf(nd.cdf(z0) - points)
    return math.exp((z0 - z1) * 0.3)


def _table(rng: np.random.Generator, factor: float) -> td.RunTable:
    t = td.RunTable(run="synth")
    t.pairs = list(range(1, PAIRS + 1))
    t.slots = {k + 1: {CONTROL: 2 * k, CAND: 2 * k + 1} for k in range(PAIRS)}
    cells = {m: td.CellData("agentfix", "prose", m)
             for m in (TPUT, SHARE, "requests_completed", "error_rate", "output_tokens")}
    for k in range(PAIRS):
        for m in cells.values():
            m.values[k + 1] = {}
        for arm in (CONTROL, CAND):
            ttft = 20.0 * np.exp(rng.normal(0, 0.3, REQUESTS) + rng.normal(0, JITTER))
            tput = 1000.0 * math.exp(rng.normal(0, 0.03))
            if arm == CAND:
                ttft *= factor
                tput *= 1.25
            share = float(np.mean(ttft <= BOUND_MS))
            for m, v in ((TPUT, tput), (SHARE, share), ("requests_completed", REQUESTS),
                         ("error_rate", 0.0), ("output_tokens", 20000.0)):
                cells[m].values[k + 1][arm] = td.ArmValue(v, v, v, 1)
    for m, data in cells.items():
        t.cells[("agentfix", "prose", m)] = data
    return t


def _adopted(factor: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    r = _rule()
    levels = {"agentfix": ["prose"]}
    got = sum(vd.judge_run(_table(rng, factor), r, [CONTROL, CAND], levels=levels,
                           metrics=[]).decision == "adopt" for _ in range(SIMS))
    return got / SIMS


def test_an_unchanged_share_is_shown_within_its_limit() -> None:
    assert _adopted(1.0, 1) >= 0.90


def test_a_share_at_its_limit_is_rarely_shown_within_it() -> None:
    """At the limit the shown-within bound errs at most α = 5% (t test on the pairs);
    300 campaigns: a 95% binomial allowance of ~2.5 points above it."""
    assert _adopted(_scale_for_drop(0.02), 2) <= 0.075


def test_a_share_twice_its_limit_worse_is_not_adopted() -> None:
    assert _adopted(_scale_for_drop(0.04), 3) <= 0.10


def test_the_guardrail_line_reads_in_points() -> None:
    rng = np.random.default_rng(4)
    v = vd.judge_run(_table(rng, _scale_for_drop(0.10)), _rule(), [CONTROL, CAND],
                     levels={"agentfix": ["prose"]}, metrics=[])
    g = next(g for g in v.candidates[0].guardrails if g.metric == SHARE)
    assert v.decision != "adopt"
    assert g.state == "broken", g.reason
    assert g.worsening == pytest.approx(0.10, abs=0.03)  # points, not a ratio
    assert g.change == pytest.approx(-0.10, abs=0.03)
    assert g.absolute and g.limit == pytest.approx(-0.02)  # 2 points, not 2% of the share
    assert "an absolute guardrail" in g.reason, g.reason
