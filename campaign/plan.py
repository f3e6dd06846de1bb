"""`spec-ab plan`: what a campaign's pre-registered rule will decide, before the night.

A Monte Carlo of the campaign's exact rule under a noise model (`campaign.noise`). For
1…N pairs (N = max(8, the registered pairs), `--pairs N` overrides) it simulates thousands
of campaigns per pair count — every candidate, every decision cell, the campaign's arm
order, invalid passes — judges each one, and prints P(adopt) at true effects 0, half the
margin (m/2), the margin (m) and 1.5× the margin (1.5m), plus `--effect` when it is another
number. One scale: an effect is the change of the metric itself, so for a lower-is-better
primary metric "+15%" means a 15% reduction (`rule.better_d`).

It recommends the fewest pairs that adopt a true 1.5m at least 90% of the time and a true
m/2 at most 5% of the time (Monte Carlo point estimates), or says that no count up to N
does, and what would (the other rule, every invalid pass redone, a quieter lane, more
pairs).

What is modelled, under the same noise model:

- every candidate: with k candidates each has its own boots and passes and shares the
  control's boot and pass within a pair; all are at the same true effect, and the campaign
  adopts when any candidate adopts under the corrected bar (`Rule.bar_d(k)`,
  `Rule.ci_alpha(k)`). Beside it, the campaign-level false-adopt at m/2 of the same
  campaign with one candidate (k = 3 when the campaign has one: what a third arm would
  do) — the correction promises no higher;
- invalid passes (`--invalid-rate`, default 2%, after retries): each arm's pass of each
  decision cell is invalid independently; a pair with an invalid pass is left out, and a
  decision cell short of its pre-registered pairs cannot adopt (inconclusive), so P(adopt)
  includes that loss (`--redo-invalid` can recover it; the share lost is printed);
- the `window-drift` gate: a decision cell whose control moved across the window beyond
  the limit and its noise cannot adopt (as in `verdict`);
- guardrails (relative ones): P(the guardrail holds) at one cell when the candidate truly
  worsens its metric by 2× its limit, and when it does not worsen it at all, under the
  pair rule of `campaign.guardrails` (mean worsening ≤ limit and no pair beyond limit +
  band). A guardrail checked at several cells holds less often. P(adopt) does not include
  guardrails;
- the noise flags of `verdict` (the same χ² and z tests at FLAG_FAMILY_ALPHA / (2 ×
  decision cells)): their false-alarm rate on an A/A lane (this noise, no effect, no
  trend) and their power: `high-variance` at a true pair sd 2× the rule's assumed one,
  `window-drift` at a true window drift of 3× the band.

Exactness. The rule is the one `campaign.verdict` applies to real runs. Calling it once per
simulated campaign is too slow, so the counting is vectorised with numpy (`adopts`,
`decide`, `flag_rates`, `guardrail_holds`): the same comparisons, with the same epsilon, on
arrays. Every plan then re-judges a sample of its simulated campaigns through
`verdict.judge_run` itself (candidates, invalid passes, window-drift gate and flags; the
guardrails through `guardrails.check_guardrail`) with the rule's `pairs` set to the
simulated count, and refuses to print (a bug, exit 1) if a single decision differs.

`--rule point|ci` plans under the other rule: exploratory, marked so.

JSON (`--format json`) keys:

- `campaign`, `decision_cells`, `candidates` (k), `order`, `registered_pairs`;
- `rule`: `registered` and `used` (point|ci), `exploratory` (bool), `text`, `margin`,
  `band`, `confidence`, `direction`;
- `noise`: `boot_sd`, `pass_sd`, `window_drift`, `pair_sd`, `source`;
- `invalid_rate`, `sims`, `seed`, `exact_checked`;
- `effects`: [{`name` ("0", "m/2", "m", "1.5m", "effect"), `effect` (change of the metric as
  a fraction, better-signed)}];
- `table`: one row per pair count, {`pairs`, `adopt`: {effect name: rate},
  `lost_to_invalid`: rate (some decision cell short of its pairs, for the first
  candidate), `meets`: bool, `false_adopt_half_margin`: {`single`: rate, `campaign`: rate,
  `candidates`}, `guardrails`: [{`metric`, `limit`, `hold_at_2x`: rate, `hold_at_0`:
  rate}], `flags`: {`high_variance_false_alarm`, `window_drift_false_alarm`,
  `any_false_alarm`, `high_variance_power`, `window_drift_power`: rate or null (one
  pair: no test)}};
- `recommendation`: {`pairs` (int or null), `power_at` (1.5m as a fraction), `power_min`,
  `false_at` (m/2), `false_max`, `wall_s`, `alternatives`: [{`change`, `pairs`}]};
- `orders`: AB vs ABBA under a linear drift: [{`order`, `pairs`, `bias`, `null`,
  `at_effect`}], `order_drift`; `wall_s_per_pair`; `notes`.

A rate is {`p`, `lo`, `hi`, `k`, `n`}: k of n simulated campaigns with a 95%
Clopper–Pearson interval (the Monte Carlo's own uncertainty).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import stats as sps

from campaign import duration
from campaign import fmt as fm
from campaign import rule as rl
from campaign import stats as st
from campaign import tidy as td
from campaign import verdict as vd
from campaign.aa import aa_run_of, resolve_drift_band
from campaign.errors import UsageError
from campaign.guardrails import check_guardrail
from campaign.noise import NoiseModel, estimate_noise, from_drift
from campaign.outcome import RunVerdict
from campaign.schedule import Order, plan_slots
from campaign.spec import Campaign, Guardrail, Preregistration

RuleName = Literal["point", "ci"]

EFFECTS = (("0", 0.0), ("m/2", 0.5), ("m", 1.0), ("1.5m", 1.5))
"""The table's true effects: name and multiple of the margin."""
POWER_AT, POWER_MIN = 1.5, 0.90
"""The recommendation: at least 90% adoption at a true 1.5× the margin …"""
FALSE_AT, FALSE_MAX = 0.5, 0.05
"""… and at most 5% adoption at a true half the margin."""
MIN_TABLE_PAIRS = 8
DEFAULT_INVALID_RATE = 0.02
GUARDRAIL_VIOLATION = 2.0
"""Guardrails are tried at a true worsening of this many times their limit."""
HV_POWER_AT = 2.0
"""`high-variance` power: a true pair sd this many times the rule's assumed one."""
WD_POWER_AT = 3.0
"""`window-drift` power: a true drift across the window of this many bands."""
MULTI_CANDIDATES = 3
"""Candidates of the multi-candidate comparison when the campaign has one."""
EXACT_SAMPLE = 12
"""Simulated campaigns per (pair count, effect) re-judged by `verdict.judge_run`."""
MAX_SEARCH_SIMS = 2000
"""Campaigns per pair count in the searches (alternatives, pairs for power)."""
MORE_PAIRS = (10, 12, 16, 20, 24, 32, 48, 64)
PAIR_STEPS = (
    *range(1, 17), *range(18, 33, 2), *range(36, 65, 4), *range(72, 129, 8),
    *range(144, 201, 16),
)
"""Pair counts tried by the power search, ascending (the rule allows up to 200)."""


