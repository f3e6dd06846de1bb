"""The plots show what decided: a guardrail that stopped adoption with its limit and CI,
each arm's knee ringed, knee ticks at the levels' own values, the control across the
window for every drifting cell, and legends inside their axes. Each test reads the
figure's matplotlib objects (drawn with Agg where positions matter); every figure is built
from a report whose verdicts come from the real `judge_run` (through `build_report`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

from campaign import report as rp
from campaign.fmt import pct
from campaign.report import plots
from campaign.report.plot_knee import knee_index
from campaign.report.plot_sequential import sequential_path
from tests.runs import SIM_RUN, T0, TPUT, golden_spec, make_run
from tests.unit.report.test_rate_sweep import rate_run

TTFT = "ttft_p99"


def _figs(rep: rp.Report) -> dict[str, Figure]:
    return {name: fig for name, _, fig in plots.figures(rep)}


def _late_first_token(tmp_path: Path, ttft: list[tuple[Any, ...]], **rule: Any) -> rp.Report:
    spec = golden_spec()
    spec[("knee", "c1", TTFT)] = ttft
    rule.setdefault("guardrails", [{"metric": TTFT, "max_worsening": 0.05}])
    return rp.build_report([make_run(tmp_path, spec, name="late", pairs=3, **rule)])


# --------------------------------------------------------------------------- guardrails


def test_a_broken_guardrail_is_drawn_with_its_pairs_limit_and_ci(tmp_path: Path) -> None:
    ttft = [(210.0, 260.0), (205.0, 262.0), (212.0, 255.0)]
    rep = _late_first_token(tmp_path, ttft)
    run = rep.latest
    assert run.decision != "adopt"
    (check,) = [g for cv in run.verdict.candidates for g in cv.guardrails if g.stops]
    assert check.state == "broken" and check.metric == TTFT
    fig = _figs(rep)["guardrails"]
    (ax,) = fig.axes
    assert "broken" in ax.get_title() and TTFT in ax.get_title()
    # each pair's change of TTFT itself, from the measured values
    pairs = next(c for c in ax.collections if isinstance(c, PathCollection))
    drawn = [float(y) for _, y in pairs.get_offsets()]
    assert drawn == pytest.approx([(y / x - 1) * 100 for x, y in ttft])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["p1", "p2", "p3", "check"]
    # the limit: the registered 5% worsening of a lower-is-better metric, as the line says
    (limit,) = [ln for ln in ax.get_lines() if ln.get_gid() == "limit"]
    assert list(limit.get_ydata()) == pytest.approx([5.0, 5.0])
    assert "+5.0% limit" in check.reason
    # the check's own CI, whole (it is within reach of the points)
    (ci,) = [ln for ln in ax.get_lines() if ln.get_gid() == "ci"]
    assert check.ci is not None
    assert list(ci.get_ydata()) == pytest.approx([v * 100 for v in check.ci])
    assert min(ci.get_ydata()) > 5.0  # wholly beyond the limit: what "broken" means
    assert "CI" in " ".join(t.get_text() for t in ax.get_legend().get_texts())


def test_an_unclear_guardrail_is_drawn_and_an_unclear_deterioration_check_is_not(
        tmp_path: Path) -> None:
    """Unclear at a registered guardrail's cell stops adoption (not shown within its limit,
    whatever an older registration's `unclear_stops: false` says): drawn. Unclear at a
    deterioration check (another cell of the metric) does not stop it: not drawn."""
    ttft = [(210.0, 200.0), (205.0, 240.0), (212.0, 214.0)]  # wide: cannot tell
    for sub, guard in (("a", {"metric": TTFT, "max_worsening": 0.05}),
                       ("b", {"metric": TTFT, "max_worsening": 0.05, "unclear_stops": False})):
        rep = _late_first_token(tmp_path / sub, ttft, guardrails=[guard])
        checks = {(g.level, g.role): g for cv in rep.latest.verdict.candidates
                  for g in cv.guardrails if g.metric == TTFT}
        assert set(checks) == {("c1", "guardrail"), ("c4", "deterioration")}
        g, det = checks[("c1", "guardrail")], checks[("c4", "deterioration")]
        assert g.state == "unclear" and g.stops
        assert det.state == "unclear" and not det.stops
        assert rep.latest.verdict.reason == "guardrail-unresolved"
        (ax,) = _figs(rep)["guardrails"].axes  # one panel: the deterioration check has none
        assert ax.get_title() == "cand: guardrail ttft_p99 at knee c1 unclear — stops adoption"
        (ci,) = [ln for ln in ax.get_lines() if ln.get_gid() == "ci"]
        lo, hi = sorted(ci.get_ydata())
        assert lo < 5.0 < hi or any("CI goes on" in t.get_text() for t in ax.texts)
        # the legend names the interval's own levels, as the check's line does
        assert g.ci is not None
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert (f"CI {pct(g.ci[0])} … {pct(g.ci[1])}\n"
                "(one-sided: lower end 97.5%, upper end 95%)") in labels
        assert "(one-sided: lower end 97.5%, upper end 95%)" in g.reason


def test_a_broken_deterioration_check_is_drawn_as_one(tmp_path: Path) -> None:
    """A worsening shown beyond the limit at another cell of the guardrail's metric stops
    adoption: drawn, titled as the deterioration check it is."""
    spec = golden_spec()
    spec[("knee", "c4", TTFT)] = [(260.0, 330.0), (255.0, 325.0), (258.0, 331.0)]
    rep = rp.build_report([make_run(tmp_path, spec, name="late", pairs=3, guardrails=[
        {"metric": TTFT, "max_worsening": 0.05}])])
    (det,) = [g for cv in rep.latest.verdict.candidates for g in cv.guardrails
              if g.role == "deterioration"]
    assert (det.level, det.state, det.stops) == ("c4", "broken", True)
    assert rep.latest.verdict.reason == "guardrail"
    (ax,) = _figs(rep)["guardrails"].axes
    assert ax.get_title() == ("cand: deterioration check ttft_p99 at knee c4 broken — stops "
                              "adoption")
    (ci,) = [ln for ln in ax.get_lines() if ln.get_gid() == "ci"]
    assert min(ci.get_ydata()) > 5.0


def test_holding_guardrails_draw_no_guardrail_figure(tmp_path: Path) -> None:
    rep = rp.build_report([make_run(tmp_path, golden_spec(), pairs=3)])
    assert all(not g.stops for cv in rep.latest.verdict.candidates for g in cv.guardrails)
    assert "guardrails" not in _figs(rep)


# --------------------------------------------------------------------------- knee


def _knee_spec(control: list[float], cand: list[float]) -> dict[Any, Any]:
    spec: dict[Any, Any] = {("knee", lvl, TPUT): [(x * f, y * f) for f in (1.0, 1.01)]
                            for lvl, x, y in zip(("c1", "c4", "c16"), control, cand,
                                                 strict=True)}
    spec[("knee", "c1", TTFT)] = [(200.0, 201.0), (202.0, 203.0)]
    return spec


def _rings(fig: Figure) -> dict[str, tuple[float, float]]:
    return {str(c.get_gid()): tuple(float(v) for v in c.get_offsets()[0])
            for ax in fig.axes for c in ax.collections
            if str(c.get_gid()).startswith("knee:")}


def test_the_knee_is_ringed_where_the_curve_bends(tmp_path: Path) -> None:
    # per user: 100, 95, 26 tok/s — c4 buys almost 4× the throughput at little cost per
    # user, c16 pays for every token: c4 is the knee, for both arms
    control, cand = [100.0, 380.0, 420.0], [120.0, 440.0, 470.0]
    rep = rp.build_report([make_run(tmp_path, _knee_spec(control, cand), guardrails=[])])
    rings = _rings(_figs(rep)["knee"])
    assert set(rings) == {"knee:control:c4", "knee:cand:c4"}
    x = statistics.geometric_mean([380.0, 380.0 * 1.01])
    assert rings["knee:control:c4"] == pytest.approx((x, x / 4))


def test_no_knee_without_a_bend_or_with_two_levels(tmp_path: Path) -> None:
    # c4 lies below the line from c1 to c16 (throughput jumps only at c16): no knee
    rep = rp.build_report([make_run(tmp_path / "a", _knee_spec([100.0, 150.0, 1400.0],
                                                               [110.0, 160.0, 1500.0]),
                                    guardrails=[])])
    assert _rings(_figs(rep)["knee"]) == {}
    two = rp.build_report([make_run(tmp_path / "b", golden_spec(), pairs=3)])
    assert _rings(_figs(two)["knee"]) == {}
    assert "no knee" in _figs(two)["knee"].axes[0].get_title()
    assert "ring = the knee" in _figs(rp.build_report([make_run(
        tmp_path / "c", _knee_spec([100.0, 380.0, 420.0], [120.0, 440.0, 470.0]),
        guardrails=[])]))["knee"].axes[0].get_title()
    assert knee_index([1.0, 2.0], [2.0, 1.0]) is None


def _sim_report(tmp_path: Path) -> rp.Report:
    run = tmp_path / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    return rp.build_report([run])


def test_knee_axes_are_ticked_at_each_level_and_readable(tmp_path: Path) -> None:
    rep = _sim_report(tmp_path)
    run = rep.latest
    ax = _figs(rep)["knee"].axes[0]
    control = run.arms[0]
    for lvl in ("c1", "c4", "c16"):
        vals = [a[control] for a in run.measurements[("knee", lvl, TPUT)].values()]
        total = statistics.geometric_mean(vals)
        xticks = dict(zip(ax.get_xticks(), (t.get_text() for t in ax.get_xticklabels()),
                          strict=True))
        (label,) = [t for v, t in xticks.items() if math.isclose(v, total, rel_tol=1e-9)]
        assert label.endswith(lvl) and label.startswith(f"{total:.0f}\n")  # tok/s ≥ 100
        yticks = [t.get_text() for t in ax.get_yticklabels()]
        assert any(t.endswith(f" {lvl}") for t in yticks)
    assert all(not t.get_text() for t in ax.get_xticklabels(minor=True))
    assert all(not t.get_text() for t in ax.get_yticklabels(minor=True))
    canvas = FigureCanvasAgg(ax.figure)
    canvas.draw()
    boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
    assert len(boxes) >= 3
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two knee tick labels overlap"


# --------------------------------------------------------------------------- window


def _many_requests(df: pd.DataFrame) -> pd.DataFrame:
    """Passes of 400 requests: enough for a p99's window drift to be judged."""
    df.loc[df["metric"] == "requests_completed", "value"] = 400.0
    return df


