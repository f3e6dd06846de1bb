"""Plan figures of a sequential design (`preregistration.sequential`): over true effects
0, m/2, m, 1.5m and 2m, P(adopt), P(keep-default), P(inconclusive) and the pairs spent
(mean, 90th percentile), beside the fixed design that meets the same targets, and the
max_pairs that meets the registered targets.

Each campaign is a sequence of pair log ratios N(ln(1 + effect), σ²) under the plan's pair
noise σ, looked at on the design's schedule with the verdict's own boundaries
(`verdict.boundaries.bounds` of the looks so far, as `judge_run` computes them);
`cross_check` re-judges a sample through `verdict.judge_run` itself and counts
disagreements. A design of more than `EXACT_LOOKS` looks (up to 63, at max_pairs 64)
would take minutes that way: its figures use the boundaries of the whole schedule,
simulated once, marked approximate (`SeqPlan.exact`), and only sequences decided within
`EXACT_LOOKS` looks are re-judged. Guardrails, gates and
invalid passes are not in these figures (the fixed-design table of `plan` has them), and
they are of one decision cell (several must all cross: less power, the same false adopt).

The sequential design is one concept at five stages; here it is planned. It is also
registered (`campaign.campaignfile.sequential`), followed by the runner
(`campaign.run.sequential`), judged (`campaign.verdict.sequential`), reported
(`campaign.report.sequential`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from campaign.campaignfile import DecisionCell
from campaign.campaignfile.sequential import Sequential
from campaign.verdict import boundaries as sq
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
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
    checked: int
    disagree: int
    exact: bool = True
    """The judge's own boundaries (of the looks so far) at each look; False: those of the
    whole schedule (more than `EXACT_LOOKS` looks), equal up to their Monte Carlo error."""
    looks: int = 0
    power: float = 0.90
    """The design's target: P(adopt) at 1.5m at least this (`sequential.power`)."""
    alpha: float = 0.05
    """The design's target: P(adopt) at m/2 at most this (the rule's α)."""


EXACT_LOOKS = 16
"""A design of up to this many looks is planned with the judge's own boundaries: at each
look those of the looks taken so far, each a simulation of its own (`sq.bounds`), as
`judge_run` computes them. A design of more looks (up to 63, at max_pairs 64) would take
minutes that way (the simulations grow with the square of the looks): its figures use the
boundaries of the whole schedule, simulated once, and say so (`SeqPlan.exact`)."""
def schedule_of(design: Sequential, max_pairs: int) -> tuple[int, ...]:
    """The looks of `design` registered with `max_pairs` pairs (what it would look at)."""
    return design.model_copy(update={"max_pairs": max_pairs}).schedule()


def _outcomes(rule: rl.Rule, max_pairs: int, d: np.ndarray, *, exact: bool = True,
              simulations: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's end (1 adopt, −1 keep-default, 0 inconclusive) and pairs spent.

    `exact`: at each look the boundaries of the looks so far, as the judge simulates them;
    else those of the whole schedule, simulated once (the same boundaries up to their
    Monte Carlo error, which is large at a look that spends almost no α: seconds instead
    of minutes for a design of many looks)."""
    design = rule.prereg.sequential
    assert design is not None
    margin, floor = rule.bar_d(1), rule.floor_d()
    powered = rl.better_d(1.5 * rule.prereg.margin, rule.direction)
    alpha, beta = rule.ci_alpha(1), 1 - design.power
    schedule = schedule_of(design, max_pairs)
    sims = () if simulations is None else (simulations,)
    adopt_at: tuple[float, ...] = () if exact else sq.bounds(schedule, max_pairs, alpha, *sims)
    futile_at: tuple[float, ...] = () if exact else sq.bounds(schedule, max_pairs, beta, *sims)
    end = np.zeros(d.shape[0], dtype=int)
    spent = np.full(d.shape[0], max_pairs)
    alive = np.ones(d.shape[0], dtype=bool)
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
        adopt = alive & (t_adopt >= c) & (mean >= margin - 1e-12)
        futile = alive & ~adopt & (-t_futile >= f)
        end[adopt], end[futile] = 1, -1
        spent[adopt | futile] = p
        alive &= ~(adopt | futile)
    return end, spent


def _fixed_adopt(rule: rl.Rule, n: int, d: np.ndarray) -> float:
    """P(adopt) of the fixed `bound` rule on the first n pairs."""
    x = d[:, :n]
    lcb = x.mean(axis=1) - sps.t.ppf(1 - rule.alpha, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean((x.mean(axis=1) >= rule.bar_d(1) - 1e-12) & (lcb >= rule.floor_d())))


def plan_sequential(rule: rl.Rule, sigma: float, *, sims: int = 4000, seed: int = 0,
                    check: int = 40) -> SeqPlan:
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
    rows = []
    for label, k in EFFECTS:
        end, spent = _outcomes(rule, design.max_pairs, draws[label], exact=exact)
        rows.append(SeqRow(label, k * m, float(np.mean(end == 1)), float(np.mean(end == -1)),
                           float(np.mean(end == 0)), float(spent.mean()),
                           int(np.percentile(spent, 90)),
                           _fixed_adopt(rule, fixed, draws[label]) if fixed else math.nan))
    recommended = None
    few = min(sims, 2000)  # the search reuses the first sequences: enough to rank max_pairs
    # the max_pairs the design could register: a block design's end on a whole block
    for mp in range(max(3, design.min_pairs), 25):
        if mp % design.step:
            continue
        hi = float(np.mean(_outcomes(rule, mp, draws["1.5m"][:few], exact=False)[0] == 1))
        lo = float(np.mean(_outcomes(rule, mp, draws["m/2"][:few], exact=False)[0] == 1))
        if hi >= design.power and lo <= rule.alpha:
            recommended = mp
            break
    checked, disagree = cross_check(rule, draws["1.5m"][:check // 2], draws["0"][:check // 2])
    return SeqPlan(design.max_pairs, sigma, sims, tuple(rows), fixed, recommended, checked,
                   disagree, exact, design.max_looks, design.power, rule.alpha)


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
        end, spent = _outcomes(rule, design.max_pairs, d, exact=exact)
        for i in range(d.shape[0]):
            if spent[i] > last:
                continue  # decided late (or never): the judge would take minutes
            # the pairs up to the plan's stop: a judge that goes on disagrees at once
            v = vd.judge_run(_table(d[i, :int(spent[i])]), one, ["control", "candidate"],
                             metrics=[])
            path = v.candidates[0].sequential
            mine = {"adopt": 1, "keep-default": -1}.get(path.state if path else "", 0)
            at = path.stopped_at if path and path.stopped_at else design.max_pairs
            checked += 1
            disagree += int(mine != int(end[i]) or at != int(spent[i]))
    return checked, disagree


def _table(d: np.ndarray) -> td.RunTable:
    """One decision cell (knee c1) whose pairs change by exp(d) − 1."""
    rule_cell = ("knee", "c1")
    metric = "output_token_throughput"
    t = td.RunTable(run="plan", pairs=list(range(1, len(d) + 1)))
    t.slots = {k + 1: {"control": 2 * k, "candidate": 2 * k + 1} for k in range(len(d))}
    cell = td.CellData(*rule_cell, metric)
    for k, v in enumerate(d):
        y = 1000.0 * math.exp(float(v))
        cell.values[k + 1] = {"control": td.ArmValue(1000.0, 1000.0, 1000.0, 1),
                              "candidate": td.ArmValue(y, y, y, 1)}
    t.cells[(*rule_cell, metric)] = cell
    return t