# --------------------------------------------------------------------------- rates


@dataclass(frozen=True)
class Rate:
    """k of n simulated campaigns, with a 95% Clopper–Pearson interval."""

    k: int
    n: int

    @property
    def p(self) -> float:
        return self.k / self.n if self.n else math.nan

    @property
    def lo(self) -> float:
        return 0.0 if self.k == 0 else float(sps.beta.ppf(0.025, self.k, self.n - self.k + 1))

    @property
    def hi(self) -> float:
        return 1.0 if self.k == self.n else float(sps.beta.ppf(0.975, self.k + 1, self.n - self.k))

    def complement(self) -> Rate:
        return Rate(self.n - self.k, self.n)

    def as_dict(self) -> dict[str, float | int]:
        return {"p": self.p, "lo": self.lo, "hi": self.hi, "k": self.k, "n": self.n}


def rate_of(hits: np.ndarray) -> Rate:
    return Rate(int(np.count_nonzero(hits)), int(hits.size))


def count_interval(rate: Rate, runs: int, level: float = 0.95) -> tuple[int, int]:
    """Adoptions expected in `runs` real campaigns: the central `level` binomial range at
    the plan's rate, widened by the plan's own 95% interval (its Monte Carlo error)."""
    q = (1 - level) / 2
    lo = int(sps.binom.ppf(q, runs, rate.lo))
    hi = int(sps.binom.ppf(1 - q, runs, rate.hi))
    return max(0, lo), min(runs, hi)


# --------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class RuleSpec:
    """What the Monte Carlo needs of a campaign: its rule, cells and schedule."""

    rule: rl.Rule
    cells: tuple[tuple[str, str], ...]
    """Decision cells (workload, level), `*` expanded to the campaign's levels."""
    arms: tuple[str, ...]
    """Control first, then every candidate."""
    guardrails: tuple[Guardrail, ...] = ()
    """The registered guardrails (not part of `rule`: modelled on their own)."""

    @property
    def prereg(self) -> Preregistration:
        return self.rule.prereg

    @property
    def order(self) -> Order:
        return self.rule.prereg.order

    @property
    def pairs(self) -> int:
        return self.rule.prereg.pairs

    @property
    def candidates(self) -> int:
        return len(self.arms) - 1

    def at(self, pairs: int | None = None, rule: RuleName | None = None,
           candidates: int | None = None) -> RuleSpec:
        """The same campaign registered with `pairs` pairs, under `rule`, with `candidates`
        candidates (extra ones named candidate-2, …; fewer keep the first ones)."""
        update: dict[str, Any] = {}
        if pairs is not None:
            update["pairs"] = pairs
        if rule is not None:
            update["rule"] = rule
        arms = self.arms
        if candidates is not None:
            names = list(self.arms[1:candidates + 1])
            names += [f"candidate-{i + 1}" for i in range(len(names), candidates)]
            arms = (self.arms[0], *names)
        prereg = self.prereg.model_copy(update=update) if update else self.prereg
        return dataclasses.replace(self, rule=rl.Rule(prereg=prereg, band=self.rule.band),
                                   arms=arms)


def rule_spec(campaign: Campaign, band: float | None = None) -> RuleSpec:
    pre = campaign.preregistration
    cells: list[tuple[str, str]] = []
    for dc in pre.decision_cells:
        levels = campaign.workloads.levels(dc.workload)
        for lvl in (levels if dc.level == "*" else [dc.level]):
            if (dc.workload, lvl) not in cells:
                cells.append((dc.workload, lvl))
    if not cells:
        raise UsageError("the campaign has no decision cell to plan for")
    # Guardrails are modelled on their own (`guardrail_holds`): the adoption cross-check
    # must not count them as "cannot be checked".
    prereg = pre.model_copy(update={"guardrails": []})
    rule = rl.Rule(prereg=prereg, band=resolve_drift_band(campaign) if band is None else band)
    return RuleSpec(rule, tuple(cells), tuple(campaign.arm_names), tuple(pre.guardrails))


def flag_alpha(cells: int) -> float:
    """Level of each noise flag's test (as `verdict.judge_run` sets it)."""
    return rl.FLAG_FAMILY_ALPHA / (2 * max(1, cells))


