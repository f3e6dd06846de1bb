"""Per-cell verdicts, flags, guardrails and the campaign decision, under a `rule.Rule`.

Pure: a `tidy.RunTable` and the rule in, verdicts with their reasons out; no file is read
or written, no clock is read. `campaign.report` loads run directories and lays out what
this module decides; `campaign.aa` turns the cells of an A/A run into a drift band.

Each cell (workload × level × metric) of each candidate is paired with the control over
its complete pairs and labelled by the rule's kernel (`rule.label_of`). Under `ci` with
several decision cells the one-sided tests are Holm-corrected (adjusted p ≤ α/2, the level
of the CI's lower end).

Flags add what a careful reader must know: `high-variance` (pairs or repeats disagree by
more than the band: "a sign, not a size"), `small-sample` ("a hint, not a number"),
`window-drift` (the control itself moved beyond the band across the window), `split-pair`
(a pair's arms started further apart than the pre-registered gap), `invalid-pass` (pairs
left out of the cell, counted).

The campaign adopts only when every decision cell adopts and no guardrail is broken (or
left unchecked); otherwise it keeps the default, with the reasons.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from campaign import stats as st
from campaign.fmt import abs_pct, fmt_gain, pct, span
from campaign.guardrails import check_guardrail, guardrail_targets
from campaign.outcome import (
    CandidateVerdict,
    Cell,
    DataProblem,
    GuardrailCheck,
    HolmInfo,
    LeftOut,
    PairGain,
    Ranked,
    RunVerdict,
)
from campaign.rule import (
    EPS,
    Decision,
    Label,
    Rule,
    adopts_ci,
    adopts_point,
    label_of,
)
from campaign.tidy import TOKEN_METRICS, CellData, RunTable, cell_sort_key

DESCRIPTIVE_METRICS = (
    "output_token_throughput", "ttft_p99", "itl_p99", "request_latency_p99",
    "error_rate", "acceptance_rate", "tokens_per_step", "implied_a",
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

    Raises DataProblem when a value is missing or cannot enter a ratio (zero) — the caller
    decides whether the cell matters enough to stop the report.
    """
    direction = rule.direction_of(data.metric)
    kind = rule.kind_of(data.metric)
    band = rule.band if kind == "ratio" else 0.0
    gates = rule.prereg.gates
    for pair, a in data.missing:
        if a in (control, arm):
            raise DataProblem(
                f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {a} has "
                "a valid row with no value"
            )
    complete: list[PairGain] = []
    left: list[LeftOut] = []
    xs: list[float] = []
    ys: list[float] = []
    for pair in sorted(set(pairs) | set(data.values) | set(data.invalid)):
        vals = data.values.get(pair, {})
        if control in vals and arm in vals:
            x, y = vals[control].value, vals[arm].value
            if kind == "ratio" and not (x > 0 and y > 0):
                who = control if not x > 0 else arm
                raise DataProblem(
                    f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {who} "
                    f"is {x if who == control else y!r}; a ratio needs values > 0"
                )
            xs.append(x)
            ys.append(y)
            complete.append(PairGain(pair, x, y, math.nan))
            continue
        for a in (control, arm):
            if a in vals:
                continue
            reason = data.invalid.get(pair, {}).get(a, "not measured")
            left.append(LeftOut(pair, a, reason))
    flags: list[str] = []
    reasons: list[str] = []
    stats_: st.Paired | None = None
    verdict: Label = "no-data"
    if complete:
        stats_ = st.paired(xs, ys, direction, confidence=rule.prereg.confidence, kind=kind)
        complete = [
            PairGain(pg.pair, pg.control, pg.candidate, g)
            for pg, g in zip(complete, stats_.pair_gains, strict=True)
        ]
        adopts = (
            adopts_point(stats_, rule.prereg.margin, band)
            if rule.prereg.rule == "point"
            else adopts_ci(stats_, rule.prereg.margin)
        )
        verdict = label_of(stats_, band, adopts)
        reasons.append(_label_reason(verdict, stats_, rule, band))
        if stats_.ci is None:
            reasons.append("one pair: no confidence interval (nothing to estimate spread from)")
    else:
        reasons.append(f"no complete pair: {len(left)} arm pass(es) missing or invalid")

    # -- flags
    if stats_ is not None and kind == "ratio":
        spread = max(stats_.pair_gains) - min(stats_.pair_gains)
        if stats_.n >= 2 and spread > band + EPS:
            flags.append("high-variance")
            reasons.append(
                f"high-variance — a sign, not a size: pair gains range "
                f"{pct(min(stats_.pair_gains))} … {pct(max(stats_.pair_gains))} "
                f"(spread {spread * 100:.1f} points > band {abs_pct(band)})"
            )
        else:
            worst = _repeat_spread(data, (control, arm), [pg.pair for pg in complete])
            if worst is not None and worst[0] > band + EPS:
                flags.append("high-variance")
                reasons.append(
                    f"high-variance — a sign, not a size: repeats of pair {worst[1]} "
                    f"({worst[2]}) disagree by {abs_pct(worst[0])} > band {abs_pct(band)}"
                )
    small = _small_sample(ctx, gates.min_output_tokens, gates.min_completed_requests,
                          [pg.pair for pg in complete], (control, arm))
    if small:
        flags.append("small-sample")
        reasons.append(f"small-sample — a hint, not a number: {small}")
    trend = None
    if kind == "ratio":
        ctrl = sorted(
            (ctx.slots.get(p, {}).get(control, p), v[control].value)
            for p, v in data.values.items()
            if control in v
        )
        if len(ctrl) >= 2:
            trend = st.trend([v for _, v in ctrl], [s for s, _ in ctrl])
        if trend is not None and abs(trend) > band + EPS:
            flags.append("window-drift")
            reasons.append(
                f"window-drift: the control itself moved {pct(trend)} across the window "
                f"(band ±{abs_pct(band)}): the window was not stable"
            )
    gap_s = gates.max_pair_gap_s
    split = []
    for pg in complete:
        starts = ctx.started.get(pg.pair, {})
        t0, t1 = starts.get(control), starts.get(arm)
        if t0 is not None and t1 is not None and abs((t1 - t0).total_seconds()) > gap_s:
            split.append(f"pair {pg.pair} ({span(abs((t1 - t0).total_seconds()))})")
    if split:
        flags.append("split-pair")
        reasons.append(
            f"split-pair: arms started further apart than {span(gap_s)}: "
            + ", ".join(split)
        )
    if left:
        flags.append("invalid-pass")
        n_left = len({lo.pair for lo in left})
        total = n_left + len(complete)
        detail = "; ".join(f"pair {lo.pair} {lo.arm}: {lo.reason}" for lo in left)
        reasons.append(f"invalid-pass: {n_left} of {total} pairs left out ({detail})")
    return Cell(
        workload=data.workload,
        level=data.level,
        metric=data.metric,
        arm=arm,
        direction=direction,
        kind=kind,
        control=_centre([pg.control for pg in complete], kind),
        candidate=_centre([pg.candidate for pg in complete], kind),
        stats=stats_,
        pairs=tuple(complete),
        left_out=tuple(left),
        verdict=verdict,
        flags=tuple(flags),
        reasons=tuple(reasons),
        decision_cell=decision,
        control_trend=trend,
    )