def test_the_control_is_drawn_for_every_cell_flagged_window_drift(tmp_path: Path) -> None:
    spec = golden_spec()
    spec[("knee", "c4", TTFT)] = [(200.0, 204.0), (220.0, 224.0), (240.0, 246.0)]
    spec[("knee", "c4", "itl_p99")] = [(20.0, 20.4), (22.0, 22.4), (24.0, 24.6)]
    rep = rp.build_report([make_run(tmp_path, spec, name="drift", pairs=3,
                                    edit=_many_requests)])
    run = rep.latest
    drifting = [c for cv in run.verdict.candidates for c in cv.cells
                if "window-drift" in c.flags]
    assert {c.metric for c in drifting} == {TTFT, "itl_p99"}
    titles = [ax.get_title() for ax in _figs(rep)["control-window"].axes]
    assert titles[0].startswith("knee c1 output_token_throughput (decision cell)")
    for c in drifting:
        (title,) = [t for t in titles if t.startswith(f"{c.where} {c.metric}")]
        assert "NOT stable (window-drift)" in title and pct(c.control_trend) in title


def test_a_p99_of_16_requests_is_not_drawn_as_an_unstable_window(tmp_path: Path) -> None:
    """Issue "The first night, for a newcomer", 9: the demo marked its `ttft_p99` cells
    "NOT stable … moved +145.5%" in red from 2 pairs of 16–32 requests each."""
    rep = _sim_report(tmp_path)
    axes = _figs(rep)["control-window"].axes
    assert axes[0].get_title() == (
        "knee c1 output_token_throughput (decision cell): stable, moved -1.3%")
    for ax in axes[1:]:  # drawn only to say why their drift was not judged, in grey
        assert "drift not judged (too few requests)" in ax.get_title()
        assert ax.title.get_color() == "#808080"
    assert not any("NOT stable" in ax.get_title() for ax in axes)


