"""The words of a cell's verdict: its change with its sense, and why it got its label
(`label_reason` for decision cells, `describe_reason` for the others). Pure text over
`stats.Paired` and the rule; `campaign.verdict.judge` decides, this module says it."""

from __future__ import annotations

from campaign.fmt import abs_pct, fmt_gain
from campaign.verdict import stats as st
from campaign.verdict.outcome import Cell
from campaign.verdict.rule import (
    EPS,
    Label,
    Rule,
    better_d,
    change_of,
    lower_bound,
    upper_bound,
    worse_d,
)


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
    """Why a decision cell got its label, and for a cell that does not adopt which
    condition of the rule failed. `alpha` is the α of the rule's bound (`Rule.ci_alpha`:
    one-sided for `bound`, two-sided for `ci`)."""
    def ch(d: float) -> str:
        return fmt_gain(change_of(d, direction, p.kind), p.kind)

    pairs = ", ".join(ch(v) for v in p.d)
    g = change_text(d=p.mean, direction=direction, kind=p.kind)
    up, down = ch(better_d(band, direction, p.kind)), ch(worse_d(band, direction, p.kind))
    failed = _rule_failed(p, rule, bar, direction, alpha)
    if verdict == "adopt":
        return f"adopt: {_rule_met(p, rule, bar, direction, alpha)} (pairs {pairs})"
    if verdict == "gain-below-bar":
        if p.mean >= bar - EPS:
            return f"gain-below-bar: {g} clears {ch(bar)} but {failed} (pairs {pairs})"
        return (f"gain-below-bar: every pair beyond {up} but {g} does not clear {ch(bar)} "
                f"(pairs {pairs})")
    if verdict == "within-drift":
        return f"within-drift: {g} is inside the ±{abs_pct(band)} band (pairs {pairs})"
    loss_alpha = rule.alpha
    ucb = upper_bound(p, loss_alpha)
    side = _metric_side("upper", direction)
    bound = (f"its {1 - loss_alpha:.0%} {side} bound {ch(ucb)}" if ucb is not None
             else f"one pair has no {side} bound")
    if verdict == "loss":
        return (f"loss: {g} is beyond {down} and {bound} excludes any gain "
                f"(pairs {pairs})")
    if verdict == "mixed":
        return (f"mixed: some pairs beyond {up} and some beyond {down} — they disagree beyond "
                f"the ±{abs_pct(band)} band ({g}; pairs {pairs})")
    down_d = worse_d(band, direction, p.kind)
    if p.mean <= down_d + EPS:
        spread = ("every pair is beyond " + down if all(v <= down_d + EPS for v in p.d)
                  else f"is beyond the ±{abs_pct(band)} band but not every pair is")
        return (f"unclear: {g} {spread}, and {bound} does not exclude a gain: no "
                f"evidence of a loss (pairs {pairs})").replace(f"{g} every", f"{g}: every")
    return (f"unclear: {g} is beyond the ±{abs_pct(band)} band but not every pair is; "
            f"not adopted: {failed} (pairs {pairs})")


def _bound_of(p: st.Paired, rule: Rule, direction: st.Direction,
              alpha: float) -> tuple[str, float | None]:
    """The rule's confidence bound of mean d in words ("its 95% lower bound") and value
    (None for one pair)."""
    if rule.prereg.rule == "ci":
        return f"its {1 - alpha:.0%} CI's worse end", lower_bound(p, alpha / 2)
    level = f"{1 - alpha:.1%}".replace(".0%", "%")
    return f"its {level} {_metric_side('lower', direction)} bound", lower_bound(p, alpha)


def _metric_side(side: str, direction: st.Direction) -> str:
    """A bound of d (positive = better) named on the metric's own scale: d's lower bound
    is the metric's upper bound when lower is better."""
    if direction == "higher":
        return side
    return "upper" if side == "lower" else "lower"


def _rule_met(p: st.Paired, rule: Rule, bar: float, direction: st.Direction,
              alpha: float) -> str:
    def ch(d: float) -> str:
        return fmt_gain(change_of(d, direction, p.kind), p.kind)

    g = change_text(d=p.mean, direction=direction, kind=p.kind)
    if rule.prereg.rule == "point":
        return (f"{g} clears {ch(bar)} and every pair clears "
                f"{ch(better_d(rule.band, direction, p.kind))}")
    words, lo = _bound_of(p, rule, direction, alpha)
    assert lo is not None
    if rule.prereg.rule == "ci":
        return f"{g}, {words} {ch(lo)} clears {ch(bar)}"
    return f"{g} clears {ch(bar)} and {words} {ch(lo)} clears {ch(rule.floor_d(p.kind))}"


def _rule_failed(p: st.Paired, rule: Rule, bar: float, direction: st.Direction,
                 alpha: float) -> str:
    """Which condition of the rule a cell that does not adopt fails."""
    def ch(d: float) -> str:
        return fmt_gain(change_of(d, direction, p.kind), p.kind)

    g = change_text(d=p.mean, direction=direction, kind=p.kind)
    if rule.prereg.rule == "point":
        if p.mean < bar - EPS:
            return f"{g} does not clear {ch(bar)}"
        return f"not every pair clears {ch(better_d(rule.band, direction, p.kind))}"
    words, lo = _bound_of(p, rule, direction, alpha)
    if lo is None:
        return ("one pair has no CI" if rule.prereg.rule == "ci"
                else f"one pair has no {_metric_side('lower', direction)} bound")
    if rule.prereg.rule == "bound" and p.mean < bar - EPS:
        return f"{g} does not clear {ch(bar)}"
    target = bar if rule.prereg.rule == "ci" else rule.floor_d(p.kind)
    return f"{words} {ch(lo)} does not clear {ch(target)}"


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
