"""The guardrails that decided: each one's per-pair changes against its limit.

Drawn wherever a guardrail check stops adoption with data behind it — state `broken`, or
`unclear` at a registered guardrail's cell (not shown within its limit; an unclear
deterioration check does not stop adoption, and a `missing` check has nothing to draw).
One panel per such check: each pair's change of the guardrail metric itself (p1, p2 …;
a failed candidate pass of a failure metric is one more point), the check's estimate
and its interval (the check's own: the end that would show it beyond the limit a
one-sided bound at α ÷ checks, the end that shows it within at α, as its line says), the
limit (`max_worsening` on the change's scale) and zero. Everything drawn is read off the
verdict's `GuardrailCheck`; nothing is recomputed here.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from campaign.fmt import fmt_gain
from campaign.report.plot_common import color, legend, unit

if TYPE_CHECKING:
    from campaign.report.model import RunReport
    from campaign.verdict.outcome import CandidateVerdict, GuardrailCheck

MAX_PANELS = 6
CI_REACH = 4.0
"""A CI end further than this many times the span of the points and the limit is cut at
the axis (its value is written at the cut)."""

_LEVELS = re.compile(r" \((\d[\d.]*% CI|one-sided: lower end [\d.]+%, upper end [\d.]+%)\)")
"""The interval's levels as the check's own line states them: "(90% CI)", or "(one-sided:
lower end 99.5%, upper end 95%)"."""


def deciding(run: RunReport) -> list[tuple[CandidateVerdict, GuardrailCheck]]:
    """(candidate, check) of every guardrail check that stops adoption with data: broken,
    or unclear at a registered guardrail's cell."""
    return [(cv, g) for cv in run.verdict.candidates for g in cv.guardrails
            if g.stops and g.state in ("broken", "unclear") and g.change is not None]


def pair_changes(cv: CandidateVerdict, g: GuardrailCheck) -> list[tuple[str, float]]:
    """(label, change) of each pair: the check's own per-pair worsening turned back into
    the metric's change, labelled with the pair when the cell's pairs match it."""
    sign = 1.0 if g.direction == "lower" else -1.0
    values = [sign * w for w in g.pair_worsening]
    cell = next((c for c in cv.cells
                 if (c.workload, c.level, c.metric) == (g.workload, g.level, g.metric)), None)
    if cell is not None and len(cell.pairs) == len(values):
        return [(f"p{p.pair}", v) for p, v in zip(cell.pairs, values, strict=True)]
    return [(f"#{i + 1}", v) for i, v in enumerate(values)]


def _scale(g: GuardrailCheck) -> tuple[float, str]:
    """(factor, axis unit) of the plotted change: percent for ratios, the unit else."""
    return (100.0, "%") if g.kind == "ratio" else (1.0, unit(g.metric) or "difference")


def _panel(ax: Axes, run: RunReport, cv: CandidateVerdict, g: GuardrailCheck) -> None:
    k, axis_unit = _scale(g)
    col = color(run.arms.index(cv.arm) if cv.arm in run.arms else 1)
    pts = pair_changes(cv, g)
    xs = list(range(len(pts)))
    ax.scatter(xs, [v * k for _, v in pts], color=col, s=34, zorder=3, label="each pair")
    for x, (name, v) in zip(xs, pts, strict=True):
        ax.annotate(name, (x, v * k), textcoords="offset points", xytext=(6, 2), fontsize=8)
    est_x = len(pts) + 0.3
    seen = [v * k for _, v in pts] + [0.0]
    if g.limit is not None:
        ax.axhline(g.limit * k, color="#d62728", linestyle="--", linewidth=1.6, gid="limit",
                   zorder=2.5,
                   label=f"limit {fmt_gain(g.limit, g.kind)} (max worsening)")
        seen.append(g.limit * k)
    assert g.change is not None
    ax.scatter([est_x], [g.change * k], marker="D", color="#222222", s=40, zorder=4,
               label=f"estimate {fmt_gain(g.change, g.kind)}")
    seen.append(g.change * k)
    lo_v, hi_v = min(seen), max(seen)
    pad = max(hi_v - lo_v, 1e-9)
    if g.ci is not None:
        lo, hi = (v * k for v in g.ci)
        cut_lo, cut_hi = max(lo, lo_v - CI_REACH * pad), min(hi, hi_v + CI_REACH * pad)
        ax.plot([est_x, est_x], [cut_lo, cut_hi], color="#222222", linewidth=2.2, gid="ci",
                label=_ci_label(g, f"{fmt_gain(g.ci[0], g.kind)} … "
                                   f"{fmt_gain(g.ci[1], g.kind)}"))
        for cut, end, va in ((cut_lo, lo, "top"), (cut_hi, hi, "bottom")):
            if cut != end:
                ax.annotate(f"CI goes on to {fmt_gain(end / k, g.kind)}", (est_x, cut),
                            fontsize=7, ha="right", va=va)
    ax.axhline(0, color="#333333", linewidth=0.8, zorder=1)
    ax.set_xticks([*xs, est_x], [*(n for n, _ in pts), "check"])
    ax.set_xlim(-0.6, est_x + 0.6)
    ax.set_xlabel("pair (and the check's estimate with its CI)")
    worse = "up" if g.direction == "lower" else "down"
    ax.set_ylabel(f"change of {g.metric}\n({axis_unit}; worse is {worse})", fontsize=9)
    what = "guardrail" if g.role == "guardrail" else "deterioration check"
    ax.set_title(f"{cv.arm}: {what} {g.metric} at {g.workload} {g.level} {g.state} — "
                 "stops adoption", fontsize=10, color="#b00000")
    ax.grid(axis="y", alpha=0.3)
    legend(ax)


def _ci_label(g: GuardrailCheck, span: str) -> str:
    """The interval's legend with its levels as the check's own line states them: "90% CI
    +8.0% … +11.5%", or "CI -0.3% … +3.4%" over "(one-sided: lower end 98.3%, upper end
    95%)"; the two-sided `ci_level` when the line names none."""
    found = _LEVELS.search(g.reason)
    if found is None:
        return (f"{g.ci_level:.0%} " if g.ci_level is not None else "") + f"CI {span}"
    levels = found.group(1)
    return f"{levels} {span}" if levels.endswith("CI") else f"CI {span}\n({levels})"


def guardrails(run: RunReport) -> Figure | None:
    """One panel per guardrail check that decided (see the module docstring); None when
    no guardrail stopped adoption with data."""
    checks = deciding(run)
    if not checks:
        return None
    shown, more = checks[:MAX_PANELS], len(checks) - MAX_PANELS
    cols = 1 if len(shown) == 1 else 2
    rows = (len(shown) + cols - 1) // cols
    fig = Figure(figsize=(7.5 * cols, 3.8 * rows + 0.4))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (cv, g) in zip(axes, shown, strict=False):
        _panel(ax, run, cv, g)
    for ax in axes[len(shown):]:
        fig.delaxes(ax)
    if more > 0:
        fig.suptitle(f"{more} more guardrail check(s) stop adoption (see the guardrail "
                     "lines)", fontsize=9, color="#b00000")
    fig.tight_layout()
    return fig