def test_a_quantile_whose_drift_was_not_judged_is_drawn_grey_saying_why(
        tmp_path: Path) -> None:
    rep = _sim_report(tmp_path)
    why = ("window drift not judged: the control moved -38.6% across the window, but a p99 "
           "from 16 requests per pass (pair 1) is no number to judge it on: a p99 needs at "
           "least 300 requests per pass (3 beyond it)")
    run = rep.latest
    cv = run.verdict.candidates[0]
    cells = tuple(dataclasses.replace(c, reasons=(*c.reasons, why))
                  if c.key == ("knee", "c1", TTFT) else c for c in cv.cells)
    verdict = dataclasses.replace(run.verdict, candidates=(
        dataclasses.replace(cv, cells=cells),))
    rep = dataclasses.replace(rep, runs=(dataclasses.replace(run, verdict=verdict),))
    ax = _figs(rep)["control-window"].axes[1]
    assert ax.get_title() == (
        "knee c1 ttft_p99: drift not judged (too few requests), moved -38.6%\n"
        "a p99 from 16 requests per pass (pair 1) is no number to judge it on: a p99 needs "
        "at least 300 requests per\npass (3 beyond it)")
    assert ax.title.get_color() == "#808080"


def test_a_drifting_guardrail_metric_gets_its_window_panel(tmp_path: Path) -> None:
    ttft = [(200.0, 204.0), (220.0, 224.0), (240.0, 246.0)]  # the control climbs 20%
    spec = golden_spec()
    spec[("knee", "c1", TTFT)] = ttft
    rep = rp.build_report([make_run(tmp_path, spec, name="late", pairs=3,
                                    guardrails=[{"metric": TTFT, "max_worsening": 0.5}],
                                    edit=_many_requests)])
    (c,) = [c for cv in rep.latest.verdict.candidates for c in cv.cells
            if "window-drift" in c.flags]
    assert c.metric == TTFT and not c.decision_cell
    axes = _figs(rep)["control-window"].axes
    assert len(axes) == 2
    ax = axes[1]
    assert ax.get_title().startswith(f"knee c1 {TTFT}: NOT stable")
    (line,) = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert list(line.get_ydata()) == [200.0, 220.0, 240.0]
    (trend,) = [c for c in ax.collections if c.get_gid() == "trend"]
    (segment,) = trend.get_segments()  # type: ignore[attr-defined]
    (x0, y0), (x1, y1) = segment
    assert (x0, x1) == (0.0, 4.0)
    assert y1 / y0 - 1 == pytest.approx(c.control_trend)