def _centre(values: Sequence[float], kind: st.Kind) -> float | None:
    if not values:
        return None
    if kind == "ratio":
        return math.exp(math.fsum(math.log(v) for v in values) / len(values))
    return math.fsum(values) / len(values)


def _label_reason(verdict: Label, p: st.Paired, rule: Rule, band: float) -> str:
    pairs = ", ".join(fmt_gain(g, p.kind) for g in p.pair_gains)
    g = fmt_gain(p.gain, p.kind)
    margin = pct(rule.prereg.margin)
    ci = (
        f"CI lower bound {pct(p.ci[0])}" if p.ci is not None else "no CI with one pair"
    )
    if verdict == "adopt":
        if rule.prereg.rule == "point":
            return f"adopt: {g} ≥ {margin} and every pair ≥ {pct(band)} (pairs {pairs})"
        return f"adopt: {ci} ≥ {margin} (gain {g}, pairs {pairs})"
    if verdict == "gain-below-bar":
        if rule.prereg.rule == "ci" and p.gain >= rule.prereg.margin - EPS:
            return f"gain-below-bar: {ci} < {margin} (gain {g}, pairs {pairs})"
        return f"gain-below-bar: every pair beyond {pct(band)} but {g} < {margin} (pairs {pairs})"
    if verdict == "within-drift":
        return f"within-drift: {g} is inside the ±{abs_pct(band)} band (pairs {pairs})"
    if verdict == "loss":
        return f"loss: every pair worse than {pct(-band)} ({g}; pairs {pairs})"
    return f"mixed: pairs disagree beyond the ±{abs_pct(band)} band ({g}; pairs {pairs})"