def adopts(d: np.ndarray, rule: rl.Rule, candidates: int = 1) -> np.ndarray:
    """The rule's decision of each simulated campaign of one candidate: d[sim, pair, cell]
    are the paired log ratios (positive = better) of the decision cells. True = every
    decision cell meets the rule (no gate, no missing pair).

    The comparisons of `rule.adopts_point` / `rule.adopts_ci` (every decision cell must
    adopt: no correction across cells), on arrays, with the bar of `candidates`.
    """
    pre = rule.prereg
    eps = rl.EPS
    _, n, _ = d.shape
    mean = d.mean(axis=1)
    bar = rule.bar_d(candidates)
    if pre.rule == "point":
        up = rl.better_d(rule.band, rule.direction)
        cell = (mean >= bar - eps) & np.all(d >= up - eps, axis=1)
        return np.asarray(np.all(cell, axis=1))
    if n < 2:
        return np.zeros(d.shape[0], dtype=bool)
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    t = st.t_critical(1 - rule.ci_alpha(candidates) / 2, n - 1)
    cell = mean - t * se >= bar - eps
    return np.asarray(np.all(cell, axis=1))


def window_drift_flags(ctrl: np.ndarray, slots: np.ndarray, rule: rl.Rule,
                       alpha: float) -> np.ndarray:
    """`verdict`'s window-drift flag of each decision cell: ctrl[sim, pair, cell] are the
    control's ln(value) at slot positions slots[pair]. flags[sim, cell]."""
    n = slots.size
    if n < 2:
        return np.zeros((ctrl.shape[0], ctrl.shape[2]), dtype=bool)
    x = slots.astype(float) - float(slots.mean())
    sxx = float(np.sum(x**2))
    span = float(slots.max() - slots.min())
    slope = np.einsum("p,spc->sc", x, ctrl - ctrl.mean(axis=1, keepdims=True)) / sxx
    moved = np.expm1(slope * span)
    z = np.log1p(moved) / span / (rule.control_sd / math.sqrt(sxx))
    p = 2 * sps.norm.sf(np.abs(z))
    return np.asarray((np.abs(moved) > rule.window_limit + rl.EPS) & (p < alpha))


def high_variance_flags(d: np.ndarray, rule: rl.Rule, alpha: float) -> np.ndarray:
    """`verdict`'s high-variance flag of each decision cell of one candidate (every pair
    complete): χ² test of d[sim, pair, cell]'s variance against the rule's pair sd."""
    n = d.shape[1]
    if n < 2:
        return np.zeros((d.shape[0], d.shape[2]), dtype=bool)
    ss = np.sum((d - d.mean(axis=1, keepdims=True)) ** 2, axis=1)
    return np.asarray(sps.chi2.sf(ss / rule.pair_sd**2, n - 1) < alpha)


# --------------------------------------------------------------------------- simulation


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

    def d(self, shift: float = 0.0) -> np.ndarray:
        """Paired log ratios d[sim, pair, cell, candidate] at a true effect of `shift` (d)."""
        return np.asarray(self.cand - self.ctrl[..., None] + shift)

    def complete(self) -> np.ndarray:
        """[sim, candidate]: every decision cell has all its pairs."""
        ok = self.ctrl_ok[..., None] & self.cand_ok
        return np.asarray(np.all(ok, axis=(1, 2)))


def schedule_slots(pairs: int, arms: Sequence[str], order: Order, seed: int) -> np.ndarray:
    """slots[arm, pair]: each arm's slot index in the campaign's own schedule."""
    idx = {(s.pair, s.arm): s.index for s in plan_slots(pairs, list(arms), order, seed)}
    return np.array([[idx[(p, a)] for p in range(1, pairs + 1)] for a in arms], dtype=int)


def drift_offsets(pairs: int, arms: Sequence[str], order: Order, seed: int) -> np.ndarray:
    """Each pair's (first candidate − control) position in the window, from 0 to 1 across
    all slots. Times the log window drift, the pair's bias."""
    slots = schedule_slots(pairs, arms, order, seed)
    span = max(1, pairs * len(arms) - 1)
    return np.asarray((slots[1] - slots[0]) / span)


def simulate_arms(noise: NoiseModel, *, pairs: int, cells: int, candidates: int, sims: int,
                  slots: np.ndarray, invalid_rate: float,
                  rng: np.random.Generator) -> Draws:
    """Each arm's boot (shared by the cells of a pair), each pass (per cell), the window's
    linear drift by slot, and invalid passes. Boots are drawn first, so a different number
    of cells sees the same boots (common random numbers)."""
    arms = candidates + 1
    total = pairs * arms
    per_slot = math.log1p(noise.window_drift) / max(1, total - 1)
    boot = rng.standard_normal((sims, pairs, 1, arms)) * noise.boot_sd
    passes = rng.standard_normal((sims, pairs, cells, arms)) * noise.pass_sd
    bad = rng.random((sims, pairs, cells, arms)) < invalid_rate
    g = boot + passes + per_slot * slots.T[None, :, None, :]
    return Draws(g[..., 0], g[..., 1:], ~bad[..., 0], ~bad[..., 1:], slots)


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
    met in every decision cell, every pair complete, no window-drift gate."""
    d = draws.d(shift)
    k = d.shape[-1]
    met = np.stack([adopts(d[..., j], spec.rule, k) for j in range(k)], axis=-1)
    drift = np.asarray(window_drift_flags(_metric_log(draws.ctrl, spec.rule), draws.slots[0],
                                          spec.rule, flag_alpha(len(spec.cells))).any(axis=1))
    return np.asarray(met & draws.complete() & ~drift[:, None])


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
    candidates), the share of campaigns whose first candidate is short of pairs, the draws
    and each effect's decisions [sim, candidate]."""
    n, k = spec.pairs, spec.candidates
    slots = schedule_slots(n, spec.arms, spec.order, spec.prereg.seed)
    draws = simulate_arms(noise, pairs=n, cells=len(spec.cells), candidates=k, sims=sims,
                          slots=slots, invalid_rate=invalid_rate, rng=_rng(seed, n, k))
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
    """`guardrails.check_guardrail` of a relative guardrail on arrays: the geometric-mean
    worsening within the limit and no pair beyond limit + band. holds[sim]."""
    higher = spec.rule.direction_of(g.metric) == "higher"
    ratio_mean = np.exp(lr.mean(axis=1))
    per_pair = np.exp(lr)
    worse = (1 - ratio_mean) if higher else (ratio_mean - 1)
    pair_worse = (1 - per_pair) if higher else (per_pair - 1)
    limit, clear = g.max_worsening, g.max_worsening + spec.rule.band
    return np.asarray((worse <= limit + rl.EPS)
                      & np.all(pair_worse <= clear + rl.EPS, axis=1))


