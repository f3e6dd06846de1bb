"""`spec-ab plan`: what a campaign's pre-registered rule will decide, before the night.

A Monte Carlo of the campaign's exact rule under a noise model (`campaign.noise`): for a
true effect on the primary metric, simulate thousands of campaigns (pairs × decision cells,
in the campaign's own arm order), judge each one, and count adoptions. It answers the
questions a lab night costs too much to answer by trial: how often does the rule adopt a
change that does nothing (false adopt), how often does it adopt a real +15% (power), how
many pairs does that take, and what does the arm order do under a drift across the window.

Exactness. The rule is the one `campaign.verdict` applies to real runs. Calling it once per
simulated campaign is too slow (thousands × every effect × every pair count), so the
counting is vectorised with numpy (`adopts`): the same comparisons, with the same epsilon,
on arrays. Every plan then re-judges a sample of its simulated campaigns through
`verdict.judge_run` itself — the very function `spec-ab report` calls — and refuses to
print (a bug, exit 1) if a single decision differs. So a change to the rule in
`verdict.py` that the kernel does not follow cannot go unnoticed.

What is modelled: the primary metric in every pre-registered decision cell, the same true
effect in each. Guardrails are assumed to hold (the plan has no model of p99 TTFT); a
candidate that breaks one adopts less often than printed. Rates carry 95% Clopper–Pearson
intervals (the Monte Carlo's own uncertainty).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
from campaign.noise import NoiseModel, estimate_noise, from_drift
from campaign.schedule import Order, plan_slots
from campaign.spec import Campaign, Preregistration

GRID = (-0.10, -0.05, 0.0, 0.05, 0.10, 0.15, 0.20, 0.25)
"""True effects the plan prints P(adopt) and P(keep) for."""
FALSE_ADOPT_AT = (0.0, 0.05)
POWER_TARGETS = (0.80, 0.90)
EXACT_SAMPLE = 48
"""Simulated campaigns per grid effect re-judged by `verdict.judge_run` (the cross-check)."""
MAX_SEARCH_SIMS = 2000
"""Campaigns per pair count in the pairs-for-power search (enough for ±2% near 90%)."""
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
    """Control first; the first candidate is the one simulated."""

    @property
    def prereg(self) -> Preregistration:
        return self.rule.prereg

    @property
    def order(self) -> Order:
        return self.rule.prereg.order

    @property
    def pairs(self) -> int:
        return self.rule.prereg.pairs


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
    # Guardrails are not modelled (see the module docstring): the exact check must not
    # count them as "cannot be checked".
    prereg = pre.model_copy(update={"guardrails": []})
    rule = rl.Rule(prereg=prereg, band=resolve_drift_band(campaign) if band is None else band)
    return RuleSpec(rule, tuple(cells), tuple(campaign.arm_names))


def adopts(d: np.ndarray, rule: rl.Rule, candidates: int = 1) -> np.ndarray:
    """The campaign decision of each simulated campaign: d[sim, pair, cell] are the paired
    log ratios (positive = better) of the decision cells. True = adopt.

    The comparisons of `rule.adopts_point` / `rule.adopts_ci` (every decision cell must
    adopt: no correction across cells), on arrays; `plan_campaign` checks a sample against
    `verdict.judge_run`.
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


def exact_adopts(d: np.ndarray, spec: RuleSpec) -> bool:
    """One simulated campaign d[pair, cell] judged by `verdict.judge_run` itself."""
    rule = spec.rule
    control, cand = spec.arms[0], spec.arms[1]
    sign = 1.0 if rule.prereg.metric_direction == "higher" else -1.0
    table = td.RunTable(run="plan")
    n = d.shape[0]
    table.pairs = list(range(1, n + 1))
    for j, (w, lvl) in enumerate(spec.cells):
        data = td.CellData(w, lvl, rule.metric)
        for i in range(n):
            x = 1000.0
            y = x * math.exp(sign * float(d[i, j]))
            data.values[i + 1] = {control: td.ArmValue(x, x, x, 1),
                                  cand: td.ArmValue(y, y, y, 1)}
        table.cells[(w, lvl, rule.metric)] = data
    verdict = vd.judge_run(table, rule, [control, cand], metrics=[rule.metric])
    return verdict.decision == "adopt"


