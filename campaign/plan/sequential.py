"""Plan figures of a sequential design (`preregistration.sequential`): over true effects
0, m/2, m, 1.5m and 2m, P(adopt), P(keep-default), P(inconclusive) and the pairs spent
(mean, 90th percentile) of the design with its guardrails, beside the rule alone and the
fixed design that meets the same targets, each relative guardrail's rates in the design,
and the max_pairs that meets the registered targets.

Each campaign is a sequence of pair log ratios N(ln(1 + effect), σ²) under the plan's pair
noise σ, looked at on the design's schedule with the verdict's own boundaries
(`verdict.boundaries.bounds` of the looks so far, as `judge_run` computes them). Its
relative guardrails are drawn on their own noise as the fixed plan draws them
(`plan.guards`: the guardrail's assumed or measured pass-to-pass noise, the sampling error
of its requests, its cells and deterioration cells) and judged at each look on the pairs so
far at the verdict's levels for a design (α ÷ looks to show one within its limit, α ÷
(checks × looks) to call it broken). A look adopts only when the rule has crossed and every
guardrail is shown within its limit; a loss, a broken guardrail, the futility boundary or a
guardrail shown beyond its limit at the campaign's one-sided α keeps the default;
a guardrail not yet shown keeps the night going to max_pairs, where the design ends
inconclusive (`verdict.sequential.state_at`). Absolute and fidelity guardrails hold (as in
the fixed plan). The rule alone is kept beside each row (`SeqRow.rule_only`).

`cross_check` and `cross_check_guarded` re-judge a sample through `verdict.judge_run` itself
(the guarded one with every guardrail in its cells) and count disagreements: where a
sequence stops, what it decides and whether the guardrails are why it does not adopt. A
design of more than `EXACT_LOOKS` looks (up to 63, at max_pairs 64) would take minutes that
way: its figures use the boundaries of the whole schedule, simulated once, marked
approximate (`SeqPlan.exact`), and only sequences decided within `EXACT_LOOKS` looks are
re-judged. Invalid passes and the window-drift gate are not in these figures (the
fixed-design table of `plan` has them), and they are of one decision cell (several must
all cross: less power, the same false adopt).

The sequential design is one concept at five stages; here it is planned. It is also
registered (`campaign.campaignfile.sequential`), followed by the runner
(`campaign.run.sequential`), judged (`campaign.verdict.sequential`), reported
(`campaign.report.sequential`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

from campaign.campaignfile import DecisionCell
from campaign.campaignfile.sequential import Sequential
from campaign.plan.exact import exact_judge
from campaign.plan.guards import (
    BROKEN,
    HOLDS,
    GuardDraws,
    GuardModel,
    first_pairs,
    look_states,
    simulate_guards,
)
from campaign.plan.kernel import GUARDRAIL_VIOLATION, Rate, RuleSpec, rate_of
from campaign.verdict import boundaries as sq
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import stats as st
from campaign.verdict import tidy as td

EFFECTS = (("0", 0.0), ("m/2", 0.5), ("m", 1.0), ("1.5m", 1.5), ("2m", 2.0))
"""True effects as multiples of the margin."""


@dataclass(frozen=True)
class SeqRow:
    label: str
    effect: float
    adopt: float
    keep_default: float
    inconclusive: float
    expected_pairs: float
    p90_pairs: int
    fixed_adopt: float
    """P(adopt) of the fixed design with `fixed_pairs` pairs at this effect."""
    rule_only: SeqRow | None = None
    """The same sequences judged by the rule alone (None: this row is the rule alone)."""
    guardrail_stops: float = 0.0
    """P(the guardrails are why it does not adopt: reason `guardrail` or
    `guardrail-unresolved`)."""


@dataclass(frozen=True)
class SeqGuardRow:
    """One relative guardrail in the design, at its registered max_pairs, family-wise over
    its cells and the design's looks (the candidate truly at 1.5m)."""

    model: GuardModel
    break_at_0: Rate
    """Shown beyond its limit at a look the design takes, its metric truly unchanged."""
    stops_at_0: Rate
    """Among the guardrails the verdict names as why it does not adopt (reason
    `guardrail` or `guardrail-unresolved`), its metric truly unchanged."""
    passes_at_2x: Rate
    """P(adopt) with its metric truly 2× its limit worse (the others unchanged)."""
    alpha_each: float
    """The worse-side bound's one-sided level: α ÷ (checks × looks)."""
    alpha_shown: float
    """The level that shows it within its limit: α ÷ looks."""


