"""Per-cell verdicts, flags, guardrails and the campaign decision, under a `rule.Rule`.

Pure: a `tidy.RunTable` and the rule in, verdicts with their reasons out; no file is read
or written, no clock is read. `campaign.report` loads run directories and lays out what
this module decides; `campaign.verdict.aa` turns the cells of an A/A run into a drift band.

Each cell (workload × level × metric) of each candidate is paired with the control over
its complete pairs. Decision cells get the rule's label (`rule.label_of`); every other cell
is described (`better`, `worse`, `no-clear-change`). Decision cells that must all adopt
form an intersection–union test: no correction across them is needed (or applied).

Flags (`flags`) are tests calibrated on the lane's assumed noise and facts about the passes;
the gating ones stop a decision cell from adopting (its label is `inconclusive`). The
campaign adopts only when every decision cell adopts and every guardrail holds; otherwise
it keeps the default with one reason category: `inconclusive`, `loss`, `guardrail` or
`below-bar` (`rule-met` when it adopts).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from campaign import catalog
from campaign.fmt import pct
from campaign.verdict import capacity
from campaign.verdict import stats as st
from campaign.verdict.decide import best_by_level, decide_candidate, run_decision
from campaign.verdict.flags import (
    CellPairs,
    Context,
    drift_not_judged,
    fact_flags,
    gate,
    lane_means,
    noise_flags,
)
from campaign.verdict.guardrails import guardrail_targets
from campaign.verdict.outcome import (
    CandidateVerdict,
    Cell,
    CellLook,
    DataProblem,
    LeftOut,
    LevelBest,
    PairGain,
    RunVerdict,
)
from campaign.verdict.reasons import describe_reason, label_reason
from campaign.verdict.rule import (
    Label,
    Rule,
    adopts_bound,
    adopts_ci,
    adopts_point,
    change_of,
    describe,
    flag_alpha,
    label_of,
)
from campaign.verdict.sequential import (
    cell_look,
    critical_words,
    judge_lanes,
    judge_sequential,
    too_few,
)
from campaign.verdict.tidy import TOKEN_METRICS, CellData, RunTable, cell_sort_key

NO_ZERO_LATENCY = ("ttft_", "request_latency_")
"""Metrics whose value 0 over a pass is no measurement (a latency is never 0): the pair is
left out of the cell. An ITL of 0 is one (a stream that arrived in one burst)."""
ZERO_LATENCY = "a latency of 0 over a pass is no measurement"
DESCRIPTIVE_METRICS = (
    "output_token_throughput", "ttft_p99", "itl_p99", "request_latency_p99",
    "error_rate", "acceptance_rate", "tokens_per_decode_step", "implied_a",
)
"""Cells computed beside the primary metric and the guardrails (when measured)."""

# --------------------------------------------------------------------------- one cell


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
    """Paired statistics, label, flags and reasons of one cell (candidate `arm`):
    pairs → statistics → label → flags → gates.

    Raises DataProblem when a value is damaged (missing, infinite, negative in a ratio) —
    the caller decides whether the cell matters enough to stop the report.
    """
    direction = rule.direction_of(data.metric)
    _refuse_damaged(data, control, arm)
    complete, left, not_applicable = _pairs_of(data, control, arm, pairs)
    kind, notes = _compared_by(data, rule.kind_of(data.metric), complete, control, arm,
                               decision)
    p = (st.paired([x for _, x, _ in complete], [y for _, _, y in complete], direction,
                   confidence=rule.prereg.confidence, kind=kind) if complete else None)
    look = (cell_look([i for i, _, _ in complete], p.d, max(pairs), rule, ctx.candidates,
                      data.workload, data.level, kind)
            if decision and p is not None and pairs and rule.prereg.sequential else None)
    verdict, first = _label(p, data, rule, ctx, decision=decision, direction=direction,
                            kind=kind, not_applicable=not_applicable, left=left, look=look)
    if data.bounds and (short := capacity.beyond_the_sweep(data, control, arm, complete)):
        first = first.split(":", 1)[0] + ": " + short  # its label's word, then why
    reasons = [first, *notes]
    if p is not None and p.ci is None:
        reasons.append("one pair: no confidence interval (nothing to estimate spread from)")
    if data.bounds and (censored := capacity.censored_words(data, control, arm)):
        reasons.append(censored)
    cp = CellPairs(data, control, arm, [pair for pair, _, _ in complete], left)
    flagged, trend = (noise_flags(cp, p, rule, ctx, decision=decision, direction=direction)
                      if kind == "ratio" else ([], None))
    flagged += fact_flags(cp, rule, ctx, decision=decision)
    flags = tuple(f for f, _ in flagged)
    reasons += [why for _, why in flagged]
    if kind == "ratio" and (not_judged := drift_not_judged(cp, rule, ctx)):
        reasons.append(not_judged)
    if decision:
        verdict, reasons[0] = gate(verdict, flags, reasons[0])
    return Cell(
        workload=data.workload, level=data.level, metric=data.metric, arm=arm,
        direction=direction, kind=kind,
        control=(_centre([x for _, x, _ in complete], kind) if complete
                 else _own_values(data, control, verdict)),
        candidate=(_centre([y for _, _, y in complete], kind) if complete
                   else _own_values(data, arm, verdict)),
        stats=p,
        pairs=_pair_gains(complete, p, direction, kind),
        left_out=tuple(left), verdict=verdict, flags=flags, reasons=tuple(reasons),
        decision_cell=decision, control_trend=trend, planned_pairs=rule.prereg.pairs,
        look=look,
    )


def _refuse_damaged(data: CellData, control: str, arm: str) -> None:
    for pair, a in data.missing:
        if a in (control, arm):
            raise DataProblem(
                f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {a} has "
                "a valid row with no usable value"
            )


def _pairs_of(data: CellData, control: str, arm: str, pairs: Sequence[int]
              ) -> tuple[list[tuple[int, float, float]], list[LeftOut], set[str]]:
    """The complete pairs (pair, control, candidate), the arms' passes left out with their
    reasons, and the arms for which the figure is not applicable.

    A figure from server counters that an arm's valid passes did not yield means its
    server has no such counters (spec decoding off, or a server without /metrics): not
    applicable to that arm, not a pass left out."""
    complete: list[tuple[int, float, float]] = []
    left: list[LeftOut] = []
    not_applicable: set[str] = set()
    info = catalog.METRICS.get(data.metric)
    counters_only = info is not None and info.source in ("server", "spec_decode")
    no_zero = data.metric.startswith(NO_ZERO_LATENCY)
    for pair in sorted(set(pairs) | set(data.values) | set(data.invalid)):
        vals = data.values.get(pair, {})
        invalid = data.invalid.get(pair, {})
        zeros = [a for a in (control, arm) if no_zero and a in vals and vals[a].value == 0]
        if zeros:
            left.extend(LeftOut(pair, a, ZERO_LATENCY) for a in zeros)
            continue
        if control in vals and arm in vals:
            complete.append((pair, vals[control].value, vals[arm].value))
            continue
        for a in (control, arm):
            if a in vals:
                continue
            if counters_only and a not in invalid:
                not_applicable.add(a)
                continue
            reason = invalid.get(a, "not measured")
            if a == arm and a in invalid and control in vals:
                reason += " — a failure of the candidate: counts against it"
            left.append(LeftOut(pair, a, reason))
    return complete, left, not_applicable


def _compared_by(data: CellData, kind: st.Kind, complete: Sequence[tuple[int, float, float]],
                 control: str, arm: str, decision: bool) -> tuple[st.Kind, list[str]]:
    """Ratio or absolute: a ratio cell with a measured 0 is compared by differences (a
    decision cell refuses it: the rule's margin is relative)."""
    if kind != "ratio" or not any(min(x, y) <= 0 for _, x, y in complete):
        return kind, []
    bad = [(p, x, y) for p, x, y in complete if min(x, y) < 0 or decision]
    if bad:
        p, x, y = next((p, x, y) for p, x, y in bad if min(x, y) <= 0)
        who = control if x <= 0 else arm
        raise DataProblem(f"{data.metric} at {data.workload} {data.level}: pair {p}, arm "
                          f"{who} is {min(x, y)!r}; a ratio needs values > 0")
    return "absolute", ["a value is 0 (e.g. a stream that arrived in one burst): compared "
                        "by differences, not ratios"]


def _label(p: st.Paired | None, data: CellData, rule: Rule, ctx: Context, *, decision: bool,
           direction: st.Direction, kind: st.Kind, not_applicable: set[str],
           left: Sequence[LeftOut], look: CellLook | None = None) -> tuple[Label, str]:
    """The cell's label and the reason that opens its reasons: the rule's for a decision
    cell, a description for any other (under a sequential design, `bound` adopts when the
    look crosses the design's adopt boundary)."""
    if p is None:
        if not_applicable and not left:
            return "not-applicable", (
                f"not applicable: {', '.join(sorted(not_applicable))} reported no "
                f"{data.metric} (no spec-decode counters: spec decoding off, or no /metrics)")
        return "no-data", f"no complete pair: {len(left)} arm pass(es) missing or invalid"
    if not decision:
        verdict = describe(p)
        return verdict, describe_reason(verdict, p, direction)
    band = rule.band if kind == "ratio" else 0.0
    bar = rule.bar_d(ctx.candidates, kind)
    alpha = rule.ci_alpha(ctx.candidates)
    if rule.prereg.sequential is not None:
        adopts = look is not None and look.outcome == "adopt"
    elif rule.prereg.rule == "bound":
        adopts = adopts_bound(p, bar, rule.floor_d(kind), alpha)
    elif rule.prereg.rule == "point":
        adopts = adopts_point(p, bar, band, direction)
    else:
        adopts = adopts_ci(p, bar, alpha)
    verdict = label_of(p, band, adopts, direction, rule.alpha)
    why = label_reason(verdict, p, rule, band, bar, direction, alpha)
    if look is not None:
        why = _look_reason(verdict, why, look, rule, kind)
    return verdict, why


def _look_reason(verdict: Label, why: str, look: CellLook, rule: Rule, kind: st.Kind) -> str:
    """A sequential design's decision cell: its reason names the design's boundary, not
    the fixed-sample bound."""
    floor = pct(change_of(rule.floor_d(kind), rule.direction, kind))
    crit = critical_words(look)
    bound = (f"the design has too few pairs yet for a bound after {look.n} pairs"
             if too_few(look)
             else f"the design's bound after {look.n} pairs is {pct(look.boundary or 0.0)}")
    if verdict == "adopt":
        bar = pct(change_of(rule.bar_d(1, kind), rule.direction, kind))
        return (f"adopt: {pct(look.change)} clears {bar} and {bound} ({crit}), "
                f"clearing {floor} (sequential; pairs {why.rsplit('(pairs ', 1)[-1]}")
    head = why.split(" (pairs ", 1)[0]
    if look.outcome == "continue" and verdict != "loss":
        head = head.replace("keep-default", "undecided", 1)  # the design goes on
    at_look = {"futile": f"the data rule out {rule.powered_words()}",
               "continue": "the design goes on"}.get(look.outcome, look.outcome)
    return (f"{head}; sequential: {bound} ({crit}; adopting needs {floor}); at this look "
            f"{at_look}" + (f" (pairs {why.rsplit('(pairs ', 1)[-1]}"
                            if "(pairs " in why else ""))


def _pair_gains(complete: Sequence[tuple[int, float, float]], p: st.Paired | None,
                direction: st.Direction, kind: st.Kind) -> tuple[PairGain, ...]:
    if p is None:
        return ()
    return tuple(PairGain(pair, x, y, g, change_of(d, direction, kind))
                 for (pair, x, y), g, d in zip(complete, p.pair_gains, p.d, strict=True))


def lane_changes(cell: Cell, lanes: Mapping[int, str]) -> list[tuple[str, int, float]]:
    """(lane, pairs, change) of a pooled cell, lane by lane in first-seen order: the
    change is the lane's mean pair change on the metric's own scale."""
    if cell.stats is None:
        return []
    return [(lane, n, change_of(mean, cell.direction, cell.kind)) for lane, n, mean in
            lane_means(cell.stats.d, [lanes.get(pg.pair, "?") for pg in cell.pairs])]


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
    guard_cells: Sequence[Sequence[tuple[str, str]]] | None = None,
    metrics: Iterable[str] | None = None,
    resume_command: str = "spec-ab run --resume RUN_DIR",
) -> RunVerdict:
    """Every candidate against the control under `rule`, then the run's decision.

    `levels` are the campaign's configured levels per workload (so a registered level with
    no rows is seen as missing, not skipped); `guard_cells` each guardrail's registered
    cells (results schema 3; else they are found from the rule and the rows);
    `resume_command` is what finishes this run. Raises DataProblem when a decision cell or
    a guardrail's value is damaged. A rule with a sequential design is judged at each of
    its looks (`looks.judge_sequential`).
    """
    if rule.prereg.sequential is not None:
        def at(keep: Sequence[int] | None) -> RunVerdict:
            return _judge_fixed(table if keep is None else table.subset(keep), rule, arms,
                                level_order, levels, guard_cells, metrics, resume_command)

        if len(set(table.lanes.values())) > 1:
            def lane(keep: Sequence[int], number: Mapping[int, int]) -> RunVerdict:
                one = table.subset(keep, number)
                return judge_sequential(one.pairs, rule, lambda k: _judge_fixed(
                    one if k is None else one.subset(k), rule, arms, level_order, levels,
                    guard_cells, metrics, resume_command), resume_command)

            return judge_lanes(table.lanes, rule, at(None), lane)
        return judge_sequential(table.pairs, rule, at, resume_command)
    return _judge_fixed(table, rule, arms, level_order, levels, guard_cells, metrics,
                        resume_command)


