"""A sequential design's verdict: the registered rule judged at every look, and the
campaign stopped at the first look that decides (`preregistration.sequential`).

At each look (a pair count of `Sequential.schedule()` that has been measured) the run is
judged as if it ended there (`RunTable.subset`): decision cells get their look from the
kernel (`boundaries.path`: the group-sequential boundaries on the cell's complete pairs),
guardrails and gates are judged as in a fixed campaign, with the guardrails' α also shared
over the design's looks (Bonferroni: α ÷ (checks × max_looks)). Per candidate, a look is:

- `adopt`: every decision cell crossed the adopt boundary and every guardrail is shown
  within its limit (the rule's `adopt`, after the gates and guardrails);
- `keep-default`: a decision cell is a `loss`, a guardrail is broken, a decision cell
  crossed the futility boundary, or a guardrail not yet shown within its limit is shown
  beyond it at the campaign's one-sided α (its futility: a stop that keeps the default can
  never adopt, so it needs no split over the looks; a candidate truly within its limit by
  a margin of a few standard errors is almost never stopped by it);
- `continue`: none of these, and pairs are left (a guardrail not yet shown within its limit
  keeps the night going: more pairs may show it);
- `inconclusive`: none of these at max_pairs (reason `guardrail-unresolved` when the rule
  crossed and a guardrail is still not shown).

A candidate's verdict is the one of its first deciding look: pairs measured after it are
not used (the runner stops there; a run that went on anyway is judged as if it had not).

The sequential design is one concept at five stages; here it is judged. It is also
registered (`campaign.campaignfile.sequential`), followed by the runner
(`campaign.run.sequential`), planned (`campaign.plan.sequential`), reported
(`campaign.report.sequential`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

from campaign.campaignfile.sequential import Sequential
from campaign.fmt import pct
from campaign.verdict import boundaries as sq
from campaign.verdict import stats as st
from campaign.verdict.decide import run_decision
from campaign.verdict.outcome import (
    CandidateVerdict,
    CellLook,
    GuardrailCheck,
    LookStep,
    RunVerdict,
    SequentialPath,
    SequentialState,
)
from campaign.verdict.rule import Decision, Rule, better_d, change_of

FUTILE = "keep-default: the data rule out "
"""A look's reason when a decision cell crossed the futility boundary (with the power
point in the file's numbers: `Rule.powered_words`)."""
GUARD_FUTILE = "keep-default: guardrail "
"""A look's reason when a guardrail is shown beyond its limit where it would be shown
within (the guardrail's futility)."""


def design_of(rule: Rule) -> Sequential:
    design = rule.prereg.sequential
    if design is None:
        raise ValueError("not a sequential design")
    return design


def cell_look(ids: Sequence[int], d: Sequence[float], last: int, rule: Rule, candidates: int,
              workload: str, level: str, kind: st.Kind = "ratio") -> CellLook | None:
    """A decision cell's look at `last` (the last pair measured), from its complete pairs
    `ids` and their d (positive = better); None when no look is due at `last`."""
    design = design_of(rule)
    due = [p for p in design.schedule() if p <= last]
    if not due:
        return None
    direction = rule.direction
    taken = sq.path(ids, d, design.schedule(), last, max_pairs=design.max_pairs,
                    margin_d=rule.bar_d(candidates, kind), floor_d=rule.floor_d(kind),
                    powered_d=better_d(1.5 * rule.prereg.margin, direction, kind),
                    alpha=rule.ci_alpha(candidates), beta=1 - design.power)
    if not taken or taken[-1][0] != due[-1]:
        return None  # the look at `last` added no valid pair: it is not taken
    lk = taken[-1][1]
    lower = lk.lower
    return CellLook(workload, level, lk.n, change_of(lk.mean, direction, kind),
                    change_of(lower, direction, kind) if math.isfinite(lower) else None,
                    lk.statistic, lk.bound, lk.futility_statistic, lk.futility_bound,
                    lk.outcome)


