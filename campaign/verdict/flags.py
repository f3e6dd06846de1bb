"""A cell's flags and their context: the noise tests, the facts, and the gates.

Noise flags are statistical tests under the noise the rule assumes (the band as per-boot
drift, plus 1% within-pass noise), each at the level `Context.flag_alpha` (the family's 5%
shared over the decision cells × candidates × noise flags in play: `rule.flag_alpha`):

- `high-variance` ("a sign, not a size"): the pairs spread more than that noise explains
  (χ² test of their variance), or one arm's repeats disagree beyond pass noise;
- `window-drift` ("the window was not stable"): the control moved across the window by
  more than `gates.max_window_drift` and more than its noise explains (z-test of its slope),
  lane by lane in a pooled run; on a quantile (`ttft_p99`) only where each control pass has
  the requests to give it (`drift_requests_needed`: 3 beyond the quantile, so 300 for a
  p99, 30 for a p90, 6 for a p50): below that the flag is not raised (`drift_not_judged`
  says why), as a p99 of 16 requests is the slowest one or two of them;
- `lanes-disagree` ("not one change"): a pooled decision cell's lanes measure different
  changes (χ² test of their means).

Fact flags state what happened: `small-sample`, `split-pair`, `invalid-pass`, `incomplete`
(fewer complete pairs than pre-registered), `one-pair`. `outcome.GATING_FLAGS` stop a
decision cell from adopting (`gate`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from campaign import catalog
from campaign.campaignfile.checks import BEYOND_TO_RESOLVE
from campaign.fmt import abs_pct, pct, span
from campaign.verdict import stats as st
from campaign.verdict.outcome import GATING_FLAGS, LeftOut
from campaign.verdict.reasons import change_text
from campaign.verdict.rule import DEFAULT_PASS_SD, EPS, FLAG_FAMILY_ALPHA, Label, Rule
from campaign.verdict.tidy import CellData


@dataclass(frozen=True)
class Context:
    """What a cell's flags need beyond its own values."""

    tokens: Mapping[tuple[int, str], float]
    """(pair, arm) → output tokens measured in the cell's pass(es)."""
    requests: Mapping[tuple[int, str], float]
    started: Mapping[int, Mapping[str, dt.datetime | None]]
    slots: Mapping[int, Mapping[str, int]]
    flag_alpha: float = FLAG_FAMILY_ALPHA / 2
    """Level of each noise flag's test (the family's 5% shared over the decision cells,
    candidates and noise flags: `rule.flag_alpha`)."""
    candidates: int = 1
    """Candidates compared in the run (raises the bar: see `Rule.bar_d`)."""
    lanes: Mapping[int, str] = field(default_factory=dict)
    """pair → lane in a run pooled from shards (`tidy.RunTable.lanes`), else empty."""


@dataclass(frozen=True)
class CellPairs:
    """A cell's pairs as the flags see them: the complete ones and those left out."""

    data: CellData
    control: str
    arm: str
    complete: Sequence[int]
    left: Sequence[LeftOut]


Flagged = list[tuple[str, str]]
"""(flag, its reason) in the order they were raised."""

DRIFT_NOT_JUDGED = "window drift not judged"
"""How a cell's reason opens when its control moved beyond the window limit but its
quantile had too few requests to judge it (`drift_requests_needed`); the window plot greys
such a panel."""


def drift_requests_needed(metric: str) -> int | None:
    """Requests per pass a quantile metric needs for its window drift to be judged:
    `BEYOND_TO_RESOLVE` requests beyond the quantile (300 for a p99, 30 for a p90, 6 for a
    p50), as a pass needs to measure the quantile's own sampling error; None for a metric
    that is no quantile (judged at any count)."""
    q = catalog.quantile_of(metric)
    if q is None:
        return None
    return math.ceil(round(BEYOND_TO_RESOLVE / (1 - q), 9))


def noise_flags(cp: CellPairs, p: st.Paired | None, rule: Rule, ctx: Context, *,
                decision: bool, direction: st.Direction) -> tuple[Flagged, float | None]:
    """The noise tests of a ratio cell: high-variance, window-drift and, for a pooled
    decision cell, lanes-disagree; with the control's movement across the window."""
    out: Flagged = []
    if p is not None:
        hv = _high_variance(cp, p, rule, ctx, direction)
        if hv:
            out.append(("high-variance", hv))
    trend, drifted = _window_drift(cp.data, cp.control, rule, ctx)
    if drifted and not drifted.startswith(DRIFT_NOT_JUDGED):
        out.append(("window-drift", drifted))
    if decision and p is not None and ctx.lanes:
        disagree = _lanes_disagree(p, cp.complete, rule, ctx, direction)
        if disagree:
            out.append(("lanes-disagree", disagree))
    return out, trend


