"""Which rows count: one rule for the verdict, the A/A noise estimate and the planner."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from campaign.results.registration import Registration
from campaign.results.store import RunDir
from campaign.verdict import noise, tidy


def _rows(rows: list[tuple[int, int, str, int, object, float]]) -> pd.DataFrame:
    """(pair, pair_attempt, arm, attempt, valid, value) → tidy rows of one cell."""
    return pd.DataFrame(
        [
            {"run": "r", "pair": p, "pair_attempt": pa, "arm": arm, "slot": 0,
             "workload": "knee", "level": "c1", "metric": "output_token_throughput",
             "value": v, "valid": ok, "attempt": att, "reason": "" if ok else "errors"}
            for p, pa, arm, att, ok, v in rows
        ]
    )


def test_an_invalid_redo_leaves_the_pair_out_instead_of_reviving_the_first_attempt() -> None:
    df = _rows([
        (1, 1, "control", 1, True, 100.0), (1, 1, "cand", 1, True, 120.0),  # cut, redone
        (1, 2, "control", 1, True, 101.0), (1, 2, "cand", 1, False, 5.0),   # redo invalid
    ])
    rows = tidy.counting_rows(df)
    assert set(zip(rows["pair_attempt"], rows["arm"], strict=True)) == {(2, "control")}
    cell = tidy.tidy_tables(df)["r"].cells[("knee", "c1", "output_token_throughput")]
    assert "cand" not in cell.values[1]
    assert cell.invalid[1]["cand"] == "errors"


def test_valid_written_as_text_is_read_as_a_boolean() -> None:
    df = _rows([(1, 1, "control", 1, "True", 100.0), (1, 1, "cand", 1, "false", 90.0),
                (2, 1, "control", 1, "1", 100.0), (2, 1, "cand", 1, "0", 90.0)])
    assert list(tidy.valid_mask(df)) == [True, False, True, False]
    assert set(tidy.counting_rows(df)["arm"]) == {"control"}


def test_the_latest_valid_attempt_of_a_retried_pass_counts() -> None:
    df = _rows([(1, 1, "control", 1, True, 100.0), (1, 1, "control", 2, True, 104.0),
                (1, 1, "control", 3, False, 1.0), (1, 1, "cand", 1, True, 110.0)])
    rows = tidy.counting_rows(df)
    assert sorted(rows["value"]) == [104.0, 110.0]


def test_noise_estimate_leaves_out_a_pair_whose_redo_was_invalid(tmp_path: Path) -> None:
    # the A/A estimator used to filter by validity first, so a redo that failed whole
    # brought the cut first attempt back into the noise model
    rows = []
    slot = 0
    for pair in (1, 2, 3, 4):
        attempts = (1, 2) if pair == 2 else (1,)
        for pa in attempts:
            for arm in ("control", "cand"):
                ok = not (pair == 2 and pa == 2)
                rows.append((pair, pa, arm, 1, ok, 100.0 + slot))
                slot += 1
    df = _rows(rows)
    df["slot"] = range(len(df))
    reg = Registration.new({"primary_metric": "output_token_throughput"}, campaign="aa",
                           arms=["control", "cand"], drift_band=0.03,
                           registered_at="2026-11-30T00:00:00Z")
    run = RunDir(run_dir=tmp_path, run_id="r", passes=df, registration=reg, campaign=None,
                 campaign_problems=(), manifest={}, complete=True)
    est = noise.estimate_noise(run)
    assert est.slots == 6  # pairs 1, 3, 4; neither attempt of pair 2
