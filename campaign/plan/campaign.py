"""The whole plan of one campaign: the table of P(adopt) by pairs and effect, the
recommendation, guardrails, flags, several candidates, AB vs ABBA, the wall clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from campaign.campaignfile import Campaign, duration
from campaign.catalog import FIDELITY_METRICS
from campaign.errors import UsageError
from campaign.plan.exact import (
    _cross_check,
    _cross_check_flags,
    _cross_check_guard,
)
from campaign.plan.guards import (
    BROKEN,
    HOLDS,
    GuardModel,
    guard_models,
    guard_states,
    simulate_guards,
    stopping,
)
from campaign.plan.kernel import (
    DEFAULT_INVALID_RATE,
    EFFECTS,
    EXACT_SAMPLE,
    FALSE_AT,
    FALSE_MAX,
    GUARDRAIL_VIOLATION,
    MAX_SEARCH_SIMS,
    MIN_TABLE_PAIRS,
    MORE_PAIRS,
    MULTI_CANDIDATES,
    POWER_AT,
    POWER_MIN,
    Rate,
    RuleName,
    RuleSpec,
    rate_of,
    rule_spec,
)
from campaign.plan.lanes import LaneRow, lane_rows, unequal_row
from campaign.plan.noiserun import aa_noise, run_noise
from campaign.plan.sequential import SeqPlan, plan_sequential
from campaign.plan.simulate import (
    Draws,
    FlagRates,
    _rng,
    adopt_rate,
    campaign_rates,
    decide,
    drift_offsets,
    effect_d,
    flag_draws,
    flag_rates,
    flags_of,
)
from campaign.verdict import capacity
from campaign.verdict import rule as rl
from campaign.verdict.aa import aa_run_of
from campaign.verdict.noise import NoiseModel, from_drift
from campaign.verdict.rule import FAILURE_METRICS
from campaign.verdict.showable import guard_cells, other_cells, relative

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
    """One relative guardrail at one pair count, family-wise over its cells, on its own
    noise (`plan.guards`)."""

    metric: str
    limit: float
    hold_at_2x: Rate
    """P(it holds at every cell) when the candidate is truly 2× the limit worse."""
    hold_at_0: Rate
    """P(it holds at every cell) when the candidate does not change it."""
    break_at_0: Rate
    """P(it is broken at some cell) with no change: the false break, family-wise."""
    stops_at_0: Rate
    """P(it stops adoption) with no change (broken, or unclear where unclear stops)."""
    passes_at_2x: Rate
    """P(it does not stop adoption) at 2× the limit: the missed violation."""
    model: GuardModel
    family_alpha: float
    """α ÷ k of each bound (k: every guardrail check of a candidate)."""


def guard_rows(spec: RuleSpec, draws: Draws, *, sims: int, seed: int
               ) -> tuple[list[GuardrailRow], int]:
    """Each relative guardrail's error rates at `spec.pairs` pairs: no change (the table's
    own guardrail draws) and 2× its limit (its own draws, the others unchanged), the latter
    re-judged on a sample through `verdict.judge_run`. Returns the rows and the number of
    campaigns re-judged."""
    models, n = spec.guard_models, spec.pairs
    if not models or draws.guard is None:
        return [], 0
    rows, checked = [], 0
    for j, m in enumerate(models):
        worse = [GUARDRAIL_VIOLATION * m.guardrail.max_worsening if jj == j else 0.0
                 for jj in range(len(models))]
        at2 = simulate_guards(models, worse, pairs=n, candidates=1, sims=sims,
                              checks=spec.guard_checks, alpha=spec.rule.alpha,
                              rng=_rng(seed, n, 600 + j))
        full0, full2 = guard_states(draws.guard, j), guard_states(at2, j)
        stop0, stop2 = stopping(draws.guard, j, full0)[..., 0], stopping(at2, j, full2)[..., 0]
        s0, s2 = full0[..., 0], full2[..., 0]
        own = len(m.cells)
        checked += _cross_check_guard(spec, at2, j, s2)
        rows.append(GuardrailRow(
            m.guardrail.metric, m.guardrail.max_worsening,
            rate_of(np.all(s2[:, :own] == HOLDS, axis=1)),
            rate_of(np.all(s0[:, :own] == HOLDS, axis=1)),
            rate_of(np.any(s0 == BROKEN, axis=1)), rate_of(np.any(stop0, axis=1)),
            rate_of(~np.any(stop2, axis=1)), m, at2.each))
    return rows, checked


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
    adopt_rule_only: tuple[Rate, ...] = ()
    """P(adopt) at each effect without the guardrails (the rule and its gates alone)."""


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
    lanes: list[LaneRow] = field(default_factory=list)
    """The pooled verdict with 1, 2, 4 and the campaign's own number of lanes."""
    lane_names: tuple[str, ...] = ()
    """The campaign's lanes (its one `lane:` when it has no `lanes:` table)."""
    sequential: SeqPlan | None = None
    """A sequential design's figures (None: a fixed number of pairs)."""
    unequal_lanes: LaneRow | None = None
    """2 lanes, the second twice as noisy: what the equal-noise assumption costs."""
    pooled_lanes: int = 1
    """Lanes whose pairs the table pools (a sharded campaign's): `pairs`, the rows and the
    recommendation count pooled pairs, `pairs` ÷ this per lane."""
    pairs_said: str = ""
    """The registered pairs in words (`duration.pairs_said`): "12 pairs", or "up to 12
    pairs, looks from pair 2, may stop early" for a sequential design."""

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
        """Night seconds per (pooled) pair: the lanes measure theirs in parallel."""
        return self.estimate.total_s / self.pairs

    def per_lane(self, pairs: int) -> str:
        """`pairs` pooled pairs in words, with what each lane runs (a sharded campaign)."""
        if self.pooled_lanes <= 1:
            return f"{pairs} pairs"
        return (f"{pairs} pairs pooled ({-(-pairs // self.pooled_lanes)} per lane × "
                f"{self.pooled_lanes} lanes)")