def state_at(cv: CandidateVerdict, rule: Rule, pairs: int) -> tuple[SequentialState, str]:
    """Where a candidate's design stands at the look after `pairs` pairs, and why."""
    design = design_of(rule)
    dec = [c for c in cv.cells if c.decision_cell]
    looks = [c.look for c in dec if c.look is not None]
    broken = [g for g in cv.guardrails if g.state == "broken"]
    if cv.decision == "adopt":
        return "adopt", "adopt boundary crossed at every decision cell → stopping"
    if cv.reason == "loss":
        return "keep-default", "a loss (evidence the candidate is worse) → stopping"
    if broken:
        return "keep-default", ("guardrail broken: " + ", ".join(
            f"{g.metric} at {g.workload} {g.level}" for g in broken) + " → stopping")
    futile = [lk for lk in looks if lk.outcome == "futile"]
    if futile:
        return "keep-default", (f"{FUTILE}{rule.powered_gain()} at "
                                + ", ".join(f"{lk.workload} {lk.level}" for lk in futile)
                                + f" ({rule.powered_source()}) → stopping")
    unshown = [g for g in cv.guardrails if g.role == "guardrail" and g.stops]
    # shown beyond its limit at the campaign's α: more pairs would not show it within (a
    # noisy early estimate beyond the limit alone is not enough)
    hopeless = [g for g in unshown if g.shown_beyond]
    if hopeless:
        return "keep-default", (GUARD_FUTILE + ", ".join(
            f"{g.metric} at {g.workload} {g.level} ({pct(g.change or 0.0)})"
            for g in hopeless) + " shown beyond its limit at the campaign's one-sided "
            f"{rule.alpha:.0%}: more pairs would not show it within → stopping")
    crossed = bool(looks) and all(lk.outcome == "adopt" for lk in looks)
    if pairs >= design.max_pairs:
        if crossed and unshown:
            return "inconclusive", ("adopt boundary crossed, but " + _unshown(unshown)
                                    + f" not shown within its limit by max_pairs "
                                    f"{design.max_pairs}")
        return "inconclusive", f"no boundary crossed by max_pairs {design.max_pairs}"
    if crossed and unshown:
        return "continue", ("adopt boundary crossed, but " + _unshown(unshown)
                            + " not yet shown within its limit → continuing")
    return "continue", "no boundary crossed → continuing"


def _unshown(checks: Sequence[GuardrailCheck]) -> str:
    return ", ".join(f"guardrail {g.metric} at {g.workload} {g.level}" for g in checks)


def look_line(step: LookStep, design: Sequential) -> str:
    """"look 3 of ≤ 8 (pair 4): knee c4 +24.1% [bound +17.9%, critical value t = 4.2],
    adopt boundary crossed at every decision cell → stopping" (the bound: the estimate's
    lower bound the design compares with the floor; `bound_words`)."""
    cells = "; ".join(
        f"{c.workload} {c.level} {pct(c.change)}{_bound_text(c)}" for c in step.cells)
    return (f"look {step.look} of ≤ {design.max_looks} (pair {step.pairs}): "
            f"{cells or 'no look due'}, {step.why}")


def _bound_text(c: CellLook) -> str:
    return f" [{bound_words(c)}]"


def bound_words(c: CellLook) -> str:
    """The adopt boundary as a change with its critical value ("bound -86.9%, critical
    value t = 12.3"), or, where so few pairs spend no error or put the bound beyond
    −99.5% (a "-100.0%" reads as broken arithmetic), that there are too few pairs yet."""
    if not math.isfinite(c.bound):
        return f"too few pairs yet for a bound: {c.n} pairs spend no error"
    if too_few(c):
        return f"too few pairs yet for a bound: {c.n} pairs, {critical_words(c)}"
    return f"bound {pct(c.boundary or 0.0)}, {critical_words(c)}"


def too_few(c: CellLook) -> bool:
    """No bound worth printing at this look: no error spent, or a bound beyond −99.5%."""
    return c.boundary is None or c.boundary <= -0.995 or not math.isfinite(c.bound)


def critical_words(c: CellLook) -> str:
    """"critical value t = 12.3" (the adopt boundary on the look's t statistic), or that
    the look spends no error."""
    if not math.isfinite(c.bound):
        return "no error is spent at this look"
    return f"critical value t = {c.bound:.1f}"


Judge = Callable[[Sequence[int] | None], RunVerdict]
"""Judge the run on its pairs ≤ a look (None: every pair measured)."""
LaneJudge = Callable[[Sequence[int], Mapping[int, int]], RunVerdict]
"""Judge one lane: its pooled pairs, renumbered as in its shard."""


