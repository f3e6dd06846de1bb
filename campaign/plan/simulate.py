"""Simulated campaigns under a noise model: draws, decisions, adoption rates, guardrails
at a true violation, and the noise flags' false alarms and power.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from campaign.campaignfile import Guardrail
from campaign.campaignfile.schedule import Order, plan_slots
from campaign.plan.guards import GuardDraws, guard_stops, simulate_guards
from campaign.plan.kernel import (
    HV_POWER_AT,
    PAIR_STEPS,
    WD_POWER_AT,
    Rate,
    RuleSpec,
    adopts,
    flag_alpha,
    high_variance_flags,
    rate_of,
    window_drift_flags,
)
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import stats as st
from campaign.verdict import tidy as td
from campaign.verdict.flags import Context
from campaign.verdict.guardrails import Family, Inputs, check_guardrail
from campaign.verdict.noise import NoiseModel

# --------------------------------------------------------------------------- simulation

GUARD_KEY = 500
"""Random stream of the guardrails' values (apart from the primary's, common to effects)."""


@dataclass(frozen=True)
class Draws:
    """Simulated campaigns at a true effect of 0, arm by arm, on the better-signed log
    scale (ln of the metric for higher-is-better, −ln for lower-is-better)."""

    ctrl: np.ndarray
    """[sim, pair, cell]: the control's value."""
    cand: np.ndarray
    """[sim, pair, cell, candidate]."""
    ctrl_ok: np.ndarray
    cand_ok: np.ndarray
    """Valid passes, same shapes."""
    slots: np.ndarray
    """[arm, pair]: slot index of each arm's pass in the schedule (control first)."""
    guard: GuardDraws | None = None
    """The relative guardrails' simulated values (no true worsening), when modelled."""

    def d(self, shift: float = 0.0) -> np.ndarray:
        """Paired log ratios d[sim, pair, cell, candidate] at a true effect of `shift` (d)."""
        return np.asarray(self.cand - self.ctrl[..., None] + shift)

    def complete(self) -> np.ndarray:
        """[sim, candidate]: every decision cell has all its pairs."""
        ok = self.ctrl_ok[..., None] & self.cand_ok
        return np.asarray(np.all(ok, axis=(1, 2)))


def pooled_lane_of(lanes: Sequence[Draws]) -> np.ndarray:
    """lane_of[pooled pair]: each lane's draws one after the other (lane 0, 1, …)."""
    return np.concatenate([np.full(x.ctrl.shape[1], i) for i, x in enumerate(lanes)])


def schedule_slots(pairs: int, arms: Sequence[str], order: Order, seed: int,
                   lane: int = 0) -> np.ndarray:
    """slots[arm, pair]: each arm's slot index in the campaign's own schedule (on the lane
    in place `lane`)."""
    idx = {(s.pair, s.arm): s.index for s in plan_slots(pairs, list(arms), order, seed, lane)}
    return np.array([[idx[(p, a)] for p in range(1, pairs + 1)] for a in arms], dtype=int)


def drift_offsets(pairs: int, arms: Sequence[str], order: Order, seed: int) -> np.ndarray:
    """Each pair's (first candidate − control) position in the window, from 0 to 1 across
    all slots. Times the log window drift, the pair's bias."""
    slots = schedule_slots(pairs, arms, order, seed)
    span = max(1, pairs * len(arms) - 1)
    return np.asarray((slots[1] - slots[0]) / span)


def simulate_arms(noise: NoiseModel, *, pairs: int, cells: int, candidates: int, sims: int,
                  slots: np.ndarray, invalid_rate: float,
                  rng: np.random.Generator, redo_budget: int = 0) -> Draws:
    """Each arm's boot (shared by the cells of a pair), each pass (per cell), the window's
    linear drift by slot, and invalid passes. Boots are drawn first, so a different number
    of cells sees the same boots (common random numbers).

    The night's redos (`gates.redo_budget`, as `run.runner` does them): at the end of the
    slots, the lowest pair with an invalid pass is measured again whole (new boots, new
    passes, its own chance of an invalid pass, the window's drift at its new place after
    the last slot; its registered slots stay, as the report reads them), until the budget
    is spent; an invalid redo can be redone again while budget is left. Invalid passes are
    the lane's faults here (a candidate's own failures are never redone)."""
    arms = candidates + 1
    total = pairs * arms
    per_slot = math.log1p(noise.window_drift) / max(1, total - 1)
    boot = rng.standard_normal((sims, pairs, 1, arms)) * noise.boot_sd
    passes = rng.standard_normal((sims, pairs, cells, arms)) * noise.pass_sd
    bad = rng.random((sims, pairs, cells, arms)) < invalid_rate
    g = boot + passes + per_slot * slots.T[None, :, None, :]
    if invalid_rate > 0:
        for r in range(redo_budget):
            _redo_lowest(g, bad, noise, invalid_rate, per_slot * (total + r * arms), rng)
    return Draws(g[..., 0], g[..., 1:], ~bad[..., 0], ~bad[..., 1:], slots)