def _judge_fixed(table: RunTable, rule: Rule, arms: Sequence[str],
                 level_order: Sequence[str], levels: Mapping[str, Sequence[str]] | None,
                 guard_cells: Sequence[Sequence[tuple[str, str]]] | None,
                 metrics: Iterable[str] | None, resume_command: str) -> RunVerdict:
    control, candidates = arms[0], list(arms[1:])
    decisions = decision_keys(rule, table, level_order, levels)
    guard_targets = {i: (list(guard_cells[i]) if guard_cells is not None
                         and i < len(guard_cells) else
                         guardrail_targets(g, table, level_order, decisions))
                     for i, g in enumerate(rule.prereg.guardrails)}
    lanes = len(set(table.lanes.values()))
    plan = _CellPlan(table, rule, decisions, guard_targets, level_order, metrics,
                     flag_alpha(len(decisions), len(candidates), lanes), len(candidates))
    damaged: list[str] = []
    out = [decide_candidate(arm, plan.judge(arm, control, damaged), rule, table, decisions,
                            guard_targets, control, resume_command, level_order)
           for arm in candidates]
    run = run_decision(out)
    adopt_arm, top = run.adopt_arm, run.top
    best = best_by_level(out, decisions, rule)
    left = {(lo.pair, lo.arm) for cv in out for c in cv.cells for lo in c.left_out}
    notes = _run_notes(out, rule, table, damaged, left, best, adopt_arm)
    return RunVerdict(
        run=table.run, decision="adopt" if adopt_arm else "keep-default", adopt_arm=adopt_arm,
        reasons=run.reasons, notes=tuple(notes), candidates=tuple(out), ranking=run.ranking,
        pairs_measured=len(table.pairs), pairs_planned=rule.prereg.pairs, left_out=len(left),
        window_stable=all(cv.window_stable for cv in out), reason=top.reason,
        settle=top.settle, best_by_level=tuple(best),
    )