def judge_lanes(lanes: Mapping[int, str], rule: Rule, pooled: RunVerdict,
                judge_lane: LaneJudge) -> RunVerdict:
    """A pooled run of sequential shards: each lane judged by the design on its own pairs
    (as its runner looked at them), and a candidate adopts only when every lane's design
    adopts (intersection–union: the pooled false adopt is at most each lane's α); a lane
    that keeps the default keeps it; else the pooled design continues (a lane still
    going) or is inconclusive. The pooled cells stay for what the report shows."""
    by_lane: dict[str, list[int]] = {}
    for p in sorted(lanes):
        by_lane.setdefault(lanes[p], []).append(p)
    per_lane = {lane: judge_lane(ps, {p: i + 1 for i, p in enumerate(ps)})
                for lane, ps in sorted(by_lane.items())}
    out = []
    for cv in pooled.candidates:
        mine = {lane: next(c for c in v.candidates if c.arm == cv.arm)
                for lane, v in per_lane.items()}
        out.append(_pooled_candidate(cv, mine))
    return recombine(pooled, out, pooled.pairs_measured)


def _pooled_candidate(cv: CandidateVerdict, lanes: Mapping[str, CandidateVerdict]
                      ) -> CandidateVerdict:
    states = {lane: (c.sequential.state if c.sequential else "continue")
              for lane, c in lanes.items()}
    if all(s == "adopt" for s in states.values()):
        state: SequentialState = "adopt"
    elif any(s == "keep-default" for s in states.values()):
        state = "keep-default"
    elif any(s == "continue" for s in states.values()):
        state = "continue"
    else:
        state = "inconclusive"
    first = next((c for c in lanes.values()
                  if (c.sequential.state if c.sequential else "continue") == state),
                 next(iter(lanes.values())))
    steps = tuple(dataclasses.replace(s, why=f"lane {lane}: {s.why}")
                  for lane, c in lanes.items() if c.sequential for s in c.sequential.steps)
    assert first.sequential is not None
    path = dataclasses.replace(first.sequential, steps=steps, state=state, stopped_at=None)
    reasons = (f"pooled sequential shards: {state} ("
               + ", ".join(f"{lane} {s}" for lane, s in states.items())
               + "; adopts only when every lane's design adopts)",
               *(f"{lane}: {r}" for lane, c in lanes.items() for r in c.reasons[:1]),
               # the pooled cells' own reasons, not a look on the pooled numbering
               *(r for r in cv.reasons if not r.startswith("look ")))
    decision: Decision = "adopt" if state == "adopt" else "keep-default"
    return dataclasses.replace(cv, decision=decision, reason=first.reason,
                               settle=first.settle, reasons=reasons, sequential=path)


def judge_sequential(pairs_measured: Sequence[int], rule: Rule, judge: Judge,
                     resume_command: str = "spec-ab run --resume RUN_DIR") -> RunVerdict:
    """The run's verdict under its sequential design: judged at each look in turn until
    every candidate is decided (see the module docstring); `resume_command`: what measures
    more pairs of this run (a `--resume`, or a new run when it cannot be resumed)."""
    design = design_of(rule)
    last = max(pairs_measured, default=0)
    due = [p for p in design.schedule() if p <= last]
    steps: dict[str, list[LookStep]] = {}
    final: dict[str, tuple[CandidateVerdict, SequentialState, str, int]] = {}
    verdict = None
    for p in due or [last]:
        verdict = judge(None if p == last else [q for q in pairs_measured if q <= p])
        for cv in verdict.candidates:
            if cv.arm in final:
                continue
            state, why = (state_at(cv, rule, p) if due else
                          ("continue", f"no look before pair {design.schedule()[0]}"))
            mine = steps.setdefault(cv.arm, [])
            if due:
                cells = tuple(c.look for c in cv.cells if c.decision_cell and c.look)
                mine.append(LookStep(len(mine) + 1, p, cells, state, why))
            if state in ("adopt", "keep-default") or p == (due[-1] if due else last):
                final[cv.arm] = (cv, state, why, p)
        if len(final) == len(verdict.candidates):
            break
    assert verdict is not None
    out = [_finish(cv, state, why, p, steps.get(cv.arm, []), design, rule, last,
                   resume_command)
           for cv, state, why, p in (final[c.arm] for c in verdict.candidates)]
    return recombine(verdict, out, len(pairs_measured))