# --------------------------------------------------------------------------- simulation


def drift_offsets(pairs: int, arms: Sequence[str], order: Order, seed: int) -> np.ndarray:
    """Each pair's (candidate − control) position in the window, from 0 to 1 across all
    slots, in the campaign's own schedule. Times the log window drift, the pair's bias."""
    slots = plan_slots(pairs, list(arms), order, seed)
    span = max(1, len(slots) - 1)
    pos: dict[tuple[int, str], float] = {(s.pair, s.arm): s.index / span for s in slots}
    return np.array([pos[(p, arms[1])] - pos[(p, arms[0])] for p in range(1, pairs + 1)])


def simulate(noise: NoiseModel, *, pairs: int, cells: int, sims: int, offsets: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    """Paired log ratios at a true effect of 0: d[sim, pair, cell] (add ln(1 + effect)).

    Each pair's two boots differ by √2·boot_sd (shared by the cells of a pair), each cell's
    two passes by √2·pass_sd, and the window's linear drift adds its share by position.
    """
    boot = rng.standard_normal((sims, pairs, 1)) * (math.sqrt(2.0) * noise.boot_sd)
    passes = rng.standard_normal((sims, pairs, cells)) * (math.sqrt(2.0) * noise.pass_sd)
    trend = math.log1p(noise.window_drift) * offsets[None, :, None]
    return np.asarray(boot + passes + trend)


def _rng(seed: int, *key: int) -> np.random.Generator:
    """One stream per (seed, pairs): every effect and every order of a plan sees the same
    noise (common random numbers), so differences between rows are the effect's or the
    order's, not the draw's."""
    return np.random.default_rng([seed, *key])


def adopt_rate(spec: RuleSpec, noise: NoiseModel, effect: float, *, sims: int, seed: int = 0,
               pairs: int | None = None, order: Order | None = None) -> Rate:
    """P(adopt) at a true `effect` (0.15 = +15%), as a Monte Carlo `Rate`."""
    n = pairs or spec.pairs
    o = order or spec.order
    offsets = drift_offsets(n, spec.arms, o, spec.rule.prereg.seed)
    d = simulate(noise, pairs=n, cells=len(spec.cells), sims=sims, offsets=offsets,
                 rng=_rng(seed, n))
    shift = rl.better_d(effect, spec.rule.direction)
    return Rate(int(adopts(d + shift, spec.rule).sum()), sims)


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


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class OrderRow:
    order: str
    pairs: int
    bias: float
    """Mean shift of the estimated gain the window drift causes (as a gain)."""
    null: Rate
    at_effect: Rate


@dataclass(frozen=True)
class PowerRow:
    target: float
    pairs: int | None
    rate: Rate
    wall_s: float | None


@dataclass
class PlanResult:
    campaign: str
    rule_text: str
    rule: str
    margin: float
    band: float
    cells: tuple[str, ...]
    pairs: int
    order: str
    noise: NoiseModel
    effect: float
    sims: int
    seed: int
    grid: list[tuple[float, Rate]]
    at_effect: Rate
    power: list[PowerRow]
    orders: list[OrderRow]
    order_drift: float
    estimate: duration.Estimate
    exact_checked: int
    notes: list[str] = field(default_factory=list)

    def rate_at(self, effect: float) -> Rate:
        for e, r in self.grid:
            if abs(e - effect) < 1e-12:
                return r
        raise KeyError(effect)

    @property
    def false_adopt(self) -> list[tuple[float, Rate]]:
        return [(e, self.rate_at(e)) for e in FALSE_ADOPT_AT if e < self.margin - 1e-12]


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


def plan_campaign(campaign: Campaign, *, effect: float, noise_run: Path | None,
                  drift: float | None, sims: int, seed: int = 0) -> PlanResult:
    """The whole plan: rates over the effect grid, false adopts, pairs for power, AB vs
    ABBA under drift, and the wall-clock estimate. Deterministic for a given seed."""
    if sims < 100:
        raise UsageError(f"--sims {sims}: use at least 100 simulated campaigns per effect")
    if effect <= -1:
        raise UsageError(f"--effect {effect:.0%}: a speed change must be above -100%")
    if len(campaign.arm_names) < 2:
        raise UsageError("the campaign has no candidate arm")
    spec = rule_spec(campaign)
    noise = noise_for(campaign, noise_run=noise_run, drift=drift, band=spec.rule.band)
    pre = spec.rule.prereg
    n_cells = len(spec.cells)
    offsets = drift_offsets(spec.pairs, spec.arms, spec.order, pre.seed)
    base = simulate(noise, pairs=spec.pairs, cells=n_cells, sims=sims, offsets=offsets,
                    rng=_rng(seed, spec.pairs))
    grid: list[tuple[float, Rate]] = []
    checked = 0
    effects = sorted({*GRID, effect})
    for e in effects:
        d = base + rl.better_d(e, spec.rule.direction)
        decided = adopts(d, spec.rule)
        if e in GRID:
            grid.append((e, Rate(int(decided.sum()), sims)))
        for i in range(min(EXACT_SAMPLE, sims)):
            if exact_adopts(d[i], spec) != bool(decided[i]):
                raise AssertionError(
                    f"plan's vectorised rule disagrees with verdict.judge_run at effect "
                    f"{e:+.0%}, simulated campaign {i}: a bug in campaign/plan.py")
            checked += 1
        if abs(e - effect) < 1e-12:
            at_effect = Rate(int(decided.sum()), sims)

    est = duration.estimate(campaign)
    per_pair = est.total_s / spec.pairs
    search_sims = min(sims, MAX_SEARCH_SIMS)
    power: list[PowerRow] = []
    for target in POWER_TARGETS:
        n, r = pairs_for_power(spec, noise, effect, target, sims=search_sims, seed=seed)
        power.append(PowerRow(target, n, r, None if n is None else per_pair * n))

    drift_w = noise.window_drift if abs(noise.window_drift) > 1e-9 else spec.rule.band
    cmp_noise = NoiseModel(noise.boot_sd, noise.pass_sd, drift_w, noise.source)
    n_cmp = spec.pairs + (spec.pairs % 2)
    orders: list[OrderRow] = []
    for o in ("AB", "ABBA", *(("random",) if spec.order == "random" else ())):
        offs = drift_offsets(n_cmp, spec.arms, o, pre.seed)
        bias = math.expm1(math.log1p(drift_w) * float(offs.mean()))
        orders.append(OrderRow(
            o, n_cmp, bias,
            adopt_rate(spec, cmp_noise, 0.0, sims=search_sims, seed=seed, pairs=n_cmp, order=o),
            adopt_rate(spec, cmp_noise, effect, sims=search_sims, seed=seed, pairs=n_cmp,
                       order=o)))

    notes = ["guardrails are assumed to hold (not modelled); a candidate that breaks one "
             "adopts less often"]
    if pre.rule == "point" and any(p.pairs is None for p in power):
        notes.append("under `point` every pair must clear the band: past a few pairs, more "
                     "pairs add chances for one to fall short and power drops; with this "
                     "noise consider `rule: ci` (power grows with pairs) or a quieter lane")
    if len(spec.arms) > 2:
        notes.append(f"{len(spec.arms) - 1} candidates: each is judged against the control "
                     f"like '{spec.arms[1]}' (simulated); the schedule includes all of them")
    return PlanResult(
        campaign=campaign.name, rule_text=spec.rule.describe(), rule=pre.rule,
        margin=pre.margin, band=spec.rule.band, cells=tuple(f"{w} {lvl}" for w, lvl in spec.cells),
        pairs=spec.pairs, order=spec.order, noise=noise, effect=effect, sims=sims, seed=seed,
        grid=grid, at_effect=at_effect, power=power, orders=orders, order_drift=drift_w,
        estimate=est, exact_checked=checked, notes=notes,
    )


# --------------------------------------------------------------------------- rendering


def _rate(r: Rate) -> str:
    return f"{fm.abs_pct(r.p)} [{fm.abs_pct(r.lo)}–{fm.abs_pct(r.hi)}]"


def print_plan(console: Console, result: PlanResult) -> None:
    """Render a plan: the rule, the noise, the table of rates, and the numbers to act on."""
    r = result
    nm = r.noise
    console.print(f"[bold]plan[/] {r.campaign}: {r.pairs} pairs, order {r.order}, decision "
                  f"cells {', '.join(r.cells)}")
    console.print(f"rule: {r.rule_text}")
    console.print(f"noise: per-boot sd {fm.abs_pct(nm.boot_sd, 2)}, within-pass sd "
                  f"{fm.abs_pct(nm.pass_sd, 2)}, window drift {fm.pct(nm.window_drift, 2)} "
                  f"(one pair's log-ratio sd {fm.abs_pct(nm.pair_sd, 2)}) — {nm.source}")
    console.print(f"Monte Carlo: {r.sims} campaigns per effect, seed {r.seed}; "
                  f"[95% Clopper–Pearson intervals]; {r.exact_checked} campaigns re-judged "
                  "by verdict.judge_run, all agree")
    table = Table(title=f"P(adopt) and P(keep) by true effect ({r.pairs} pairs)",
                  title_justify="left")
    table.add_column("true effect", justify="right")
    table.add_column("P(adopt)", justify="right")
    table.add_column("P(keep)", justify="right")
    table.add_column("")
    for e, rate in r.grid:
        what = ""
        if e < r.margin - 1e-12 and e >= 0:
            what = "adopt is a false adopt (below the bar)"
        elif e < 0:
            what = "adopt would be a loss adopted"
        elif e >= r.margin - 1e-12:
            what = "adopt is right (at or above the bar)"
        table.add_row(fm.pct(e, 0), _rate(rate), _rate(rate.complement()), what)
    console.print(table)
    for e, rate in r.false_adopt:
        console.print(f"false-adopt rate at a true {fm.pct(e, 0)}: {_rate(rate)}")
    console.print(f"P(adopt) at the planned effect {fm.pct(r.effect, 1)} with {r.pairs} "
                  f"pairs: {_rate(r.at_effect)}")
    for row in r.power:
        if row.pairs is None:
            console.print(f"pairs for {row.target:.0%} power at {fm.pct(r.effect, 1)}: not "
                          f"reached up to 200 pairs (best {_rate(row.rate)})")
        else:
            wall = f", about {fm.clock(row.wall_s)}" if row.wall_s is not None else ""
            console.print(f"pairs for {row.target:.0%} power at {fm.pct(r.effect, 1)}: "
                          f"[bold]{row.pairs}[/] (P(adopt) {_rate(row.rate)}{wall})")
    ot = Table(title=f"arm order under a linear drift of {fm.pct(r.order_drift, 1)} across "
               "the window", title_justify="left")
    ot.add_column("order")
    ot.add_column("pairs", justify="right")
    ot.add_column("gain bias", justify="right")
    ot.add_column("P(adopt) at +0%", justify="right")
    ot.add_column(f"P(adopt) at {fm.pct(r.effect, 0)}", justify="right")
    for o in r.orders:
        ot.add_row(o.order, str(o.pairs), fm.pct(o.bias, 2), _rate(o.null), _rate(o.at_effect))
    console.print(ot)
    console.print(f"wall clock: about {fm.clock(r.estimate.total_s)} for {r.pairs} pairs "
                  f"({fm.clock(r.estimate.total_s / r.pairs)} per pair; "
                  f"{r.estimate.assumptions})")
    for note in r.notes:
        console.print(f"note: {note}")