def drift_not_judged(cp: CellPairs, rule: Rule, ctx: Context) -> str:
    """Why a quantile cell raised no `window-drift` although its control moved beyond the
    limit and its noise: its passes had too few requests (`drift_requests_needed`); the
    reason opens with `DRIFT_NOT_JUDGED`. "" when the drift was judged, or within limits."""
    drifted = _window_drift(cp.data, cp.control, rule, ctx)[1]
    return drifted if drifted.startswith(DRIFT_NOT_JUDGED) else ""


def fact_flags(cp: CellPairs, rule: Rule, ctx: Context, *, decision: bool) -> Flagged:
    """What happened to the cell's passes: small-sample, split-pair, invalid-pass and, for
    a decision cell, incomplete and one-pair."""
    gates = rule.prereg.gates
    out: Flagged = []
    small = _small_sample(ctx, gates.min_output_tokens, gates.min_completed_requests,
                          cp.complete, (cp.control, cp.arm))
    if small:
        out.append(("small-sample", f"small-sample — a hint, not a number: {small}"))
    split = _split_pairs(cp, ctx, gates.max_pair_gap_s)
    if split:
        out.append(("split-pair", f"split-pair: arms started further apart than "
                    f"{span(gates.max_pair_gap_s)}: " + ", ".join(split)))
    if cp.left:
        n_left = len({lo.pair for lo in cp.left})
        detail = "; ".join(f"pair {lo.pair} {lo.arm}: {lo.reason}" for lo in cp.left)
        out.append(("invalid-pass", f"invalid-pass: {n_left} of {n_left + len(cp.complete)} "
                    f"pairs left out ({detail})"))
    design = rule.prereg.sequential
    planned = rule.prereg.pairs if design is None else design.min_pairs
    if decision and len(cp.complete) < planned:
        out.append(("incomplete", f"incomplete: {len(cp.complete)} of {planned} "
                    "pre-registered pairs complete: a decision cell never adopts on fewer"))
    if decision and len(cp.complete) == 1:
        out.append(("one-pair", "one-pair — a hint, not a number: one pair shows neither the "
                    "spread of the gain nor whether the window was stable"))
    return out


def gate(verdict: Label, flags: Sequence[str], first_reason: str) -> tuple[Label, str]:
    """A decision cell that meets the rule but carries a gating flag is `inconclusive`;
    its first reason says which gate stopped it."""
    gating = [f for f in flags if f in GATING_FLAGS]
    if verdict != "adopt" or not gating:
        return verdict, first_reason
    return "inconclusive", first_reason.replace(
        "adopt:", f"undecided ({', '.join(gating)}): the rule is met on these pairs, but", 1)


# --------------------------------------------------------------------------- the tests


def _high_variance(cp: CellPairs, p: st.Paired, rule: Rule, ctx: Context,
                   direction: st.Direction) -> str:
    p_var = st.variance_test(p.d, rule.pair_sd)
    if p_var is not None and p_var < ctx.flag_alpha:
        return (f"high-variance — a sign, not a size: pairs spread {abs_pct(p.sd or 0.0)} "
                f"(sd) where the lane's noise predicts {abs_pct(rule.pair_sd)} "
                f"(p={p_var:.2g}); pairs "
                + ", ".join(change_text(d=v, direction=direction) for v in p.d))
    worst = _repeat_spread(cp.data, (cp.control, cp.arm), cp.complete)
    if worst is None:
        return ""
    p_rep = st.variance_test([0.0, math.log(worst[0])], DEFAULT_PASS_SD)
    if p_rep is None or p_rep >= ctx.flag_alpha:
        return ""
    return (f"high-variance — a sign, not a size: repeats of pair {worst[1]} ({worst[2]}) "
            f"disagree by {abs_pct(worst[0] - 1)}, more than pass-to-pass noise explains "
            f"(p={p_rep:.2g})")


def _window_drift(data: CellData, control: str, rule: Rule,
                  ctx: Context) -> tuple[float | None, str]:
    """The control's movement across the window and, when it is beyond the limit and its
    noise, the flag's reason. A pooled run is tested lane by lane (each lane is its own
    window, on its own machine), at the flag's level shared over the lanes; the movement
    shown is the largest. A quantile whose control passes have fewer requests than
    `drift_requests_needed` raises no flag: the reason then opens with `DRIFT_NOT_JUDGED`
    (`noise_flags` drops it, `drift_not_judged` says it)."""
    groups: dict[str, list[tuple[int, float, int]]] = {}
    for p_, v in data.values.items():
        if control in v and v[control].value > 0:
            groups.setdefault(ctx.lanes.get(p_, ""), []).append(
                (ctx.slots.get(p_, {}).get(control, p_), v[control].value, p_))
    alpha = ctx.flag_alpha / max(1, len(groups))
    needed = drift_requests_needed(data.metric)
    trend: float | None = None
    worst: tuple[float, float, str] | None = None
    thin: tuple[float, float, int] | None = None
    for lane, points in sorted(groups.items()):
        points.sort()
        tested = (st.trend_test([v for _, v, _ in points], [s for s, _, _ in points],
                                rule.control_sd) if len(points) >= 2 else None)
        if tested is None:
            continue
        moved, p_trend = tested
        if trend is None or abs(moved) > abs(trend):
            trend = moved
        if abs(moved) <= rule.window_limit + EPS or p_trend >= alpha:
            continue
        least = _least_requests(ctx, control, [p for _, _, p in points])
        if needed is not None and least is not None and least[0] < needed:
            if thin is None or abs(moved) > abs(thin[0]):
                thin = (moved, *least)
        elif worst is None or abs(moved) > abs(worst[0]):
            worst = (moved, p_trend, lane)
    if worst is None:
        return trend, ("" if thin is None or needed is None
                       else _not_judged(data.metric, thin, needed))
    moved, p_trend, lane = worst
    where = f" on lane {lane}" if lane else ""
    return trend, (f"window-drift: the control itself moved {pct(moved)} across the window"
                   f"{where} (limit ±{abs_pct(rule.window_limit)}, beyond its noise: "
                   f"p={p_trend:.2g}): the window was not stable")