def _finish(cv: CandidateVerdict, state: SequentialState, why: str, at: int,
            steps: Sequence[LookStep], design: Sequential, rule: Rule,
            last: int, resume_command: str) -> CandidateVerdict:
    stopped = state in ("adopt", "keep-default")
    path = SequentialPath(design.max_pairs, design.min_pairs, design.look, design.max_looks,
                          tuple(steps), state, at if stopped else None)
    line = look_line(steps[-1], design) if steps else f"sequential: {why}"
    reasons = [line, *cv.reasons]
    reason, settle = cv.reason, cv.settle
    if state == "keep-default" and reason not in ("loss", "guardrail"):
        reason = ("guardrail" if any(g.state == "broken" for g in cv.guardrails)
                  else "guardrail-unresolved" if why.startswith(GUARD_FUTILE)
                  else "below-bar")
        settle = ""
    elif state == "continue":
        reason = "inconclusive"
        settle = _go_on(design.max_pairs - last, resume_command, steps)
    elif state == "inconclusive" and reason == "guardrail-unresolved":
        settle = next((g.resolve for g in cv.guardrails if g.stops and g.resolve), "")
    elif state == "inconclusive":
        reason, settle = "inconclusive", _further_night(cv, rule, design)
    if stopped and at < last:
        reasons.append(f"the design stopped after pair {at}: the {last - at} pair(s) "
                       "measured after it are not used")
    if cv.decision == "adopt" and state != "adopt":
        raise AssertionError("a sequential adopt is always the design's")
    return dataclasses.replace(cv, reasons=tuple(reasons), reason=reason, settle=settle,
                               sequential=path)


def _go_on(more: int, resume_command: str, steps: Sequence[LookStep]) -> str:
    """What measures the pairs a design still going needs: the run resumed; or, when it
    cannot be (a finished run judged under `--rule`, an arm that never became ready),
    the new run `resume_command` names, said as is when nothing was measured to look at."""
    if "--resume" in resume_command:
        return f"the design continues: up to {more} more pair(s): {resume_command}"
    if not any(step.cells for step in steps):
        return resume_command
    return f"the design would go on for up to {more} more pair(s), but {resume_command}"


def _further_night(cv: CandidateVerdict, rule: Rule, design: Sequential) -> str:
    """What another night would buy for a design that ended without a crossing."""
    parts = []
    for c in cv.cells:
        if not c.decision_cell or c.stats is None or c.stats.sd is None or c.stats.n < 2:
            continue
        s, mean = c.stats.sd, c.stats.mean
        room = mean - rule.floor_d(c.kind)
        if room <= 0 or mean < rule.bar_d(1, c.kind):
            parts.append(f"{c.workload} {c.level}: measured {pct(c.change or 0.0)}, below "
                         "what the rule adopts: more pairs would not adopt it")
            continue
        t = st.t_critical(1 - rule.alpha, max(1, c.stats.n - 1))
        need = math.ceil((t * s / room) ** 2)
        parts.append(f"{c.workload} {c.level}: measured {pct(c.change or 0.0)}; at this "
                     f"spread a fixed campaign of about {max(need, 2)} pairs would settle it")
    return ("; ".join(parts) or "a new campaign with a larger max_pairs") + (
        f" (this design stopped at its max_pairs {design.max_pairs})")


def recombine(verdict: RunVerdict, out: Sequence[CandidateVerdict], measured: int
              ) -> RunVerdict:
    """The run's verdict with its candidates' final verdicts (each from its own deciding
    look); `measured`: the pairs the run holds."""
    run = run_decision(out)
    notes = tuple(n for n in verdict.notes if not n.startswith("incomplete: ")
                  or "left out" in n)
    return dataclasses.replace(
        verdict, candidates=tuple(out), ranking=run.ranking,
        decision="adopt" if run.adopt_arm else "keep-default", adopt_arm=run.adopt_arm,
        reasons=run.reasons, reason=run.top.reason, settle=run.top.settle, notes=notes,
        pairs_measured=measured,
        decided=all(cv.sequential is not None and cv.sequential.decided for cv in out))
