"""The knee per level: what a decode step yields against what it costs, control against
candidate, and acceptance by draft position at each level.

A deeper draft emits more tokens per decode step but makes each step cost more; where it
stops paying depends on the concurrency. The left panel puts each knee level of each arm
at (step cost, tokens per step):

- tokens per step = `tokens_per_decode_step` (generated ÷ decode steps, drafted or not),
  the level's own counters (the knee cut at its level boundaries, `run/measure/levelcut.py`);
- step cost = `itl_p50` × tokens per step: the median time between two tokens of a stream
  times the tokens a step gives it, i.e. how long one decode step takes as a stream sees it.

Tokens per step ÷ step cost is the stream's token rate, so a point above the dotted ray
through the control's point of the same level is faster per stream at that level, one
below it slower: the crossover is the level where the candidate's point moves from above
its ray to below it. The right panel shows acceptance at each draft position
(`acceptance_pos<i>`, accepted at position i ÷ drafts) per level and arm.

Lines join an arm's levels through their geometric means over pairs; each pair's own point
is drawn faint. Runs whose knee has only the sweep's total (level `all`) get no figure.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from campaign.report.model import RunReport

COLORS = ["#555555", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
TPS = "tokens_per_decode_step"
ITL = "itl_p50"
POS = "acceptance_pos"
MARKERS = "osD^v<>ph*"


def _conc(level: str) -> int | None:
    return int(level[1:]) if level[:1] == "c" and level[1:].isdigit() else None


def _gmean(xs: list[float]) -> float:
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def step_points(run: RunReport, arm: str, level: str) -> list[tuple[float, float]]:
    """(step cost in ms, tokens per step) of each pair of `arm` at a knee level."""
    tps = run.measurements.get(("knee", level, TPS), {})
    itl = run.measurements.get(("knee", level, ITL), {})
    out = []
    for pair in sorted(tps):
        t, i = tps[pair].get(arm), itl.get(pair, {}).get(arm)
        if t is not None and i is not None and t > 0 and i > 0:
            out.append((i * t, t))
    return out


def _levels(run: RunReport) -> list[str]:
    found = {lvl for (w, lvl, m) in run.measurements if w == "knee" and m == TPS}
    return sorted((lvl for lvl in found if _conc(lvl)), key=lambda lvl: _conc(lvl) or 0)


def _steps_panel(ax: Axes, run: RunReport, levels: list[str]) -> bool:
    """The left panel; whether anything was drawn."""
    means: dict[str, dict[str, tuple[float, float]]] = {}
    for ai, arm in enumerate(run.arms):
        color = COLORS[ai % len(COLORS)]
        xs, ys, names = [], [], []
        for lvl in levels:
            pts = step_points(run, arm, lvl)
            if not pts:
                continue
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=color, alpha=0.25,
                       s=18, linewidths=0)
            x, y = _gmean([p[0] for p in pts]), _gmean([p[1] for p in pts])
            means.setdefault(arm, {})[lvl] = (x, y)
            xs.append(x)
            ys.append(y)
            names.append(lvl)
        if xs:
            ax.plot(xs, ys, "-o", color=color, label=arm, markersize=5, linewidth=1.8)
            for x, y, name in zip(xs, ys, names, strict=True):
                ax.annotate(name, (x, y), textcoords="offset points",
                            xytext=(6, 6 if ai % 2 else -12), fontsize=8, color=color)
    if not means:
        return False
    xmax = max(x for arm in means.values() for x, _ in arm.values()) * 1.15
    ymax = max(y for arm in means.values() for _, y in arm.values()) * 1.2
    for lvl, (x, y) in means.get(run.arms[0], {}).items():  # the control's rate per level
        slope = y / x
        ax.plot([0, xmax], [0, slope * xmax], ":", color=COLORS[0], alpha=0.5, linewidth=0.9)
        end = (min(xmax, ymax / slope), min(ymax, slope * xmax))  # where it leaves the axes
        ax.annotate(f"{lvl}: control's rate", end, fontsize=7, color=COLORS[0], alpha=0.8,
                    ha="right", va="top", rotation=0)
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, ymax)
    ax.set_xlabel("step cost (ms) = median inter-token latency × tokens per step")
    ax.set_ylabel("tokens per decode step (tokens)")
    ax.set_title("Per level: what a step yields against what it costs\n(above the dotted "
                 "ray of a level = faster per stream than the control there)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")  # few points yield little at a high cost
    return True


def _positions_panel(ax: Axes, run: RunReport, levels: list[str]) -> bool:
    """The right panel: acceptance at each draft position, per level and arm."""
    drawn = False
    for ai, arm in enumerate(run.arms):
        color = COLORS[ai % len(COLORS)]
        for li, lvl in enumerate(levels):
            pos = sorted(int(m[len(POS):]) for (w, lv, m) in run.measurements
                         if w == "knee" and lv == lvl and m.startswith(POS))
            xs, ys = [], []
            for i in pos:
                vals = [a[arm] for a in run.measurements[("knee", lvl, f"{POS}{i}")].values()
                        if arm in a]
                if vals:
                    xs.append(i)
                    ys.append(math.fsum(vals) / len(vals))
            if xs:
                drawn = True
                ax.plot(xs, ys, "-", marker=MARKERS[li % len(MARKERS)], color=color,
                        alpha=0.35 + 0.65 * (li + 1) / len(levels), markersize=4,
                        linewidth=1.2, label=f"{arm} {lvl}")
    if drawn:
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("draft position (0 = first drafted token)")
        ax.set_ylabel("accepted at position ÷ drafts (fraction)")
        ax.set_title("Acceptance by draft position, per level (mean over pairs)",
                     fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return drawn


def levels(run: RunReport) -> Figure | None:
    """Tokens per step against step cost per knee level, and acceptance by position per
    level, control against candidate (module docstring); None without per-level figures."""
    lv = _levels(run)
    if not lv:
        return None
    fig = Figure(figsize=(12.5, 5.0))
    left, right = fig.subplots(1, 2, width_ratios=[1.25, 1])
    if not _steps_panel(left, run, lv):
        return None
    if not _positions_panel(right, run, lv):
        right.set_axis_off()
    fig.tight_layout()
    return fig
