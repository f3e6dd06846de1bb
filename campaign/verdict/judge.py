"""Per-cell verdicts, flags, guardrails and the campaign decision, under a `rule.Rule`.

Pure: a `tidy.RunTable` and the rule in, verdicts with their reasons out; no file is read
or written, no clock is read. `campaign.report` loads run directories and lays out what
this module decides; `campaign.verdict.aa` turns the cells of an A/A run into a drift band.

Each cell (workload × level × metric) of each candidate is paired with the control over
its complete pairs. Decision cells get the rule's label (`rule.label_of`); every other cell
is described (`better`, `worse`, `no-clear-change`). Decision cells that must all adopt
form an intersection–union test: no correction across them is needed (or applied).

Flags are tests calibrated on the lane's assumed noise (the band as per-boot drift, plus
1% within-pass noise), each at level 5% ÷ (2 × decision cells), so that all flags of an
A/A campaign's decision cells together fire at most 5% of the time:

- `high-variance` ("a sign, not a size"): the pairs spread more than that noise explains
  (χ² test of their variance);
- `window-drift` ("the window was not stable"): the control moved across the window by
  more than `gates.max_window_drift` (default: the band) and more than its noise explains
  (z-test of its slope);
- `small-sample` ("a hint, not a number"), `split-pair`, `invalid-pass` and `incomplete`
  (fewer complete pairs than pre-registered) state facts.

`incomplete`, `one-pair`, `small-sample` and `window-drift` gate: such a decision cell
cannot adopt (its label is `inconclusive`). The campaign adopts only when every decision cell adopts
and every guardrail holds; otherwise it keeps the default with one reason category:
`inconclusive`, `loss`, `guardrail` or `below-bar` (`rule-met` when it adopts).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from campaign import catalog
from campaign.fmt import abs_pct, pct, span
from campaign.verdict import stats as st
from campaign.verdict.decide import best_by_level, decide_candidate, rank
from campaign.verdict.guardrails import guardrail_targets
from campaign.verdict.outcome import (
    GATING_FLAGS,
    CandidateVerdict,
    Cell,
    DataProblem,
    LeftOut,
    PairGain,
    RunVerdict,
)
from campaign.verdict.reasons import change_text, describe_reason, label_reason
from campaign.verdict.rule import (
    DEFAULT_PASS_SD,
    EPS,
    FLAG_FAMILY_ALPHA,
    Label,
    Rule,
    adopts_ci,
    adopts_point,
    change_of,
    describe,
    label_of,
)
from campaign.verdict.tidy import TOKEN_METRICS, CellData, RunTable, cell_sort_key

DESCRIPTIVE_METRICS = (
    "output_token_throughput", "ttft_p99", "itl_p99", "request_latency_p99",
    "error_rate", "acceptance_rate", "tokens_per_decode_step", "implied_a",
)
"""Cells computed beside the primary metric and the guardrails (when measured)."""

# --------------------------------------------------------------------------- one cell


@dataclass(frozen=True)
class Context:
    """What a cell's flags need beyond its own values."""

    tokens: Mapping[tuple[int, str], float]
    """(pair, arm) → output tokens measured in the cell's pass(es)."""
    requests: Mapping[tuple[int, str], float]
    started: Mapping[int, Mapping[str, dt.datetime | None]]
    slots: Mapping[int, Mapping[str, int]]
    flag_alpha: float = FLAG_FAMILY_ALPHA / 2
    """Level of each noise flag's test (the family's 5% shared over the decision cells)."""
    candidates: int = 1
    """Candidates compared in the run (raises the bar: see `Rule.bar_d`)."""
    lanes: Mapping[int, str] = field(default_factory=dict)
    """pair → lane in a run pooled from shards (`tidy.RunTable.lanes`), else empty."""