@dataclass(frozen=True)
class SeqPlan:
    max_pairs: int
    sigma: float
    sims: int
    rows: tuple[SeqRow, ...]
    fixed_pairs: int | None
    """Pairs of the fixed `bound` design meeting ≤ α at m/2 and ≥ power at 1.5m (None: none
    up to 32)."""
    recommended_max_pairs: int | None
    """The smallest max_pairs meeting the targets, with the guardrails when modelled."""
    checked: int
    disagree: int
    """Re-judged sequences that disagree with `judge_run`, rule alone and guarded."""
    exact: bool = True
    """The judge's own boundaries (of the looks so far) at each look; False: those of the
    whole schedule (more than `EXACT_LOOKS` looks), equal up to their Monte Carlo error."""
    looks: int = 0
    power: float = 0.90
    """The design's target: P(adopt) at 1.5m at least this (`sequential.power`)."""
    alpha: float = 0.05
    """The design's target: P(adopt) at m/2 at most this (the rule's α)."""
    guardrails: tuple[SeqGuardRow, ...] = ()
    """Each relative guardrail in the design (empty: the rows are the rule alone)."""
    recommended_rule_only: int | None = None
    guard_checked: int = 0
    """Guarded sequences re-judged by `judge_run` (each look, guardrails in their cells)."""

    @property
    def guarded(self) -> bool:
        return bool(self.guardrails)


EXACT_LOOKS = 16
"""A design of up to this many looks is planned with the judge's own boundaries: at each
look those of the looks taken so far, each a simulation of its own (`sq.bounds`), as
`judge_run` computes them. A design of more looks (up to 63, at max_pairs 64) would take
minutes that way (the simulations grow with the square of the looks): its figures use the
boundaries of the whole schedule, simulated once, and say so (`SeqPlan.exact`)."""
SEARCH_MAX = 24
"""The largest max_pairs the recommendation tries."""
SEARCH_SIMULATIONS = 50_000
"""Pivotal sequences behind each boundary the recommendation's search uses (a quarter of
the judge's: the search ranks max_pairs on 2,000 sequences, whose own error is larger)."""


def schedule_of(design: Sequential, max_pairs: int) -> tuple[int, ...]:
    """The looks of `design` registered with `max_pairs` pairs (what it would look at)."""
    return design.model_copy(update={"max_pairs": max_pairs}).schedule()


@dataclass(frozen=True)
class Ends:
    """Where each simulated sequence ends."""

    end: np.ndarray
    """[sim]: 1 adopt, −1 keep-default, 0 inconclusive."""
    spent: np.ndarray
    """[sim]: pairs at the deciding look (max_pairs when none decides)."""
    guard: np.ndarray
    """[sim]: the guardrails are why it does not adopt (the verdict's reason `guardrail`
    or `guardrail-unresolved`)."""
    stops: np.ndarray
    """[sim, guardrail model]: named among them at the deciding look."""
    broke: np.ndarray
    """[sim, guardrail model]: broken at the deciding look (a broken one stops the
    design, so: at some look taken)."""