def noise_for(campaign: Campaign, *, noise_run: Path | None, drift: float | None,
              band: float) -> NoiseModel:
    """The noise model of a plan: an A/A run, a given per-boot drift, the campaign's own
    A/A run (`drift_band: {from: RUN_DIR}`), or — assumed — a per-boot drift the size of the
    band (conservative: the band is meant to hold most single-pair A/A gains)."""
    if noise_run is not None and drift is not None:
        raise UsageError("give --noise RUN_DIR or --drift, not both")
    metric = campaign.preregistration.primary_metric
    workloads = sorted({dc.workload for dc in campaign.preregistration.decision_cells})
    target = capacity.slo_target(campaign.preregistration)  # capacity at SLO's reading
    if noise_run is not None:
        return run_noise(noise_run, metric, workloads, target)
    if drift is not None:
        return from_drift(drift)
    aa_run = aa_run_of(campaign)
    if aa_run is not None:
        return aa_noise(aa_run, metric, workloads, target)
    return from_drift(band, source=f"assumed (no --noise or --drift): per-boot drift sd = the "
                      f"drift band {band:.1%}, within-pass sd 1.0%, no trend across the window")


def with_guardrails(spec: RuleSpec, campaign: Campaign, noise_run: Path | None) -> RuleSpec:
    """`spec` with every guardrail's cells and its relative guardrails' models (noise from
    `noise_run` where it has them, else assumed): its P(adopt) then includes them."""
    places = tuple(tuple(guard_cells(g, campaign, spec.cells)) for g in spec.guardrails)
    others = tuple(tuple(o) for o in other_cells(spec.guardrails, campaign, spec.cells))
    spec = dataclasses.replace(spec, guard_places=places, guard_others=others)
    return dataclasses.replace(spec, guard_models=tuple(guard_models(campaign, spec,
                                                                     noise_run)))


