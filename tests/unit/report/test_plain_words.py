"""One word per outcome, in the user's own numbers (issue 39 item 2): the text formats
say adopt / keep-default / undecided with the registered margin and where each other bar
comes from; the JSON keeps its labels (`below-bar`, `within-drift`, …)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from campaign.report.build import build_report
from campaign.report.formats import render
from tests.runs import TPUT, make_run

CELL = ("knee", "c1", TPUT)
FLAT = [(1000.0, 1013.0), (1000.0, 1012.0)]
LABELS = ("below-bar", "within-drift", "gain-below-bar", "not worth it")


def _text(report: object, fmt: str) -> str:
    """What a reader reads: the page's text without its tags for HTML (a cell's label
    stays its CSS class, what colours it)."""
    text = render(report, fmt)  # type: ignore[arg-type]
    return re.sub(r"<[^>]+>", " ", text.split("<body>", 1)[1]) if fmt == "html" else text


def test_a_futile_design_says_keep_default_with_the_power_point_and_its_source(
        tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: FLAT}, guardrails=[], sequential={"max_pairs": 6})
    report = build_report([run])
    head = render(report, "table").splitlines()[0]
    assert head == ("Decision: KEEP-DEFAULT (the data rule out a +15.0% gain = 1.5 × your "
                    "+10.0% margin, the gain the design is powered for; observed +1.2%)")
    for fmt in ("table", "markdown", "html"):
        text = _text(report, fmt)
        for label in LABELS:
            assert label not in text, (fmt, label)
        assert "keep-default: the data rule out a +15.0% gain at knee c1" in text, fmt
    doc = json.loads(render(report, "json"))
    assert doc["reason"] == "below-bar"
    assert doc["cells"][0]["verdict"] == "within-drift"


def test_a_fixed_rule_names_the_floor_and_where_it_comes_from(tmp_path: Path) -> None:
    spread = [(1000.0, 1120.0), (1000.0, 1300.0), (1000.0, 1150.0)]
    report = build_report([make_run(tmp_path, {CELL: spread}, guardrails=[])])
    head = render(report, "table", width=400).splitlines()[0]
    assert head == ("Decision: KEEP-DEFAULT (observed +18.7% clears your +10.0% margin, but "
                    "its 95% lower bound +3.8% does not clear +5.0%, the bound's floor = half "
                    "your +10.0% margin)")
    table = render(report, "table")
    assert "knee c1: keep-default: +18.7% (better) clears +10.0%" in table
    for label in LABELS:
        assert label not in table, label
    assert json.loads(render(report, "json"))["cells"][0]["verdict"] == "gain-below-bar"