@dataclass
class _CellPlan:
    """Which cells a run's candidates are judged at, with their shared contexts."""

    table: RunTable
    rule: Rule
    decisions: Sequence[tuple[str, str]]
    guard_targets: Mapping[int, Sequence[tuple[str, str]]]
    level_order: Sequence[str]
    metrics: Iterable[str] | None
    alpha: float
    candidates: int
    contexts: dict[tuple[str, str], Context] = field(default_factory=dict)

    def keys(self) -> list[tuple[str, str, str]]:
        """The cells to judge: every measured cell (of the shown metrics) and every
        decision cell, token counts only where a decision or guardrail needs them."""
        rule, metric = self.rule, self.rule.metric
        key_cells = self.key_cells()
        shown = set(self.metrics) if self.metrics is not None else None
        keys = set(self.table.cells) | {(w, lvl, metric) for w, lvl in self.decisions}
        # every cell of a guardrail's metric: its noise is pooled over them, and a
        # worsening shown beyond the limit at any of them stops adoption
        guarded = {g.metric for g in rule.prereg.guardrails}
        return [k for k in sorted(keys, key=lambda k: cell_sort_key(k, self.level_order))
                if not (k[2] in TOKEN_METRICS and k[2] != rule.metric and k not in key_cells)
                and (shown is None or k[2] in shown or k in key_cells or k[2] in guarded)]

    def key_cells(self) -> set[tuple[str, str, str]]:
        """Decision and guardrail cells: a damaged value there stops the report."""
        cells = {(w, lvl, self.rule.metric) for w, lvl in self.decisions}
        for i, g in enumerate(self.rule.prereg.guardrails):
            cells |= {(w, lvl, g.metric) for w, lvl in self.guard_targets[i]}
        return cells

    def judge(self, arm: str, control: str, damaged: list[str]) -> list[Cell]:
        """Every cell of one candidate; damaged descriptive cells are left out (and said)."""
        key_cells = self.key_cells()
        cells: list[Cell] = []
        for key in self.keys():
            w, lvl, m = key
            ctx = self.contexts.get((w, lvl))
            if ctx is None:
                ctx = self.contexts[(w, lvl)] = _context(self.table, w, lvl, self.alpha,
                                                         self.candidates)
            data = self.table.cells.get(key) or CellData(w, lvl, m)
            try:
                cells.append(judge_cell(data, arm, self.rule, ctx, control=control,
                                        decision=(w, lvl) in self.decisions
                                        and m == self.rule.metric, pairs=self.table.pairs))
            except DataProblem as exc:
                if key in key_cells:
                    raise
                damaged.append(str(exc))
        return cells


def _run_notes(out: Sequence[CandidateVerdict], rule: Rule, table: RunTable,
               damaged: Sequence[str], left: set[tuple[int, str]], best: Sequence[LevelBest],
               adopt_arm: str | None) -> list[str]:
    """What a reader of the run's decision should know beside it."""
    notes: list[str] = []
    if damaged:
        notes.append(f"{len(damaged)} descriptive cell(s) left out for damaged values: "
                     + "; ".join(sorted(set(damaged))[:3])
                     + (" …" if len(set(damaged)) > 3 else ""))
    measured = len(table.pairs)
    if measured < rule.prereg.pairs:
        notes.append(f"incomplete: {measured} of {rule.prereg.pairs} pre-registered pairs measured")
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
    if len(out) > 1:
        if len({b.arm for b in best}) > 1:
            notes.append("the best candidate differs by level: " + ", ".join(
                f"{b.workload} {b.level} {b.arm} ({pct(b.change)})" for b in best)
                + " — one overall ranking would hide this")
        if adopt_arm:
            notes.append(f"{adopt_arm} was picked as the best of {len(out)} candidates: "
                         "its measured change is biased upward by that choice; re-run it "
                         "alone against the control to size it")
    return notes


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