def exact_guardrail_holds(lr: np.ndarray, g: Guardrail, spec: RuleSpec) -> bool:
    """One simulated guardrail cell lr[pair] through `verdict.judge_cell` and
    `guardrails.check_guardrail` (what `spec-ab report` does)."""
    control, cand = spec.arms[0], spec.arms[1]
    data = td.CellData("plan", "cell", g.metric)
    for i, v in enumerate(lr):
        x = 1000.0
        y = x * math.exp(float(v))
        data.values[i + 1] = {control: td.ArmValue(x, x, x, 1), cand: td.ArmValue(y, y, y, 1)}
    cell = vd.judge_cell(data, cand, spec.rule, vd.Context({}, {}, {}, {}), control=control)
    return not check_guardrail(g, cell, ("plan", "cell"), spec.rule.band).broken


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


# --------------------------------------------------------------------------- exactness


def exact_judge(spec: RuleSpec, ctrl: np.ndarray, cand: np.ndarray,
                ctrl_ok: np.ndarray | None = None, cand_ok: np.ndarray | None = None,
                slots: np.ndarray | None = None) -> RunVerdict:
    """One simulated campaign judged by `verdict.judge_run` itself: ctrl[pair, cell] and
    cand[pair, cell, candidate] on the better-signed log scale; invalid passes are recorded
    as such; slots[arm, pair] are the arms' slot indices."""
    rule = spec.rule
    sign = 1.0 if rule.direction == "higher" else -1.0
    n, _, k = cand.shape
    arms = spec.arms[:k + 1]
    table = td.RunTable(run="plan")
    table.pairs = list(range(1, n + 1))
    if slots is not None:
        table.slots = {p + 1: {a: int(slots[j, p]) for j, a in enumerate(arms)}
                       for p in range(n)}
    for c, (w, lvl) in enumerate(spec.cells):
        data = td.CellData(w, lvl, rule.metric)
        for i in range(n):
            vals: dict[str, td.ArmValue] = {}
            bad: dict[str, str] = {}
            for j, a in enumerate(arms):
                g = float(ctrl[i, c]) if j == 0 else float(cand[i, c, j - 1])
                ok = (ctrl_ok is None or bool(ctrl_ok[i, c])) if j == 0 else \
                    (cand_ok is None or bool(cand_ok[i, c, j - 1]))
                if ok:
                    v = 1000.0 * math.exp(sign * g)
                    vals[a] = td.ArmValue(v, v, v, 1)
                else:
                    bad[a] = "invalid (simulated)"
            data.values[i + 1] = vals
            if bad:
                data.invalid[i + 1] = bad
        table.cells[(w, lvl, rule.metric)] = data
    return vd.judge_run(table, rule, list(arms), metrics=[rule.metric])


def exact_adopts(d: np.ndarray, spec: RuleSpec) -> bool:
    """One simulated campaign d[pair, cell] (one candidate, control at 0, every pass valid)
    or d[pair, cell, candidate] judged by `verdict.judge_run`: does it adopt?"""
    cand = d if d.ndim == 3 else d[..., None]
    ctrl = np.zeros(cand.shape[:2])
    return bool(exact_judge(spec, ctrl, cand).decision == "adopt")


def _cross_check(spec: RuleSpec, draws: Draws, shift: float, decided: np.ndarray,
                 what: str) -> int:
    """Re-judge a sample of simulated campaigns through `verdict.judge_run`; raise on any
    disagreement. Returns the number checked."""
    sims = decided.shape[0]
    checked = 0
    for i in range(min(EXACT_SAMPLE, sims)):
        v = exact_judge(spec, draws.ctrl[i], draws.cand[i] + shift, draws.ctrl_ok[i],
                        draws.cand_ok[i], draws.slots)
        got = [cv.decision == "adopt" for cv in v.candidates]
        if got != [bool(x) for x in decided[i]]:
            raise AssertionError(
                f"plan's vectorised rule disagrees with verdict.judge_run ({what}, "
                f"simulated campaign {i}: {got} vs {decided[i].tolist()}): a bug in "
                "campaign/plan.py")
        checked += 1
    return checked


def _cross_check_flags(spec: RuleSpec, draws: Draws, hv: np.ndarray, wd: np.ndarray) -> int:
    checked = 0
    for i in range(min(EXACT_SAMPLE, hv.size)):
        v = exact_judge(spec, draws.ctrl[i], draws.cand[i], slots=draws.slots)
        flags = {f for c in v.candidates[0].cells if c.decision_cell for f in c.flags}
        if ("high-variance" in flags, "window-drift" in flags) != (bool(hv[i]), bool(wd[i])):
            raise AssertionError(
                f"plan's flags disagree with verdict.judge_run ({spec.pairs} pairs, simulated "
                f"campaign {i}: {sorted(flags)}): a bug in campaign/plan.py")
        checked += 1
    return checked


