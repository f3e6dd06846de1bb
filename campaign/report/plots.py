"""Figures of a report (matplotlib, Agg): PNG bytes for the HTML page, PNG and SVG files
beside it (`--format html -o DIR/report.html` → DIR/plots/).

Every figure shows each pair's own points, not only the means: with 2–5 pairs the reader
must see the spread the verdict is based on ("a sign, not a size"). Figures are built on
`matplotlib.figure.Figure` directly (no pyplot state), so they are safe to make anywhere
and need no display. Every axis names its unit.

- `knee`: the Pareto view — output tok/s per user (total ÷ concurrency) against total
  output tok/s, one line per arm through its levels (c1 … c16), each pair's points faint;
  underneath, the candidate's change at each level;
- `pair_changes`: each decision cell's per-pair change of the metric itself, labelled by
  pair, with the cell's CI, the drift band shaded and the bar (margin) drawn;
- `control_window`: the control's measurement of each decision cell in run order across
  the window (slot on x) — the evidence behind `window-drift`;
- `acceptance`: acceptance rate by content class (agent fixtures) and by draft position
  (`acceptance_pos<i>`), per arm;
- `history`: with several runs, each night's change of each decision cell and its
  decision.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from campaign import catalog
from campaign.report import plot_levels as _levels
from campaign.verdict.rule import change_of

if TYPE_CHECKING:
    from campaign.report.model import Report, RunReport

COLORS = ["#555555", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
TPUT = "output_token_throughput"


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight",
                metadata={"Software": None})  # no version stamp: same input, same bytes
    return buf.getvalue()


def _svg(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Creator": None, "Date": None})
    return buf.getvalue()


def _concurrency(level: str) -> int | None:
    return int(level[1:]) if level[:1] == "c" and level[1:].isdigit() else None


def _gmean(xs: list[float]) -> float:
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def _unit(metric: str) -> str:
    return catalog.METRICS[metric].unit if metric in catalog.METRICS else ""


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


# ------------------------------------------------------------------ knee (Pareto view)


def knee(run: RunReport) -> Figure | None:
    """Tok/s per user against total tok/s, one line per arm through its levels; below,
    each candidate's change of total tok/s per level (with each pair's change)."""
    levels = sorted({lvl for (w, lvl, m) in run.measurements
                     if w == "knee" and m == TPUT and _concurrency(lvl)},
                    key=lambda lvl: _concurrency(lvl) or 0)
    if not levels:
        return None
    fig = Figure(figsize=(8.5, 6.5))
    ax, strip = fig.subplots(2, 1, height_ratios=[3, 1.2])
    drawn = False
    for ai, arm in enumerate(run.arms):
        color = _color(ai)
        xs: list[float] = []
        ys: list[float] = []
        names: list[str] = []
        for lvl in levels:
            conc = _concurrency(lvl) or 1
            vals = [a[arm] for a in run.measurements[("knee", lvl, TPUT)].values()
                    if arm in a and a[arm] > 0]
            if not vals:
                continue
            ax.scatter(vals, [v / conc for v in vals], color=color, alpha=0.25, s=18,
                       linewidths=0)
            m = _gmean(vals)
            xs.append(m)
            ys.append(m / conc)
            names.append(lvl)
        if not xs:
            continue
        drawn = True
        ax.plot(xs, ys, "-o", color=color, label=arm, markersize=5, linewidth=1.8)
        for x, y, name in zip(xs, ys, names, strict=True):
            ax.annotate(name, (x, y), textcoords="offset points",
                        xytext=(6, 6 if ai % 2 else -12), fontsize=8, color=color)
    if not drawn:
        return None
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel("total output throughput (tok/s, log scale)")
    ax.set_ylabel("output per user (tok/s, log scale)")
    ax.set_title("Knee: per-user speed against total throughput "
                 "(line = geometric mean per level, faint dots = pairs)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    # the change at each level, underneath
    width = 0.8 / max(1, len(run.arms) - 1)
    for ci, cand in enumerate(run.arms[1:]):
        color = _color(ci + 1)
        for li, lvl in enumerate(levels):
            pairs = [a for a in run.measurements[("knee", lvl, TPUT)].values()
                     if cand in a and run.arms[0] in a and a[run.arms[0]] > 0]
            if not pairs:
                continue
            ch = [(a[cand] / a[run.arms[0]] - 1) * 100 for a in pairs]
            x = li + (ci - (len(run.arms) - 2) / 2) * width
            mean = (math.exp(math.fsum(math.log1p(c / 100) for c in ch) / len(ch)) - 1) * 100
            strip.bar(x, mean, width * 0.8, color=color, alpha=0.5,
                      label=cand if li == 0 else None)
            strip.scatter([x] * len(ch), ch, color=color, s=12, zorder=3)
    strip.axhline(0, color="#333333", linewidth=0.8)
    strip.set_xticks(range(len(levels)), levels)
    strip.set_xlabel("knee level (concurrent streams)")
    strip.set_ylabel("change of\ntotal tok/s (%)")
    strip.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


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
        color = _color(run.arms.index(c.arm) if c.arm in run.arms else 1)
        ys = [p.change * 100 for p in c.pairs]
        xs = [i + (j - (len(ys) - 1) / 2) * 0.12 for j in range(len(ys))]
        ax.scatter(xs, ys, color=color, s=30, zorder=3)
        for x, y, p in zip(xs, ys, c.pairs, strict=True):
            lane = run.lane_of.get(p.pair)
            ax.annotate(f"p{p.pair}" + (f" {lane}" if lane else ""), (x, y),
                        textcoords="offset points", xytext=(5, 2),
                        fontsize=8)
        if c.change is not None:
            ax.scatter([i], [c.change * 100], marker="_", s=900, color=color, linewidth=2.5,
                       zorder=4, label="cell's change" if i == 0 else None)
        if c.change_ci is not None:
            lo, hi = (v * 100 for v in c.change_ci)
            ax.plot([i + 0.3, i + 0.3], [lo, hi], color=color, linewidth=2,
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
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


# -------------------------------------------------------------- control across the window


def control_window(run: RunReport) -> Figure | None:
    """The control's value of each decision cell in slot order (run order in the window);
    a pooled run draws one line per lane (each lane is its own window)."""
    control = run.arms[0]
    cells = []
    seen = set()
    for c in run.decision_cells():
        if c.key not in seen and c.pairs:
            seen.add(c.key)
            cells.append(c)
    slot = {p: arms.get(control) for p, arms in run.slots.items()}
    if not cells or not any(v is not None for v in slot.values()):
        return None
    fig = Figure(figsize=(8, 2.6 * len(cells) + 0.6))
    axes = fig.subplots(len(cells), 1, squeeze=False)[:, 0]
    for ax, c in zip(axes, cells, strict=True):
        lanes = run.lane_of
        ticks: set[float] = set()
        for i, lane in enumerate(dict.fromkeys(lanes.get(p.pair, "") for p in c.pairs)):
            pts = sorted((slot[p.pair], p.control, p.pair) for p in c.pairs
                         if slot.get(p.pair) is not None and lanes.get(p.pair, "") == lane)
            xs = [float(s) for s, _, _ in pts if s is not None]
            ys = [v for _, v, _ in pts]
            ticks.update(xs)
            ax.plot(xs, ys, "-o", color=_color(i),
                    label=f"{control} ({c.where})" + (f", lane {lane}" if lane else ""))
            for x, y, (_, _, pair) in zip(xs, ys, pts, strict=True):
                ax.annotate(f"p{pair}", (x, y), textcoords="offset points", xytext=(5, 4),
                            fontsize=8)
        if c.control is not None:
            lo, hi = c.control / (1 + run.rule.band), c.control * (1 + run.rule.band)
            ax.axhspan(lo, hi, color="#bbbbbb", alpha=0.3,
                       label=f"control mean ±{run.rule.band * 100:.1f}% (drift band)")
        stable = "window-drift" not in c.flags
        ax.set_title(f"{c.where} {c.metric}: the control across the window — "
                     f"{'stable' if stable else 'NOT stable (window-drift)'}", fontsize=10)
        ax.set_xlabel("slot (run order in the window)")
        ax.set_ylabel(f"{c.metric}\n({_unit(c.metric)})", fontsize=9)
        ax.set_xticks(sorted(ticks))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
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
            color = _color(ai)
            for ki, k in enumerate(keys):
                key = (("agentfix", str(k), "acceptance_rate") if kind == "class"
                       else ("knee", "all", f"acceptance_pos{k}"))
                vals = [a[arm] for a in run.measurements.get(key, {}).values() if arm in a]
                if not vals:
                    continue
                x = ki + (ai - (n - 1) / 2) * width
                ax.bar(x, math.fsum(vals) / len(vals), width * 0.9, color=color, alpha=0.55,
                       label=arm if ki == 0 else None)
                ax.scatter([x] * len(vals), vals, color=color, s=14, zorder=3)
        ax.set_xticks(range(len(keys)), [str(k) for k in keys])
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
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
        ax.plot(xs, ys, "-", color=_color(si + 1), alpha=0.6, label=name)
    for i, run in enumerate(report.runs):
        adopt = run.decision == "adopt"
        for c in run.decision_cells():
            if c.change is not None:
                ax.scatter([i], [c.change * 100], marker="o" if adopt else "x",
                           color="#2ca02c" if adopt else "#d62728", s=40, zorder=3)
    latest = report.latest
    bar = change_of(latest.rule.bar_d(max(1, len(latest.arms) - 1)), latest.rule.direction)
    ax.axhline(bar * 100, color="#2ca02c", linestyle="--", label=f"bar {bar * 100:+.1f}%")
    ax.axhline(0, color="#333333", linewidth=0.8)
    ax.scatter([], [], marker="o", color="#2ca02c", label="night adopts")
    ax.scatter([], [], marker="x", color="#d62728", label="night keeps the default")
    ticks = list(range(len(report.runs)))
    step = max(1, len(ticks) // 12)
    ax.set_xticks(ticks[::step], [r.registered_at[:10] for r in report.runs][::step],
                  rotation=30, ha="right")
    ax.set_xlabel("night (registration date)")
    ax.set_ylabel(f"change of {latest.rule.metric} (%)")
    ax.set_title("History: each night's change in the decision cells, and its decision",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


PLOTS: tuple[tuple[str, str, Callable[[RunReport], Figure | None]], ...] = (
    ("knee", "Knee: per-user against total throughput, and the change per level", knee),
    ("pair-changes", "Decision cells: per-pair changes, CI, drift band and bar",
     pair_changes),
    ("control-window", "The control across the window (window stability)", control_window),
    ("acceptance", "Acceptance by content class and by draft position", acceptance),
    ("levels", "Per knee level: tokens per step against step cost", _levels.levels),
)


def figures(report: Report) -> list[tuple[str, str, Figure]]:
    """The report's figures as (name, title, Figure), skipping those without data: the
    newest run's, then the history (several runs)."""
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
    return [(name, title, _png(fig)) for name, title, fig in figures(report)]


def write_files(report: Report, folder: Path) -> list[Path]:
    """Every figure as NAME.png and NAME.svg in `folder` (created); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, _, fig in figures(report):
        for suffix, data in ((".png", _png(fig)), (".svg", _svg(fig))):
            path = folder / f"{name}{suffix}"
            path.write_bytes(data)
            written.append(path)
    return written


__all__ = ["PLOTS", "acceptance", "control_window", "figures", "history", "knee",
           "pair_changes", "pngs", "write_files"]