def _redo_lowest(g: np.ndarray, bad: np.ndarray, noise: NoiseModel, invalid_rate: float,
                 trend: float, rng: np.random.Generator) -> None:
    """One redo, in place: in each simulated campaign with an invalid pair, its lowest such
    pair measured again whole at window position `trend` (the log drift at the redo's
    first slot; its arms follow one slot apart)."""
    sims, _, cells, arms = g.shape
    pair_bad = np.asarray(np.any(bad, axis=(2, 3)))
    hit = np.flatnonzero(pair_bad.any(axis=1))
    # drawn for every campaign (common random numbers whatever the hits)
    boot = rng.standard_normal((sims, 1, arms)) * noise.boot_sd
    passes = rng.standard_normal((sims, cells, arms)) * noise.pass_sd
    again = rng.random((sims, cells, arms)) < invalid_rate
    if hit.size == 0:
        return
    p = np.argmax(pair_bad[hit], axis=1)
    step = math.log1p(noise.window_drift) / max(1, g.shape[1] * arms - 1)
    new = boot + passes + trend + step * np.arange(arms)[None, None, :]
    g[hit, p] = new[hit]
    bad[hit, p] = again[hit]


def simulate(noise: NoiseModel, *, pairs: int, cells: int, sims: int, offsets: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    """Paired log ratios of one candidate at a true effect of 0: d[sim, pair, cell].

    Each pair's two boots differ by √2·boot_sd (shared by the cells of a pair), each cell's
    two passes by √2·pass_sd, and the window's linear drift adds its share by position.
    """
    boot = rng.standard_normal((sims, pairs, 1)) * (math.sqrt(2.0) * noise.boot_sd)
    passes = rng.standard_normal((sims, pairs, cells)) * (math.sqrt(2.0) * noise.pass_sd)
    trend = math.log1p(noise.window_drift) * offsets[None, :, None]
    return np.asarray(boot + passes + trend)


def _rng(seed: int, *key: int) -> np.random.Generator:
    """One stream per (seed, key): every effect of a pair count sees the same noise (common
    random numbers), so differences between columns are the effect's, not the draw's."""
    return np.random.default_rng([seed, *key])


def decide(draws: Draws, shift: float, spec: RuleSpec) -> np.ndarray:
    """Each candidate's decision [sim, candidate] at a true effect `shift` (d): the rule
    met in every decision cell, every pair complete, no window-drift gate, and (when the
    draws carry them) no guardrail stopping it."""
    d = draws.d(shift)
    k = d.shape[-1]
    met = np.stack([adopts(d[..., j], spec.rule, k) for j in range(k)], axis=-1)
    drift = np.asarray(window_drift_flags(_metric_log(draws.ctrl, spec.rule), draws.slots[0],
                                          spec.rule, flag_alpha(len(spec.cells), k)).any(axis=1))
    out = met & draws.complete() & ~drift[:, None]
    if draws.guard is not None and draws.guard.models:
        out &= ~guard_stops(draws.guard)
    return np.asarray(out)


def _metric_log(g: np.ndarray, rule: rl.Rule) -> np.ndarray:
    return g if rule.direction == "higher" else -g


def effect_d(effect: float, rule: rl.Rule) -> float:
    """The d of a true effect given as a change of the metric (better-signed)."""
    return rl.better_d(effect, rule.direction)


def adopt_rate(spec: RuleSpec, noise: NoiseModel, effect: float, *, sims: int, seed: int = 0,
               pairs: int | None = None, order: Order | None = None) -> Rate:
    """P(adopt) of the first candidate alone at a true `effect` (0.15 = 15% better), no
    invalid pass, as a Monte Carlo `Rate`."""
    n = pairs or spec.pairs
    o = order or spec.order
    offsets = drift_offsets(n, spec.arms, o, spec.rule.prereg.seed)
    d = simulate(noise, pairs=n, cells=len(spec.cells), sims=sims, offsets=offsets,
                 rng=_rng(seed, n))
    return Rate(int(adopts(d + effect_d(effect, spec.rule), spec.rule).sum()), sims)


def pairs_for_power(spec: RuleSpec, noise: NoiseModel, effect: float, target: float, *,
                    sims: int, seed: int = 0, max_pairs: int = 200) -> tuple[int | None, Rate]:
    """The fewest pairs (in the campaign's order) whose P(adopt) at `effect` reaches
    `target`; None (and the best rate seen) when no count up to `max_pairs` does.

    Power is not monotone in pairs under the `point` rule (every pair must clear +band, and
    more pairs give more chances for one to fall short), so counts are tried in ascending
    order and the first one that reaches the target is returned.
    """
    best: Rate | None = None
    for n in PAIR_STEPS:
        if n > max_pairs:
            break
        if spec.order == "ABBA" and n % 2:
            continue
        if spec.rule.prereg.rule == "ci" and n < 2:
            continue
        r = adopt_rate(spec, noise, effect, sims=sims, seed=seed, pairs=n)
        if r.p >= target:
            return n, r
        if best is None or r.p > best.p:
            best = r
    assert best is not None
    return None, best


def campaign_rates(spec: RuleSpec, noise: NoiseModel, effects: Sequence[float], *,
                   sims: int, seed: int, invalid_rate: float
                   ) -> tuple[list[Rate], Rate, Draws, list[np.ndarray]]:
    """P(the campaign adopts) at each true effect for `spec` as registered (its pairs, its
    candidates, its relative guardrails at no true worsening, `spec.guard_models`), the
    share of campaigns whose first candidate is short of pairs, the draws and each effect's
    decisions [sim, candidate]."""
    n, k = spec.pairs, spec.candidates
    slots = schedule_slots(n, spec.arms, spec.order, spec.prereg.seed)
    draws = simulate_arms(noise, pairs=n, cells=len(spec.cells), candidates=k, sims=sims,
                          slots=slots, invalid_rate=invalid_rate, rng=_rng(seed, n, k),
                          redo_budget=spec.redo_budget)
    if spec.guard_models:
        gd = simulate_guards(spec.guard_models, [0.0] * len(spec.guard_models), pairs=n,
                             candidates=k, sims=sims, checks=spec.guard_checks,
                             alpha=spec.rule.alpha, rng=_rng(seed, n, k, GUARD_KEY))
        draws = dataclasses.replace(draws, guard=gd)
    decided = [decide(draws, effect_d(e, spec.rule), spec) for e in effects]
    rates = [rate_of(np.asarray(dec.any(axis=1))) for dec in decided]
    return rates, rate_of(np.asarray(~draws.complete()[:, 0])), draws, decided


# --------------------------------------------------------------------------- guardrails


def guardrail_log_ratios(g: Guardrail, spec: RuleSpec, noise: NoiseModel, worsening: float,
                         *, pairs: int, sims: int, rng: np.random.Generator) -> np.ndarray:
    """ln(candidate ÷ control) of a guardrail's metric at one cell, lr[sim, pair], when the
    candidate truly worsens it by `worsening` (a fraction of the metric)."""
    higher = spec.rule.direction_of(g.metric) == "higher"
    true = math.log1p(-worsening) if higher else math.log1p(worsening)
    noise_lr = rng.standard_normal((sims, pairs)) * noise.pair_sd
    return np.asarray(true + noise_lr)


def guardrail_holds(lr: np.ndarray, g: Guardrail, spec: RuleSpec) -> np.ndarray:
    """`guardrails.check_guardrail` of a relative guardrail at one cell (one check) on
    arrays, when the passes carry no sampling error of their own (the simulated values do
    not): the pairs' own spread, holds when the one-sided (1 − α) t upper bound of the mean
    log worsening is within the limit; one pair never holds (no noise estimate).
    holds[sim]."""
    higher = spec.rule.direction_of(g.metric) == "higher"
    w = -lr if higher else lr
    n = w.shape[1]
    if n < 2:
        return np.zeros(w.shape[0], dtype=bool)
    limit = -rl.worse_d(g.max_worsening, "higher" if higher else "lower")
    t = st.t_critical(1 - spec.rule.alpha, n - 1)
    upper = w.mean(axis=1) + t * w.std(axis=1, ddof=1) / math.sqrt(n)
    return np.asarray(upper <= limit + rl.EPS)


def exact_guardrail_holds(lr: np.ndarray, g: Guardrail, spec: RuleSpec) -> bool:
    """One simulated guardrail cell lr[pair] through `verdict.judge_cell` and
    `guardrails.check_guardrail` as one check (what `spec-ab report` does)."""
    control, cand = spec.arms[0], spec.arms[1]
    data = td.CellData("plan", "cell", g.metric)
    for i, v in enumerate(lr):
        x = 1000.0
        y = x * math.exp(float(v))
        data.values[i + 1] = {control: td.ArmValue(x, x, x, 1), cand: td.ArmValue(y, y, y, 1)}
    cell = vd.judge_cell(data, cand, spec.rule, Context({}, {}, {}, {}), control=control)
    inputs = Inputs(cell, data, band=spec.rule.band, control=control, arm=cand)
    return check_guardrail(g, ("plan", "cell"), inputs, Family(spec.rule.alpha, 1)).state \
        == "holds"


# --------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class FlagRates:
    """Noise flags of one candidate's decision cells: false alarms on an A/A lane and power
    (None with one pair: no test)."""

    high_variance_false: Rate | None
    window_drift_false: Rate | None
    any_false: Rate | None
    high_variance_power: Rate | None
    window_drift_power: Rate | None

    def as_dict(self) -> dict[str, Any]:
        def r(x: Rate | None) -> dict[str, float | int] | None:
            return None if x is None else x.as_dict()
        return {"high_variance_false_alarm": r(self.high_variance_false),
                "window_drift_false_alarm": r(self.window_drift_false),
                "any_false_alarm": r(self.any_false),
                "high_variance_power": r(self.high_variance_power),
                "window_drift_power": r(self.window_drift_power)}


def flag_draws(spec: RuleSpec, noise: NoiseModel, *, sims: int, rng: np.random.Generator
               ) -> Draws:
    slots = schedule_slots(spec.pairs, spec.arms[:2], spec.order, spec.prereg.seed)
    return simulate_arms(noise, pairs=spec.pairs, cells=len(spec.cells), candidates=1,
                         sims=sims, slots=slots, invalid_rate=0.0, rng=rng)


def flags_of(draws: Draws, spec: RuleSpec) -> tuple[np.ndarray, np.ndarray]:
    """(high-variance, window-drift) of each simulated campaign's first candidate: [sim]."""
    alpha = flag_alpha(len(spec.cells))
    hv = np.asarray(high_variance_flags(draws.d()[..., 0], spec.rule, alpha).any(axis=1))
    wd = np.asarray(window_drift_flags(_metric_log(draws.ctrl, spec.rule), draws.slots[0],
                                       spec.rule, alpha).any(axis=1))
    return hv, wd


def flag_rates(spec: RuleSpec, noise: NoiseModel, *, sims: int, seed: int) -> FlagRates:
    """False alarms on an A/A lane (this noise, no trend) and power (see the docstring)."""
    if spec.pairs < 2:
        return FlagRates(None, None, None, None, None)
    rule = spec.rule
    aa = NoiseModel(noise.boot_sd, noise.pass_sd, 0.0, noise.source)
    hv0, wd0 = flags_of(flag_draws(spec, aa, sims=sims, rng=_rng(seed, spec.pairs, 7)), spec)
    scale = HV_POWER_AT * rule.pair_sd / noise.pair_sd if noise.pair_sd > 0 else 0.0
    wide = (NoiseModel(noise.boot_sd * scale, noise.pass_sd * scale, 0.0, "")
            if scale > 0 else NoiseModel(HV_POWER_AT * rule.control_sd, 0.0, 0.0, ""))
    hv1, _ = flags_of(flag_draws(spec, wide, sims=sims, rng=_rng(seed, spec.pairs, 8)), spec)
    moving = NoiseModel(noise.boot_sd, noise.pass_sd, WD_POWER_AT * rule.band, "")
    _, wd1 = flags_of(flag_draws(spec, moving, sims=sims, rng=_rng(seed, spec.pairs, 9)), spec)
    return FlagRates(rate_of(hv0), rate_of(wd0), rate_of(hv0 | wd0), rate_of(hv1),
                     rate_of(wd1))