def guard_notes(spec: RuleSpec) -> list[str]:
    """What the plan says of the guardrails it does and does not simulate."""
    out = []
    if spec.guard_models:
        out.append("P(adopt) includes the relative guardrails (" + ", ".join(
            m.guardrail.metric for m in spec.guard_models) + ") at no true change, each "
            "on its own noise (below); `adopt_rule_only` in the JSON is the rule alone. "
            "The lanes rows and the AB vs ABBA comparison are the rule alone")
    fidelity = [g.metric for g in spec.guardrails if g.metric in FIDELITY_METRICS]
    absolute = [g.metric for g in spec.guardrails
                if g.metric in FAILURE_METRICS and g.metric not in fidelity]
    if absolute:
        out.append("absolute guardrails (" + ", ".join(absolute) + ") are not modelled: the "
                   "plan takes both arms to fail no request (they hold; they count in the "
                   "family's k); how often they stop a candidate that fails requests is not "
                   "estimated")
    # compared by differences (an absolute limit, a share of requests): not drawn
    differences = [g.metric for g in spec.guardrails if not relative(g)
                   and g.metric not in FAILURE_METRICS and g.metric not in fidelity]
    if differences:
        out.append("guardrails compared by differences (" + ", ".join(differences) + ") are "
                   "not modelled: the plan takes the candidate not to change them (they "
                   "hold; they count in the family's k)")
    absolute += differences
    if fidelity:
        out.append("fidelity guardrails (" + ", ".join(fidelity) + ") are not simulated: the "
                   "verdict judges them against the control's own agreement, measured, with "
                   "no pair-to-pair noise, so a lossless candidate holds them (the plan "
                   "takes the candidate to be lossless; they count in the family's k); how "
                   "often they catch a lossy one is docs/verdict.md's, \"Fidelity\"")
    if not spec.guard_models and len(absolute) + len(fidelity) < len(spec.guardrails):
        out.append("a relative guardrail with no cell to check (its workload or level not "
                   "configured) is not modelled")
    return out


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
    counts = table_pairs(max_pairs, spec.pairs)
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


def _pair_row(spec: RuleSpec, noise: NoiseModel, n: int, effects: Sequence[tuple[str, float]],
              kk: int, *, sims: int, seed: int, invalid_rate: float) -> tuple[PairRow, int]:
    """The plan's row of `n` pairs (P(adopt) by effect, the false adopts of one and of `kk`
    candidates, guardrails, flags, the rule alone) and how many of its simulated campaigns
    were re-judged by `verdict.judge_run`."""
    m, k, checked = spec.prereg.margin, spec.candidates, 0
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
    grows, n_checked = guard_rows(s_n, draws, sims=sims, seed=seed)
    checked += n_checked
    flags = flag_rates(single_spec, noise, sims=sims, seed=seed)
    if n >= 2:
        aa = NoiseModel(noise.boot_sd, noise.pass_sd, 0.0, "")
        fd = flag_draws(single_spec, aa, sims=min(sims, EXACT_SAMPLE),
                        rng=_rng(seed, n, 7))
        hv, wd = flags_of(fd, single_spec)
        checked += _cross_check_flags(single_spec, fd, hv, wd)
    names = [nm for nm, _ in effects]
    at_power, at_false = rates[names.index("1.5m")], rates[names.index("m/2")]
    bare = dataclasses.replace(draws, guard=None)
    rule_only = tuple(rate_of(np.asarray(decide(bare, effect_d(e, s_n.rule), s_n)
                                         .any(axis=1))) for _, e in effects)
    return PairRow(n, tuple(rates), lost, single, multi, tuple(grows), flags,
                   recommend([(n, at_power, at_false)]) is not None, rule_only), checked


