"""campaign.report.plot_levels: per knee level, tokens per step against step cost (control
against candidate) and acceptance by draft position, from a results directory written
through the store's API."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from campaign import report as rp
from campaign.report import plot_levels, plots
from tests.runs import golden_spec, make_run
from tests.unit.report.test_report_html import level_spec


def test_each_level_of_each_arm_at_its_step_cost_and_tokens_per_step(tmp_path: Path) -> None:
    run = make_run(tmp_path, golden_spec() | level_spec(), name="depth7", pairs=3)
    rep = rp.build_report([run])
    # step cost = median inter-token latency × tokens per step, pair by pair
    points = plot_levels.step_points(rep.latest, "cand", "c4")
    assert [x for x, _ in points] == pytest.approx([12.5 * 2.9, 12.4 * 2.95, 12.6 * 2.9])
    assert [y for _, y in points] == pytest.approx([2.9, 2.95, 2.9])
    fig = plot_levels.levels(rep.latest)
    assert fig is not None
    steps, positions = fig.axes
    assert "step cost (ms)" in steps.get_xlabel() and "(tokens)" in steps.get_ylabel()
    assert "(fraction)" in positions.get_ylabel()
    lines = {ln.get_label(): ln for ln in steps.get_lines()}
    cand = lines["cand"].get_xydata()
    gmean = math.exp(sum(math.log(v) for v in (3.3, 3.2, 3.25)) / 3)
    assert cand[0][1] == pytest.approx(gmean)  # c1, the geometric mean over pairs
    assert len(cand) == len(lines["control"].get_xydata()) == 2
    # one dotted ray per level through the control's point: its rate there
    rays = [ln for ln in steps.get_lines() if ln.get_linestyle() == ":"]
    assert len(rays) == 2
    assert {ln.get_label() for ln in positions.get_lines()} == {
        "control c1", "control c4", "cand c1", "cand c4"}
    assert "levels" in [n for n, _, _ in plots.figures(rep)]


def test_no_figure_with_only_the_sweeps_total(tmp_path: Path) -> None:
    run = make_run(tmp_path, golden_spec(), name="depth7", pairs=3)  # spec figures at `all`
    rep = rp.build_report([run])
    assert plot_levels.levels(rep.latest) is None
    assert "levels" not in [n for n, _, _ in plots.figures(rep)]