# --------------------------------------------------------------------------- legends


def test_every_legend_stays_inside_its_axes(tmp_path: Path) -> None:
    from tests.unit.report.test_report_html import level_spec

    reports = [_sim_report(tmp_path),
               _late_first_token(tmp_path / "late", [(210.0, 260.0), (205.0, 262.0),
                                                     (212.0, 255.0)]),
               rp.build_report([make_run(tmp_path / "lv", golden_spec() | level_spec(),
                                         pairs=3)]),
               rp.build_report([make_run(tmp_path / "h", golden_spec(), pairs=3,
                                         short_id=f"n{i:05d}",
                                         when=T0 + dt.timedelta(days=i)) for i in range(3)]),
               rp.build_report([make_run(tmp_path / "sq", {
                   ("knee", "c1", "output_token_throughput"):
                       [(1000.0, 1250.0), (1000.0, 1262.0), (1000.0, 1255.0)]},
                   guardrails=[], sequential={"max_pairs": 6}, complete=False)]),
               rp.build_report([rate_run(tmp_path / "rates")])]
    seen = 0
    names: set[str] = set()
    for rep in reports:
        for name, fig in _figs(rep).items():
            names.add(name)
            FigureCanvasAgg(fig).draw()
            for ax in fig.axes:
                leg = ax.get_legend()
                if leg is None:
                    continue
                seen += 1
                box, inside = leg.get_window_extent(), ax.get_window_extent()
                assert (box.x0 >= inside.x0 - 1 and box.x1 <= inside.x1 + 1
                        and box.y0 >= inside.y0 - 1 and box.y1 <= inside.y1 + 1), (
                    f"{name}: legend outside its axes")
    assert seen >= 8
    assert names == {n for n, _, _ in plots.PLOTS} | {"history"}  # every kind of figure