def _guard_look(gd: GuardDraws | None, p: int, sims: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each guardrail model at a look of `p` pairs, [sim, model]: broken at some cell (own
    or deterioration), not shown within its limit at an own cell, and not shown within but
    shown beyond it at the campaign's one-sided α (`look_states`)."""
    if gd is None or not gd.models:
        none = np.zeros((sims, 0), dtype=bool)
        return none, none, none
    look = first_pairs(gd, p)
    broken, unshown, hopeless = [], [], []
    for i, m in enumerate(gd.models):
        states, beyond = look_states(look, i)
        s, b = states[..., 0], beyond[..., 0]
        own = len(m.cells)
        broken.append(np.any(s == BROKEN, axis=1))
        unshown.append(np.any(s[:, :own] != HOLDS, axis=1))
        hopeless.append(np.any((s[:, :own] != HOLDS) & b[:, :own], axis=1))
    return np.stack(broken, 1), np.stack(unshown, 1), np.stack(hopeless, 1)


def _outcomes(rule: rl.Rule, max_pairs: int, d: np.ndarray, *, exact: bool = True,
              simulations: int | None = None, gd: GuardDraws | None = None) -> Ends:
    """Each sequence's end, its pairs spent and, with guardrail draws `gd` (their levels
    those of this design's looks), what the guardrails did: a look adopts when the rule
    crossed and every guardrail is shown within its limit; it keeps the default on a loss,
    a broken guardrail, the futility boundary or a guardrail shown beyond its limit at the
    campaign's one-sided α; else it goes on (`verdict.sequential.state_at`).

    `exact`: at each look the boundaries of the looks so far, as the judge simulates them;
    else those of the whole schedule, simulated once (the same boundaries up to their
    Monte Carlo error, which is large at a look that spends almost no α: seconds instead
    of minutes for a design of many looks)."""
    design = rule.prereg.sequential
    assert design is not None
    margin, floor = rule.bar_d(1), rule.floor_d()
    powered = rl.better_d(1.5 * rule.prereg.margin, rule.direction)
    worse = rl.worse_d(rule.band, rule.direction)
    alpha, beta = rule.ci_alpha(1), 1 - design.power
    schedule = schedule_of(design, max_pairs)
    sims = () if simulations is None else (simulations,)
    adopt_at: tuple[float, ...] = () if exact else sq.bounds(schedule, max_pairs, alpha, *sims)
    futile_at: tuple[float, ...] = () if exact else sq.bounds(schedule, max_pairs, beta, *sims)
    n_sims = d.shape[0]
    models = len(gd.models) if gd is not None else 0
    end = np.zeros(n_sims, dtype=int)
    spent = np.full(n_sims, max_pairs)
    guard = np.zeros(n_sims, dtype=bool)
    stops = np.zeros((n_sims, models), dtype=bool)
    broke = np.zeros((n_sims, models), dtype=bool)
    alive = np.ones(n_sims, dtype=bool)
    for j, p in enumerate(schedule):
        if not alive.any():
            break
        if exact:
            c = sq.bounds(schedule[:j + 1], max_pairs, alpha, *sims)[-1]
            f = sq.bounds(schedule[:j + 1], max_pairs, beta, *sims)[-1]
        else:
            c, f = adopt_at[j], futile_at[j]
        x = d[:, :p]
        mean, sd = x.mean(axis=1), x.std(axis=1, ddof=1)
        root = math.sqrt(p)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_adopt = root * (mean - floor) / sd
            t_futile = root * (mean - powered) / sd
        crossed = (t_adopt >= c) & (mean >= margin - 1e-12)
        futile = ~crossed & (-t_futile >= f)
        ucb = mean + st.t_critical(1 - rule.alpha, p - 1) * sd / root
        loss = ~crossed & (mean <= worse + rl.EPS) & (ucb <= rl.EPS)
        broken, unshown, hopeless = _guard_look(gd, p, n_sims)
        any_broken, any_unshown = broken.any(axis=1), unshown.any(axis=1)
        adopt = alive & crossed & ~any_unshown & ~any_broken
        keep = alive & ~adopt & (loss | any_broken | futile | hopeless.any(axis=1))
        # the verdict's reason: `guardrail` (broken), else `guardrail-unresolved` (shown
        # beyond where it would be shown within), after a loss and the rule's futility
        by_break = keep & ~loss & any_broken
        by_hope = keep & ~loss & ~any_broken & ~futile
        stopping = adopt | keep
        if j == len(schedule) - 1:
            # max_pairs: the rule crossed and a guardrail is still not shown within
            by_open = alive & ~stopping & crossed & any_unshown
            stops[by_open] = unshown[by_open]
            guard |= by_open
            broke[alive] = broken[alive]
        end[adopt], end[keep] = 1, -1
        spent[stopping] = p
        stops[by_break] = broken[by_break]
        stops[by_hope] = hopeless[by_hope]
        guard |= by_break | by_hope
        broke[stopping] = broken[stopping]
        alive &= ~stopping
    return Ends(end, spent, guard, stops, broke)


def _fixed_adopt(rule: rl.Rule, n: int, d: np.ndarray) -> float:
    """P(adopt) of the fixed `bound` rule on the first n pairs."""
    x = d[:, :n]
    lcb = x.mean(axis=1) - sps.t.ppf(1 - rule.alpha, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean((x.mean(axis=1) >= rule.bar_d(1) - 1e-12) & (lcb >= rule.floor_d())))


def _levels(rule: rl.Rule, gd: GuardDraws, max_pairs: int, sims: int | None = None
            ) -> GuardDraws:
    """`gd` at the levels the verdict judges a design of `max_pairs` with: α ÷ looks to
    show each guardrail within, α ÷ (checks × looks) to call it broken
    (`decide.guardrail_checks`); its first `sims` sequences."""
    design = rule.prereg.sequential
    assert design is not None
    looks = len(schedule_of(design, max_pairs))
    cut = slice(None) if sims is None else slice(0, sims)
    return replace(gd, alpha=rule.alpha / looks, shown=rule.alpha / looks,
                   futile=rule.alpha if looks > 1 else None,
                   x=tuple(v[cut] for v in gd.x), y=tuple(v[cut] for v in gd.y))


def _row(label: str, effect: float, ends: Ends, fixed: float,
         rule_only: SeqRow | None = None) -> SeqRow:
    return SeqRow(label, effect, float(np.mean(ends.end == 1)), float(np.mean(ends.end == -1)),
                  float(np.mean(ends.end == 0)), float(ends.spent.mean()),
                  int(np.percentile(ends.spent, 90)), fixed, rule_only,
                  float(np.mean(ends.guard)))


def _meets(rule: rl.Rule, mp: int, hi: np.ndarray, lo: np.ndarray,
           gd: GuardDraws | None) -> bool:
    """Whether a design registered with `mp` pairs meets the targets on these sequences
    (the whole schedule's boundaries), with the guardrails `gd` when given."""
    design = rule.prereg.sequential
    assert design is not None

    def p_adopt(d: np.ndarray, g: GuardDraws | None) -> float:
        return float(np.mean(_outcomes(rule, mp, d, exact=False, gd=g,
                                       simulations=SEARCH_SIMULATIONS).end == 1))

    if p_adopt(hi, None) < design.power or (gd is None and p_adopt(lo, None) > rule.alpha):
        return False  # the guardrails only take adoptions away
    if gd is None:
        return True
    g = _levels(rule, gd, mp, hi.shape[0])
    return (p_adopt(hi, g) >= design.power
            and (p_adopt(lo, None) <= rule.alpha or p_adopt(lo, g) <= rule.alpha))


def _recommend(rule: rl.Rule, hi: np.ndarray, lo: np.ndarray, gd: GuardDraws | None
               ) -> int | None:
    """The smallest max_pairs (3 to `SEARCH_MAX`; a block design's on a whole block) that
    meets the targets."""
    design = rule.prereg.sequential
    assert design is not None
    for mp in range(max(3, design.min_pairs), SEARCH_MAX + 1):
        if mp % design.step == 0 and _meets(rule, mp, hi, lo, gd):
            return mp
    return None


def plan_sequential(rule: rl.Rule, sigma: float, *, sims: int = 4000, seed: int = 0,
                    check: int = 40, guards: RuleSpec | None = None) -> SeqPlan:
    """The design's figures on pair noise `sigma`; with `guards` (the campaign's spec with
    its relative guardrails' models, `plan.guards`) each row is the design with its
    guardrails at no true change, beside the rule alone, and each guardrail has its rates
    in the design."""
    design = rule.prereg.sequential
    if design is None:
        raise ValueError("not a sequential design")
    m, n_max = rule.prereg.margin, max(design.max_pairs, 32)
    exact = design.max_looks <= EXACT_LOOKS
    rng = np.random.default_rng(seed)
    draws = {label: math.log1p(k * m) + sigma * rng.standard_normal((sims, n_max))
             for label, k in EFFECTS}
    fixed = next((n for n in range(2, 33)
                  if _fixed_adopt(rule, n, draws["m/2"]) <= rule.alpha
                  and _fixed_adopt(rule, n, draws["1.5m"]) >= design.power), None)
    models = tuple(guards.guard_models) if guards is not None else ()
    gd0 = None
    if guards is not None and models:
        gd0 = _levels(rule, simulate_guards(
            models, [0.0] * len(models), pairs=max(design.max_pairs, SEARCH_MAX),
            candidates=1, sims=sims, checks=guards.guard_checks, alpha=rule.alpha,
            rng=np.random.default_rng([seed, GUARD_STREAM])), design.max_pairs)
    rows, ends_at = [], {}
    for label, k in EFFECTS:
        f = _fixed_adopt(rule, fixed, draws[label]) if fixed else math.nan
        alone = _row(label, k * m, _outcomes(rule, design.max_pairs, draws[label],
                                             exact=exact), f)
        if gd0 is None:
            rows.append(alone)
            continue
        ends_at[label] = _outcomes(rule, design.max_pairs, draws[label], exact=exact, gd=gd0)
        rows.append(_row(label, k * m, ends_at[label], f, alone))
    few = min(sims, 2000)  # the search reuses the first sequences: enough to rank max_pairs
    hi, lo = draws["1.5m"][:few], draws["m/2"][:few]
    rec_alone = _recommend(rule, hi, lo, None)
    recommended = rec_alone if gd0 is None else _recommend(rule, hi, lo, gd0)
    grows, worse = _guard_rows(rule, guards, gd0, ends_at.get("1.5m"), draws["1.5m"], exact,
                               seed)
    checked, disagree = cross_check(rule, draws["1.5m"][:check // 2], draws["0"][:check // 2])
    g_checked = g_disagree = 0
    if guards is not None and gd0 is not None:
        g_checked, g_disagree = cross_check_guarded(
            rule, guards, gd0, (draws["1.5m"], 0, check // 2), (draws["0"], 0, check // 2))
        for at2 in worse:  # where the guardrails break and are shown beyond their limit
            c2, d2 = cross_check_guarded(rule, guards, at2, (draws["1.5m"], 0, check // 4))
            g_checked, g_disagree = g_checked + c2, g_disagree + d2
    return SeqPlan(design.max_pairs, sigma, sims, tuple(rows), fixed, recommended, checked,
                   disagree + g_disagree, exact, design.max_looks, design.power, rule.alpha,
                   tuple(grows), rec_alone, g_checked)


GUARD_STREAM = 77
"""Random stream of the guardrails' draws: (seed, GUARD_STREAM[, model])."""


def _guard_rows(rule: rl.Rule, spec: RuleSpec | None, gd0: GuardDraws | None,
                at_hi: Ends | None, hi: np.ndarray, exact: bool, seed: int
                ) -> tuple[list[SeqGuardRow], list[GuardDraws]]:
    """Each guardrail's rates in the design: at no change (the 1.5m row's own sequences)
    and with its metric truly 2× its limit worse; and the draws of the latter."""
    design = rule.prereg.sequential
    if spec is None or gd0 is None or at_hi is None or design is None:
        return [], []
    out, draws = [], []
    models = gd0.models
    for j, mod in enumerate(models):
        worse = [GUARDRAIL_VIOLATION * mod.guardrail.max_worsening if jj == j else 0.0
                 for jj in range(len(models))]
        at2 = _levels(rule, simulate_guards(
            models, worse, pairs=design.max_pairs, candidates=1, sims=hi.shape[0],
            checks=gd0.checks, alpha=rule.alpha,
            rng=np.random.default_rng([seed, GUARD_STREAM, j + 1])), design.max_pairs)
        passes = _outcomes(rule, design.max_pairs, hi, exact=exact, gd=at2).end == 1
        out.append(SeqGuardRow(mod, rate_of(at_hi.broke[:, j]), rate_of(at_hi.stops[:, j]),
                               rate_of(passes), gd0.each, gd0.shown))
        draws.append(at2)
    return out, draws


def cross_check(rule: rl.Rule, *samples: np.ndarray) -> tuple[int, int]:
    """Re-judge simulated sequences through `verdict.judge_run`: (judged, disagreeing)."""
    design = rule.prereg.sequential
    assert design is not None
    # the figures are of one decision cell: judged as the campaign's only one
    one = rl.Rule(prereg=rule.prereg.model_copy(update={"decision_cells": [
        DecisionCell(workload="knee", level="c1")]}), band=rule.band)
    schedule = design.schedule()
    last = schedule[min(len(schedule), EXACT_LOOKS) - 1]
    exact = len(schedule) <= EXACT_LOOKS
    checked = disagree = 0
    for d in samples:
        ends = _outcomes(rule, design.max_pairs, d, exact=exact)
        end, spent = ends.end, ends.spent
        for i in range(d.shape[0]):
            if spent[i] > last:
                continue  # decided late (or never): the judge would take minutes
            # the pairs up to the plan's stop: a judge that goes on disagrees at once
            v = vd.judge_run(_table(d[i, :int(spent[i])], rule.metric, rule.direction), one,
                             ["control", "candidate"], metrics=[])
            path = v.candidates[0].sequential
            mine = {"adopt": 1, "keep-default": -1}.get(path.state if path else "", 0)
            at = path.stopped_at if path and path.stopped_at else design.max_pairs
            checked += 1
            disagree += int(mine != int(end[i]) or at != int(spent[i]))
    return checked, disagree


def cross_check_guarded(rule: rl.Rule, spec: RuleSpec, gd: GuardDraws,
                        *samples: tuple[np.ndarray, int, int]) -> tuple[int, int]:
    """Re-judge simulated sequences with their guardrails through `verdict.judge_run`:
    each (d, first, count) sample's sequences first … first + count − 1, the pairs up to
    the plan's stop in the decision cell, every registered guardrail in its cells (the
    relative ones with their draws and `log_se`, `exact._guard_cells`), judged at every
    look under the rule with its guardrails and its design. A disagreement is where it
    stops, what it decides, or whether the guardrails are why it does not adopt.
    Returns (judged, disagreeing)."""
    design = rule.prereg.sequential
    assert design is not None
    cell = spec.cells[0]
    prereg = spec.prereg.model_copy(update={
        "sequential": design, "pairs": design.max_pairs,
        "decision_cells": [DecisionCell(workload=cell[0], level=cell[1])]})
    one = replace(spec.at(candidates=1), rule=replace(spec.rule, prereg=prereg), cells=(cell,))
    schedule = design.schedule()
    last = schedule[min(len(schedule), EXACT_LOOKS) - 1]
    exact = len(schedule) <= EXACT_LOOKS
    slots = np.array([[2 * k for k in range(design.max_pairs)],
                      [2 * k + 1 for k in range(design.max_pairs)]])
    checked = disagree = 0
    for d, first, count in samples:
        pick = slice(first, first + count)
        part = replace(gd, x=tuple(v[pick] for v in gd.x), y=tuple(v[pick] for v in gd.y))
        ends = _outcomes(rule, design.max_pairs, d[pick], exact=exact, gd=part)
        for i in range(ends.end.shape[0]):
            n = int(ends.spent[i])
            if n > last:
                continue  # decided late (or never): the judge would take minutes
            v = exact_judge(one, np.zeros((n, 1)), d[first + i, :n, None, None],
                            slots=slots[:, :n], guard=(first_pairs(part, n), i))
            cv = v.candidates[0]
            path = cv.sequential
            mine = {"adopt": 1, "keep-default": -1}.get(path.state if path else "", 0)
            at = path.stopped_at if path and path.stopped_at else design.max_pairs
            why = cv.reason in ("guardrail", "guardrail-unresolved") and mine != 1
            checked += 1
            disagree += int(mine != int(ends.end[i]) or at != n
                            or why != bool(ends.guard[i]))
    return checked, disagree


def _table(d: np.ndarray, metric: str, direction: st.Direction = "higher") -> td.RunTable:
    """One decision cell (knee c1) of the primary `metric` whose pairs are better by d (the
    candidate ÷ the control is exp(d), or exp(−d) for a lower-is-better metric)."""
    rule_cell = ("knee", "c1")
    sign = 1.0 if direction == "higher" else -1.0
    t = td.RunTable(run="plan", pairs=list(range(1, len(d) + 1)))
    t.slots = {k + 1: {"control": 2 * k, "candidate": 2 * k + 1} for k in range(len(d))}
    cell = td.CellData(*rule_cell, metric)
    for k, v in enumerate(d):
        y = 1000.0 * math.exp(sign * float(v))
        cell.values[k + 1] = {"control": td.ArmValue(1000.0, 1000.0, 1000.0, 1),
                              "candidate": td.ArmValue(y, y, y, 1)}
    t.cells[(*rule_cell, metric)] = cell
    return t
