"""A sharded campaign (`lanes:`) as `spec-ab report` pools it: L lanes, each running the
registered pairs on its own machine (its own boots, its own window and its drift across
it), judged as one campaign over all L × pairs pairs.

The pooled verdict, on arrays: the rule over every pooled pair (a decision cell short of
its L × pairs cannot adopt); the `window-drift` gate tested per lane — each lane's control
against its own slots — firing when any lane does at `flag_alpha / L`; and the
`lanes-disagree` gate (`kernel.lanes_disagree_flags`, `stats.lanes_test`'s χ² of the lane
means): a candidate whose decision cell has lanes that disagree below the flag alpha cannot
adopt. With one lane it is the single-lane plan's draws and decision, unchanged.

Every row is cross-checked as the table is (`exact`): a sample of its simulated campaigns
at each effect is re-judged by `verdict.judge_run` — with two or more lanes on the pooled
`RunTable` (every lane's pairs in start order, each pair's lane, each lane's own slots,
invalid passes) under the pooled rule (pairs × L), with one lane as a plain run — and a
single decision that differs stops the plan (a bug).

The lanes run in parallel, so the night is one lane's wall time, whatever L.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from campaign.plan.exact import _cross_check, _cross_check_lanes
from campaign.plan.kernel import (
    FALSE_AT,
    POWER_AT,
    Rate,
    RuleSpec,
    adopts,
    flag_alpha,
    lanes_disagree_flags,
    rate_of,
    window_drift_flags,
)
from campaign.plan.simulate import (
    Draws,
    _metric_log,
    _rng,
    effect_d,
    pooled_lane_of,
    schedule_slots,
    simulate_arms,
)
from campaign.verdict.noise import NoiseModel

LANE_COUNTS = (1, 2, 4)
"""Lane counts every plan shows (with the campaign's own)."""
LANE_KEY = 1000
"""Random streams of lanes after the first: (seed, pairs, candidates, LANE_KEY + lane)."""


@dataclass(frozen=True)
class LaneRow:
    """The pooled verdict of `lanes` lanes × the registered pairs each."""

    lanes: int
    pairs_total: int
    night_s: float
    """One lane's wall time for its pairs (the lanes run in parallel)."""
    false_adopt: Rate
    """P(the campaign adopts) at a true m/2."""
    power: Rate
    """P(the campaign adopts) at a true 1.5m."""
    campaign: bool
    """The campaign's own lane count."""
    exact_checked: int = 0
    """Simulated campaigns of this row re-judged by `verdict.judge_run` (both effects),
    every one agreeing with the arrays."""
    noisier: float = 1.0
    """The second lane's noise as a multiple of the first's (1: lanes of equal noise)."""
    disagree: Rate | None = None
    """P(lanes-disagree fires with no true change), for the unequal-noise row."""


def lane_counts(campaign_lanes: int) -> list[int]:
    return sorted({*LANE_COUNTS, campaign_lanes})


def simulate_lanes(spec: RuleSpec, noise: NoiseModel, lanes: int, *, sims: int, seed: int,
                   invalid_rate: float, noisier: float = 1.0) -> list[Draws]:
    """Each lane's draws, as one lane is simulated (`campaign_rates`): the first lane's are
    the single-lane plan's own (same stream), the others' from streams of their own, so
    2 lanes are the first 2 of 4 (common random numbers); each lane in its own schedule
    (`schedule.plan_slots`, as `spec-ab run --lane` runs it). `noisier`: every lane but the
    first has its per-boot and within-pass sd multiplied by it (lanes of unequal noise)."""
    n, k = spec.pairs, spec.candidates
    loud = NoiseModel(noise.boot_sd * noisier, noise.pass_sd * noisier, noise.window_drift,
                      noise.source)
    return [simulate_arms(noise if i == 0 else loud, pairs=n, cells=len(spec.cells),
                          candidates=k, sims=sims,
                          slots=schedule_slots(n, spec.arms, spec.order, spec.prereg.seed, i),
                          invalid_rate=invalid_rate, redo_budget=spec.redo_budget,
                          rng=_rng(seed, n, k) if i == 0 else _rng(seed, n, k, LANE_KEY + i))
            for i in range(lanes)]


def decide_lanes(lanes: Sequence[Draws], shift: float, spec: RuleSpec) -> np.ndarray:
    """Each candidate's pooled decision [sim, candidate] at a true effect `shift` (d): the
    rule met over every pooled pair in every decision cell, every pair of every lane
    complete, no lane's window-drift gate (at flag_alpha / L), no lanes-disagree gate;
    under the pooled rule (`RuleSpec.pooled`: with several candidates the `point` bar is
    that of all L × pairs pairs, as in `spec-ab report`)."""
    rule = spec.pooled(len(lanes)).rule
    n_lanes = len(lanes)
    d = np.concatenate([x.d(shift) for x in lanes], axis=1)
    k = d.shape[-1]
    alpha = flag_alpha(len(spec.cells), k, n_lanes)
    lane_of = pooled_lane_of(lanes)
    met = np.stack([adopts(d[..., j], rule, k)
                    & ~lanes_disagree_flags(d[..., j], lane_of, rule, alpha).any(axis=1)
                    for j in range(k)], axis=-1)
    complete = np.all(np.stack([x.complete() for x in lanes]), axis=0)
    drift = np.zeros(d.shape[0], dtype=bool)
    for x in lanes:
        drift |= window_drift_flags(_metric_log(x.ctrl, rule), x.slots[0], rule,
                                    alpha / n_lanes).any(axis=1)
    return np.asarray(met & complete & ~drift[:, None])


def lane_rates(spec: RuleSpec, noise: NoiseModel, lanes: int, effects: Sequence[float], *,
               sims: int, seed: int, invalid_rate: float) -> list[Rate]:
    """P(the pooled campaign adopts) at each true effect (a change of the metric)."""
    return checked_lane_rates(spec, noise, lanes, effects, sims=sims, seed=seed,
                              invalid_rate=invalid_rate)[0]


def checked_lane_rates(spec: RuleSpec, noise: NoiseModel, lanes: int,
                       effects: Sequence[float], *, sims: int, seed: int,
                       invalid_rate: float, noisier: float = 1.0
                       ) -> tuple[list[Rate], int]:
    """`lane_rates`, and a sample of each effect's simulated campaigns re-judged by
    `verdict.judge_run` (pooled with two or more lanes); raises AssertionError on any
    disagreement. Returns the rates and the number re-judged."""
    draws = simulate_lanes(spec, noise, lanes, sims=sims, seed=seed,
                           invalid_rate=invalid_rate, noisier=noisier)
    rates, checked = [], 0
    for e in effects:
        shift = effect_d(e, spec.rule)
        decided = decide_lanes(draws, shift, spec)
        what = f"{lanes} lane(s) × {spec.pairs} pairs, {spec.candidates} candidate(s), " \
               f"effect {e:+.4g}"
        checked += (_cross_check(spec, draws[0], shift, decided, what) if lanes == 1 else
                    _cross_check_lanes(spec, draws, shift, decided, what))
        rates.append(rate_of(np.asarray(decided.any(axis=1))))
    return rates, checked


UNEQUAL = 2.0
"""How much noisier the second lane is in the unequal-noise row."""


def disagree_rate(spec: RuleSpec, noise: NoiseModel, *, sims: int, seed: int,
                  invalid_rate: float, noisier: float) -> Rate:
    """P(lanes-disagree fires on a decision cell) on 2 lanes with no true change, the
    second `noisier` × as noisy as the first (the flag assumes equal noise)."""
    draws = simulate_lanes(spec, noise, 2, sims=sims, seed=seed, invalid_rate=invalid_rate,
                           noisier=noisier)
    rule = spec.pooled(2).rule
    d = np.concatenate([x.d(0.0) for x in draws], axis=1)
    alpha = flag_alpha(len(spec.cells), d.shape[-1], 2)
    fired = np.stack([lanes_disagree_flags(d[..., j], pooled_lane_of(draws), rule,
                                           alpha).any(axis=1)
                      for j in range(d.shape[-1])], axis=-1).any(axis=1)
    return rate_of(np.asarray(fired))


def lane_rows(spec: RuleSpec, noise: NoiseModel, *, campaign_lanes: int, night_s: float,
              sims: int, seed: int, invalid_rate: float) -> list[LaneRow]:
    """The lanes section: 1, 2, 4 and the campaign's own number of lanes, each row
    cross-checked against `verdict.judge_run`."""
    m = spec.prereg.margin
    rows = []
    for n_lanes in lane_counts(campaign_lanes):
        (false, power), checked = checked_lane_rates(
            spec, noise, n_lanes, [FALSE_AT * m, POWER_AT * m], sims=sims, seed=seed,
            invalid_rate=invalid_rate)
        rows.append(LaneRow(n_lanes, spec.pairs * n_lanes, night_s, false, power,
                            n_lanes == campaign_lanes, checked))
    return rows


def unequal_row(spec: RuleSpec, noise: NoiseModel, *, night_s: float, sims: int, seed: int,
                invalid_rate: float) -> LaneRow:
    """What the verdict's equal-noise assumption costs: 2 lanes, the second `UNEQUAL` × as
    noisy (false adopt, power and lanes-disagree on no change), cross-checked as the rows."""
    m = spec.prereg.margin
    (false, power), checked = checked_lane_rates(
        spec, noise, 2, [FALSE_AT * m, POWER_AT * m], sims=sims, seed=seed,
        invalid_rate=invalid_rate, noisier=UNEQUAL)
    return LaneRow(2, spec.pairs * 2, night_s, false, power, False, checked,
                   noisier=UNEQUAL, disagree=disagree_rate(
                       spec, noise, sims=sims, seed=seed, invalid_rate=invalid_rate,
                       noisier=UNEQUAL))
