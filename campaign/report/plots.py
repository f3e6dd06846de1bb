"""Figures of a run's verdicts (matplotlib, Agg, PNG bytes for the HTML report).

Every figure shows each pair's own points, not only the means: with 2–5 pairs the reader
must see the spread the verdict is based on ("a sign, not a size"). Figures are built on
`matplotlib.figure.Figure` directly (no pyplot state), so they are safe to make anywhere
and need no display.

- knee curves: the primary metric against concurrency, every arm, every pair's point, a
  line through the arm's geometric means;
- per-pair gains per cell: each pair's gain, the cell's gain, the drift band shaded and
  the pre-registered margin drawn;
- acceptance by content class: the acceptance rate of each arm per agent-fixture class.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

if TYPE_CHECKING:
    from campaign.report.model import RunReport

COLORS = ["#555555", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight",
                metadata={"Software": None})  # no version stamp: same input, same bytes
    return buf.getvalue()


def _concurrency(level: str) -> int | None:
    return int(level[1:]) if level[:1] == "c" and level[1:].isdigit() else None


def knee_curves(run: RunReport) -> bytes | None:
    """Primary metric vs concurrency for every arm, with every pair's points."""
    metric = run.rule.metric
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    drawn = False
    ticks: set[int] = set()
    for i, cv in enumerate(run.verdict.candidates):
        cells = sorted(
            (c for c in cv.cells
             if c.workload == "knee" and c.metric == metric and _concurrency(c.level)),
            key=lambda c: _concurrency(c.level) or 0,
        )
        if not cells:
            continue
        arms = [(run.arms[0], 0, "control")] if i == 0 else []
        arms.append((cv.arm, i + 1, "candidate"))
        for name, color_i, side in arms:
            color = COLORS[color_i % len(COLORS)]
            xs_mean: list[int] = []
            ys_mean: list[float] = []
            for c in cells:
                x = _concurrency(c.level) or 0
                ticks.add(x)
                vals = [p.control if side == "control" else p.candidate for p in c.pairs]
                ax.scatter([x] * len(vals), vals, color=color, alpha=0.45, s=22)
                centre = c.control if side == "control" else c.candidate
                if centre is not None:
                    xs_mean.append(x)
                    ys_mean.append(centre)
            ax.plot(xs_mean, ys_mean, "-o", color=color, label=name, markersize=4)
            drawn = True
    if not drawn:
        return None
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks), [str(t) for t in sorted(ticks)])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (streams)")
    ax.set_ylabel(metric)
    ax.set_title(f"Knee: {metric} by concurrency (dots = pairs, line = geometric mean)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def pair_gains(run: RunReport) -> bytes | None:
    """Each pair's gain per primary-metric cell, with the band shaded and the margin."""
    metric = run.rule.metric
    groups = [
        (cv.arm, [c for c in cv.cells if c.metric == metric and c.stats is not None])
        for cv in run.verdict.candidates
    ]
    groups = [(a, cs) for a, cs in groups if cs]
    if not groups:
        return None
    n = max(len(cs) for _, cs in groups)
    fig = Figure(figsize=(max(6.0, 1.1 * n + 2), 4.5))
    ax = fig.add_subplot()
    band, margin = run.rule.band, run.rule.prereg.margin
    ax.axhspan(-band * 100, band * 100, color="#bbbbbb", alpha=0.35,
               label=f"drift band ±{band * 100:.1f}%")
    ax.axhline(margin * 100, color="#2ca02c", linestyle="--",
               label=f"margin {margin * 100:+.1f}%")
    ax.axhline(0, color="#333333", linewidth=0.8)
    width = 0.8 / len(groups)
    labels: list[str] = []
    for gi, (arm, cells) in enumerate(groups):
        color = COLORS[(gi + 1) % len(COLORS)]
        for ci, c in enumerate(cells):
            x = ci + (gi - (len(groups) - 1) / 2) * width
            gains = [p.gain * 100 for p in c.pairs]
            ax.scatter([x] * len(gains), gains, color=color, s=26, alpha=0.75, zorder=3)
            ax.scatter([x], [(c.gain or 0) * 100], marker="_", s=600, color=color,
                       linewidth=2.5, zorder=4, label=arm if ci == 0 else None)
            if gi == 0:
                labels.append(("★ " if c.decision_cell else "") + f"{c.workload}\n{c.level}")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(f"gain in {metric} (%)")
    ax.set_title("Per-pair gains (dots) and the cell's gain (bar); ★ = decision cell")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def acceptance_by_class(run: RunReport) -> bytes | None:
    """Acceptance rate per content class (agent fixtures), each arm, each pair."""
    if not run.verdict.candidates:
        return None
    per_arm: dict[str, dict[str, list[float]]] = {}
    classes: list[str] = []
    for i, cv in enumerate(run.verdict.candidates):
        for c in cv.cells:
            if c.workload != "agentfix" or c.metric != "acceptance_rate" or not c.pairs:
                continue
            if c.level not in classes:
                classes.append(c.level)
            if i == 0:
                per_arm.setdefault(run.arms[0], {})[c.level] = [p.control for p in c.pairs]
            per_arm.setdefault(cv.arm, {})[c.level] = [p.candidate for p in c.pairs]
    if not classes:
        return None
    fig = Figure(figsize=(max(6.0, 1.3 * len(classes) + 2), 4.2))
    ax = fig.add_subplot()
    width = 0.8 / len(per_arm)
    for ai, (arm, by_class) in enumerate(per_arm.items()):
        color = COLORS[ai % len(COLORS)]
        for ci, cls in enumerate(classes):
            vals = by_class.get(cls, [])
            if not vals:
                continue
            x = ci + (ai - (len(per_arm) - 1) / 2) * width
            ax.bar(x, math.fsum(vals) / len(vals), width * 0.9, color=color, alpha=0.55,
                   label=arm if ci == 0 else None)
            ax.scatter([x] * len(vals), vals, color=color, s=18, zorder=3)
    ax.set_xticks(range(len(classes)), classes)
    ax.set_ylim(0, 1)
    ax.set_ylabel("acceptance rate (accepted ÷ draft tokens)")
    ax.set_title("Acceptance by content class (bars = mean, dots = pairs)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def figures(run: RunReport) -> list[tuple[str, bytes]]:
    """The run's figures as (title, PNG bytes), skipping those without data."""
    out = []
    for title, make in (
        ("Knee curves", knee_curves),
        ("Per-pair gains per cell", pair_gains),
        ("Acceptance by content class", acceptance_by_class),
    ):
        png = make(run)
        if png is not None:
            out.append((title, png))
    return out


__all__ = ["acceptance_by_class", "figures", "knee_curves", "pair_gains"]