def _repeat_spread(
    data: CellData, arms: Sequence[str], pairs: Sequence[int]
) -> tuple[float, int, str] | None:
    worst: tuple[float, int, str] | None = None
    for pair in pairs:
        for a in arms:
            v = data.values[pair][a]
            if v.repeats > 1 and v.lo > 0:
                spread = v.hi / v.lo - 1
                if worst is None or spread > worst[0]:
                    worst = (spread, pair, a)
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


def decision_keys(rule: Rule, table: RunTable, order: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The (workload, level) decision cells, `*` expanded to the measured levels."""
    measured = sorted(
        {(w, lvl) for (w, lvl, m) in table.cells if m == rule.metric},
        key=lambda k: cell_sort_key((*k, ""), order),
    )
    out: list[tuple[str, str]] = []
    for dc in rule.prereg.decision_cells:
        if dc.level == "*":
            levels = [lvl for (w, lvl) in measured if w == dc.workload]
            specific = [lvl for lvl in levels if lvl != "all"]
            chosen = specific or levels
            if not chosen:
                raise DataProblem(
                    f"no rows of {rule.metric} for workload {dc.workload} "
                    "(a pre-registered decision cell)"
                )
            keys = [(dc.workload, lvl) for lvl in chosen]
        else:
            if (dc.workload, dc.level) not in measured:
                raise DataProblem(
                    f"no rows of {rule.metric} at {dc.workload} {dc.level} "
                    "(a pre-registered decision cell)"
                )
            keys = [(dc.workload, dc.level)]
        out.extend(k for k in keys if k not in out)
    return out


def judge_run(
    table: RunTable,
    rule: Rule,
    arms: Sequence[str],
    *,
    level_order: Sequence[str] = (),
    metrics: Iterable[str] | None = None,
) -> RunVerdict:
    """Every candidate against the control under `rule`, then the run's decision.

    Raises DataProblem when a decision cell or a guardrail's value is missing or zero.
    """
    control, candidates = arms[0], list(arms[1:])
    decisions = decision_keys(rule, table, level_order)
    guard_targets = {
        i: guardrail_targets(g, decisions, table) for i, g in enumerate(rule.prereg.guardrails)
    }
    key_cells = {(w, lvl, rule.metric) for w, lvl in decisions}
    for i, g in enumerate(rule.prereg.guardrails):
        key_cells |= {(w, lvl, g.metric) for w, lvl in guard_targets[i]}
    shown = set(metrics) if metrics is not None else None
    ctx_cache: dict[tuple[str, str], Context] = {}

    out: list[CandidateVerdict] = []
    for arm in candidates:
        cells: list[Cell] = []
        for key in sorted(table.cells, key=lambda k: cell_sort_key(k, level_order)):
            w, lvl, m = key
            if m in TOKEN_METRICS and m != rule.metric and key not in key_cells:
                continue
            if shown is not None and m not in shown and key not in key_cells:
                continue
            ctx = ctx_cache.get((w, lvl))
            if ctx is None:
                ctx = ctx_cache[(w, lvl)] = _context(table, w, lvl)
            try:
                c = judge_cell(
                    table.cells[key], arm, rule, ctx, control=control,
                    decision=(w, lvl) in decisions and m == rule.metric, pairs=table.pairs,
                )
            except DataProblem:
                if key in key_cells:
                    raise
                continue  # a descriptive cell with a zero (e.g. acceptance at position 7)
            cells.append(c)
        if rule.prereg.rule == "ci":
            cells = _apply_holm(cells, rule)
        out.append(_decide_candidate(arm, cells, rule, decisions, guard_targets))

    ranking = rank(out)
    adopting = [r for r in ranking if r.decision == "adopt"]
    adopt_arm = adopting[0].arm if adopting else None
    notes: list[str] = []
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
    stable = all(cv.window_stable for cv in out)
    if len(out) == 1:
        reasons = out[0].reasons
    else:
        reasons = tuple(f"{cv.arm}: {cv.decision} — {r}" for cv in out for r in cv.reasons)
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
    )


def _context(table: RunTable, workload: str, level: str) -> Context:
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
                   table.slots)


def _apply_holm(cells: list[Cell], rule: Rule) -> list[Cell]:
    """The `ci` rule over m > 1 decision cells: each adopts only when its Holm-adjusted
    one-sided p ≤ α/2 (the level of the CI's lower end). With one cell, the CI itself."""
    idx = [i for i, c in enumerate(cells) if c.decision_cell and c.stats is not None]
    m = len([c for c in cells if c.decision_cell])
    if m < 2:
        return cells
    margin = rule.prereg.margin
    half = rule.alpha / 2
    ps = []
    for i in idx:
        p = st.p_above(cells[i].stats, margin)  # type: ignore[arg-type]
        ps.append(1.0 if p is None else p)
    ps_all = ps + [1.0] * (m - len(idx))  # cells without data count as not rejected
    adjusted = st.holm(ps_all)[: len(idx)]
    levels = st.holm_levels(ps_all, half)[: len(idx)]
    out = list(cells)
    for j, i in enumerate(idx):
        c = cells[i]
        assert c.stats is not None
        lb = st.lower_bound(c.stats, levels[j])
        adopts = adjusted[j] <= half + EPS and c.stats.n >= 2
        verdict = label_of(c.stats, rule.band if c.kind == "ratio" else 0.0, adopts)
        reasons = list(c.reasons)
        reasons[0] = (
            f"{verdict}: Holm over {m} decision cells — adjusted p {adjusted[j]:.3g} "
            f"{'≤' if adopts else '>'} {half:.3g}; lower bound at its Holm level {pct(lb)} "
            f"vs bar {pct(margin)} (gain {pct(c.stats.gain)})"
        )
        out[i] = replace(c, verdict=verdict, reasons=tuple(reasons),
                         holm=HolmInfo(m, ps[j], adjusted[j], lb))
    return out


def _decide_candidate(
    arm: str,
    cells: Sequence[Cell],
    rule: Rule,
    decisions: Sequence[tuple[str, str]],
    guard_targets: Mapping[int, Sequence[tuple[str, str]]],
) -> CandidateVerdict:
    by_key = {c.key: c for c in cells}
    reasons: list[str] = []
    all_adopt = True
    gains: list[float] = []
    for w, lvl in decisions:
        c = by_key.get((w, lvl, rule.metric))
        if c is None or c.verdict != "adopt":
            all_adopt = False
            why = c.reasons[0] if c is not None else "no data"
            reasons.append(f"{w} {lvl}: {why}")
        if c is not None and c.stats is not None and c.kind == "ratio":
            gains.append(c.stats.mean)
    checks: list[GuardrailCheck] = []
    for i, g in enumerate(rule.prereg.guardrails):
        for where in guard_targets[i]:
            checks.append(check_guardrail(g, by_key.get((*where, g.metric)), where))
    broken = [c for c in checks if c.broken]
    reasons.extend(c.reason for c in broken)
    decision: Decision = "adopt" if all_adopt and not broken else "keep-default"
    if decision == "adopt":
        reasons = [
            f"every decision cell adopts ({len(decisions)}) and every guardrail holds "
            f"({len(checks)})",
            *(f"{w} {lvl}: {by_key[(w, lvl, rule.metric)].reasons[0]}" for w, lvl in decisions),
        ]
    drifted = [
        c for c in cells if c.decision_cell and "window-drift" in c.flags
    ]
    stable = not drifted
    if drifted:
        reasons.append(
            "the window was not stable: the control moved beyond the band at "
            + ", ".join(f"{c.where} ({pct(c.control_trend)})" for c in drifted)
            + "; consider re-running the campaign"
        )
    score = math.expm1(math.fsum(gains) / len(gains)) if gains else None
    return CandidateVerdict(arm, decision, tuple(reasons), tuple(cells), tuple(checks),
                            stable, score)


def rank(candidates: Sequence[CandidateVerdict]) -> list[Ranked]:
    """Candidates ordered: adopting ones first, then by mean gain over decision cells."""
    def worst(cv: CandidateVerdict) -> float | None:
        gs = [c.gain for c in cv.cells if c.decision_cell and c.gain is not None]
        return min(gs) if gs else None

    order = sorted(
        candidates,
        key=lambda cv: (cv.decision != "adopt", -(cv.score if cv.score is not None else -1e9)),
    )
    return [Ranked(i + 1, cv.arm, cv.decision, cv.score, worst(cv)) for i, cv in enumerate(order)]
