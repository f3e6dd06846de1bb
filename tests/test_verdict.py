"""Verdicts on constructed tidy tables: labels, flags, both rules, Holm, guardrails, the
campaign decision, multi-candidate ranking and the A/A band."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pandas as pd
import pytest
from scipy import stats as sp

from campaign import verdict as vd
from campaign.errors import UsageError
from campaign.spec import Preregistration

T0 = dt.datetime(2026, 11, 28, 22, 0, tzinfo=dt.UTC)
Values = float | list[float]


def frame(
    spec: dict[tuple[str, str, str], list[tuple[Values, ...]]],
    *,
    arms: tuple[str, ...] = ("control", "cand"),
    tokens: float | None = 5000,
    requests: float | None = 32,
    run: str = "r1",
    arm_gap_s: float = 600,
    extra: list[dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """Tidy rows: spec maps a cell to, per pair, one value (or a list of repeats) per arm.

    Pair p's control starts at T0 + (p-1)·20 min, each next arm `arm_gap_s` later.
    """
    out: list[dict[str, Any]] = []
    places: set[tuple[str, str, int]] = set()
    for (w, lvl, m), pairs in spec.items():
        for p, values in enumerate(pairs, start=1):
            for a, (arm, v) in enumerate(zip(arms, values, strict=True)):
                for rep in v if isinstance(v, list) else [v]:
                    out.append(_row(run, p, arm, a, len(arms), w, lvl, m, rep, arm_gap_s))
                places.add((w, lvl, p))
    for w, lvl, p in sorted(places):
        for a, arm in enumerate(arms):
            if tokens is not None:
                out.append(_row(run, p, arm, a, len(arms), w, lvl, "output_tokens", tokens,
                                arm_gap_s))
            if requests is not None:
                out.append(_row(run, p, arm, a, len(arms), w, lvl, "requests_completed",
                                requests, arm_gap_s))
    out.extend(extra or [])
    return pd.DataFrame(out)


def _row(run: str, pair: int, arm: str, a: int, n_arms: int, w: str, lvl: str, m: str,
         value: float, gap: float, **kw: Any) -> dict[str, Any]:
    start = T0 + dt.timedelta(seconds=(pair - 1) * 1200 + a * gap)
    row = dict(run=run, pair=pair, pair_attempt=1, arm=arm, slot=(pair - 1) * n_arms + a,
               started_at=start.isoformat().replace("+00:00", "Z"), workload=w, level=lvl,
               metric=m, value=value, valid=True, attempt=1, reason="")
    row.update(kw)
    return row


def rule(band: float = 0.03, **kw: Any) -> vd.Rule:
    kw.setdefault("decision_cells", [{"workload": "knee", "level": "c1"}])
    kw.setdefault("guardrails", [])
    return vd.parse_rule(Preregistration(**kw).model_dump(mode="json", by_alias=True), band)


def judge(df: pd.DataFrame, r: vd.Rule | None = None,
          arms: tuple[str, ...] = ("control", "cand")) -> vd.RunVerdict:
    tables = vd.tidy_tables(df)
    return vd.judge_run(tables["r1"], r or rule(), list(arms))


def cell(v: vd.RunVerdict, level: str = "c1", metric: str = "output_token_throughput",
         arm: str = "cand", workload: str = "knee") -> vd.Cell:
    cv = next(c for c in v.candidates if c.arm == arm)
    return next(c for c in cv.cells if c.key == (workload, level, metric))


TPUT = ("knee", "c1", "output_token_throughput")


# ----------------------------------------------------------------- the cases


def test_plus_15_percent_in_every_pair_adopts() -> None:
    v = judge(frame({TPUT: [(100.0, 115.0), (101.0, 116.15)]}))
    c = cell(v)
    assert c.verdict == "adopt"
    assert c.gain == pytest.approx(0.15)
    assert c.flags == ()
    assert v.decision == "adopt"
    assert any("every decision cell adopts" in r for r in v.reasons)


def test_plus_12_and_plus_1_does_not_adopt() -> None:
    v = judge(frame({TPUT: [(100.0, 112.0), (100.0, 101.0)]}))
    c = cell(v)
    # g = sqrt(1.12 * 1.01) - 1 = 6.36%: below the bar, and pair 2 is inside the band
    assert c.gain == pytest.approx(math.sqrt(1.12 * 1.01) - 1)
    assert c.verdict == "mixed"
    assert "high-variance" in c.flags  # +12% vs +1%: 11 points apart > 3% band
    assert v.decision == "keep-default"
    assert any("knee c1: mixed" in r for r in v.reasons)


def test_minus_5_in_both_pairs_with_large_spread_is_a_loss_a_sign_not_a_size() -> None:
    # each pair is -5% on its mean, but the repeats inside an arm spread by 40%
    v = judge(frame({TPUT: [([100.0, 140.0], [95.0, 133.0]), ([100.0, 140.0], [95.0, 133.0])]}))
    c = cell(v)
    assert c.gain == pytest.approx(-0.05)
    assert c.verdict == "loss"
    assert "high-variance" in c.flags
    assert any("a sign, not a size" in r for r in c.reasons)
    assert v.decision == "keep-default"


def test_loss_with_pairs_disagreeing_beyond_the_band_is_flagged() -> None:
    v = judge(frame({TPUT: [(100.0, 96.5), (100.0, 92.0)]}))
    c = cell(v)
    assert c.verdict == "loss"
    assert "high-variance" in c.flags
    assert any("a sign, not a size" in r for r in c.reasons)


def test_plus_2_percent_is_within_drift() -> None:
    v = judge(frame({TPUT: [(100.0, 102.0), (101.0, 103.02)]}))
    c = cell(v)
    assert c.verdict == "within-drift"
    assert c.flags == ()
    assert v.decision == "keep-default"


def test_gain_below_bar() -> None:
    c = cell(judge(frame({TPUT: [(100.0, 106.0), (100.0, 107.0)]})))
    assert c.verdict == "gain-below-bar"


def test_lower_is_better_primary_metric_flips_the_sign() -> None:
    key = ("knee", "c1", "ttft_p99")
    v = judge(frame({key: [(100.0, 80.0), (120.0, 96.0)]}), rule(primary_metric="ttft_p99"))
    c = cell(v, metric="ttft_p99")
    assert c.direction == "lower"
    assert c.gain == pytest.approx(1 / 0.8 - 1)  # 20% lower TTFT = +25% on the log scale
    assert c.verdict == "adopt"


# ----------------------------------------------------------------- rules


def test_one_pair_has_no_ci_and_says_so() -> None:
    v = judge(frame({TPUT: [(100.0, 120.0)]}), rule(pairs=1))
    c = cell(v)
    assert c.stats is not None and c.ci is None
    assert any("one pair: no confidence interval" in r for r in c.reasons)
    assert c.verdict == "adopt"  # the point rule still decides on one pair
    v2 = judge(frame({TPUT: [(100.0, 120.0)]}), rule(pairs=1, rule="ci"))
    assert cell(v2).verdict == "gain-below-bar"  # the ci rule cannot adopt without a CI


def test_ci_rule_uses_the_lower_bound() -> None:
    pairs = [(100.0, 120.0), (100.0, 121.0), (100.0, 119.0), (100.0, 120.5)]
    v = judge(frame({TPUT: pairs}), rule(rule="ci", pairs=4))
    c = cell(v)
    d = [math.log(y / x) for x, y in pairs]
    lo, _ = sp.t.interval(0.95, df=3, loc=sum(d) / 4, scale=sp.sem(d))
    assert c.ci is not None and c.ci[0] == pytest.approx(math.expm1(lo))
    assert c.ci[0] > 0.10
    assert c.verdict == "adopt"
    # the same mean with wide pairs: the lower bound falls below the bar
    wide = [(100.0, 140.0), (100.0, 103.0), (100.0, 140.0), (100.0, 103.0)]
    c2 = cell(judge(frame({TPUT: wide}), rule(rule="ci", pairs=4)))
    assert c2.gain is not None and c2.gain > 0.10
    assert c2.verdict != "adopt"
    assert any("CI lower bound" in r for r in c2.reasons)


def test_ci_rule_holm_corrects_over_decision_cells() -> None:
    # two decision cells; each clears the bar alone at alpha/2 = 0.025 but not at 0.0125
    pairs = [(100.0, 117.0), (100.0, 124.0), (100.0, 121.0)]
    d = [math.log(y / x) for x, y in pairs]
    p_one = sp.ttest_1samp(d, popmean=math.log(1.10), alternative="greater").pvalue
    assert 0.0125 < p_one < 0.025  # the constructed case sits between the two levels
    spec = {("knee", "c1", "output_token_throughput"): pairs,
            ("knee", "c4", "output_token_throughput"): pairs}
    r = rule(rule="ci", pairs=3, decision_cells=[{"workload": "knee", "level": "*"}])
    v = judge(frame(spec), r)
    c1, c4 = cell(v, "c1"), cell(v, "c4")
    assert c1.holm is not None and c1.holm.m == 2
    assert c1.holm.p == pytest.approx(p_one)
    assert c1.holm.p_adjusted == pytest.approx(min(1.0, 2 * p_one))
    assert c1.verdict != "adopt" and c4.verdict != "adopt"
    assert v.decision == "keep-default"
    # one decision cell: no correction, it adopts
    v1 = judge(frame(spec), rule(rule="ci", pairs=3))
    assert cell(v1).verdict == "adopt" and cell(v1).holm is None


def test_star_expands_to_every_measured_level_except_all() -> None:
    spec = {("knee", lvl, "output_token_throughput"): [(100.0, 115.0), (100.0, 115.0)]
            for lvl in ("c1", "c16", "c4")}
    spec[("knee", "all", "acceptance_rate")] = [(0.4, 0.5), (0.4, 0.5)]
    v = judge(frame(spec), rule(decision_cells=[{"workload": "knee", "level": "*"}]))
    decision = [c.level for c in v.candidates[0].cells if c.decision_cell]
    assert decision == ["c1", "c4", "c16"]
    assert v.decision == "adopt"


def test_missing_decision_cell_is_a_data_problem() -> None:
    with pytest.raises(vd.DataProblem, match="knee c8"):
        judge(frame({TPUT: [(100.0, 115.0)]}),
              rule(decision_cells=[{"workload": "knee", "level": "c8"}]))


def test_zero_value_in_a_decision_cell_is_a_data_problem() -> None:
    with pytest.raises(vd.DataProblem, match=r"pair 2, arm cand is 0"):
        judge(frame({TPUT: [(100.0, 115.0), (100.0, 0.0)]}))


def test_zero_in_a_descriptive_cell_is_skipped_not_fatal() -> None:
    spec = {TPUT: [(100.0, 115.0), (100.0, 115.0)],
            ("knee", "c1", "implied_a"): [(0.0, 0.5), (0.0, 0.5)]}
    v = judge(frame(spec))
    assert v.decision == "adopt"
    assert all(c.metric != "implied_a" for c in v.candidates[0].cells)


# ----------------------------------------------------------------- flags


def test_invalid_pass_leaves_the_pair_out_and_counts_it() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0), (100.0, 115.0)]})
    bad = (df["pair"] == 2) & (df["arm"] == "cand") & (df["metric"] == TPUT[2])
    df.loc[bad, ["valid", "reason", "attempt"]] = [False, "error rate 0.05 > 0", 2]
    v = judge(df, rule(pairs=3))
    c = cell(v)
    assert c.stats is not None and c.stats.n == 2
    assert [lo.pair for lo in c.left_out] == [2]
    assert "invalid-pass" in c.flags
    assert any("1 of 3 pairs left out" in r and "after 2 attempts" in r for r in c.reasons)
    assert v.incomplete and v.left_out == 1


def test_a_retried_pass_counts_its_valid_attempt() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)]})
    failed = _row("r1", 1, "cand", 1, 2, *TPUT, 50.0, 600, valid=False, attempt=1,
                  reason="timeout")
    df.loc[(df["pair"] == 1) & (df["arm"] == "cand"), "attempt"] = 2
    v = judge(pd.concat([df, pd.DataFrame([failed])], ignore_index=True))
    c = cell(v)
    assert c.verdict == "adopt" and c.left_out == () and "invalid-pass" not in c.flags


def test_validity_written_as_text_is_read_as_text() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0), (100.0, 115.0)]})
    df["valid"] = ["false" if (p == 3 and a == "cand") else "true"
                   for p, a in zip(df["pair"], df["arm"], strict=True)]
    c = cell(judge(df, rule(pairs=3)))
    assert c.stats is not None and c.stats.n == 2 and [lo.pair for lo in c.left_out] == [3]


def test_only_the_latest_pair_attempt_counts() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)]})
    old = frame({TPUT: [(100.0, 90.0), (100.0, 90.0)]})
    old = old[old["pair"] == 2]
    df.loc[df["pair"] == 2, "pair_attempt"] = 2
    v = judge(pd.concat([old, df], ignore_index=True))
    assert cell(v).pairs[1].gain == pytest.approx(0.15)


def test_small_sample_flag() -> None:
    v = judge(frame({TPUT: [(100.0, 115.0), (100.0, 115.0)]}, tokens=800),
              rule(gates={"min_output_tokens": 2000}))
    c = cell(v)
    assert "small-sample" in c.flags
    assert any("a hint, not a number" in r and "800 output tokens" in r for r in c.reasons)
    assert c.verdict == "adopt"  # a flag, not a veto


def test_window_drift_flag_and_decision_note() -> None:
    # the control climbs +6% across the window; the candidate keeps +15% in each pair
    v = judge(frame({TPUT: [(100.0, 115.0), (106.0, 121.9)]}))
    c = cell(v)
    assert "window-drift" in c.flags
    assert c.control_trend == pytest.approx(0.06)
    assert not v.window_stable
    assert any("window was not stable" in r for r in v.reasons)


def test_split_pair_flag() -> None:
    v = judge(frame({TPUT: [(100.0, 115.0), (100.0, 115.0)]}, arm_gap_s=7200),
              rule(gates={"max_pair_gap_s": 3600}))
    c = cell(v)
    assert "split-pair" in c.flags
    assert any("pair 1 (2.0 h)" in r for r in c.reasons)


# ----------------------------------------------------------------- guardrails, decision


def test_relative_guardrail_broken_blocks_adoption() -> None:
    spec = {TPUT: [(100.0, 115.0), (100.0, 115.0)],
            ("knee", "c1", "ttft_p99"): [(200.0, 214.0), (200.0, 214.0)]}
    v = judge(frame(spec), rule(guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}]))
    g = v.candidates[0].guardrails[0]
    assert g.broken and g.worsening == pytest.approx(0.07)
    assert v.decision == "keep-default"
    assert any("guardrail ttft_p99 at knee c1 broken: +7.0% worse (allowed: +5.0% worse)" in r
               for r in v.reasons)
    ok = {**spec, ("knee", "c1", "ttft_p99"): [(200.0, 208.0), (200.0, 208.0)]}
    v2 = judge(frame(ok), rule(guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}]))
    assert v2.decision == "adopt"


def test_absolute_error_rate_guardrail() -> None:
    er = ("knee", "c1", "error_rate")
    r = rule(guardrails=[{"metric": "error_rate", "max_worsening": 0.0, "absolute": True}])
    same = judge(frame({TPUT: [(100.0, 115.0)] * 2, er: [(0.0, 0.0)] * 2}), r)
    assert same.decision == "adopt"
    worse = judge(frame({TPUT: [(100.0, 115.0)] * 2, er: [(0.0, 0.0), (0.0, 0.02)]}), r)
    g = worse.candidates[0].guardrails[0]
    assert g.broken and g.worsening == pytest.approx(0.01)
    assert worse.decision == "keep-default"


def test_unmeasured_guardrail_counts_as_broken() -> None:
    v = judge(frame({TPUT: [(100.0, 115.0)] * 2}),
              rule(guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}]))
    assert v.decision == "keep-default"
    assert any("cannot be checked" in r for r in v.reasons)


def test_multi_candidate_each_against_control_then_ranked() -> None:
    spec = {TPUT: [(100.0, 112.0, 120.0, 101.0), (100.0, 111.0, 118.0, 100.0)]}
    arms = ("control", "a", "b", "c")
    v = judge(frame(spec, arms=arms), arms=arms)
    assert [r.arm for r in v.ranking] == ["b", "a", "c"]
    assert [r.decision for r in v.ranking] == ["adopt", "adopt", "keep-default"]
    assert v.decision == "adopt" and v.adopt_arm == "b"
    assert cell(v, arm="c").verdict == "within-drift"


# ----------------------------------------------------------------- overrides, A/A


def test_overrides_are_validated() -> None:
    base = Preregistration().model_dump(mode="json", by_alias=True)
    out = vd.apply_overrides(base, {"margin": "0.05", "rule": "ci"})
    assert out["margin"] == "0.05" and vd.parse_rule(out, 0.03).prereg.margin == 0.05
    with pytest.raises(UsageError, match="cannot be overridden"):
        vd.apply_overrides(base, {"pairs": "9"})
    with pytest.raises(UsageError, match="invalid"):
        vd.apply_overrides(base, {"rule": "vibes"})


def test_aa_band_from_control_vs_control_pairs() -> None:
    pairs = [(100.0, 101.0), (100.0, 98.5), (100.0, 100.5), (100.0, 99.0)]
    v = judge(frame({TPUT: pairs}), rule(pairs=4))
    rec = vd.aa_band([cell(v)])
    d = [math.log(y / x) for x, y in pairs]
    rms = math.sqrt(sum(x * x for x in d) / 4)
    assert rec.rms == pytest.approx(rms)
    raw = math.expm1(sp.t.ppf(0.975, 4) * rms)
    assert rec.band == pytest.approx(math.ceil(raw * 1000) / 1000)
    assert rec.band >= rec.largest
    assert "recommended drift band" in rec.text


def test_spec_decode_off_in_the_control_is_not_applicable_not_incomplete() -> None:
    # A real vLLM without --speculative-config exports no spec_decode counters: the
    # control's valid passes yield no acceptance rows. That is "not applicable", not a
    # pair left out; the candidate's own acceptance is still shown.
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)]})
    extra = [_row("r1", p, "cand", 1, 2, "knee", "all", "acceptance_rate", 0.6, 600)
             for p in (1, 2)]
    v = judge(pd.concat([df, pd.DataFrame(extra)], ignore_index=True), rule(pairs=2))
    c = cell(v, level="all", metric="acceptance_rate")
    assert c.verdict == "not-applicable"
    assert not c.left_out and "invalid-pass" not in c.flags
    assert c.candidate == pytest.approx(0.6) and c.control is None
    assert "not applicable" in c.reasons[0]
    assert not v.incomplete and v.left_out == 0
    assert v.decision == "adopt"


def test_missing_spec_decode_rows_of_an_invalid_pass_still_leave_the_pair_out() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)],
                ("knee", "all", "acceptance_rate"): [(0.5, 0.6), (0.5, 0.6)]})
    bad = (df["pair"] == 2) & (df["arm"] == "control") & (df["metric"] == "acceptance_rate")
    df.loc[bad, ["valid", "reason"]] = [False, "server restarted"]
    v = judge(df, rule(pairs=2))
    c = cell(v, level="all", metric="acceptance_rate")
    assert [lo.pair for lo in c.left_out] == [2] and v.incomplete
