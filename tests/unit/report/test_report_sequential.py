"""A sequential design's looks in every report format, its path figure and `--fail-on
undecided`, on run directories written with the store's API."""

from __future__ import annotations

import json
from pathlib import Path

from campaign.report.build import build_report, fail_on_held
from campaign.report.formats import render
from campaign.report.plot_sequential import sequential_path
from tests.runs import TPUT, make_run
from tests.unit.report.test_report import SCHEMA, _validate

CELL = ("knee", "c1", TPUT)
GAIN = [(1000.0, 1250.0), (1000.0, 1262.0), (1000.0, 1255.0), (1000.0, 1248.0)]


def _run(tmp_path: Path, pairs: list[tuple[float, float]]) -> Path:
    return make_run(tmp_path, {CELL: pairs}, guardrails=[],
                    sequential={"max_pairs": 6}, complete=False)


def test_every_look_appears_once_in_every_format(tmp_path: Path) -> None:
    report = build_report([_run(tmp_path, GAIN[:3])])
    v = report.latest.verdict
    assert v.decision == "adopt" and not v.incomplete
    for fmt in ("table", "markdown", "html"):
        text = render(report, fmt)
        assert text.count("look 1 of ≤ 5 (pair 2)") == 1, fmt
        assert text.count("look 2 of ≤ 5 (pair 3)") == 1, fmt
        assert "stopped after pair 3 of ≤ 6: adopt" in text, fmt
    doc = json.loads(render(report, "json"))
    schema = json.loads(SCHEMA.read_text())
    assert _validate(doc, schema, schema, "$") == []
    seq = doc["candidates"][0]["sequential"]
    assert seq["state"] == "adopt" and seq["stopped_at"] == 3
    assert [lk["pairs"] for lk in seq["looks"]] == [2, 3]
    assert seq["looks"][-1]["cells"][0]["outcome"] == "adopt"
    assert "3 of ≤ 6 pairs" in render(report, "table")


def test_the_path_figure_draws_each_look_with_the_floor_and_margin(tmp_path: Path) -> None:
    report = build_report([_run(tmp_path, GAIN[:3])])
    fig = sequential_path(report.latest)
    assert fig is not None
    ax = fig.axes[0]
    change = next(line for line in ax.get_lines() if line.get_label().endswith(": change"))
    assert list(change.get_xdata()) == [2, 3]
    assert abs(change.get_ydata()[-1] - 100 * report.latest.verdict.candidates[0]
               .cells[0].change) < 30  # the cell's change, in %
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(lbl.startswith("margin +10.0%") for lbl in labels)
    assert any(lbl.startswith("floor +5.0%") for lbl in labels)


def test_a_design_still_going_is_undecided_and_says_so(tmp_path: Path) -> None:
    unclear = [(1000.0, 1120.0), (1000.0, 1020.0)]
    report = build_report([_run(tmp_path, unclear)])
    v = report.latest.verdict
    assert v.decision == "keep-default" and v.reason == "inconclusive"
    assert v.incomplete
    assert fail_on_held(report, ["undecided"]) == ["fail-on: undecided (cand continue)"]
    assert "not decided yet: up to 6 pairs registered" in render(report, "table")


def test_the_html_page_carries_the_path_figure(tmp_path: Path) -> None:
    from campaign.report.plots import figures

    report = build_report([_run(tmp_path, GAIN[:3])])
    names = [name for name, _, _ in figures(report)]
    assert "sequential" in names
    fixed = build_report([make_run(tmp_path / "fixed", {CELL: GAIN[:2]}, guardrails=[])])
    assert "sequential" not in [name for name, _, _ in figures(fixed)]


def test_a_complete_run_under_an_exploratory_rule_is_not_told_to_resume(tmp_path: Path) -> None:
    """Issue 39 item 1: a finished run cannot be resumed (`run --resume` refuses it), so a
    design that would go on under `--rule` says to start a new run, not `--resume`."""
    run = make_run(tmp_path, {CELL: GAIN[:3]}, guardrails=[], sequential={"max_pairs": 6})
    report = build_report([run], rule_overrides={"confidence": "0.999"})
    v = report.latest.verdict
    assert v.candidates[0].sequential is not None
    assert v.candidates[0].sequential.state == "continue"
    assert "--resume" not in v.settle
    assert v.settle.startswith("the design would go on for up to 3 more pair(s), but the "
                               "run is finished and cannot be resumed"), v.settle
    assert "start a new run" in v.settle
    for fmt in ("table", "markdown", "json", "html"):
        assert "--resume" not in render(report, fmt), fmt


def test_a_look_prints_its_real_bound_with_its_critical_value_or_too_few_pairs(
        tmp_path: Path) -> None:
    """Issue 39 item 3: never a bound of -100.0% (or -99.9%): the real bound with its
    critical value, or "too few pairs yet"."""
    run = make_run(tmp_path, {CELL: GAIN[:3]}, guardrails=[], sequential={"max_pairs": 6})
    text = render(build_report([run]), "table", width=400)
    assert "look 1 of ≤ 5 (pair 2): knee c1 +25.6% [bound -86.9%, critical value t = " in text
    strict = build_report([run], rule_overrides={"confidence": "0.999"})
    for fmt in ("table", "markdown", "html"):
        text = render(strict, fmt, width=400) if fmt == "table" else render(strict, fmt)
        assert "-99.9%" not in text and "-100.0%" not in text, fmt
        # look 1 spends no error at all; look 2's bound is beyond -99.5%
        assert "look 1 of ≤ 5 (pair 2): knee c1 +25.6% [too few pairs yet for a bound: " \
            "2 pairs spend no error]" in text, fmt
        assert "[too few pairs yet for a bound: 3 pairs, critical value t = 2812.3]" in text
        assert "the design has too few pairs yet for a bound after 3 pairs (critical value " \
            "t = 2812.3; adopting needs +5.0%)" in text, fmt