def judge_cell(
    data: CellData,
    arm: str,
    rule: Rule,
    ctx: Context,
    *,
    control: str = "control",
    decision: bool = False,
    pairs: Sequence[int] = (),
) -> Cell:
    """Paired statistics, label, flags and reasons of one cell (candidate `arm`).

    Raises DataProblem when a value is damaged (missing, infinite, negative in a ratio) —
    the caller decides whether the cell matters enough to stop the report.
    """
    direction = rule.direction_of(data.metric)
    kind = rule.kind_of(data.metric)
    gates = rule.prereg.gates
    for pair, a in data.missing:
        if a in (control, arm):
            raise DataProblem(
                f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {a} has "
                "a valid row with no usable value"
            )
    complete: list[tuple[int, float, float]] = []
    left: list[LeftOut] = []
    # A figure from server counters an arm's valid passes did not yield: its server has no
    # such counters (spec decoding off, or a server without /metrics). Not applicable to
    # that arm, not a pass left out.
    info = catalog.METRICS.get(data.metric)
    counters_only = info is not None and info.source in ("server", "spec_decode")
    not_applicable: set[str] = set()
    for pair in sorted(set(pairs) | set(data.values) | set(data.invalid)):
        vals = data.values.get(pair, {})
        if control in vals and arm in vals:
            complete.append((pair, vals[control].value, vals[arm].value))
            continue
        for a in (control, arm):
            if a in vals:
                continue
            if counters_only and not decision and a not in data.invalid.get(pair, {}):
                not_applicable.add(a)
                continue
            if counters_only and a not in data.invalid.get(pair, {}):
                not_applicable.add(a)
                continue
            reason = data.invalid.get(pair, {}).get(a, "not measured")
            if a == arm and a in data.invalid.get(pair, {}) and control in vals:
                reason += " — a failure of the candidate: counts against it"
            left.append(LeftOut(pair, a, reason))
    reasons: list[str] = []
    if kind == "ratio" and any(min(x, y) <= 0 for _, x, y in complete):
        bad = [(p, x, y) for p, x, y in complete if min(x, y) < 0 or decision]
        if bad:  # the rule's margin is relative: a decision cell needs values > 0
            p, x, y = next((p, x, y) for p, x, y in bad if min(x, y) <= 0)
            who = control if x <= 0 else arm
            raise DataProblem(f"{data.metric} at {data.workload} {data.level}: pair {p}, arm "
                              f"{who} is {min(x, y)!r}; a ratio needs values > 0")
        kind = "absolute"
        reasons.append("a value is 0 (e.g. a stream that arrived in one burst): compared "
                       "by differences, not ratios")
    band = rule.band if kind == "ratio" else 0.0
    flags: list[str] = []
    stats_: st.Paired | None = None
    verdict: Label = "no-data"
    pair_gains: list[PairGain] = []
    if complete:
        xs = [x for _, x, _ in complete]
        ys = [y for _, _, y in complete]
        stats_ = st.paired(xs, ys, direction, confidence=rule.prereg.confidence, kind=kind)
        pair_gains = [
            PairGain(p, x, y, g, change_of(d, direction, kind))
            for (p, x, y), g, d in zip(complete, stats_.pair_gains, stats_.d, strict=True)
        ]
        if decision:
            bar = rule.bar_d(ctx.candidates, kind)
            adopts = (adopts_point(stats_, bar, band, direction) if rule.prereg.rule == "point"
                      else adopts_ci(stats_, bar, rule.ci_alpha(ctx.candidates)))
            verdict = label_of(stats_, band, adopts, direction)
            reasons.insert(0, label_reason(verdict, stats_, rule, band, bar, direction,
                                            rule.ci_alpha(ctx.candidates)))
        else:
            verdict = describe(stats_)
            reasons.insert(0, describe_reason(verdict, stats_, direction))
        if stats_.ci is None:
            reasons.append("one pair: no confidence interval (nothing to estimate spread from)")
    elif not_applicable and not left:
        verdict = "not-applicable"
        reasons.append(f"not applicable: {', '.join(sorted(not_applicable))} reported no "
                       f"{data.metric} (no spec-decode counters: spec decoding off)")
    elif not_applicable and not left:
        verdict = "not-applicable"
        reasons.insert(0, f"not applicable: {', '.join(sorted(not_applicable))} reported no "
                       f"{data.metric} (no spec-decode counters: spec decoding off, or no "
                       "/metrics)")
    else:
        reasons.insert(0, f"no complete pair: {len(left)} arm pass(es) missing or invalid")

    # -- flags: noise tests
    if stats_ is not None and kind == "ratio":
        p_var = st.variance_test(stats_.d, rule.pair_sd)
        if p_var is not None and p_var < ctx.flag_alpha:
            flags.append("high-variance")
            sd = stats_.sd or 0.0
            reasons.append(
                f"high-variance — a sign, not a size: pairs spread {abs_pct(sd)} (sd) where "
                f"the lane's noise predicts {abs_pct(rule.pair_sd)} (p={p_var:.2g}); pairs "
                + ", ".join(change_text(d=v, direction=direction) for v in stats_.d))
        else:
            worst = _repeat_spread(data, (control, arm), [p_ for p_, _, _ in complete])
            p_rep = (None if worst is None else
                     st.variance_test([0.0, math.log(worst[0])], DEFAULT_PASS_SD))
            if worst is not None and p_rep is not None and p_rep < ctx.flag_alpha:
                flags.append("high-variance")
                reasons.append(
                    f"high-variance — a sign, not a size: repeats of pair {worst[1]} "
                    f"({worst[2]}) disagree by {abs_pct(worst[0] - 1)}, more than pass-to-pass "
                    f"noise explains (p={p_rep:.2g})")
    trend = None
    if kind == "ratio":
        trend, drifted = _window_drift(data, control, rule, ctx)
        if drifted:
            flags.append("window-drift")
            reasons.append(drifted)
    if decision and stats_ is not None and kind == "ratio" and ctx.lanes:
        disagree = _lanes_disagree(stats_, [p_ for p_, _, _ in complete], rule, ctx, direction)
        if disagree:
            flags.append("lanes-disagree")
            reasons.append(disagree)
    small = _small_sample(ctx, gates.min_output_tokens, gates.min_completed_requests,
                          [p_ for p_, _, _ in complete], (control, arm))
    if small:
        flags.append("small-sample")
        reasons.append(f"small-sample — a hint, not a number: {small}")
    split = []
    for p_, _, _ in complete:
        starts = ctx.started.get(p_, {})
        t0, t1 = starts.get(control), starts.get(arm)
        if t0 is not None and t1 is not None and abs((t1 - t0).total_seconds()) > \
                gates.max_pair_gap_s:
            split.append(f"pair {p_} ({span(abs((t1 - t0).total_seconds()))})")
    if split:
        flags.append("split-pair")
        reasons.append(f"split-pair: arms started further apart than "
                       f"{span(gates.max_pair_gap_s)}: " + ", ".join(split))
    if left:
        flags.append("invalid-pass")
        n_left = len({lo.pair for lo in left})
        detail = "; ".join(f"pair {lo.pair} {lo.arm}: {lo.reason}" for lo in left)
        reasons.append(f"invalid-pass: {n_left} of {n_left + len(complete)} pairs left out "
                       f"({detail})")
    planned = rule.prereg.pairs
    if decision and len(complete) < planned:
        flags.append("incomplete")
        reasons.append(f"incomplete: {len(complete)} of {planned} pre-registered pairs "
                       "complete: a decision cell never adopts on fewer")
    if decision and len(complete) == 1:
        flags.append("one-pair")
        reasons.append("one-pair — a hint, not a number: one pair shows neither the spread of "
                       "the gain nor whether the window was stable")
    if decision and verdict == "adopt" and GATING_FLAGS & set(flags):
        verdict = "inconclusive"
        gate = ", ".join(f for f in flags if f in GATING_FLAGS)
        reasons[0] = reasons[0].replace("adopt:", f"inconclusive ({gate}): the rule is met "
                                        "on these pairs, but", 1)
    return Cell(
        workload=data.workload,
        level=data.level,
        metric=data.metric,
        arm=arm,
        direction=direction,
        kind=kind,
        control=_centre([x for _, x, _ in complete], kind) if complete else
        _own_values(data, control, verdict),
        candidate=_centre([y for _, _, y in complete], kind) if complete else
        _own_values(data, arm, verdict),
        stats=stats_,
        pairs=tuple(pair_gains),
        left_out=tuple(left),
        verdict=verdict,
        flags=tuple(flags),
        reasons=tuple(reasons),
        decision_cell=decision,
        control_trend=trend,
        planned_pairs=planned,
    )