# --------------------------------------------------------------------------- the plan


def recommend(rows: Sequence[tuple[int, Rate, Rate]], *, power_min: float = POWER_MIN,
              false_max: float = FALSE_MAX) -> int | None:
    """The fewest pairs whose P(adopt) at 1.5m reaches `power_min` and whose P(adopt) at
    m/2 is at most `false_max`: rows are (pairs, at 1.5m, at m/2); None when none does."""
    for n, power, false in sorted(rows, key=lambda r: r[0]):
        if power.p >= power_min - 1e-12 and false.p <= false_max + 1e-12:
            return n
    return None


@dataclass(frozen=True)
class GuardrailRow:
    metric: str
    limit: float
    hold_at_2x: Rate
    hold_at_0: Rate


@dataclass(frozen=True)
class PairRow:
    pairs: int
    adopt: tuple[Rate, ...]
    """P(the campaign adopts) at each of `PlanResult.effects`."""
    lost_to_invalid: Rate
    false_single: Rate
    false_campaign: Rate
    guardrails: tuple[GuardrailRow, ...]
    flags: FlagRates
    meets: bool = False


@dataclass(frozen=True)
class OrderRow:
    order: str
    pairs: int
    bias: float
    """Mean shift of the estimated gain the window drift causes (as a gain)."""
    null: Rate
    at_effect: Rate


@dataclass(frozen=True)
class Alternative:
    change: str
    pairs: int | None


@dataclass
class PlanResult:
    campaign: str
    rule_text: str
    rule: str
    registered_rule: str
    margin: float
    band: float
    direction: str
    confidence: float
    cells: tuple[str, ...]
    pairs: int
    """Registered pairs."""
    candidates: int
    multi_candidates: int
    """Candidates of the multi-candidate comparison (the campaign's, or 3)."""
    order: str
    noise: NoiseModel
    effect: float
    invalid_rate: float
    sims: int
    seed: int
    effects: list[tuple[str, float]]
    rows: list[PairRow]
    recommended: int | None
    alternatives: list[Alternative]
    orders: list[OrderRow]
    order_drift: float
    estimate: duration.Estimate
    exact_checked: int
    notes: list[str] = field(default_factory=list)

    @property
    def exploratory(self) -> bool:
        return self.rule != self.registered_rule

    def row(self, pairs: int) -> PairRow:
        return next(r for r in self.rows if r.pairs == pairs)

    def rate(self, name: str, pairs: int | None = None) -> Rate:
        i = [n for n, _ in self.effects].index(name)
        return self.row(pairs or self.pairs).adopt[i]

    @property
    def at_effect(self) -> Rate:
        """P(adopt) at `--effect` with the registered pairs (when within the table)."""
        name = next((n for n, e in self.effects if abs(e - self.effect) < 1e-12), "effect")
        return self.rate(name)

    @property
    def wall_per_pair(self) -> float:
        return self.estimate.total_s / self.pairs


def noise_for(campaign: Campaign, *, noise_run: Path | None, drift: float | None,
              band: float) -> NoiseModel:
    """The noise model of a plan: an A/A run, a given per-boot drift, the campaign's own
    A/A run (`drift_band: {from: RUN_DIR}`), or — assumed — a per-boot drift the size of the
    band (conservative: the band is meant to hold most single-pair A/A gains)."""
    if noise_run is not None and drift is not None:
        raise UsageError("give --noise RUN_DIR or --drift, not both")
    metric = campaign.preregistration.primary_metric
    workloads = sorted({dc.workload for dc in campaign.preregistration.decision_cells})
    if noise_run is not None:
        return estimate_noise(noise_run, metric=metric, workloads=workloads).model
    if drift is not None:
        return from_drift(drift)
    aa_run = aa_run_of(campaign)
    if aa_run is not None:
        return estimate_noise(aa_run, metric=metric, workloads=workloads).model
    return from_drift(band, source=f"assumed (no --noise or --drift): per-boot drift sd = the "
                      f"drift band {band:.1%}, within-pass sd 1.0%, no trend across the window")


def _qualifying(spec: RuleSpec, noise: NoiseModel, counts: Sequence[int], *, sims: int,
                seed: int, invalid_rate: float) -> int | None:
    """The fewest of `counts` pairs that meets the recommendation's two bars."""
    m = spec.prereg.margin
    for n in counts:
        (power, false), *_ = campaign_rates(spec.at(pairs=n), noise, [POWER_AT * m, FALSE_AT * m],
                                            sims=sims, seed=seed, invalid_rate=invalid_rate)
        if recommend([(n, power, false)]) is not None:
            return n
    return None


def alternatives(spec: RuleSpec, noise: NoiseModel, max_pairs: int, *, sims: int, seed: int,
                 invalid_rate: float) -> list[Alternative]:
    """What would meet the bars when nothing up to `max_pairs` does: the other rule, every
    invalid pass redone, a lane half as noisy, more pairs."""
    counts = list(range(1, max_pairs + 1))
    other: RuleName = "ci" if spec.prereg.rule == "point" else "point"
    quiet = NoiseModel(noise.boot_sd / 2, noise.pass_sd / 2, noise.window_drift / 2,
                       "half the noise")
    tries = [
        (f"rule {other} (a new registration)", spec.at(rule=other), noise, invalid_rate,
         counts),
        ("every invalid pass redone (spec-ab run --resume … --redo-invalid)", spec, noise,
         0.0, counts),
        ("a lane half as noisy (per-boot and within-pass sd halved)", spec, quiet,
         invalid_rate, counts),
        (f"rule {other} with every invalid pass redone", spec.at(rule=other), noise, 0.0,
         counts),
        (f"more pairs (up to {MORE_PAIRS[-1]})", spec, noise, invalid_rate,
         [n for n in MORE_PAIRS if n > max_pairs]),
    ]
    out = []
    for text, s, nz, rate, ns in tries:
        out.append(Alternative(text, _qualifying(s, nz, ns, sims=sims, seed=seed,
                                                 invalid_rate=rate)))
    return out