def test_each_guardrail_check_carries_its_limit_on_the_change_scale(tmp_path: Path) -> None:
    """The limit drawn is the verdict's own (`judge_run` through `build_report`): +5% for a
    lower-is-better metric, −5% for a higher-is-better one, the absolute difference for an
    absolute guardrail — as each check's own line states it."""
    spec = golden_spec()
    spec[("knee", "c1", "error_rate")] = [(0.0, 0.03), (0.0, 0.0), (0.0, 0.06)]
    spec[("agentfix", "shell", TPUT)] = [(150.0, 120.0), (148.0, 138.0), (151.0, 131.0)]
    rep = rp.build_report([make_run(tmp_path, spec, pairs=3, guardrails=[
        {"metric": "error_rate", "max_worsening": 0.0, "absolute": True},
        {"metric": TTFT, "max_worsening": 0.05},
        {"metric": TPUT, "max_worsening": 0.05, "workload": "agentfix", "level": "shell"}])])
    every = [g for cv in rep.latest.verdict.candidates for g in cv.guardrails]
    checks = {g.metric: g for g in every if g.role == "guardrail"}
    assert (checks[TTFT].limit, checks[TTFT].kind) == (pytest.approx(0.05), "ratio")
    assert "+5.0% limit" in checks[TTFT].reason
    assert (checks[TPUT].limit, checks[TPUT].kind) == (pytest.approx(-0.05), "ratio")
    assert "-5.0% limit" in checks[TPUT].reason
    # each deterioration check carries its guardrail's limit too
    assert sorted((g.metric, round(g.limit or 0.0, 9)) for g in every
                  if g.role == "deterioration") == [
        (TPUT, -0.05), (TPUT, -0.05), (TPUT, -0.05), (TTFT, 0.05)]
    err = checks["error_rate"]
    assert (err.limit, err.kind) == (0.0, "absolute")
    # the failure share is up on 2 of 3 pairs, not significantly: unclear; the throughput
    # at agentfix shell, -13.5% on pairs of -20%, -7% and -13%, is not shown within -5%
    # either: each stops adoption (not shown within its limit), so each is drawn
    assert err.state == "unclear" and err.stops
    assert checks[TPUT].state == "unclear" and checks[TPUT].stops
    err_ax, tput_ax = _figs(rep)["guardrails"].axes
    assert err_ax.get_title() == "cand: guardrail error_rate at knee c1 unclear — stops adoption"
    assert tput_ax.get_title() == ("cand: guardrail output_token_throughput at agentfix shell "
                                   "unclear — stops adoption")
    # the error rate in the metric's own unit, the throughput as a change in %
    assert "fraction" in err_ax.get_ylabel() and "%" not in err_ax.get_ylabel()
    assert "%" in tput_ax.get_ylabel()
    pairs = next(c for c in err_ax.collections if isinstance(c, PathCollection))
    assert [float(y) for _, y in pairs.get_offsets()] == pytest.approx([0.03, 0.0, 0.06])
    (limit,) = [ln for ln in err_ax.get_lines() if ln.get_gid() == "limit"]
    assert list(limit.get_ydata()) == [0.0, 0.0]
    (limit,) = [ln for ln in tput_ax.get_lines() if ln.get_gid() == "limit"]
    assert list(limit.get_ydata()) == pytest.approx([-5.0, -5.0])


def test_the_html_page_embeds_the_guardrail_figure(tmp_path: Path) -> None:
    rep = _late_first_token(tmp_path, [(210.0, 260.0), (205.0, 262.0), (212.0, 255.0)])
    page = rp.render(rep, "html")
    (title,) = [t for n, t, _ in plots.PLOTS if n == "guardrails"]
    assert f"<figure id='plot-guardrails'><figcaption>{title}</figcaption>" in page
    assert page.index("id='plot-pair-changes'") < page.index("id='plot-guardrails'")


def test_an_html_report_draws_each_figure_once(tmp_path: Path) -> None:
    """`report --format html -o`: the files and the page's PNGs are the same drawing."""
    rep = rp.build_report([make_run(tmp_path, golden_spec(), pairs=3)])
    first = plots.figures(rep)
    written = plots.write_files(rep, tmp_path / "plots")
    embedded = plots.pngs(rep)
    assert [f for _, _, f in plots.figures(rep)] == [f for _, _, f in first]
    assert all(a is b for (_, _, a), (_, _, b) in zip(plots.figures(rep), first, strict=True))
    files = {p.stem: p.read_bytes() for p in written if p.suffix == ".png"}
    assert {n: data for n, _, data in embedded} == files
    other = rp.build_report([make_run(tmp_path / "b", golden_spec(), pairs=3)])
    assert not any(a is b for (_, _, a), (_, _, b) in zip(plots.figures(other), first,
                                                              strict=True))


