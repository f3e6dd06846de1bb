"""Window drift on a quantile is judged only where the quantile has the requests to be one
(issue "The first night, for a newcomer", 9: four `ttft_p99` cells flagged "NOT stable"
from 2 points of 16–32 requests each)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from campaign.campaignfile import Preregistration
from campaign.verdict import flags as fl
from campaign.verdict import judge as vd
from campaign.verdict import outcome as oc
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td
from tests.runs import frame

TPUT = ("knee", "c1", "output_token_throughput")
P99 = ("knee", "c1", "ttft_p99")
P50 = ("knee", "c1", "ttft_p50")
# the control's p99 moves +145.5% between two boots, the candidate follows it
MOVED = [(20.0, 18.0), (49.1, 44.2)]


def _rule(**kw: Any) -> rl.Rule:
    kw.setdefault("decision_cells", [{"workload": "knee", "level": "c1"}])
    kw.setdefault("guardrails", [])
    return rl.parse_rule(Preregistration(**kw).model_dump(mode="json", by_alias=True), 0.03)


def _cell(df: pd.DataFrame, key: tuple[str, str, str]) -> oc.Cell:
    v = vd.judge_run(td.tidy_tables(df)["r1"], _rule(), ["control", "cand"])
    return next(c for c in v.candidates[0].cells if c.key == key)


@pytest.mark.parametrize("metric,needed", [("ttft_p99", 300), ("itl_p90", 30),
                                           ("ttft_p95", 60), ("ttft_p50", 6),
                                           ("output_token_throughput", None)])
def test_the_requests_a_quantile_needs_for_its_drift_to_be_judged(metric: str,
                                                                  needed: int | None) -> None:
    assert fl.drift_requests_needed(metric) == needed


def _why(df: pd.DataFrame, key: tuple[str, str, str]) -> str:
    """`flags.drift_not_judged` of the cell, with the context `judge_run` gives it."""
    table = td.tidy_tables(df)["r1"]
    req = table.cells[(key[0], key[1], "requests_completed")].values
    ctx = fl.Context({}, {(p, a): v.value for p, arms in req.items() for a, v in arms.items()},
                     table.started, table.slots)
    cp = fl.CellPairs(table.cells[key], "control", "cand", sorted(table.pairs), [])
    return fl.drift_not_judged(cp, _rule(), ctx)


def test_a_p99_of_16_requests_is_not_flagged_and_says_why() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)], P99: MOVED}, requests=16)
    c = _cell(df, P99)
    assert "window-drift" not in c.flags
    assert c.control_trend == pytest.approx(1.455)
    assert _why(df, P99) == (
        "window drift not judged: the control moved +145.5% across the window, but a p99 "
        "from 16 requests per pass (pair 1) is no number to judge it on: a p99 needs at "
        "least 300 requests per pass (3 beyond it)")


def test_a_p99_of_enough_requests_is_flagged() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)], P99: MOVED}, requests=300)
    assert "window-drift" in _cell(df, P99).flags
    assert _why(df, P99) == ""


def test_a_p50_needs_few_requests() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)], P50: MOVED}, requests=16)
    assert "window-drift" in _cell(df, P50).flags


def test_a_mean_is_judged_at_any_request_count() -> None:
    df = frame({TPUT: [(100.0, 115.0), (115.0, 132.25)]}, requests=4)
    assert "window-drift" in _cell(df, TPUT).flags


def test_a_p99_within_the_limit_says_nothing() -> None:
    df = frame({TPUT: [(100.0, 115.0), (100.0, 115.0)], P99: [(20.0, 18.0), (20.1, 18.1)]},
               requests=16)
    assert "window-drift" not in _cell(df, P99).flags
    assert _why(df, P99) == ""