def plan_campaign(campaign: Campaign, *, effect: float, noise_run: Path | None,
                  drift: float | None, sims: int, seed: int = 0, pairs: int | None = None,
                  rule: RuleName | None = None,
                  invalid_rate: float = DEFAULT_INVALID_RATE) -> PlanResult:
    """The whole plan (see the module docstring). Deterministic for a given seed."""
    if sims < 100:
        raise UsageError(f"--sims {sims}: use at least 100 simulated campaigns per effect")
    if effect <= -1 or (effect >= 1 and campaign.preregistration.metric_direction == "lower"):
        raise UsageError(f"--effect {effect:.0%}: a change must be above -100% (and a "
                         "reduction below 100%)")
    if not 0 <= invalid_rate < 1:
        raise UsageError(f"--invalid-rate {invalid_rate}: a probability in [0, 1)")
    if pairs is not None and not 1 <= pairs <= 200:
        raise UsageError(f"--pairs {pairs}: between 1 and 200")
    if len(campaign.arm_names) < 2:
        raise UsageError("the campaign has no candidate arm")
    registered = rule_spec(campaign)
    spec = registered.at(rule=rule) if rule is not None else registered
    noise = noise_for(campaign, noise_run=noise_run, drift=drift, band=spec.rule.band)
    pre = spec.prereg
    m = pre.margin
    max_pairs = pairs if pairs is not None else max(MIN_TABLE_PAIRS, spec.pairs)
    effects = [(name, f * m) for name, f in EFFECTS]
    if all(abs(e - effect) > 1e-12 for _, e in effects):
        effects.append(("effect", effect))
    k = spec.candidates
    kk = k if k > 1 else MULTI_CANDIDATES
    rows: list[PairRow] = []
    checked = 0
    ns = sorted({*range(1, max_pairs + 1), spec.pairs})
    for n in ns:
        s_n = spec.at(pairs=n)
        rates, lost, draws, decided = campaign_rates(
            s_n, noise, [e for _, e in effects], sims=sims, seed=seed,
            invalid_rate=invalid_rate)
        for (name, e), dec in zip(effects, decided, strict=True):
            checked += _cross_check(s_n, draws, effect_d(e, s_n.rule), dec,
                                    f"{n} pairs, {k} candidate(s), effect {name}")
        half = FALSE_AT * m
        single_spec = s_n.at(candidates=1)
        multi_spec = s_n.at(candidates=kk)
        (single,), *_ = campaign_rates(single_spec, noise, [half], sims=sims, seed=seed,
                                       invalid_rate=invalid_rate)
        (multi,), _, mdraws, mdec = campaign_rates(multi_spec, noise, [half], sims=sims,
                                                   seed=seed, invalid_rate=invalid_rate)
        checked += _cross_check(multi_spec, mdraws, effect_d(half, s_n.rule), mdec[0],
                                f"{n} pairs, {kk} candidates, m/2")
        grows = []
        for gi, g in enumerate(spec.guardrails):
            if g.absolute:
                continue
            holds = []
            for w in (GUARDRAIL_VIOLATION * g.max_worsening, 0.0):
                lr = guardrail_log_ratios(g, s_n, noise, w, pairs=n, sims=sims,
                                          rng=_rng(seed, n, 100 + gi))
                h = guardrail_holds(lr, g, s_n)
                for i in range(min(EXACT_SAMPLE, sims)):
                    if exact_guardrail_holds(lr[i], g, s_n) != bool(h[i]):
                        raise AssertionError(
                            f"plan's guardrail check disagrees with check_guardrail "
                            f"({g.metric}, {n} pairs, simulated campaign {i}): a bug in "
                            "campaign/plan.py")
                    checked += 1
                holds.append(rate_of(h))
            grows.append(GuardrailRow(g.metric, g.max_worsening, holds[0], holds[1]))
        flags = flag_rates(single_spec, noise, sims=sims, seed=seed)
        if n >= 2:
            aa = NoiseModel(noise.boot_sd, noise.pass_sd, 0.0, "")
            fd = flag_draws(single_spec, aa, sims=min(sims, EXACT_SAMPLE),
                            rng=_rng(seed, n, 7))
            hv, wd = flags_of(fd, single_spec)
            checked += _cross_check_flags(single_spec, fd, hv, wd)
        names = [nm for nm, _ in effects]
        at_power, at_false = rates[names.index("1.5m")], rates[names.index("m/2")]
        rows.append(PairRow(n, tuple(rates), lost, single, multi, tuple(grows), flags,
                            recommend([(n, at_power, at_false)]) is not None))
    recommended = next((r.pairs for r in rows if r.meets and r.pairs <= max_pairs), None)
    search = min(sims, MAX_SEARCH_SIMS)
    alts = ([] if recommended is not None else
            alternatives(spec, noise, max_pairs, sims=search, seed=seed,
                         invalid_rate=invalid_rate))

    drift_w = noise.window_drift if abs(noise.window_drift) > 1e-9 else spec.rule.band
    cmp_noise = NoiseModel(noise.boot_sd, noise.pass_sd, drift_w, noise.source)
    n_cmp = spec.pairs + (spec.pairs % 2)
    orders: list[OrderRow] = []
    for o in ("AB", "ABBA", *(("random",) if spec.order == "random" else ())):
        offs = drift_offsets(n_cmp, spec.arms[:2], o, pre.seed)
        bias = math.expm1(math.log1p(drift_w) * float(offs.mean()))
        orders.append(OrderRow(
            o, n_cmp, bias,
            adopt_rate(spec, cmp_noise, 0.0, sims=search, seed=seed, pairs=n_cmp, order=o),
            adopt_rate(spec, cmp_noise, effect, sims=search, seed=seed, pairs=n_cmp,
                       order=o)))

    notes = []
    if spec.prereg.rule != registered.prereg.rule:
        notes.append(f"exploratory: planned under rule {spec.prereg.rule}, not the registered "
                     f"{registered.prereg.rule}; running it needs a new registration")
    if invalid_rate > 0:
        notes.append(f"P(adopt) counts a campaign short of its pairs ({invalid_rate:.0%} of "
                     "passes invalid) as not adopting; `spec-ab run --resume RUN_DIR "
                     "--redo-invalid` can finish it")
    if any(g.absolute for g in spec.guardrails):
        notes.append("absolute guardrails (" + ", ".join(
            g.metric for g in spec.guardrails if g.absolute) + ") are not modelled")
    if pre.rule == "point" and recommended is None:
        notes.append("under `point` every pair must clear the band: past a few pairs, more "
                     "pairs add chances for one to fall short and power drops")
    return PlanResult(
        campaign=campaign.name, rule_text=spec.rule.describe(), rule=pre.rule,
        registered_rule=registered.prereg.rule, margin=m, band=spec.rule.band,
        direction=spec.rule.direction, confidence=pre.confidence,
        cells=tuple(f"{w} {lvl}" for w, lvl in spec.cells), pairs=spec.pairs,
        candidates=k, multi_candidates=kk, order=spec.order, noise=noise, effect=effect,
        invalid_rate=invalid_rate, sims=sims, seed=seed, effects=effects, rows=rows,
        recommended=recommended, alternatives=alts, orders=orders, order_drift=drift_w,
        estimate=duration.estimate(campaign), exact_checked=checked, notes=notes,
    )


