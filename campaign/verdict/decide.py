"""A candidate's decision from its judged cells, and the ranking of several candidates.

`decide_candidate` turns the cells of one candidate (see `verdict.judge_cell`) and its
guardrail checks into adopt / keep-default with one reason category:

- `rule-met`: every decision cell adopts and every guardrail is shown within its limit
  (the only adopt);
- `inconclusive`: a decision cell is short of its pre-registered pairs or has none (first,
  whatever else holds: the campaign is not finished), or the rule is met on the pairs
  measured but a gate stops it (one pair, small sample, unstable window); `settle` says
  what would settle it;
- `loss`: a decision cell is a loss;
- `guardrail`: the rule is met but a guardrail is broken (at its cells, or a deterioration
  check elsewhere) or missing;
- `guardrail-unresolved`: the rule is met but a guardrail is not shown within its limit
  (unclear): named first, with its estimate, the bound and what would resolve it;
- `below-bar`: anything else (below the bar, within drift, mixed, unclear).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from campaign.campaignfile import Guardrail
from campaign.fmt import fmt_gain, pct
from campaign.verdict import guardstats as gs
from campaign.verdict.guardrails import (
    Family,
    Inputs,
    check_guardrail,
    deterioration_cells,
    pooled_noise,
    prior_extra,
    requests_of,
)
from campaign.verdict.outcome import (
    GATING_FLAGS,
    CandidateVerdict,
    Cell,
    GuardrailCheck,
    LevelBest,
    Ranked,
    Role,
)
from campaign.verdict.rule import Decision, Reason, Rule
from campaign.verdict.showable import relative
from campaign.verdict.stats import Kind
from campaign.verdict.tidy import RunTable


def decide_candidate(
    arm: str,
    cells: Sequence[Cell],
    rule: Rule,
    table: RunTable,
    decisions: Sequence[tuple[str, str]],
    guard_targets: Mapping[int, Sequence[tuple[str, str]]],
    control: str,
    resume_command: str,
    order: Sequence[str] = (),
) -> CandidateVerdict:
    by_key = {c.key: c for c in cells}
    dec = [(w, lvl, by_key.get((w, lvl, rule.metric))) for w, lvl in decisions]
    checks = guardrail_checks(arm, by_key, rule, table, guard_targets, control, order)
    broken = [c for c in checks if c.stops]
    rule_met = all(c is not None and c.verdict in ("adopt", "inconclusive") for *_, c in dec)
    gated = [c for *_, c in dec if c is not None and c.verdict == "inconclusive"]
    design = rule.prereg.sequential
    planned = rule.prereg.pairs if design is None else design.min_pairs
    short = [(w, lvl, c) for w, lvl, c in dec
             if c is None or c.stats is None or c.stats.n < planned]
    reasons = [f"{w} {lvl}: {c.reasons[0] if c is not None else 'no data'}" for w, lvl, c in dec]
    decision: Decision = "keep-default"
    reason: Reason
    settle = ""
    if rule_met and not gated and not broken:
        decision, reason = "adopt", "rule-met"
        reasons = [f"every decision cell adopts ({len(dec)}) and "
                   + _guardrails_pass(checks), *reasons]
    elif short:
        reason = "inconclusive"
        missing = max(planned - (0 if c is None or c.stats is None else c.stats.n)
                      for _, _, c in short)
        invalid = any(c is not None and c.left_out for _, _, c in short)
        # a new run (an arm that never booted) has nothing invalid to redo
        redo = invalid and "--resume" in resume_command
        cmd = resume_command + (" --redo-invalid" if redo else "")
        settle = f"{missing} more complete pair(s): {cmd}"
        reasons.insert(0, "inconclusive: decision cell(s) "
                       + ", ".join(f"{w} {lvl}" for w, lvl, _ in short)
                       + f" have fewer complete pairs than the {planned} "
                       f"pre-registered; to settle it: {settle}")
    elif any(c is not None and c.verdict == "loss" for *_, c in dec):
        reason = "loss"
    elif rule_met and broken:
        shown_worse = [c for c in broken if c.state != "unclear"]
        reason = "guardrail" if shown_worse else "guardrail-unresolved"
        reasons.insert(0, _guardrail_headline(shown_worse or broken))
    elif rule_met and gated:
        reason = "inconclusive"
        flags = {f for c in gated for f in c.flags}
        settle = _settle_gates(gated, flags, rule)
        reasons.insert(0, f"inconclusive: the rule is met on the pairs measured, but "
                       f"{', '.join(sorted(flags & GATING_FLAGS))}; to settle it: {settle}")
    else:
        reason = "below-bar"
    if broken:
        reasons.append("guardrail(s) stopping adoption: " + ", ".join(
            f"{c.metric} at {c.workload} {c.level} {c.state}" for c in broken)
            + " — each in full under guardrails")
    drifted = [c for c in cells if c.decision_cell and "window-drift" in c.flags]
    if drifted and reason != "inconclusive":
        reasons.append(
            "the window was not stable: the control moved beyond its limit at "
            + ", ".join(f"{c.where} ({pct(c.control_trend)})" for c in drifted))
    gains = [c.stats.mean for *_, c in dec
             if c is not None and c.stats is not None and c.kind == "ratio"]
    score = math.expm1(math.fsum(gains) / len(gains)) if gains else None
    return CandidateVerdict(arm, decision, tuple(reasons), tuple(cells), tuple(checks),
                            not drifted, score, reason, settle)


def _guardrail_headline(stopping: Sequence[GuardrailCheck]) -> str:
    """The first line when guardrails stop a met rule: each named with its estimate, the
    bound that decided and what would resolve it ("keep-default: ttft_p99 at
    agentfix prose not shown within +5.0%: +12.0%, upper bound +179.4%; would resolve with
    9 pairs (now 2)"). The bound that decided: for `holds` the far end (the upper end of a
    lower-is-better metric's change, the lower end of a higher-is-better one), for
    `broken` the near end."""
    def one(c: GuardrailCheck) -> str:
        where = f"{c.metric} at {c.workload} {c.level}"
        kind: Kind = "ratio" if c.kind == "ratio" else "absolute"
        limit = fmt_gain(c.limit, kind) if c.limit is not None else "its limit"
        if c.state == "missing":
            return f"{where} missing ({c.evidence})"
        change = "—" if c.change is None else fmt_gain(c.change, kind)
        lower = c.direction == "lower"
        if c.state == "broken":
            end = "" if c.ci is None else (
                f", lower bound {fmt_gain(c.ci[0], kind)}" if lower
                else f", upper bound {fmt_gain(c.ci[1], kind)}")
            return f"{where} shown worse than {limit}: {change}{end}"
        end = "" if c.ci is None else (
            f", upper bound {fmt_gain(c.ci[1], kind)}" if lower
            else f", lower bound {fmt_gain(c.ci[0], kind)}")
        return (f"{where} not shown within {limit}: {change}{end}"
                + (f"; {c.resolve}" if c.resolve else ""))

    shown = [one(c) for c in stopping[:HEADLINE_CHECKS]]
    if len(stopping) > HEADLINE_CHECKS:
        shown.append(f"and {len(stopping) - HEADLINE_CHECKS} more (each under Guardrails)")
    return "keep-default: " + "; ".join(shown)


HEADLINE_CHECKS = 2
"""Stopping guardrails the headline names in full (the rest are counted)."""


def _guardrails_pass(checks: Sequence[GuardrailCheck]) -> str:
    """"every guardrail holds (3)", and the deterioration checks at other cells apart."""
    own = [c for c in checks if c.role == "guardrail"]
    others = [c for c in checks if c.role != "guardrail"]
    text = f"every guardrail holds ({len(own)})"
    if others:
        text += (f"; {len(others)} deterioration check(s) at other cells, none shown "
                 "beyond its limit")
    return text


def guardrail_checks(arm: str, by_key: Mapping[tuple[str, str, str], Cell], rule: Rule,
                     table: RunTable, guard_targets: Mapping[int, Sequence[tuple[str, str]]],
                     control: str, order: Sequence[str] = ()) -> list[GuardrailCheck]:
    """Every registered guardrail at each of its cells, and each relative one's
    deterioration checks at every other measured cell of its metric, for one candidate.

    A worsening is called shown beyond a limit at α ÷ k (k: every check, both kinds:
    Bonferroni); a guardrail is shown within its limit at α (no split: each must be shown).
    A relative metric's noise beyond sampling is pooled over every measured cell of it
    (`guardrails.pooled_noise`). A failed pass of the candidate counts on failure metrics
    (pair → (control, candidate))."""
    guards = rule.prereg.guardrails
    places: list[tuple[int, Guardrail, tuple[str, str], Role]] = [
        (i, g, where, "guardrail") for i, g in enumerate(guards)
        for where in guard_targets[i] or [(g.workload, g.level)]]
    taken = {(*where, g.metric) for i, g, where, _ in places}
    places += [(i, g, where, "deterioration") for i, g in enumerate(guards)
               for where in deterioration_cells(g, table, taken, order)]
    taken |= {(*where, g.metric) for i, g, where, _ in places}
    # a sequential design judges every guardrail at each of its looks: α is shared over
    # them too (Bonferroni), so repeated looks never raise the false-break rate
    looks = 1 if rule.prereg.sequential is None else rule.prereg.sequential.max_looks
    family = Family(rule.alpha / looks, len(places), rule.alpha / looks,
                    rule.alpha if looks > 1 else None)
    inputs = {(i, where): _inputs(i, g, where, rule, by_key, table, control, arm, role)
              for i, g, where, role in places}
    pooled = _pooled(rule, inputs, places)
    return [check_guardrail(g, where, replace(inputs[(i, where)], extra=pooled.get(i)),
                            family) for i, g, where, _ in places]


def _inputs(i: int, g: Guardrail, where: tuple[str, str], rule: Rule,
            by_key: Mapping[tuple[str, str, str], Cell], table: RunTable, control: str,
            arm: str, role: Role) -> Inputs:
    data = table.cells.get((*where, g.metric))
    failed = {}
    if data is not None:
        for p, arms_ in data.failed.items():
            ctrl = data.values.get(p, {}).get(control)
            if arm in arms_ and ctrl is not None:
                failed[p] = (ctrl.value, arms_[arm])
    registered = rule.guardrail_registered_band(i)
    _, source = prior_extra(g.metric, registered, rule.guardrail_band_source(i))
    return Inputs(by_key.get((*where, g.metric)), data, requests_of(table, where), failed,
                  rule.guardrail_band(i), source, control=control, arm=arm, role=role)


def _pooled(rule: Rule, inputs: Mapping[tuple[int, tuple[str, str]], Inputs],
            places: Sequence[tuple[int, Guardrail, tuple[str, str], Role]]
            ) -> dict[int, gs.Pooled]:
    """Each relative guardrail's noise beyond sampling, pooled over every measured cell of
    its metric (its own and its deterioration cells) and its prior."""
    out: dict[int, gs.Pooled] = {}
    for i, g in enumerate(rule.prereg.guardrails):
        if not relative(g):
            continue
        cells = [(_pairs(inp.cell), inp) for (j, where), inp in inputs.items()
                 if j == i and inp.cell is not None and inp.cell.kind == "ratio"]
        prior, _ = prior_extra(g.metric, rule.guardrail_registered_band(i), "")
        out[i] = pooled_noise(g.metric, cells, rule.direction_of(g.metric), prior)
    return out


def _pairs(cell: Cell) -> list[tuple[int, float, float]]:
    return [(pg.pair, pg.control, pg.candidate) for pg in cell.pairs]


def _settle_gates(gated: Sequence[Cell], flags: set[str], rule: Rule) -> str:
    """What would settle a decision whose rule is met but gated."""
    fixes = []
    if "small-sample" in flags:
        fixes.append(f"larger passes (at least {rule.prereg.gates.min_output_tokens} "
                     f"output tokens and {rule.prereg.gates.min_completed_requests} "
                     "requests per cell)")
    if "one-pair" in flags:
        fixes.append("a second pair (register `pairs: 2` or more)")
    if "window-drift" in flags:
        moved = ", ".join(f"{c.where} {pct(c.control_trend)}" for c in gated
                          if "window-drift" in c.flags)
        fixes.append(f"a re-run in a stable window (the control moved {moved})")
    if "lanes-disagree" in flags:
        fixes.append("find what differs between the lanes (the change depends on the "
                     "lane: see the report's lanes), then decide per lane or re-run "
                     "on lanes that are alike")
    return "; ".join(fixes)


def best_by_level(candidates: Sequence[CandidateVerdict],
                   decisions: Sequence[tuple[str, str]], rule: Rule) -> list[LevelBest]:
    out = []
    for w, lvl in decisions:
        scored = [(c.stats.mean, cv.arm, c.change) for cv in candidates for c in cv.cells
                  if c.key == (w, lvl, rule.metric) and c.stats is not None]
        if scored:
            _, arm, change = max(scored)
            out.append(LevelBest(w, lvl, arm, change))
    return out


@dataclass(frozen=True)
class RunDecision:
    """The run's decision from its candidates' verdicts: the ranking, the adopted arm, the
    run's reasons and the top-ranked candidate (whose reason and settle the run takes)."""

    ranking: tuple[Ranked, ...]
    adopt_arm: str | None
    reasons: tuple[str, ...]
    top: CandidateVerdict


def run_decision(out: Sequence[CandidateVerdict]) -> RunDecision:
    ranking = rank(out)
    adopting = [r for r in ranking if r.decision == "adopt"]
    adopt_arm = adopting[0].arm if adopting else None
    top = next(cv for cv in out if cv.arm == ranking[0].arm)
    if len(out) == 1:
        reasons = out[0].reasons
    else:
        reasons = tuple(f"{cv.arm}: {cv.decision} ({cv.reason}) — {r}"
                        for cv in out for r in cv.reasons)
        if adopt_arm:
            reasons = (f"adopt {adopt_arm}: best-ranked candidate that adopts", *reasons)
    return RunDecision(tuple(ranking), adopt_arm, reasons, top)


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