def _least_requests(ctx: Context, control: str,
                    pairs: Sequence[int]) -> tuple[float, int] | None:
    """(requests, pair) of the control's pass with the fewest requests, None if unknown."""
    known = [(ctx.requests[(p, control)], p) for p in pairs if (p, control) in ctx.requests]
    return min(known) if known else None


def _not_judged(metric: str, thin: tuple[float, float, int], needed: int) -> str:
    moved, requests, pair = thin
    stat = metric.rsplit("_", 1)[-1]
    return (f"{DRIFT_NOT_JUDGED}: the control moved {pct(moved)} across the window, but a "
            f"{stat} from {requests:.0f} requests per pass (pair {pair}) is no number to "
            f"judge it on: a {stat} needs at least {needed} requests per pass "
            f"({BEYOND_TO_RESOLVE} beyond it)")


def lane_means(d: Sequence[float], lanes: Sequence[str]) -> list[tuple[str, int, float]]:
    """(lane, pairs, mean d) of pooled pairs' log changes, lane by lane in first-seen
    order."""
    groups: dict[str, list[float]] = {}
    for v, lane in zip(d, lanes, strict=True):
        groups.setdefault(lane, []).append(v)
    return [(lane, len(ds), math.fsum(ds) / len(ds)) for lane, ds in groups.items()]


def _lanes_disagree(p: st.Paired, pairs: Sequence[int], rule: Rule, ctx: Context,
                    direction: st.Direction) -> str:
    """The lanes-disagree flag's reason when the lanes' mean changes differ by more than
    the lane's noise explains (`stats.lanes_test`), else ""."""
    lanes = [ctx.lanes.get(pair, "?") for pair in pairs]
    p_lanes = st.lanes_test(p.d, lanes, rule.pair_sd)
    if p_lanes is None or p_lanes >= ctx.flag_alpha:
        return ""
    per_lane = ", ".join(
        f"{lane} {change_text(d=mean, direction=direction)} ({n} pair{'s' if n > 1 else ''})"
        for lane, n, mean in lane_means(p.d, lanes))
    return (f"lanes-disagree — not one change: {per_lane}; they differ by more than the "
            f"lane's noise explains (p={p_lanes:.2g}), so the pooled change is no one lane's")


def _repeat_spread(data: CellData, arms: Sequence[str],
                   pairs: Sequence[int]) -> tuple[float, int, str] | None:
    """The largest hi ÷ lo of one arm's repeats in one pair: (ratio, pair, arm)."""
    worst: tuple[float, int, str] | None = None
    for pair in pairs:
        for a in arms:
            v = data.values[pair][a]
            if v.repeats > 1 and v.lo > 0 and (worst is None or v.hi / v.lo > worst[0]):
                worst = (v.hi / v.lo, pair, a)
    return worst


def _small_sample(ctx: Context, min_tokens: int, min_requests: int, pairs: Sequence[int],
                  arms: Sequence[str]) -> str:
    parts = []
    toks = [(ctx.tokens[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.tokens]
    if toks and min_tokens > 0:
        least = min(toks)
        if least[0] < min_tokens:
            parts.append(f"{least[0]:.0f} output tokens in pair {least[1]} ({least[2]}) < "
                         f"{min_tokens} pre-registered")
    reqs = [(ctx.requests[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.requests]
    if reqs:
        least = min(reqs)
        if least[0] < min_requests:
            parts.append(f"{least[0]:.0f} requests in pair {least[1]} ({least[2]}) < "
                         f"{min_requests}")
    return "; ".join(parts)


def _split_pairs(cp: CellPairs, ctx: Context, max_gap_s: float) -> list[str]:
    split = []
    for p_ in cp.complete:
        starts = ctx.started.get(p_, {})
        t0, t1 = starts.get(cp.control), starts.get(cp.arm)
        if t0 is not None and t1 is not None and abs((t1 - t0).total_seconds()) > max_gap_s:
            split.append(f"pair {p_} ({span(abs((t1 - t0).total_seconds()))})")
    return split
