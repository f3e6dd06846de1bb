"""What every figure of the report shares: colours, units, legends and the image bytes.

Figures are `matplotlib.figure.Figure` objects (no pyplot state); `png` and `svg` draw
them with the Agg renderer and `bbox_inches="tight"`, so nothing drawn is clipped.
"""

from __future__ import annotations

import io
import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from campaign import catalog

COLORS = ["#555555", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
TPUT = "output_token_throughput"


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight",
                metadata={"Software": None})  # no version stamp: same input, same bytes
    return buf.getvalue()


def svg(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Creator": None, "Date": None})
    return buf.getvalue()


def concurrency(level: str) -> int | None:
    """N of a knee level `cN`, else None."""
    return int(level[1:]) if level[:1] == "c" and level[1:].isdigit() else None


def gmean(xs: list[float]) -> float:
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def unit(metric: str) -> str:
    return catalog.METRICS[metric].unit if metric in catalog.METRICS else ""


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def legend(ax: Axes, headroom: float = 0.0) -> None:
    """The axes' legend inside its own box (never outside the axes, where a page or a
    narrow figure would cut it), where it covers the fewest points; `headroom` (a fraction
    of the y span) is added above the data first, room for a legend that would otherwise
    sit on a line."""
    if headroom:
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + headroom * (hi - lo))
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