def _window_drift(data: CellData, control: str, rule: Rule,
                  ctx: Context) -> tuple[float | None, str]:
    """The control's movement across the window and, when it is beyond the limit and its
    noise, the flag's reason. A pooled run is tested lane by lane (each lane is its own
    window, on its own machine), at the flag's level shared over the lanes; the movement
    shown is the largest."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for p_, v in data.values.items():
        if control in v and v[control].value > 0:
            groups.setdefault(ctx.lanes.get(p_, ""), []).append(
                (ctx.slots.get(p_, {}).get(control, p_), v[control].value))
    alpha = ctx.flag_alpha / max(1, len(groups))
    trend: float | None = None
    worst: tuple[float, float, str] | None = None
    for lane, points in sorted(groups.items()):
        points.sort()
        tested = (st.trend_test([v for _, v in points], [s for s, _ in points],
                                rule.control_sd) if len(points) >= 2 else None)
        if tested is None:
            continue
        moved, p_trend = tested
        if trend is None or abs(moved) > abs(trend):
            trend = moved
        if (abs(moved) > rule.window_limit + EPS and p_trend < alpha
                and (worst is None or abs(moved) > abs(worst[0]))):
            worst = (moved, p_trend, lane)
    if worst is None:
        return trend, ""
    moved, p_trend, lane = worst
    where = f" on lane {lane}" if lane else ""
    return trend, (f"window-drift: the control itself moved {pct(moved)} across the window"
                   f"{where} (limit ±{abs_pct(rule.window_limit)}, beyond its noise: "
                   f"p={p_trend:.2g}): the window was not stable")


def _lane_means(d: Sequence[float], lanes: Sequence[str]) -> list[tuple[str, int, float]]:
    """(lane, pairs, mean d) of pooled pairs' log changes, lane by lane in first-seen
    order."""
    groups: dict[str, list[float]] = {}
    for v, lane in zip(d, lanes, strict=True):
        groups.setdefault(lane, []).append(v)
    return [(lane, len(ds), math.fsum(ds) / len(ds)) for lane, ds in groups.items()]


def lane_changes(cell: Cell, lanes: Mapping[int, str]) -> list[tuple[str, int, float]]:
    """(lane, pairs, change) of a pooled cell, lane by lane in first-seen order: the
    change is the lane's mean pair change on the metric's own scale."""
    if cell.stats is None:
        return []
    return [(lane, n, change_of(mean, cell.direction, cell.kind)) for lane, n, mean in
            _lane_means(cell.stats.d, [lanes.get(pg.pair, "?") for pg in cell.pairs])]


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
        for lane, n, mean in _lane_means(p.d, lanes))
    return (f"lanes-disagree — not one change: {per_lane}; they differ by more than the "
            f"lane's noise explains (p={p_lanes:.2g}), so the pooled change is no one lane's")


def _own_values(data: CellData, arm: str, verdict: Label) -> float | None:
    """A not-applicable cell still shows the arm that has the figure (its own mean)."""
    if verdict != "not-applicable":
        return None
    return _centre([v[arm].value for v in data.values.values() if arm in v], "absolute")


def _centre(values: Sequence[float], kind: st.Kind) -> float | None:
    if not values:
        return None
    if kind == "ratio":
        return math.exp(math.fsum(math.log(v) for v in values) / len(values))
    return math.fsum(values) / len(values)


def _repeat_spread(
    data: CellData, arms: Sequence[str], pairs: Sequence[int]
) -> tuple[float, int, str] | None:
    """The largest hi ÷ lo of one arm's repeats in one pair: (ratio, pair, arm)."""
    worst: tuple[float, int, str] | None = None
    for pair in pairs:
        for a in arms:
            v = data.values[pair][a]
            if v.repeats > 1 and v.lo > 0 and (worst is None or v.hi / v.lo > worst[0]):
                worst = (v.hi / v.lo, pair, a)
    return worst