def test_history_marks_each_night_by_its_decision(tmp_path: Path) -> None:
    nights = [make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 100.0 + g),
                                                          (100.5, 100.5 + g)]},
                       guardrails=[], short_id=f"n{i:05d}", when=T0 + dt.timedelta(days=i))
              for i, g in enumerate((15.0, 2.0, 14.0))]
    rep = rp.build_report(nights)
    (ax,) = _figs(rep)["history"].axes
    marks = {str(c.get_gid()): [tuple(map(float, xy)) for xy in c.get_offsets()]
             for c in ax.collections if str(c.get_gid()).startswith("history:")}
    want: dict[str, list[tuple[float, float]]] = {"history:night adopts": [],
                                                  "history:night keeps the default": []}
    for i, run in enumerate(rep.runs):
        key = "history:night adopts" if run.decision == "adopt" else (
            "history:night keeps the default")
        want[key] += [(float(i), c.change * 100) for c in run.decision_cells()
                      if c.change is not None]
    assert want["history:night adopts"] and want["history:night keeps the default"]
    assert marks.keys() == want.keys()
    for key, pts in want.items():
        assert [x for x, _ in marks[key]] == [x for x, _ in pts]
        assert [y for _, y in marks[key]] == pytest.approx([y for _, y in pts])


def test_the_decision_cells_legend_covers_no_ci(tmp_path: Path) -> None:
    """The pair-changes legend sits in the room above the data: on no pair, no cell's
    change and no CI."""
    for rep in (_sim_report(tmp_path),
                rp.build_report([make_run(tmp_path / "g", golden_spec(), pairs=3)])):
        fig = _figs(rep)["pair-changes"]
        FigureCanvasAgg(fig).draw()
        (ax,) = fig.axes
        box = ax.get_legend().get_window_extent()
        cis = [ln for ln in ax.get_lines() if "CI" in str(ln.get_label())]
        assert cis
        for ln in cis:
            assert not box.overlaps(ln.get_window_extent()), "the legend covers a CI"
        data = ax.transData
        for coll in ax.collections:  # the pairs' points and the cells' change marks
            for seg in getattr(coll, "get_segments", lambda: [])():
                for x, y in seg:
                    assert not box.contains(*data.transform((x, y))), "covers a change"
            if isinstance(coll, PathCollection):
                for x, y in coll.get_offsets():
                    assert not box.contains(*data.transform((x, y))), "covers a pair"


# --------------------------------------------------------------------------- sequential


def test_the_sequential_path_draws_the_futility_boundary(tmp_path: Path) -> None:
    """Issue "The first night, for a newcomer", 12: the sequential plot lacked the futility
    boundary. Each look's futility bound (the change's upper bound the design compares with
    its power point, 1.5 × the margin) is drawn, with a legend entry for it and for the
    power point."""
    pairs = [(1000.0, 1005.0), (1000.0, 1001.0), (1000.0, 1004.0), (1000.0, 1002.0)]
    rep = rp.build_report([make_run(tmp_path, {("knee", "c1", TPUT): pairs}, guardrails=[],
                                    sequential={"max_pairs": 8}, complete=False)])
    (cv,) = rep.latest.verdict.candidates
    assert cv.sequential is not None and cv.sequential.state == "keep-default"
    fig = sequential_path(rep.latest)
    assert fig is not None
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    power = lines["power point +15.0% (the futility bound must fall below it)"]
    assert list(power.get_ydata()) == [pytest.approx(15.0)] * 2
    bound = lines["knee c1: the futility bound"]
    d = [math.log(c / a) for a, c in pairs]
    expected = []
    for step in cv.sequential.steps:
        (look,) = step.cells
        sub = d[:step.pairs]
        mean = statistics.fmean(sub)
        upper = mean + look.futility_bound * statistics.stdev(sub) / math.sqrt(len(sub))
        expected.append((step.pairs, 100 * math.expm1(upper)))
    assert list(bound.get_xdata()) == [p for p, _ in expected]
    assert list(bound.get_ydata()) == pytest.approx([y for _, y in expected])
    assert bound.get_ydata()[-1] < 15.0 <= bound.get_ydata()[0]  # crossed at the last look
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "knee c1: the futility bound" in labels
    assert "power point +15.0% (the futility bound must fall below it)" in labels
