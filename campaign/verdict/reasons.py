"""The words of a cell's verdict: its change with its sense, and why it got its label
(`label_reason` for decision cells, `describe_reason` for the others). Pure text over
`stats.Paired` and the rule; `campaign.verdict.judge` decides, this module says it."""

from __future__ import annotations

from campaign.fmt import abs_pct, fmt_gain
from campaign.verdict import capacity
from campaign.verdict import stats as st
from campaign.verdict.outcome import CandidateVerdict, Cell
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
            return f"keep-default: {g} clears {ch(bar)} but {failed} (pairs {pairs})"
        return (f"keep-default: every pair beyond {up} but {g} does not clear {ch(bar)} "
                f"(pairs {pairs})")
    if verdict == "within-drift":
        return (f"keep-default: {g} is inside the ±{abs_pct(band)} drift band "
                f"(pairs {pairs})")
    loss_alpha = rule.alpha
    ucb = upper_bound(p, loss_alpha)
    side = _metric_side("upper", direction)
    bound = (f"its {1 - loss_alpha:.0%} {side} bound {ch(ucb)}" if ucb is not None
             else f"one pair has no {side} bound")
    if verdict == "loss":
        return (f"keep-default, worse: {g} is beyond {down} and {bound} excludes any gain "
                f"(pairs {pairs})")
    if verdict == "mixed":
        return (f"keep-default, pairs disagree: some beyond {up} and some beyond {down} "
                f"— they disagree beyond the ±{abs_pct(band)} band ({g}; pairs {pairs})")
    down_d = worse_d(band, direction, p.kind)
    if p.mean <= down_d + EPS:
        spread = ("every pair is beyond " + down if all(v <= down_d + EPS for v in p.d)
                  else f"is beyond the ±{abs_pct(band)} band but not every pair is")
        return (f"keep-default: {g} {spread}, and {bound} does not exclude a gain: no "
                f"evidence of a loss (pairs {pairs})").replace(f"{g} every", f"{g}: every")
    return (f"keep-default: {g} is beyond the ±{abs_pct(band)} band but not every pair is; "
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
        return f"no clear change: {g} on one pair (no CI)"
    return f"no clear change: {g}; its {p.confidence:.0%} CI includes no change"


def below_bar_sentence(cv: CandidateVerdict, rule: Rule, candidates: int = 1) -> str:
    """Why a candidate keeps the default below the bar, in the file's own numbers, each
    other bar named with where it comes from: "the data rule out a +15.0% gain = 1.5 ×
    your +10.0% margin, the gain the design is powered for; observed +1.3%", or "observed
    +8.1%, below your +10.0% margin"."""
    dec = [c for c in cv.cells if c.decision_cell and c.stats is not None]
    futile = [c for c in dec if c.look is not None and c.look.outcome == "futile"]
    parts = []
    for c in futile or [c for c in dec if c.verdict != "adopt"]:
        assert c.stats is not None
        where = f"{c.where}: " if len(dec) > 1 else ""
        observed = fmt_gain(c.change or 0.0, c.kind)
        if capacity.BEYOND in c.reasons[0]:  # equal censored values: no change measured
            parts.append(where + c.reasons[0].split(": ", 1)[1])
            continue
        if c in futile:
            parts.append(f"{where}the data rule out {rule.powered_words()}; observed "
                         f"{observed}")
            continue
        parts.append(where + _short_of(c, c.stats, rule, observed, candidates))
    return "; ".join(parts) or "the change does not clear the pre-registered bar"


def _short_of(c: Cell, p: st.Paired, rule: Rule, observed: str, candidates: int) -> str:
    """Which bar a decision cell that does not adopt falls short of."""
    margin = rule.margin_text()
    bar = rule.bar_d(candidates, p.kind)
    if p.mean < bar - EPS and rule.prereg.rule != "ci":
        return f"observed {observed}, below your {margin} margin"
    if rule.prereg.rule == "point":
        return (f"observed {observed} clears your {margin} margin, but not every pair clears "
                f"your ±{abs_pct(rule.band)} drift band")
    words, lo = _bound_of(p, rule, c.direction, rule.ci_alpha(candidates))
    if lo is None:
        return f"observed {observed} on one pair: no bound yet"
    low = fmt_gain(change_of(lo, c.direction, p.kind), p.kind)
    if rule.prereg.rule == "ci":
        return f"observed {observed}, but {words} {low} does not clear your {margin} margin"
    return (f"observed {observed} clears your {margin} margin, but {words} {low} does not "
            f"clear {rule.floor_words()}")