# --------------------------------------------------------------------------- rendering


def _rate(r: Rate | None) -> str:
    if r is None:
        return "—"
    return f"{fm.abs_pct(r.p)} [{fm.abs_pct(r.lo)}–{fm.abs_pct(r.hi)}]"


def _change(r: PlanResult, e: float, digits: int = 1) -> str:
    """An effect as the change of the metric (a reduction shows as −)."""
    return fm.pct(e if r.direction == "higher" else -e, digits)


def plan_json(r: PlanResult) -> dict[str, Any]:
    """The plan as JSON-ready data (keys: see the module docstring)."""
    nm = r.noise
    names = [n for n, _ in r.effects]
    return {
        "campaign": r.campaign,
        "decision_cells": list(r.cells),
        "candidates": r.candidates,
        "order": r.order,
        "registered_pairs": r.pairs,
        "rule": {"registered": r.registered_rule, "used": r.rule,
                 "exploratory": r.exploratory, "text": r.rule_text, "margin": r.margin,
                 "band": r.band, "confidence": r.confidence, "direction": r.direction},
        "noise": {"boot_sd": nm.boot_sd, "pass_sd": nm.pass_sd,
                  "window_drift": nm.window_drift, "pair_sd": nm.pair_sd,
                  "source": nm.source},
        "invalid_rate": r.invalid_rate,
        "sims": r.sims,
        "seed": r.seed,
        "exact_checked": r.exact_checked,
        "effects": [{"name": n, "effect": e} for n, e in r.effects],
        "table": [{
            "pairs": row.pairs,
            "adopt": {n: rate.as_dict() for n, rate in zip(names, row.adopt, strict=True)},
            "lost_to_invalid": row.lost_to_invalid.as_dict(),
            "meets": row.meets,
            "false_adopt_half_margin": {"single": row.false_single.as_dict(),
                                        "campaign": row.false_campaign.as_dict(),
                                        "candidates": r.multi_candidates},
            "guardrails": [{"metric": g.metric, "limit": g.limit,
                            "hold_at_2x": g.hold_at_2x.as_dict(),
                            "hold_at_0": g.hold_at_0.as_dict()} for g in row.guardrails],
            "flags": row.flags.as_dict(),
        } for row in r.rows],
        "recommendation": {
            "pairs": r.recommended, "power_at": POWER_AT * r.margin, "power_min": POWER_MIN,
            "false_at": FALSE_AT * r.margin, "false_max": FALSE_MAX,
            "wall_s": None if r.recommended is None else r.wall_per_pair * r.recommended,
            "alternatives": [{"change": a.change, "pairs": a.pairs} for a in r.alternatives],
        },
        "orders": [{"order": o.order, "pairs": o.pairs, "bias": o.bias,
                    "null": o.null.as_dict(), "at_effect": o.at_effect.as_dict()}
                   for o in r.orders],
        "order_drift": r.order_drift,
        "wall_s_per_pair": r.wall_per_pair,
        "notes": list(r.notes),
    }


