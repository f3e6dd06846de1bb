"""The Pareto view of the knee sweep, with each arm's knee marked and its levels on the
axes.

Output tok/s per user (total ÷ concurrency) against total output tok/s, log–log, one line
per arm through its levels (c1 … c16; geometric mean of the pairs), each pair's points
faint; underneath, each candidate's change of total tok/s per level with each pair's.

The knee of an arm is the level whose point lies farthest from the straight line through
the arm's first and last levels, on the side of more of both (on the plot's own log axes
scaled to the span drawn; docs/reading-a-report.md): before it, concurrency buys throughput at
little cost per user; after it, each stream pays for the throughput. Fewer than three
levels, or no point off that line, has no knee.

Axis ticks sit at the levels' own values (the control's first, the candidates' where
they do not crowd it), labelled with the value and the level, so c4 and c16 read off
the axes, not off a log axis labelled only at its decades.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from campaign.report.plot_common import TPUT, color, concurrency, gmean, legend

if TYPE_CHECKING:
    from campaign.report.model import RunReport

MIN_TICK_GAP = 0.07
"""Two ticks closer than this fraction of the axis' log span share one label (the first)."""


@dataclass(frozen=True)
class Curve:
    """One arm's line through the knee levels: total and per-user tok/s per level."""

    arm: str
    levels: tuple[str, ...]
    total: tuple[float, ...]
    per_user: tuple[float, ...]
    pairs: tuple[tuple[float, ...], ...]
    """Each level's pairs' total tok/s."""


def curves(run: RunReport) -> list[Curve]:
    """Each arm's curve (arms without a positive knee throughput are left out)."""
    levels = sorted({lvl for (w, lvl, m) in run.measurements
                     if w == "knee" and m == TPUT and concurrency(lvl)},
                    key=lambda lvl: concurrency(lvl) or 0)
    out = []
    for arm in run.arms:
        names, total, per_user, pairs = [], [], [], []
        for lvl in levels:
            vals = tuple(a[arm] for a in run.measurements[("knee", lvl, TPUT)].values()
                         if arm in a and a[arm] > 0)
            if vals:
                m = gmean(list(vals))
                names.append(lvl)
                total.append(m)
                per_user.append(m / (concurrency(lvl) or 1))
                pairs.append(vals)
        if names:
            out.append(Curve(arm, tuple(names), tuple(total), tuple(per_user), tuple(pairs)))
    return out


def knee_index(xs: Sequence[float], ys: Sequence[float],
               span: tuple[float, float] = (1.0, 1.0)) -> int | None:
    """The knee of a curve (see the module docstring): the index of the point farthest
    from the chord of its ends towards more of both, in log10 units divided by `span`
    (the axes' log spans); None with fewer than three points or none off the chord."""
    if len(xs) < 3:
        return None
    px = [math.log10(x) / span[0] for x in xs]
    py = [math.log10(y) / span[1] for y in ys]
    dx, dy = px[-1] - px[0], py[-1] - py[0]
    norm = math.hypot(dx, dy)
    if norm == 0:
        return None
    # the normal (−dy, dx) points to more of both for a curve going right and down
    dist = [((px[i] - px[0]) * -dy + (py[i] - py[0]) * dx) / norm for i in range(len(px))]
    best = max(range(1, len(px) - 1), key=lambda i: dist[i])
    return best if dist[best] > 1e-9 else None


def _log_span(values: Sequence[float]) -> float:
    return max(math.log10(max(values)) - math.log10(min(values)), 1e-6)


