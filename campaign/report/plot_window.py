"""The control across the window: the evidence behind `window-drift`.

One panel per decision cell and per cell flagged `window-drift` (any metric, so a
guardrail's or a secondary metric's drift is seen, not only the primary's): the control's
value in each pair in run order (slot on x; a pooled run draws one line per lane, each
lane being its own window), the line the verdict fits through it (`stats.trend`: how far
the control moved across the window) and the limit it is judged against
(`Rule.window_limit`) as a band around the control's mean.

A quantile cell whose drift was not judged (its passes had too few requests to give the
quantile: `flags.drift_not_judged`) is drawn after the flagged ones, its title grey and
saying why, so a p99 of 16 requests moving +145% is not read as an unstable window.
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from campaign.fmt import abs_pct, pct
from campaign.report.plot_common import color, legend, unit
from campaign.verdict import stats as st
from campaign.verdict.flags import DRIFT_NOT_JUDGED

if TYPE_CHECKING:
    from campaign.report.model import RunReport
    from campaign.verdict.outcome import Cell

GREY = "#808080"
"""The title of a panel whose drift was not judged."""
MAX_PANELS = 8
"""Panels drawn at most (decision cells first, then one drifting cell per metric before
a metric's second); the title names how many more drifted."""


def not_judged(c: Cell) -> str:
    """Why the cell's window drift was not judged (`flags.drift_not_judged`), else ""."""
    return next((r for r in c.reasons if r.startswith(DRIFT_NOT_JUDGED)), "")


def _drifted(c: Cell) -> bool:
    return "window-drift" in c.flags


def window_cells(run: RunReport) -> list[Cell]:
    """The cells whose control is drawn, in order: the decision cells, then the cells
    flagged `window-drift`, then those whose drift was not judged (each metric's first
    before any metric's second); one cell per (workload, level, metric)."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for c in run.decision_cells():
        if c.key not in seen and c.pairs:
            seen.add(c.key)
            out.append(c)
    for shown in (_drifted, not_judged):
        by_metric: dict[str, list[Cell]] = {}
        for cv in run.verdict.candidates:
            for c in cv.cells:
                if shown(c) and c.key not in seen and c.pairs:
                    seen.add(c.key)
                    by_metric.setdefault(c.metric, []).append(c)
        rounds = max((len(v) for v in by_metric.values()), default=0)
        out += [cs[i] for i in range(rounds) for cs in by_metric.values() if i < len(cs)]
    return out


def _panel(ax: Axes, run: RunReport, c: Cell, slot: dict[int, int | None]) -> None:
    control = run.arms[0]
    lanes = run.lane_of
    ticks: set[float] = set()
    for i, lane in enumerate(dict.fromkeys(lanes.get(p.pair, "") for p in c.pairs)):
        pts = sorted((s, p.control, p.pair) for p in c.pairs
                     if (s := slot.get(p.pair)) is not None and lanes.get(p.pair, "") == lane)
        xs = [float(s) for s, _, _ in pts]
        ys = [v for _, v, _ in pts]
        ticks.update(xs)
        col = color(i)
        ax.plot(xs, ys, "-o", color=col,
                label=f"{control} ({c.where})" + (f", lane {lane}" if lane else ""))
        for x, y, (_, _, pair) in zip(xs, ys, pts, strict=True):
            ax.annotate(f"p{pair}", (x, y), textcoords="offset points", xytext=(5, 4),
                        fontsize=8)
        moved = st.trend(ys, xs)
        if moved is not None and all(y > 0 for y in ys):
            mx = math.fsum(xs) / len(xs)
            my = math.fsum(math.log(y) for y in ys) / len(ys)
            slope = math.log1p(moved) / (max(xs) - min(xs))
            ends = [(x, math.exp(my + slope * (x - mx))) for x in (min(xs), max(xs))]
            ax.add_collection(LineCollection(
                [ends], colors=col, linestyles="dotted", linewidths=1.5, gid="trend",
                label=f"fitted trend: moved {pct(moved)}"))
    if c.control is not None and c.control > 0:
        lim = run.rule.window_limit
        ax.axhspan(c.control / (1 + lim), c.control * (1 + lim), color="#bbbbbb", alpha=0.3,
                   label=f"control mean ±{abs_pct(lim)} (window limit)")
    drift = "window-drift" in c.flags
    why = not_judged(c)
    moved_txt = f", moved {pct(c.control_trend)}" if c.control_trend is not None else ""
    state = ("NOT stable (window-drift)" if drift
             else "drift not judged (too few requests)" if why else "stable")
    title = (f"{c.where} {c.metric}{' (decision cell)' if c.decision_cell else ''}: "
             f"{state}{moved_txt}")
    if why:
        title += "\n" + textwrap.fill(why.split(", but ", 1)[-1], 110)
    ax.set_title(title, fontsize=10 if not why else 8,
                 color="#b00000" if drift else GREY if why else "#222222")
    ax.set_xlabel("slot (run order in the window)")
    ax.set_ylabel(f"{c.metric}\n({unit(c.metric)})", fontsize=9)
    ax.set_xticks(sorted(ticks))
    ax.grid(alpha=0.3)
    legend(ax)


def control_window(run: RunReport) -> Figure | None:
    """The control's value in slot order for the decision cells and every drifting cell
    (see the module docstring)."""
    control = run.arms[0]
    cells = window_cells(run)
    slot = {p: arms.get(control) for p, arms in run.slots.items()}
    if not cells or not any(v is not None for v in slot.values()):
        return None
    shown, more = cells[:MAX_PANELS], len(cells) - MAX_PANELS
    fig = Figure(figsize=(8, 2.6 * len(shown) + 0.6))
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, c in zip(axes, shown, strict=True):
        _panel(ax, run, c, slot)
    if more > 0:
        flagged = sum("window-drift" in c.flags for c in cells[MAX_PANELS:])
        what = [f"{n} more cell(s) {kind}" for n, kind in (
            (flagged, "flagged window-drift"), (more - flagged, "whose drift was not judged"))
            if n]
        fig.suptitle(f"{' and '.join(what)} are not drawn (see the tables)", fontsize=9,
                     color="#b00000" if flagged else GREY)
    fig.tight_layout()
    return fig