def print_plan(console: Console, result: PlanResult) -> None:
    """Render a plan: the rule, the noise, the pairs table, the recommendation, and what the
    guardrails, flags and candidates do."""
    r = result
    nm = r.noise
    tag = " [bold red](exploratory: not the registered rule)[/]" if r.exploratory else ""
    console.print(f"[bold]plan[/] {r.campaign}: {r.pairs} pairs registered, {r.candidates} "
                  f"candidate(s), order {r.order}, decision cells {', '.join(r.cells)}")
    console.print(f"rule: {r.rule_text}{tag}")
    console.print(f"noise: per-boot sd {fm.abs_pct(nm.boot_sd, 2)}, within-pass sd "
                  f"{fm.abs_pct(nm.pass_sd, 2)}, window drift {fm.pct(nm.window_drift, 2)} "
                  f"(one pair's log-ratio sd {fm.abs_pct(nm.pair_sd, 2)}) — {nm.source}; "
                  f"invalid passes {fm.abs_pct(r.invalid_rate)}")
    console.print(f"Monte Carlo: {r.sims} campaigns per cell of the table, seed {r.seed}; "
                  f"[95% Clopper–Pearson intervals]; {r.exact_checked} campaigns re-judged "
                  "by verdict.judge_run / check_guardrail, all agree")
    table = Table(title=f"P(adopt) by pairs and true effect (m = margin {_change(r, r.margin)}"
                  f"; {r.candidates} candidate(s)){' — exploratory' if r.exploratory else ''}",
                  title_justify="left")
    table.add_column("pairs", justify="right")
    for n, e in r.effects:
        table.add_column(f"{n} ({_change(r, e)})" if n != "0" else "0 (+0%)", justify="right")
    table.add_column("short of pairs", justify="right")
    table.add_column("")
    for row in r.rows:
        mark = ("registered" if row.pairs == r.pairs else "")
        if row.meets:
            mark = (mark + " ✓").strip()
        table.add_row(str(row.pairs), *(_rate(x) for x in row.adopt),
                      _rate(row.lost_to_invalid), mark)
    console.print(table)
    power_txt = f"≥ {POWER_MIN:.0%} at 1.5m ({_change(r, POWER_AT * r.margin)})"
    false_txt = f"≤ {FALSE_MAX:.0%} at m/2 ({_change(r, FALSE_AT * r.margin)})"
    if r.recommended is not None:
        wall = fm.clock(r.wall_per_pair * r.recommended)
        console.print(f"[bold]recommended: {r.recommended} pair(s)[/] — the fewest with "
                      f"P(adopt) {power_txt} and {false_txt} (about {wall})")
    else:
        n_max = max(row.pairs for row in r.rows)
        console.print(f"[bold]recommended: none up to {n_max} pairs[/] has P(adopt) "
                      f"{power_txt} and {false_txt}; what would:")
        for a in r.alternatives:
            got = f"{a.pairs} pair(s)" if a.pairs is not None else "not enough either"
            console.print(f"  {a.change}: {got}")
    checks = Table(title="guardrails, flags and candidates by pairs", title_justify="left")
    checks.add_column("pairs", justify="right")
    checks.add_column("false adopt at m/2: 1 candidate", justify="right")
    checks.add_column(f"{r.multi_candidates} candidates", justify="right")
    guard_names = [(g.metric, g.limit) for g in r.rows[0].guardrails]
    for metric, limit in guard_names:
        checks.add_column(f"{metric} holds at {fm.pct(GUARDRAIL_VIOLATION * limit, 0)} "
                          f"(limit {fm.pct(limit, 0)})", justify="right")
    checks.add_column("flag false alarm (A/A)", justify="right")
    checks.add_column(f"high-variance power (sd ×{HV_POWER_AT:g})", justify="right")
    checks.add_column(f"window-drift power (drift {fm.pct(WD_POWER_AT * r.band, 0)})",
                      justify="right")
    for row in r.rows:
        checks.add_row(str(row.pairs), _rate(row.false_single), _rate(row.false_campaign),
                       *(_rate(g.hold_at_2x) for g in row.guardrails),
                       _rate(row.flags.any_false), _rate(row.flags.high_variance_power),
                       _rate(row.flags.window_drift_power))
    console.print(checks)
    reg = r.row(r.pairs)
    console.print(f"with {r.pairs} pairs: campaign-level false adopt at m/2 with "
                  f"{r.multi_candidates} candidates {_rate(reg.false_campaign)} vs one "
                  f"candidate {_rate(reg.false_single)} (the bar's correction promises no "
                  "higher)")
    for g in reg.guardrails:
        console.print(f"with {r.pairs} pairs: guardrail {g.metric} holds at one cell "
                      f"{_rate(g.hold_at_2x)} of the time when truly "
                      f"{fm.pct(GUARDRAIL_VIOLATION * g.limit, 0)} worse, "
                      f"{_rate(g.hold_at_0)} when not worse")
    f = reg.flags
    if f.any_false is not None:
        console.print(f"with {r.pairs} pairs: flags on an A/A lane: high-variance "
                      f"{_rate(f.high_variance_false)}, window-drift "
                      f"{_rate(f.window_drift_false)}, either {_rate(f.any_false)} (target ≤ "
                      f"{rl.FLAG_FAMILY_ALPHA:.0%})")
    if r.orders:
        ot = Table(title=f"arm order under a linear drift of {fm.pct(r.order_drift, 1)} across "
                   "the window (first candidate, no invalid pass)", title_justify="left")
        ot.add_column("order")
        ot.add_column("pairs", justify="right")
        ot.add_column("gain bias", justify="right")
        ot.add_column("P(adopt) at +0%", justify="right")
        ot.add_column(f"P(adopt) at {_change(r, r.effect, 0)}", justify="right")
        for o in r.orders:
            ot.add_row(o.order, str(o.pairs), fm.pct(o.bias, 2), _rate(o.null),
                       _rate(o.at_effect))
        console.print(ot)
    console.print(f"wall clock: about {fm.clock(r.estimate.total_s)} for {r.pairs} pairs "
                  f"({fm.clock(r.wall_per_pair)} per pair; {r.estimate.assumptions})")
    for note in r.notes:
        console.print(f"note: {note}")
