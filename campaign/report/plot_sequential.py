"""The sequential design's path: at each look, each decision cell's measured change, the
design's bound on it against the floor the bound must clear and the margin, and its
futility bound (the change's upper bound at the futility boundary's critical value)
against the power point (1.5 × the margin) it must fall below for the design to stop as
not worth it — the picture a reviewer wants of where the campaign stopped and why."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from campaign.report.plot_common import legend
from campaign.verdict.rule import better_d, change_of

if TYPE_CHECKING:
    from campaign.report.model import RunReport
    from campaign.verdict import stats as st
    from campaign.verdict.outcome import CellLook

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def futility_upper(c: CellLook, powered_d: float, direction: st.Direction) -> float | None:
    """A look's futility bound on the mean log change d̄ (positive = better): d̄ + f·s/√n,
    the futility boundary f at the look. The look is futile when it falls to the power
    point or below (`boundaries.look`: F = √n(d̄ − powered)/s ≤ −f). s/√n comes from the
    look's own statistic F. None where the look spends no futility error (f infinite), the
    pairs do not spread (s = 0), or d̄ sits exactly on the power point (F = 0)."""
    if not math.isfinite(c.futility_bound):
        return None
    mean = math.log1p(c.change) if direction == "higher" else -math.log1p(c.change)
    if c.futility_statistic == 0 or not math.isfinite(c.futility_statistic):
        return None
    se = (mean - powered_d) / c.futility_statistic
    return mean + c.futility_bound * se if se > 0 else None


def sequential_path(run: RunReport) -> Figure | None:
    """None for a fixed design (or before the first look)."""
    rule = run.rule
    paths = [(cv.arm, cv.sequential) for cv in run.verdict.candidates
             if cv.sequential is not None and cv.sequential.steps]
    if rule.prereg.sequential is None or not paths:
        return None
    fig = Figure(figsize=(8.0, 4.5))
    ax = fig.add_subplot()
    floor = change_of(rule.floor_d(), rule.direction) * 100
    margin = change_of(rule.bar_d(1), rule.direction) * 100
    ax.axhline(margin, color="#2ca02c", linestyle="--", label=f"margin {margin:+.1f}%")
    ax.axhline(floor, color="#ff7f0e", linestyle=":",
               label=f"floor {floor:+.1f}% (the bound must clear it)")
    powered_d = better_d(1.5 * rule.prereg.margin, rule.direction)
    power = change_of(powered_d, rule.direction) * 100
    ax.axhline(power, color="#7f7f7f", linestyle="-.",
               label=f"power point {power:+.1f}% (the futility bound must fall below it)")
    ax.axhline(0, color="#333333", linewidth=0.8)
    i = 0
    for arm, path in paths:
        assert path is not None
        cells = sorted({(c.workload, c.level) for s in path.steps for c in s.cells})
        for w, lvl in cells:
            pts = [(s.pairs, c) for s in path.steps for c in s.cells
                   if (c.workload, c.level) == (w, lvl)]
            color = COLORS[i % len(COLORS)]
            i += 1
            name = (f"{arm} " if len(paths) > 1 else "") + f"{w} {lvl}"
            ax.plot([p for p, _ in pts], [c.change * 100 for _, c in pts], marker="o",
                    color=color, label=f"{name}: change")
            bounded = [(p, c.boundary * 100) for p, c in pts if c.boundary is not None]
            if bounded:
                ax.plot([p for p, _ in bounded], [b for _, b in bounded], marker="v",
                        linestyle="--", color=color, alpha=0.7,
                        label=f"{name}: the design's bound")
            futile = [(p, 100 * change_of(u, rule.direction)) for p, c in pts
                      if (u := futility_upper(c, powered_d, rule.direction)) is not None]
            if futile:
                ax.plot([p for p, _ in futile], [u for _, u in futile], marker="^",
                        linestyle=":", color=color, alpha=0.7,
                        label=f"{name}: the futility bound")
        if path.stopped_at is not None:
            ax.axvline(path.stopped_at, color="#555555", linewidth=1)
            ax.annotate(f"stopped: {path.state}", (path.stopped_at, ax.get_ylim()[1]),
                        textcoords="offset points", xytext=(4, -12), fontsize=8)
    design = rule.prereg.sequential
    ax.set_xticks(list(design.schedule()))
    ax.set_xlim(design.min_pairs - 0.5, design.max_pairs + 0.5)
    ax.set_xlabel("pairs measured at the look")
    ax.set_ylabel(f"change of {rule.metric} (%)")
    ax.set_title("Sequential design: the change, the design's bound and its futility bound "
                 "at each look", fontsize=10)
    ax.grid(alpha=0.3)
    legend(ax, headroom=0.15)
    return fig