def _small_sample(
    ctx: Context, min_tokens: int, min_requests: int, pairs: Sequence[int], arms: Sequence[str]
) -> str:
    parts = []
    toks = [(ctx.tokens[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.tokens]
    if toks and min_tokens > 0:
        least = min(toks)
        if least[0] < min_tokens:
            parts.append(
                f"{least[0]:.0f} output tokens in pair {least[1]} ({least[2]}) < "
                f"{min_tokens} pre-registered"
            )
    reqs = [(ctx.requests[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.requests]
    if reqs:
        least = min(reqs)
        if least[0] < min_requests:
            parts.append(
                f"{least[0]:.0f} requests in pair {least[1]} ({least[2]}) < {min_requests}"
            )
    return "; ".join(parts)


# --------------------------------------------------------------------------- a whole run


def decision_keys(rule: Rule, table: RunTable, order: Sequence[str] = (),
                  levels: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, str]]:
    """The (workload, level) decision cells, `*` expanded to the levels the campaign
    configured (`levels`; a configured level with no rows stays a decision cell, with no
    data) or, without them, to the measured levels."""
    measured = sorted(
        {(w, lvl) for (w, lvl, m) in table.cells if m == rule.metric},
        key=lambda k: cell_sort_key((*k, ""), order),
    )
    out: list[tuple[str, str]] = []
    for dc in rule.prereg.decision_cells:
        if dc.level != "*":
            keys = [(dc.workload, dc.level)]
        elif levels is not None and levels.get(dc.workload):
            keys = [(dc.workload, lvl) for lvl in levels[dc.workload]]
        else:
            found = [lvl for (w, lvl) in measured if w == dc.workload]
            keys = [(dc.workload, lvl) for lvl in ([x for x in found if x != "all"] or found)]
            if not keys:
                raise DataProblem(f"no rows of {rule.metric} for workload {dc.workload} "
                                  "(a pre-registered decision cell)")
        out.extend(k for k in keys if k not in out)
    return out


def judge_run(
    table: RunTable,
    rule: Rule,
    arms: Sequence[str],
    *,
    level_order: Sequence[str] = (),
    levels: Mapping[str, Sequence[str]] | None = None,
    metrics: Iterable[str] | None = None,
    resume_command: str = "spec-ab run --resume RUN_DIR",
) -> RunVerdict:
    """Every candidate against the control under `rule`, then the run's decision.

    `levels` are the campaign's configured levels per workload (so a registered level with
    no rows is seen as missing, not skipped); `resume_command` is what finishes this run.
    Raises DataProblem when a decision cell or a guardrail's value is damaged.
    """
    control, candidates = arms[0], list(arms[1:])
    decisions = decision_keys(rule, table, level_order, levels)
    guard_targets = {
        i: guardrail_targets(g, table, level_order)
        for i, g in enumerate(rule.prereg.guardrails)
    }
    key_cells = {(w, lvl, rule.metric) for w, lvl in decisions}
    for i, g in enumerate(rule.prereg.guardrails):
        key_cells |= {(w, lvl, g.metric) for w, lvl in guard_targets[i]}
    shown = set(metrics) if metrics is not None else None
    alpha = FLAG_FAMILY_ALPHA / (2 * max(1, len(decisions)))
    ctx_cache: dict[tuple[str, str], Context] = {}
    notes: list[str] = []
    damaged: list[str] = []

    out: list[CandidateVerdict] = []
    for arm in candidates:
        cells: list[Cell] = []
        keys = set(table.cells) | {(w, lvl, rule.metric) for w, lvl in decisions}
        for key in sorted(keys, key=lambda k: cell_sort_key(k, level_order)):
            w, lvl, m = key
            if m in TOKEN_METRICS and m != rule.metric and key not in key_cells:
                continue
            if shown is not None and m not in shown and key not in key_cells:
                continue
            ctx = ctx_cache.get((w, lvl))
            if ctx is None:
                ctx = ctx_cache[(w, lvl)] = _context(table, w, lvl, alpha, len(candidates))
            data = table.cells.get(key) or CellData(w, lvl, m)
            try:
                c = judge_cell(data, arm, rule, ctx, control=control,
                               decision=(w, lvl) in decisions and m == rule.metric,
                               pairs=table.pairs)
            except DataProblem as exc:
                if key in key_cells:
                    raise
                damaged.append(str(exc))
                continue
            cells.append(c)
        out.append(decide_candidate(arm, cells, rule, table, decisions, guard_targets,
                                     control, resume_command))
    if damaged:
        notes.append(f"{len(damaged)} descriptive cell(s) left out for damaged values: "
                     + "; ".join(sorted(set(damaged))[:3])
                     + (" …" if len(set(damaged)) > 3 else ""))

    ranking = rank(out)
    adopting = [r for r in ranking if r.decision == "adopt"]
    adopt_arm = adopting[0].arm if adopting else None
    measured = len(table.pairs)
    if measured < rule.prereg.pairs:
        notes.append(f"incomplete: {measured} of {rule.prereg.pairs} pre-registered pairs measured")
    left = {(lo.pair, lo.arm) for cv in out for c in cv.cells for lo in c.left_out}
    if left:
        in_decision = {
            lo.pair for cv in out for c in cv.cells if c.decision_cell for lo in c.left_out
        }
        where = (f", {len(in_decision)} of them in decision cells" if in_decision
                 else ", none in decision cells")
        notes.append(
            f"incomplete: {len({p for p, _ in left})} pair(s) left out of some cells by "
            f"invalid or missing passes{where}"
        )
    best = best_by_level(out, decisions, rule)
    if len(candidates) > 1:
        arms_best = {b.arm for b in best}
        if len(arms_best) > 1:
            notes.append("the best candidate differs by level: " + ", ".join(
                f"{b.workload} {b.level} {b.arm} ({pct(b.change)})" for b in best)
                + " — one overall ranking would hide this")
        if adopt_arm:
            notes.append(f"{adopt_arm} was picked as the best of {len(candidates)} candidates: "
                         "its measured change is biased upward by that choice; re-run it "
                         "alone against the control to size it")
    stable = all(cv.window_stable for cv in out)
    top = next(cv for cv in out if cv.arm == ranking[0].arm)
    if len(out) == 1:
        reasons = out[0].reasons
    else:
        reasons = tuple(f"{cv.arm}: {cv.decision} ({cv.reason}) — {r}"
                        for cv in out for r in cv.reasons)
        if adopt_arm:
            reasons = (f"adopt {adopt_arm}: best-ranked candidate that adopts", *reasons)
    return RunVerdict(
        run=table.run,
        decision="adopt" if adopt_arm else "keep-default",
        adopt_arm=adopt_arm,
        reasons=reasons,
        notes=tuple(notes),
        candidates=tuple(out),
        ranking=tuple(ranking),
        pairs_measured=measured,
        pairs_planned=rule.prereg.pairs,
        left_out=len(left),
        window_stable=stable,
        reason=top.reason,
        settle=top.settle,
        best_by_level=tuple(best),
    )


def _context(table: RunTable, workload: str, level: str, alpha: float,
             candidates: int) -> Context:
    def sizes(metric: str) -> dict[tuple[int, str], float]:
        c = table.cells.get((workload, level, metric))
        if c is not None:
            return {(p, a): v.value for p, arms in c.values.items() for a, v in arms.items()}
        if level != "all":
            return {}
        # spec-decode figures of a whole sweep: the sizes of all its levels together
        total: dict[tuple[int, str], float] = defaultdict(float)
        for (w, _lvl, m), c in table.cells.items():
            if w == workload and m == metric:
                for p, arms in c.values.items():
                    for a, v in arms.items():
                        total[(p, a)] += v.value
        return dict(total)

    return Context(sizes("output_tokens"), sizes("requests_completed"), table.started,
                   table.slots, alpha, candidates, table.lanes)
