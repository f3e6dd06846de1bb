"""A candidate's decision from its judged cells, and the ranking of several candidates.

`decide_candidate` turns the cells of one candidate (see `verdict.judge_cell`) and its
guardrail checks into adopt / keep-default with one reason category:

- `rule-met`: every decision cell adopts and no guardrail stops it (the only adopt);
- `inconclusive`: a decision cell is short of its pre-registered pairs or has none (first,
  whatever else holds: the campaign is not finished), or the rule is met on the pairs
  measured but a gate stops it (one pair, small sample, unstable window); `settle` says
  what would settle it;
- `loss`: a decision cell is a loss;
- `guardrail`: the rule is met but a guardrail stops it (broken, missing, or unclear where
  its registration says unclear stops);
- `below-bar`: anything else (below the bar, within drift, mixed, unclear).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from campaign.fmt import pct
from campaign.verdict.guardrails import Family, Inputs, check_guardrail, requests_of
from campaign.verdict.outcome import (
    GATING_FLAGS,
    CandidateVerdict,
    Cell,
    GuardrailCheck,
    LevelBest,
    Ranked,
)
from campaign.verdict.rule import Decision, Reason, Rule
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
) -> CandidateVerdict:
    by_key = {c.key: c for c in cells}
    dec = [(w, lvl, by_key.get((w, lvl, rule.metric))) for w, lvl in decisions]
    checks = guardrail_checks(arm, by_key, rule, table, guard_targets, control)
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
        reason = "guardrail"
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


def _guardrails_pass(checks: Sequence[GuardrailCheck]) -> str:
    """"every guardrail holds (4)", or what holds and what is unclear without stopping."""
    held = sum(c.state == "holds" for c in checks)
    if held == len(checks):
        return f"every guardrail holds ({len(checks)})"
    return (f"no guardrail stops it ({held} hold, {len(checks) - held} unclear, which does "
            "not stop adoption)")


def guardrail_checks(arm: str, by_key: Mapping[tuple[str, str, str], Cell], rule: Rule,
                     table: RunTable, guard_targets: Mapping[int, Sequence[tuple[str, str]]],
                     control: str) -> list[GuardrailCheck]:
    """Every registered guardrail at each of its cells, for one candidate, family-wise over
    all of them (α ÷ the number of checks); a failed pass of the candidate counts on failure
    metrics (pair → (control, candidate))."""
    places = [(i, g, where) for i, g in enumerate(rule.prereg.guardrails)
              for where in guard_targets[i] or [(g.workload, g.level)]]
    # a sequential design judges every guardrail at each of its looks: α is shared over
    # them too (Bonferroni), so repeated looks never raise the false-break rate
    looks = 1 if rule.prereg.sequential is None else rule.prereg.sequential.max_looks
    family = Family(rule.alpha / looks, len(places))
    checks: list[GuardrailCheck] = []
    for i, g, where in places:
        data = table.cells.get((*where, g.metric))
        failed = {}
        if data is not None:
            for p, arms_ in data.failed.items():
                ctrl = data.values.get(p, {}).get(control)
                if arm in arms_ and ctrl is not None:
                    failed[p] = (ctrl.value, arms_[arm])
        inputs = Inputs(by_key.get((*where, g.metric)), data, requests_of(table, where), failed,
                        rule.guardrail_band(i), rule.guardrail_band_source(i), control, arm)
        checks.append(check_guardrail(g, where, inputs, family))
    return checks


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
