"""Capacity at SLO (`verdict.capacity`): per pair and arm from the rate levels' shares,
added to the run's table by `tidy.tidy_tables`, judged by `verdict.judge.judge_run`.

Error rates (simulated passes frames, each campaign through `tidy_tables` + `judge_run`,
rule `bound`, margin 10%, 6 pairs, rates 4–16 req/s, 300 requests a level, 3% boot drift
of each pass's true capacity): the interpolated capacity of one pass then spreads ~7%
(the shares' sampling adds to the drift), so the rule registers a drift band of 8%. A
candidate whose capacity is truly +25% is adopted in ≥ 92.5% of 200 campaigns (measured
195/200, seed 41); an A/A candidate in ≤ 2% (measured 0/200). Under a 3% band the
window-drift gate holds back 58 of the 200 true gains (142/200 adopted): a capacity's
band is wider than a throughput's, as `docs/verdict.md` says.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from campaign.campaignfile import Preregistration
from campaign.verdict import capacity as cap
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td
from campaign.verdict.reasons import below_bar_sentence

RATES = (4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0)
CELL = ("rate", "capacity", "capacity_at_slo")


def _frame(shares: dict[tuple[int, str], dict[float, float | str]], run: str = "r"
           ) -> pd.DataFrame:
    """(pair, arm) → rate → share (a str: the level is invalid with that reason)."""
    rows: list[dict[str, Any]] = []
    for (pair, arm), levels in shares.items():
        for rate, share in levels.items():
            ok = not isinstance(share, str)
            for metric, value in (("slo_attainment", share if ok else 0.1),
                                  ("output_tokens", 6000.0), ("requests_completed", 300.0)):
                rows.append({"run": run, "pair": pair, "pair_attempt": 1, "arm": arm,
                             "slot": 2 * pair + (arm != "control"), "workload": "rate",
                             "level": f"r{format(rate, 'g')}", "metric": metric,
                             "value": value, "valid": ok, "attempt": 1,
                             "reason": "" if ok else share})
    return pd.DataFrame(rows)


def _rule(pairs: int = 6, band: float = 0.03, **kw: Any) -> rl.Rule:
    kw.setdefault("guardrails", [])
    pre = Preregistration(pairs=pairs, primary_metric="capacity_at_slo",
                          decision_cells=[{"workload": "rate", "level": "capacity"}],
                          slo={"ttft_ms": 2000}, drift_band=band, **kw)
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), band)


def test_capacity_interpolates_between_the_last_level_met_and_the_next() -> None:
    got = cap.capacity_at([(16, 0.30), (2, 0.99), (8, 0.80), (4, 0.95)], 0.90)
    assert (round(got.value or 0, 4), got.bound) == (round(4 + 4 * 0.05 / 0.15, 4), "")


def test_capacity_is_censored_when_every_level_or_none_meets_the_target() -> None:
    every = cap.capacity_at([(2, 0.99), (4, 0.97), (8, 0.95)], 0.90)
    none = cap.capacity_at([(2, 0.60), (4, 0.40)], 0.90)
    assert (every.value, every.bound, every.words()) == (8, "≥", "≥ 8 req/s")
    assert (round(none.value or 0, 4), none.bound) == (round(2 * 0.60 / 0.90, 4), "<")
    assert none.words().startswith("< 1.333")


def test_no_request_within_the_slo_at_the_lowest_rate_is_no_capacity() -> None:
    """0 req/s would be no measurement a ratio can read: no capacity, with the reason."""
    got = cap.capacity_at([(2, 0.0), (4, 0.0)], 0.90)
    assert (got.value, got.reason) == (None, "no request met the SLO even at the lowest "
                                             "rate measured (2 req/s): add lower rates")


def test_a_non_monotone_sweep_takes_the_highest_rate_that_meets_the_target() -> None:
    got = cap.capacity_at([(2, 0.95), (4, 0.85), (8, 0.92), (16, 0.50)], 0.90)
    assert round(got.value or 0, 4) == round(8 + 8 * 0.02 / 0.42, 4)


def test_tidy_adds_the_capacity_cell_per_pair_and_arm_with_censoring() -> None:
    df = _frame({(1, "control"): {2: 0.99, 4: 0.95, 8: 0.80},
                 (1, "cand"): {2: 0.99, 4: 0.98, 8: 0.96}})
    cell = td.tidy_tables(df)["r"].cells[CELL]
    assert round(cell.values[1]["control"].value, 4) == round(4 + 4 * 0.05 / 0.15, 4)
    assert cell.values[1]["cand"].value == 8.0
    assert cell.bounds == {1: {"cand": "≥"}}


def test_an_invalid_rate_level_does_not_count() -> None:
    lag = "the load generator sent 9.8 req/s, 61% of the 16 req/s its schedule offers"
    df = _frame({(1, "control"): {4: 0.99, 8: 0.95, 16: lag},
                 (1, "cand"): {4: 0.99, 8: 0.95, 16: 0.50}})
    cell = td.tidy_tables(df)["r"].cells[CELL]
    assert (cell.values[1]["control"].value, cell.bounds[1]["control"]) == (8.0, "≥")
    assert round(cell.values[1]["cand"].value, 4) == round(8 + 8 * 0.05 / 0.45, 4)


def test_an_arm_with_fewer_than_two_valid_levels_has_no_capacity_with_the_reason() -> None:
    lag = "the load generator sent 9.8 req/s, 61% of the 16 req/s its schedule offers"
    df = _frame({(1, "control"): {8: 0.95, 16: lag}, (1, "cand"): {8: 0.95, 16: 0.5}})
    cell = td.tidy_tables(df)["r"].cells[CELL]
    assert "control" not in cell.values.get(1, {})
    assert cell.invalid[1]["control"] == (
        "no capacity at SLO: 1 valid rate level(s): capacity at SLO needs 2 or more "
        f"(invalid: r16: {lag})")


def test_the_registered_target_is_read_per_run_and_defaults_to_090() -> None:
    shares = {(1, "control"): {4: 0.96, 8: 0.90}, (1, "cand"): {4: 0.96, 8: 0.90}}
    df = pd.concat([_frame(shares, "a"), _frame(shares, "b")])
    tables = td.tidy_tables(df, slo_target={"a": 0.95})
    assert round(tables["a"].cells[CELL].values[1]["control"].value, 4) == round(
        4 + 4 * 0.01 / 0.06, 4)
    assert tables["b"].cells[CELL].values[1]["control"].value == 8.0  # 0.90 met at r8
    assert cap.slo_target({"slo": {"ttft_ms": 2000}}) == 0.90
    assert cap.slo_target({"slo": {"ttft_ms": 2000, "target": 0.95}}) == 0.95
    assert cap.slo_target({"slo": {"target": "lots"}}) == 0.90
    assert cap.slo_target(Preregistration().model_dump()) == 0.90


def test_asking_for_capacity_alone_keeps_the_shares_it_is_read_from() -> None:
    df = _frame({(1, "control"): {4: 0.96, 8: 0.80}, (1, "cand"): {4: 0.96, 8: 0.80}})
    table = td.tidy_tables(df, ["capacity_at_slo"])["r"]
    assert CELL in table.cells


def test_rate_levels_sort_by_offered_rate_with_the_capacity_after_them() -> None:
    levels = ["r16", "capacity", "r0.5", "r4", "r2"]
    assert sorted(levels, key=td.level_sort_key) == ["r0.5", "r2", "r4", "r16", "capacity"]


def _campaigns(rng: np.random.Generator, campaigns: int, effect: float, pairs: int = 6,
               requests: int = 300) -> pd.DataFrame:
    """Each pass's share meeting the SLO at rate r is Binomial(n, 0.9^((r/C)^3)) / n:
    exactly the target at the arm's true capacity C (control 9 req/s, candidate
    9·(1 + effect)), C drifting 3% from boot to boot."""
    rows = []
    for i in range(campaigns):
        shares: dict[tuple[int, str], dict[float, float | str]] = {}
        for p in range(1, pairs + 1):
            for arm, true in (("control", 9.0), ("cand", 9.0 * (1 + effect))):
                c = true * math.exp(rng.normal(0, math.log(1.03)))
                shares[(p, arm)] = {r: float(rng.binomial(requests, 0.9 ** ((r / c) ** 3))
                                             / requests) for r in RATES}
        rows.append(_frame(shares, f"run{i}"))
    return pd.concat(rows, ignore_index=True)


def _adopted(df: pd.DataFrame, rule: rl.Rule) -> int:
    tables = td.tidy_tables(df, ["capacity_at_slo"], slo_target=cap.slo_target(rule.prereg))
    return sum(vd.judge_run(t, rule, ["control", "cand"]).decision == "adopt"
               for t in tables.values())


@pytest.mark.parametrize(("effect", "lo", "hi"), [(0.25, 185, 200), (0.0, 0, 4)])
def test_a_registered_capacity_rule_adopts_a_true_gain_and_not_an_aa(
        effect: float, lo: int, hi: int) -> None:
    adopted = _adopted(_campaigns(np.random.default_rng(41), 200, effect), _rule(band=0.08))
    assert lo <= adopted <= hi


def test_the_capacity_cell_says_when_its_values_are_censored() -> None:
    shares: dict[tuple[int, str], dict[float, float | str]] = {}
    for p in range(1, 4):
        shares[(p, "control")] = {4: 0.99, 8: 0.95, 16: 0.40 + p / 100}
        shares[(p, "cand")] = {4: 0.99, 8: 0.98, 16: 0.95}
    table = td.tidy_tables(_frame(shares))["r"]
    v = vd.judge_run(table, _rule(pairs=3), ["control", "cand"])
    cell = next(c for c in v.candidates[0].cells if c.metric == "capacity_at_slo")
    assert any(r.startswith("capacity censored: cand met the SLO target at every rate "
                            "measured in 3 pair(s)") for r in cell.reasons)


def test_a_sweep_short_of_both_capacities_says_so_not_a_zero_change() -> None:
    """Both arms meet the SLO target at every rate in every pair: both capacities are the
    top rate, censored (≥ 16), and their +0.0% measures nothing. The verdict keeps the
    default and its headline says the sweep stops short, and which rates to add, instead
    of "+0.0% is inside the drift band" (what it said before)."""
    shares: dict[tuple[int, str], dict[float, float | str]] = {}
    for p in range(1, 4):
        shares[(p, "control")] = {4: 0.99, 8: 0.97, 16: 0.95}
        shares[(p, "cand")] = {4: 0.99, 8: 0.98, 16: 0.96}
    table = td.tidy_tables(_frame(shares))["r"]
    rule = _rule(pairs=3)
    v = vd.judge_run(table, rule, ["control", "cand"])
    assert v.decision == "keep-default"
    said = ("both arms met the SLO target at every rate measured, up to 16 req/s, in each of "
            "the 3 pair(s): the sweep stops short of either capacity (both ≥ 16 req/s), so "
            "it cannot show a change; register rates above 16 req/s (workloads.rate.rates)")
    assert v.reasons[0] == "rate capacity: keep-default: " + said
    assert below_bar_sentence(v.candidates[0], rule) == said
    assert not any("+0.0%" in r for r in v.reasons)
    # one arm measured below the top rate: a change is measured, the words are the rule's
    shares[(2, "control")] = {4: 0.99, 8: 0.95, 16: 0.40}
    v = vd.judge_run(td.tidy_tables(_frame(shares))["r"], rule, ["control", "cand"])
    assert cap.BEYOND not in v.reasons[0]


def test_a_capacity_rule_checks_its_guardrails_at_the_rate_levels() -> None:
    """The default guardrails (TTFT p99 +25%, error rate) of a capacity rule are checked
    where they are measured: the rate levels of the sweep, not the capacity cell."""
    rng = np.random.default_rng(7)
    df = _campaigns(rng, 1, 0.25)
    extra = []
    for (pair, arm, level), _ in df.groupby(["pair", "arm", "level"]):
        for metric, value in (("ttft_p99", 200.0 * math.exp(rng.normal(0, 0.02))),
                              ("error_rate", 0.0)):
            extra.append({"run": "run0", "pair": pair, "pair_attempt": 1, "arm": arm,
                          "slot": 2 * pair + (arm != "control"), "workload": "rate",
                          "level": level, "metric": metric, "value": value, "valid": True,
                          "attempt": 1, "reason": ""})
    table = td.tidy_tables(pd.concat([df, pd.DataFrame(extra)], ignore_index=True))["run0"]
    rule = _rule(band=0.08, guardrails=[{"metric": "ttft_p99", "max_worsening": 0.25},
                                        {"metric": "error_rate", "max_worsening": 0.0,
                                         "absolute": True}])
    v = vd.judge_run(table, rule, ["control", "cand"])
    where = {(g.metric, g.level) for g in v.candidates[0].guardrails}
    assert where == {(m, f"r{format(r, 'g')}") for m in ("ttft_p99", "error_rate")
                     for r in RATES}
    assert v.decision == "adopt"


def test_capacity_rows_join_a_passes_frame_for_readers_of_raw_rows() -> None:
    """`watch` and `plan` read counting rows, not tables: the same capacities as rows of
    the frame, the censoring mark and a missing capacity's reason in `reason`."""
    lag = "the load generator sent 9.8 req/s, 61% of the 16 req/s its schedule offers"
    df = _frame({(1, "control"): {4: 0.99, 8: 0.95, 16: 0.50},
                 (1, "cand"): {4: 0.99, 8: 0.97, 16: 0.95},
                 (2, "control"): {8: 0.95, 16: lag}, (2, "cand"): {8: 0.95, 16: 0.5}})
    rows = td.capacity_rows(df, 0.90)
    got = {(r.pair, r.arm): (round(r.value, 4), r.valid, r.reason)
           for r in rows.itertuples(index=False)}
    assert got[(1, "control")] == (round(8 + 8 * 0.05 / 0.45, 4), True, "")
    assert got[(1, "cand")] == (16.0, True, "≥")
    assert got[(2, "control")][1:] == (False, "no capacity at SLO: 1 valid rate level(s): "
                                       f"capacity at SLO needs 2 or more (invalid: r16: {lag})")
    counted = td.counting_rows(pd.concat([df, rows], ignore_index=True))
    assert len(counted[counted["metric"] == "capacity_at_slo"]) == 3