def tick_value(v: float) -> str:
    """A tick's number: whole tok/s from 100 up, three significant digits below."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def level_ticks(points: Sequence[tuple[float, str, str]], span: float,
                sep: str = "\n") -> list[tuple[float, str, str]]:
    """(value, label, colour) of the ticks from (value, level, colour) in priority order,
    leaving out any closer than `MIN_TICK_GAP` of `span` (log10) to one kept."""
    kept: list[tuple[float, str, str]] = []
    for value, level, col in points:
        if all(abs(math.log10(value) - math.log10(k)) >= MIN_TICK_GAP * span
               for k, _, _ in kept):
            kept.append((value, f"{tick_value(value)}{sep}{level}", col))
    return sorted(kept)


def _set_level_ticks(ax: Axes, cs: list[Curve], arms: Sequence[str],
                     axis: Literal["x", "y"]) -> None:
    pts = [(v, lvl, color(arms.index(c.arm)))
           for c in cs for v, lvl in zip(c.total if axis == "x" else c.per_user, c.levels,
                                        strict=True)]
    lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = level_ticks(pts, _log_span([lo, hi]), "\n" if axis == "x" else " ")
    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_ticks([t for t, _, _ in ticks], [lab for _, lab, _ in ticks])
    which.set_minor_formatter(NullFormatter())
    for label, (_, _, col) in zip(which.get_ticklabels(), ticks, strict=True):
        label.set_color(col)
    ax.tick_params(axis=axis, labelsize=8)


def _draw_curve(ax: Axes, c: Curve, ai: int, span: tuple[float, float]) -> bool:
    """The arm's pairs, line and level names, and its knee ringed (True when it has one)."""
    col = color(ai)
    for lvl_pairs, lvl in zip(c.pairs, c.levels, strict=True):
        conc = concurrency(lvl) or 1
        ax.scatter(lvl_pairs, [v / conc for v in lvl_pairs], color=col, alpha=0.25, s=18,
                   linewidths=0)
    ax.plot(c.total, c.per_user, "-o", color=col, label=c.arm, markersize=5, linewidth=1.8)
    for x, y, name in zip(c.total, c.per_user, c.levels, strict=True):
        ax.annotate(name, (x, y), textcoords="offset points",
                    xytext=(6, 6 if ai % 2 else -12), fontsize=8, color=col)
    k = knee_index(c.total, c.per_user, span)
    if k is not None:
        ax.scatter([c.total[k]], [c.per_user[k]], s=260, facecolors="none", edgecolors=col,
                   linewidths=2.2, zorder=5, gid=f"knee:{c.arm}:{c.levels[k]}",
                   label=f"{c.arm}'s knee ({c.levels[k]})")
    return k is not None


def _strip(strip: Axes, run: RunReport, levels: list[str]) -> None:
    """Each candidate's change of total tok/s per level, with each pair's."""
    width = 0.8 / max(1, len(run.arms) - 1)
    for ci, cand in enumerate(run.arms[1:]):
        col = color(ci + 1)
        for li, lvl in enumerate(levels):
            pairs = [a for a in run.measurements[("knee", lvl, TPUT)].values()
                     if cand in a and run.arms[0] in a and a[run.arms[0]] > 0]
            if not pairs:
                continue
            ch = [(a[cand] / a[run.arms[0]] - 1) * 100 for a in pairs]
            x = li + (ci - (len(run.arms) - 2) / 2) * width
            mean = (math.exp(math.fsum(math.log1p(c / 100) for c in ch) / len(ch)) - 1) * 100
            strip.bar(x, mean, width * 0.8, color=col, alpha=0.5,
                      label=cand if li == 0 else None)
            strip.scatter([x] * len(ch), ch, color=col, s=12, zorder=3)
    strip.axhline(0, color="#333333", linewidth=0.8)
    strip.set_xticks(range(len(levels)), levels)
    strip.set_xlabel("knee level (concurrent streams)")
    strip.set_ylabel("change of\ntotal tok/s (%)")
    strip.grid(axis="y", alpha=0.3)


def knee(run: RunReport) -> Figure | None:
    """The Pareto view with each arm's knee marked (see the module docstring)."""
    cs = curves(run)
    if not cs:
        return None
    fig = Figure(figsize=(8.5, 7.0))
    ax, strip = fig.subplots(2, 1, height_ratios=[3, 1.2])
    span = (_log_span([x for c in cs for x in c.total]),
            _log_span([y for c in cs for y in c.per_user]))
    ringed = sum(_draw_curve(ax, c, run.arms.index(c.arm), span) for c in cs)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.margins(0.08)
    _set_level_ticks(ax, cs, run.arms, "x")
    _set_level_ticks(ax, cs, run.arms, "y")
    ax.set_xlabel("total output throughput (tok/s, log scale; ticks at each level)")
    ax.set_ylabel("output per user (tok/s, log scale)")
    ring = ("ring = the knee: farthest from the line through the first and last levels"
            if ringed else "no knee: fewer than three levels, or none above the line "
            "through the first and last")
    ax.set_title("Knee: per-user speed against total throughput (line = geometric mean "
                 f"per level, faint dots = pairs,\n{ring})", fontsize=10)
    ax.grid(alpha=0.3, which="major")
    legend(ax)
    levels = sorted({lvl for c in cs for lvl in c.levels}, key=lambda x: concurrency(x) or 0)
    _strip(strip, run, levels)
    fig.tight_layout()
    return fig