def _order_rows(spec: RuleSpec, noise: NoiseModel, effect: float, *, sims: int,
                seed: int) -> tuple[float, list[OrderRow]]:
    """AB against ABBA (and the campaign's `random`) under a linear drift across the window
    (the lane's measured drift, else the band): the gain's bias and P(adopt) at 0 and at
    `effect`; returns the drift used and the rows."""
    drift_w = noise.window_drift if abs(noise.window_drift) > 1e-9 else spec.rule.band
    cmp_noise = NoiseModel(noise.boot_sd, noise.pass_sd, drift_w, noise.source)
    n_cmp = spec.pairs + (spec.pairs % 2)
    orders: list[OrderRow] = []
    for o in ("AB", "ABBA", *(("random",) if spec.order == "random" else ())):
        offs = drift_offsets(n_cmp, spec.arms[:2], o, spec.prereg.seed)
        bias = math.expm1(math.log1p(drift_w) * float(offs.mean()))
        orders.append(OrderRow(
            o, n_cmp, bias,
            adopt_rate(spec, cmp_noise, 0.0, sims=sims, seed=seed, pairs=n_cmp, order=o),
            adopt_rate(spec, cmp_noise, effect, sims=sims, seed=seed, pairs=n_cmp,
                       order=o)))
    return drift_w, orders


def _plan_notes(spec: RuleSpec, registered: RuleSpec, invalid_rate: float,
                recommended: int | None) -> list[str]:
    """What a reader of the plan should know beside its tables."""
    notes: list[str] = []
    if spec.prereg.rule != registered.prereg.rule:
        notes.append(f"exploratory: planned under rule {spec.prereg.rule}, not the registered "
                     f"{registered.prereg.rule}; running it needs a new registration")
    if invalid_rate > 0:
        notes.append(f"invalid passes ({invalid_rate:.0%}, taken as the lane's faults) are "
                     f"redone within the night up to the registered redo budget "
                     f"({spec.redo_budget} pair(s), `gates.redo_budget`, as `spec-ab run` "
                     "does); P(adopt) counts a campaign still short of its pairs after that "
                     "as not adopting; `spec-ab run --resume RUN_DIR --redo-invalid` can "
                     "finish it. A candidate's own failures are not modelled")
    notes += guard_notes(spec)
    if spec.prereg.rule == "point" and recommended is None:
        notes.append("under `point` every pair must clear the band: past a few pairs, more "
                     "pairs add chances for one to fall short and power drops")
    return notes


EVERY_PAIR_UP_TO = 16
"""The pairs table has a row for every pair count up to this; beyond it, rows at 20, 24,
32, 40, 48, 64, 80, 100, 128, 160, 200 (and the registered count): a row costs its pairs'
worth of simulated campaigns, and 64 rows of them took minutes."""
_SPARSE_ROWS = (20, 24, 32, 40, 48, 64, 80, 100, 128, 160, 200)


def table_pairs(max_pairs: int, registered: int) -> list[int]:
    """The pair counts the table simulates: every one up to `EVERY_PAIR_UP_TO`, then the
    sparse rows, `max_pairs` and the registered count."""
    dense = range(1, min(max_pairs, EVERY_PAIR_UP_TO) + 1)
    sparse = (n for n in _SPARSE_ROWS if n <= max_pairs)
    return sorted({*dense, *sparse, max_pairs, registered})


def _sequential(campaign: Campaign, spec: RuleSpec, noise: NoiseModel, *, sims: int,
                seed: int) -> SeqPlan | None:
    """The registered sequential design's figures on the plan's pair noise."""
    pre = campaign.preregistration
    if pre.sequential is None:
        return None
    rule = rl.Rule(prereg=pre.model_copy(update={"guardrails": []}), band=spec.rule.band)
    return plan_sequential(rule, noise.pair_sd, sims=min(sims, 4000), seed=seed,
                           guards=spec if spec.guard_models else None)


def _check_arguments(campaign: Campaign, *, effect: float, sims: int, pairs: int | None,
                     rule: RuleName | None, invalid_rate: float) -> None:
    """Refuse what cannot be planned (UsageError, exit 2)."""
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
    design = campaign.preregistration.sequential
    problem = None if rule is None or design is None else design.rule_problem(rule)
    if problem is not None:  # what `check` says of such a file
        raise UsageError(f"--rule {rule}: {problem}",
                         hint="plan the sequential design under rule bound (leave out --rule)")


