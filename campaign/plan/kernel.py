"""The plan's building blocks: Monte Carlo rates, the campaign's rule as arrays, and
the flags' tests vectorised (the comparisons of `campaign.verdict.rule` and
`campaign.verdict.judge`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from campaign.campaignfile import Campaign, Guardrail, Preregistration
from campaign.campaignfile.models import RuleName as RuleName
from campaign.campaignfile.schedule import Order
from campaign.errors import UsageError
from campaign.verdict import rule as rl
from campaign.verdict import stats as st
from campaign.verdict.aa import resolve_drift_band, resolve_guardrail_bands

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
    guard_bands: tuple[float, ...] = ()
    """Each guardrail's registered boot-to-boot band, resolved (`Rule.guardrail_bands`)."""
    guard_places: tuple[tuple[tuple[str, str], ...], ...] = ()
    """Each guardrail's cells, where `spec-ab report` checks it (`plan.guards`)."""
    guard_others: tuple[tuple[tuple[str, str], ...], ...] = ()
    """Each guardrail's deterioration cells (every other configured cell of its metric)."""
    guard_models: tuple[Any, ...] = ()
    """The relative guardrails the plan simulates (`plan.guards.GuardModel`); empty: the
    campaign's P(adopt) is the rule's alone."""

    def guard_band(self, index: int) -> float:
        return (self.guard_bands[index] if index < len(self.guard_bands)
                else self.rule.band)

    @property
    def guard_checks(self) -> int:
        """k of the guardrails' family: every check of one candidate."""
        return (sum(max(1, len(p)) for p in self.guard_places)
                + sum(len(p) for p in self.guard_others))

    def guard_rule(self) -> rl.Rule:
        """The rule with its guardrails, as `spec-ab report` judges a run."""
        prereg = self.prereg.model_copy(update={"guardrails": list(self.guardrails)})
        return rl.Rule(prereg=prereg, band=self.rule.band, guardrail_bands=self.guard_bands)

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

    @property
    def redo_budget(self) -> int:
        """Pairs left invalid by the lane that the night measures again
        (`gates.redo_budget`)."""
        return self.prereg.gates.redo_budget

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

    def pooled(self, lanes: int) -> RuleSpec:
        """The rule a pooled report of `lanes` lanes judges under (`report.build.
        _pooled_rule`): `pairs` counts per lane, so the pooled run is owed pairs × lanes —
        and with several candidates the `point` bar (`Rule.bar_d`) is that of the pooled
        pairs."""
        prereg = self.prereg.model_copy(update={"pairs": self.pairs * lanes})
        return dataclasses.replace(self, rule=dataclasses.replace(self.rule, prereg=prereg))


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
    # A sequential design is planned on its own (`plan.sequential`); the table is the fixed
    # `bound` design with n pairs, the comparison it is judged against.
    prereg = pre.model_copy(update={"guardrails": [], "sequential": None})
    rule = rl.Rule(prereg=prereg, band=resolve_drift_band(campaign) if band is None else band)
    return RuleSpec(rule, tuple(cells), tuple(campaign.arm_names), tuple(pre.guardrails),
                    resolve_guardrail_bands(campaign))


def flag_alpha(cells: int, candidates: int = 1, lanes: int = 1) -> float:
    """Level of each noise flag's test (as `verdict.judge_run` sets it: `rule.flag_alpha`)."""
    return rl.flag_alpha(cells, candidates, lanes)


def adopts(d: np.ndarray, rule: rl.Rule, candidates: int = 1) -> np.ndarray:
    """The rule's decision of each simulated campaign of one candidate: d[sim, pair, cell]
    are the paired log ratios (positive = better) of the decision cells. True = every
    decision cell meets the rule (no missing pair; one pair never adopts: `verdict`'s
    one-pair gate).

    The comparisons of `rule.adopts_bound` / `rule.adopts_point` / `rule.adopts_ci` (every
    decision cell must adopt: no correction across cells), on arrays, with the bar and the
    bound's α of `candidates`.
    """
    pre = rule.prereg
    eps = rl.EPS
    _, n, _ = d.shape
    mean = d.mean(axis=1)
    bar = rule.bar_d(candidates)
    if n < 2:  # the one-pair gate: one pair shows neither spread nor window stability
        return np.zeros(d.shape[0], dtype=bool)
    if pre.rule == "point":
        up = rl.better_d(rule.band, rule.direction)
        cell = (mean >= bar - eps) & np.all(d >= up - eps, axis=1)
        return np.asarray(np.all(cell, axis=1))
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    if pre.rule == "bound":
        lcb = mean - st.t_critical(1 - rule.ci_alpha(candidates), n - 1) * se
        cell = (mean >= bar - eps) & (lcb >= rule.floor_d() - eps)
        return np.asarray(np.all(cell, axis=1))
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


def lanes_disagree_p(d: np.ndarray, lane_of: np.ndarray, sd: float) -> np.ndarray | None:
    """`stats.lanes_test` on arrays: d[sim, pair, cell] the pooled pairs' log ratios,
    lane_of[pair] each pair's lane (0…L−1). p[sim, cell] of "every lane measures the same
    change" (Σ nₗ (meanₗ − mean)² / sd², χ² with one degree of freedom per lane beyond the
    first); None with fewer than two lanes holding pairs, or sd ≤ 0."""
    lanes = np.unique(lane_of)
    if lanes.size < 2 or sd <= 0:
        return None
    onehot = (lane_of[:, None] == lanes[None, :]).astype(float)  # [pair, lane]
    counts = onehot.sum(axis=0)
    means = np.einsum("spc,pl->slc", d, onehot) / counts[None, :, None]
    mean = d.mean(axis=1)
    stat = np.einsum("l,slc->sc", counts, (means - mean[:, None, :]) ** 2)
    return np.asarray(sps.chi2.sf(stat / sd**2, lanes.size - 1))


def lanes_disagree_flags(d: np.ndarray, lane_of: np.ndarray, rule: rl.Rule,
                         alpha: float) -> np.ndarray:
    """The pooled verdict's `lanes-disagree` gate of each decision cell of one candidate:
    `lanes_disagree_p` under the rule's pair sd below `alpha`. flags[sim, cell]."""
    p = lanes_disagree_p(d, lane_of, rule.pair_sd)
    if p is None:
        return np.zeros((d.shape[0], d.shape[2]), dtype=bool)
    return np.asarray(p < alpha)
