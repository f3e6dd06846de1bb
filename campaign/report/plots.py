"""Figures of a report (matplotlib, Agg): PNG bytes for the HTML page, PNG and SVG files
beside it (`--format html -o DIR/report.html` → DIR/plots/).

Every figure shows each pair's own points, not only the means: with 2–5 pairs the reader
must see the spread the verdict is based on ("a sign, not a size"). Figures are built on
`matplotlib.figure.Figure` directly (no pyplot state), so they are safe to make anywhere
and need no display. Every axis names its unit; every legend stays inside its axes.

- `knee` (`plot_knee`): the Pareto view — output tok/s per user against total output
  tok/s, one line per arm through its levels, each pair's points faint, each arm's knee
  ringed, ticks at the levels' own values; underneath, the candidate's change per level;
- `pair_changes`: each decision cell's per-pair change of the metric itself, labelled by
  pair, with the cell's CI, the drift band shaded and the bar (margin) drawn;
- `sequential` (`plot_sequential`): a sequential design's looks: each decision cell's
  change, the design's bound against the floor and the margin, and its futility bound
  against the power point (1.5 × the margin);
- `guardrails` (`plot_guardrails`): wherever a guardrail check stopped adoption (broken,
  or unclear at a registered guardrail's cell), its metric's per-pair changes with the
  limit and the check's interval;
- `control_window` (`plot_window`): the control in run order across the window for the
  decision cells and every cell flagged `window-drift`, with the fitted trend and the
  window limit (a quantile whose drift was not judged, too few requests, drawn grey);
- `acceptance`: acceptance rate by content class (agent fixtures) and by draft position
  (`acceptance_pos<i>`), per arm;
- `rates` (`plot_rates`): a rate sweep's TTFT p50 and p99 and its share of requests
  within the SLO against offered rate, per arm, each arm's capacity at SLO marked;
- `history`: with several runs, each night's change of each decision cell and its
  decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from campaign.report import plot_levels as _levels
from campaign.report.plot_common import color, legend, png, svg
from campaign.report.plot_guardrails import guardrails
from campaign.report.plot_knee import knee
from campaign.report.plot_rates import rates
from campaign.report.plot_sequential import sequential_path
from campaign.report.plot_window import control_window
from campaign.verdict.rule import change_of

if TYPE_CHECKING:
    from campaign.report.model import Report, RunReport


# ------------------------------------------------------------- per-pair changes


def pair_changes(run: RunReport) -> Figure | None:
    """Each decision cell's per-pair change of its metric, with CI, band and bar."""
    cells = [c for c in run.decision_cells() if c.pairs]
    if not cells:
        return None
    fig = Figure(figsize=(max(7.5, 1.8 * len(cells) + 4.5), 4.5))
    ax = fig.add_subplot()
    direction = run.rule.direction
    band_lo = change_of(-math.log1p(run.rule.band), direction) * 100
    band_hi = change_of(math.log1p(run.rule.band), direction) * 100
    ax.axhspan(min(band_lo, band_hi), max(band_lo, band_hi), color="#bbbbbb", alpha=0.35,
               label=f"drift band ±{run.rule.band * 100:.1f}%")
    bar_d = run.rule.bar_d(max(1, len(run.arms) - 1))
    bar = change_of(bar_d, direction) * 100
    ax.axhline(bar, color="#2ca02c", linestyle="--", label=f"bar (margin) {bar:+.1f}%")
    ax.axhline(0, color="#333333", linewidth=0.8)
    labels = []
    for i, c in enumerate(cells):
        col = color(run.arms.index(c.arm) if c.arm in run.arms else 1)
        ys = [p.change * 100 for p in c.pairs]
        xs = [i + (j - (len(ys) - 1) / 2) * 0.12 for j in range(len(ys))]
        ax.scatter(xs, ys, color=col, s=30, zorder=3)
        for x, y, p in zip(xs, ys, c.pairs, strict=True):
            lane = run.lane_of.get(p.pair)
            ax.annotate(f"p{p.pair}" + (f" {lane}" if lane else ""), (x, y),
                        textcoords="offset points", xytext=(5, 2),
                        fontsize=8)
        if c.change is not None:
            ax.hlines([c.change * 100], i - 0.2, i + 0.2, color=col, linewidth=2.5,
                      zorder=4, label="cell's change" if i == 0 else "_nolegend_")
        if c.change_ci is not None:
            lo, hi = (v * 100 for v in c.change_ci)
            ax.plot([i + 0.3, i + 0.3], [lo, hi], color=col, linewidth=2,
                    label=f"{run.rule.prereg.confidence:.0%} CI" if i == 0 else None)
        labels.append(f"{c.arm}\n{c.where}\n{c.verdict}" if len(run.arms) > 2
                      else f"{c.where}\n{c.verdict}")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlim(-0.7, len(cells) - 0.3)
    ax.set_xlabel("decision cell (and its verdict)")
    better = "up" if direction == "higher" else "down"
    ax.set_ylabel(f"change of {run.rule.metric} (%)")
    ax.set_title(f"Decision cells: each pair's change (p1, p2 …), the cell's change and CI; "
                 f"better is {better}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    legend(ax, headroom=0.45)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------- acceptance


def acceptance(run: RunReport) -> Figure | None:
    """Acceptance by content class (agent fixtures) and by draft position, per arm."""
    classes = sorted({lvl for (w, lvl, m) in run.measurements
                      if w == "agentfix" and m == "acceptance_rate"})
    positions = sorted({int(m[len("acceptance_pos"):]) for (w, lvl, m) in run.measurements
                        if w == "knee" and lvl == "all" and m.startswith("acceptance_pos")})
    panels = [p for p in (("class", classes), ("position", positions)) if p[1]]
    if not panels:
        return None
    fig = Figure(figsize=(5.2 * len(panels) + 0.8, 4.2))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    n = len(run.arms)
    width = 0.8 / n
    for ax, (kind, keys) in zip(axes, panels, strict=True):
        for ai, arm in enumerate(run.arms):
            col = color(ai)
            for ki, k in enumerate(keys):
                key = (("agentfix", str(k), "acceptance_rate") if kind == "class"
                       else ("knee", "all", f"acceptance_pos{k}"))
                vals = [a[arm] for a in run.measurements.get(key, {}).values() if arm in a]
                if not vals:
                    continue
                x = ki + (ai - (n - 1) / 2) * width
                ax.bar(x, math.fsum(vals) / len(vals), width * 0.9, color=col, alpha=0.55,
                       label=arm if ki == 0 else None)
                ax.scatter([x] * len(vals), vals, color=col, s=14, zorder=3)
        ax.set_xticks(range(len(keys)), [str(k) for k in keys])
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
        legend(ax)
        if kind == "class":
            ax.set_xlabel("content class (agent fixtures)")
            ax.set_ylabel("acceptance rate (fraction of draft tokens)")
            ax.set_title("By content class (bars = mean, dots = pairs)", fontsize=10)
        else:
            ax.set_xlabel("draft position (0 = first drafted token)")
            ax.set_ylabel("accepted at position ÷ drafts (fraction)")
            ax.set_title("By draft position, whole knee sweep", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------ history


def history(report: Report) -> Figure | None:
    """Each night's change of each decision cell, marked by the night's decision."""
    if len(report.runs) < 2:
        return None
    fig = Figure(figsize=(max(7.0, 0.5 * len(report.runs) + 4), 4.2))
    ax = fig.add_subplot()
    series: dict[str, tuple[list[int], list[float]]] = {}
    for i, run in enumerate(report.runs):
        for c in run.decision_cells():
            if c.change is None:
                continue
            xs, ys = series.setdefault(f"{c.arm} {c.where}", ([], []))
            xs.append(i)
            ys.append(c.change * 100)
    for si, (name, (xs, ys)) in enumerate(series.items()):
        ax.plot(xs, ys, "-", color=color(si + 1), alpha=0.6, label=name)
    marks: dict[bool, tuple[list[int], list[float]]] = {True: ([], []), False: ([], [])}
    for i, run in enumerate(report.runs):
        xs, ys = marks[run.decision == "adopt"]
        for c in run.decision_cells():
            if c.change is not None:
                xs.append(i)
                ys.append(c.change * 100)
    latest = report.latest
    bar = change_of(latest.rule.bar_d(max(1, len(latest.arms) - 1)), latest.rule.direction)
    ax.axhline(bar * 100, color="#2ca02c", linestyle="--", label=f"bar {bar * 100:+.1f}%")
    ax.axhline(0, color="#333333", linewidth=0.8)
    for adopt, label in ((True, "night adopts"), (False, "night keeps the default")):
        ax.scatter(*marks[adopt], marker="o" if adopt else "x", s=40, zorder=3, label=label,
                   color="#2ca02c" if adopt else "#d62728", gid=f"history:{label}")
    ticks = list(range(len(report.runs)))
    step = max(1, len(ticks) // 12)
    ax.set_xticks(ticks[::step], [r.registered_at[:10] for r in report.runs][::step],
                  rotation=30, ha="right")
    ax.set_xlabel("night (registration date)")
    ax.set_ylabel(f"change of {latest.rule.metric} (%)")
    ax.set_title("History: each night's change in the decision cells, and its decision",
                 fontsize=10)
    ax.grid(alpha=0.3)
    legend(ax)
    fig.tight_layout()
    return fig


PLOTS: tuple[tuple[str, str, Callable[[RunReport], Figure | None]], ...] = (
    ("knee", "Knee: per-user against total throughput, and the change per level", knee),
    ("pair-changes", "Decision cells: per-pair changes, CI, drift band and bar",
     pair_changes),
    ("sequential", "Sequential design: the change, the design's bound and its futility "
     "bound at each look", sequential_path),
    ("guardrails", "Guardrails that decided: per-pair changes, the limit and the CI",
     guardrails),
    ("control-window", "The control across the window: the decision cells and every "
     "cell flagged window-drift", control_window),
    ("acceptance", "Acceptance by content class and by draft position", acceptance),
    ("levels", "Per knee level: tokens per step against step cost", _levels.levels),
    ("rates", "Rate sweep: latency and requests within the SLO against offered rate, with "
     "each arm's capacity at SLO", rates),
)


def figures(report: Report) -> list[tuple[str, str, Figure]]:
    """The report's figures as (name, title, Figure), skipping those without data: the
    newest run's, then the history (several runs)."""
    return _drawn(report).figures


@dataclass
class _Drawn:
    report: Report
    figures: list[tuple[str, str, Figure]]
    png: dict[str, bytes] = field(default_factory=dict)


_LAST: list[_Drawn] = []
"""The last report's figures and their PNGs: `write_files` then `pngs` on one report
(what `report --format html -o` does) draw and encode each figure once."""


def _drawn(report: Report) -> _Drawn:
    if not _LAST or _LAST[0].report is not report:
        _LAST[:] = [_Drawn(report, _make(report))]
    return _LAST[0]


def _png_of(report: Report, name: str, fig: Figure) -> bytes:
    cache = _drawn(report).png
    if name not in cache:
        cache[name] = png(fig)
    return cache[name]


def _make(report: Report) -> list[tuple[str, str, Figure]]:
    out = []
    for name, title, make in PLOTS:
        fig = make(report.latest)
        if fig is not None:
            out.append((name, title, fig))
    hist = history(report)
    if hist is not None:
        out.append(("history", "History: the change and decision per night", hist))
    return out


def pngs(report: Report) -> list[tuple[str, str, bytes]]:
    """(name, title, PNG bytes) of every figure."""
    return [(name, title, _png_of(report, name, fig)) for name, title, fig in figures(report)]


def write_files(report: Report, folder: Path) -> list[Path]:
    """Every figure as NAME.png and NAME.svg in `folder` (created); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, _, fig in figures(report):
        for suffix, data in ((".png", _png_of(report, name, fig)), (".svg", svg(fig))):
            path = folder / f"{name}{suffix}"
            path.write_bytes(data)
            written.append(path)
    return written


__all__ = ["PLOTS", "acceptance", "control_window", "figures", "guardrails", "history",
           "knee", "pair_changes", "pngs", "rates", "write_files"]