def plan_campaign(campaign: Campaign, *, effect: float, noise_run: Path | None,
                  drift: float | None, sims: int, seed: int = 0, pairs: int | None = None,
                  rule: RuleName | None = None,
                  invalid_rate: float = DEFAULT_INVALID_RATE,
                  progress: Callable[[str], None] | None = None) -> PlanResult:
    """The whole plan (see the module docstring). Deterministic for a given seed.
    `progress` is told each long step as it starts."""
    _check_arguments(campaign, effect=effect, sims=sims, pairs=pairs, rule=rule,
                     invalid_rate=invalid_rate)
    registered = rule_spec(campaign)
    spec = registered.at(rule=rule) if rule is not None else registered
    noise = noise_for(campaign, noise_run=noise_run, drift=drift, band=spec.rule.band)
    spec = with_guardrails(spec, campaign, noise_run if noise_run is not None else
                           (aa_run_of(campaign) if drift is None else None))
    # a sharded campaign is judged pooled over its lanes (`report RUN_A RUN_B`): its
    # table, guardrails and recommendation count pooled pairs (the lanes rows keep the
    # per-lane registration and add the lanes' own gates)
    n_lanes = len(campaign.lane_names)
    per_lane = spec
    if n_lanes > 1:
        spec, registered = spec.pooled(n_lanes), registered.pooled(n_lanes)
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
    ns = table_pairs(max_pairs, spec.pairs)
    # a plan longer than the default table's says what it is doing (minutes, unsaid, look
    # like a hang)
    tell = (progress if progress is not None and max_pairs > MIN_TABLE_PAIRS
            else lambda _text: None)
    tell(f"simulating {sims:,} campaigns at each of {len(ns)} pair counts (1 to "
         f"{max(ns)})")
    for n in ns:
        row, n_checked = _pair_row(spec, noise, n, effects, kk, sims=sims, seed=seed,
                                   invalid_rate=invalid_rate)
        rows.append(row)
        checked += n_checked
    # a lane registers whole pairs: a sharded campaign's pooled counts are lanes' multiples
    recommended = next((r.pairs for r in rows if r.meets and r.pairs <= max_pairs
                        and r.pairs % n_lanes == 0), None)
    search = min(sims, MAX_SEARCH_SIMS)
    alts = ([] if recommended is not None else
            alternatives(spec, noise, max_pairs, sims=search, seed=seed,
                         invalid_rate=invalid_rate))

    drift_w, orders = _order_rows(spec, noise, effect, sims=search, seed=seed)

    # a sharded campaign's night is one lane's (the lanes run in parallel)
    estimate = duration.estimate(campaign.for_lane(campaign.lane_names[0]))
    lanes = lane_rows(per_lane, noise, campaign_lanes=n_lanes,
                      night_s=estimate.total_s, sims=sims, seed=seed,
                      invalid_rate=invalid_rate)

    notes = _plan_notes(spec, registered, invalid_rate, recommended)
    unequal = unequal_row(per_lane, noise, night_s=estimate.total_s, sims=sims, seed=seed,
                          invalid_rate=invalid_rate)
    if campaign.preregistration.sequential is not None:
        tell(f"simulating the sequential design ({campaign.preregistration.sequential.max_looks}"
             " looks)")
    return PlanResult(
        sequential=_sequential(campaign, spec, noise, sims=sims, seed=seed),
        unequal_lanes=unequal,
        campaign=campaign.name, rule_text=spec.rule.describe(), rule=pre.rule,
        registered_rule=registered.prereg.rule, margin=m, band=spec.rule.band,
        direction=spec.rule.direction, confidence=pre.confidence,
        cells=tuple(f"{w} {lvl}" for w, lvl in spec.cells), pairs=spec.pairs,
        candidates=k, multi_candidates=kk, order=spec.order, noise=noise, effect=effect,
        invalid_rate=invalid_rate, sims=sims, seed=seed, effects=effects, rows=rows,
        recommended=recommended, alternatives=alts, orders=orders, order_drift=drift_w,
        estimate=estimate, exact_checked=checked + sum(x.exact_checked for x in lanes),
        notes=notes, lanes=lanes,
        lane_names=tuple(campaign.lane_names), pairs_said=duration.pairs_said(campaign),
        pooled_lanes=n_lanes,
    )
