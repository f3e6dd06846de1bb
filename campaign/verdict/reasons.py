"""The words of a cell's verdict: its change with its sense, and why it got its label
(`label_reason` for decision cells, `describe_reason` for the others). Pure text over
`stats.Paired` and the rule; `campaign.verdict.judge` decides, this module says it."""

from __future__ import annotations

import math

from campaign.fmt import abs_pct, fmt_gain
from campaign.verdict import stats as st
from campaign.verdict.outcome import Cell
from campaign.verdict.rule import EPS, Label, Rule, better_d, change_of, worse_d


def change_text(c: Cell | None = None, *, d: float | None = None,
                direction: st.Direction = "higher", kind: st.Kind = "ratio") -> str:
    """A change on the metric's own scale with its sense: "−18.4% (better)"."""
    if c is not None:
        if c.stats is None:
            return "—"
        d, direction, kind = c.stats.mean, c.direction, c.kind
    assert d is not None
    shown = fmt_gain(change_of(d, direction, kind), kind)
    if abs(d) <= EPS or shown in ("+0.0%", "+0"):
        return shown
    return f"{shown} ({'better' if d > 0 else 'worse'})"


def label_reason(verdict: Label, p: st.Paired, rule: Rule, band: float, bar: float,
                  direction: st.Direction, alpha: float) -> str:
    def ch(d: float) -> str:
        return fmt_gain(change_of(d, direction, p.kind), p.kind)

    pairs = ", ".join(ch(v) for v in p.d)
    g = change_text(d=p.mean, direction=direction, kind=p.kind)
    bar_text = ch(bar)
    up, down = ch(better_d(band, direction, p.kind)), ch(worse_d(band, direction, p.kind))
    lo = None
    if p.sd is not None:
        t = st.t_critical(1 - alpha / 2, p.n - 1)
        lo = p.mean - t * p.sd / math.sqrt(p.n)
    ci = f"CI's worse end {ch(lo)}" if lo is not None else "no CI with one pair"
    if verdict == "adopt":
        if rule.prereg.rule == "point":
            return f"adopt: {g} clears {bar_text} and every pair clears {up} (pairs {pairs})"
        return f"adopt: {ci} clears {bar_text} (change {g}, pairs {pairs})"
    if verdict == "gain-below-bar":
        if rule.prereg.rule == "ci" and p.mean >= bar - EPS:
            return f"gain-below-bar: {ci} does not clear {bar_text} (change {g}, pairs {pairs})"
        return (f"gain-below-bar: every pair beyond {up} but {g} does not clear {bar_text} "
                f"(pairs {pairs})")
    if verdict == "within-drift":
        return f"within-drift: {g} is inside the ±{abs_pct(band)} band (pairs {pairs})"
    if verdict == "loss":
        return f"loss: every pair beyond {down} ({g}; pairs {pairs})"
    if verdict == "mixed":
        return (f"mixed: some pairs beyond {up} and some beyond {down} — they disagree beyond "
                f"the ±{abs_pct(band)} band ({g}; pairs {pairs})")
    return (f"unclear: {g} is beyond the ±{abs_pct(band)} band but not every pair is "
            f"(pairs {pairs})")


def describe_reason(verdict: Label, p: st.Paired, direction: st.Direction) -> str:
    g = change_text(d=p.mean, direction=direction, kind=p.kind)
    if verdict in ("better", "worse"):
        lo, hi = (change_of(v, direction, p.kind) for v in p.mean_ci)
        a, b = min(lo, hi), max(lo, hi)
        return (f"{verdict}: {g}; its {p.confidence:.0%} CI {fmt_gain(a, p.kind)} … "
                f"{fmt_gain(b, p.kind)} excludes no change")
    if p.n < 2:
        return f"no-clear-change: {g} on one pair (no CI)"
    return f"no-clear-change: {g}; its {p.confidence:.0%} CI includes no change"
