"""How numbers read: signed and unsigned percentages, gains, measured values, durations.

One place, so a gain reads the same in the terminal table, Markdown, JSON reasons, HTML,
`plan` and `check`. Pure: no I/O.
"""

from __future__ import annotations

import math

from campaign import catalog
from campaign.catalog import Kind


def pct(x: float | None, digits: int = 1) -> str:
    """+15.0% style (signed); '—' for None or NaN."""
    if x is None or math.isnan(x):
        return "—"
    v = round(x * 100, digits)
    if v == 0:
        v = 0.0  # no "-0.0%"
    return f"{v:+.{digits}f}%"


def abs_pct(x: float, digits: int = 1) -> str:
    """15.0% style (unsigned)."""
    return f"{abs(x) * 100:.{digits}f}%"


def fmt_gain(x: float | None, kind: Kind) -> str:
    """A gain: a signed percentage for ratio cells, a signed difference for absolute ones."""
    if kind == "ratio":
        return pct(x)
    return "—" if x is None else f"{x + 0.0:+.4g}"  # + 0.0: no "-0"


def fmt_value(value: float | None, metric: str) -> str:
    """A measured value at a precision that suits its unit ('—' when missing)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    unit = catalog.METRICS[metric].unit if metric in catalog.METRICS else ""
    if unit == "count":
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.4g}"


def clock(seconds: float) -> str:
    """1h02m / 3m05s / 42s: elapsed times and estimates."""
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def span(seconds: float) -> str:
    """1.5 h / 12 min / 40 s: a gap between two events, at the precision that matters."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
