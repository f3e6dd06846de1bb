"""Latency against offered rate for every arm, with each arm's capacity at SLO marked.

Top panel: TTFT p50 (solid) and p99 (dashed) per arm against the offered rate of each
level of the rate sweep (geometric mean over the pairs, each pair's p50 a faint dot);
bottom panel: the share of requests meeting the SLO (`slo_attainment`, mean over the
pairs) with the registered target drawn. Each arm's capacity at SLO (`report.ratesweep`)
is a vertical line in its colour on both panels, labelled with its value (`≥` / `<` when
censored). Both axes of rate are logarithmic when the rates span more than 4×.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from campaign.report.plot_common import color, gmean, legend
from campaign.verdict import capacity as cap

if TYPE_CHECKING:
    from campaign.report.model import RunReport


def _series(run: RunReport, arm: str, metric: str, geometric: bool
            ) -> tuple[list[float], list[float], list[tuple[float, float]]]:
    """(rates, centre per level, each pair's (rate, value)) of one arm."""
    rates, centres, dots = [], [], []
    levels = run.rate_sweep.levels if run.rate_sweep is not None else ()
    for lvl in levels:
        rate = cap.rate_of(lvl)
        vals = [a[arm] for a in run.measurements.get((cap.WORKLOAD, lvl, metric), {}).values()
                if arm in a and math.isfinite(a[arm]) and (a[arm] > 0 or not geometric)]
        if rate is None or not vals:
            continue
        rates.append(rate)
        centres.append(gmean(vals) if geometric else math.fsum(vals) / len(vals))
        dots += [(rate, v) for v in vals]
    return rates, centres, dots


def rates(run: RunReport) -> Figure | None:
    """The sweep's figure (None for a run without rate levels with TTFT)."""
    sweep = run.rate_sweep
    if sweep is None or not any((cap.WORKLOAD, lvl, "ttft_p50") in run.measurements
                                for lvl in sweep.levels):
        return None
    fig = Figure(figsize=(8.5, 7.0))
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 1.6], sharex=True)
    for ai, arm in enumerate(run.arms):
        col = color(ai)
        for metric, style in (("ttft_p50", "-o"), ("ttft_p99", "--s")):
            xs, ys, dots = _series(run, arm, metric, geometric=True)
            if not xs:
                continue
            top.plot(xs, ys, style, color=col, markersize=4, linewidth=1.6,
                     label=f"{arm} TTFT {metric[-3:]}")
            if metric == "ttft_p50":
                top.scatter([x for x, _ in dots], [y for _, y in dots], color=col,
                            alpha=0.25, s=14, linewidths=0)
        xs, ys, _ = _series(run, arm, "slo_attainment", geometric=False)
        if xs:
            bottom.plot(xs, [y * 100 for y in ys], "-o", color=col, markersize=4,
                        label=arm)
    bottom.axhline(sweep.target * 100, color="#2ca02c", linestyle="--",
                   label=f"target {sweep.target:.0%}")
    for c in sweep.capacities:
        if c.value is None:
            continue
        ai = run.arms.index(c.arm) if c.arm in run.arms else 0
        mark = f"{c.bound} " if c.bound else ""
        for ax in (top, bottom):
            ax.axvline(c.value, color=color(ai), linestyle=":", linewidth=2,
                       gid=f"capacity:{c.arm}",
                       label=(f"{c.arm} capacity at SLO {mark}{c.value:.3g} req/s"
                              if ax is top else None))
    all_rates = [r for lvl in sweep.levels if (r := cap.rate_of(lvl)) is not None]
    if all_rates and max(all_rates) > 4 * min(all_rates):
        top.set_xscale("log")
    top.set_yscale("log")
    bottom.set_xticks(all_rates, [format(r, "g") for r in all_rates])
    bottom.xaxis.set_minor_formatter(NullFormatter())
    top.set_ylabel("time to first token (ms, log scale)")
    top.set_title("Latency against offered rate (line = geometric mean over pairs, faint "
                  "dots = pairs' p50;\ndotted vertical = each arm's capacity at SLO)",
                  fontsize=10)
    bottom.set_ylabel("requests within\nthe SLO (%)")
    bottom.set_xlabel("offered rate (requests per second)")
    bottom.set_ylim(0, 105)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        legend(ax)
    fig.tight_layout()
    return fig
