"""Guardrails in the plan, on their own noise: where each is checked, the noise its test
reads, simulated guardrail values, and the verdict's states on arrays.

`spec-ab report` judges a relative guardrail (`verdict.guardrails`, `verdict.guardstats.
own_noise`) on the mean per-pair log worsening w̄ against SE² = Σ c(N)·vᵢ / n² + τ²/n:
vᵢ the two passes' recorded sampling variances of ln(statistic) (`log_se`, from the pass's
own requests), c(N) the tail inflation for N requests (`sampling.inflation`), τ² the
metric's per-pair noise beyond sampling, pooled over every cell of the metric from a prior
(the guardrail's registered band, else the statistic's measured default) and the pairs'
own spread (`guardstats.pooled_extra`), with a t critical value on its degrees of freedom.
It is shown within its limit at α (not split over the guardrails) and broken at α ÷ k (k
every check of the candidate, deterioration checks at the metric's other cells included);
a guardrail not shown within its limit stops adoption, a deterioration check only when
broken.

The plan simulates a guardrail metric's pass as ln(value) = boot effect (sd `boot_sd`, the
lane's TRUE pass-to-pass noise of that metric beyond sampling, shared by the cells of a
boot) + sampling noise (sd √c(N)·log_se) + the true worsening on the candidate, at its own
cells and its deterioration cells; each pass records `log_se`.

Where the noise comes from (`GuardNoise.source`): `--noise RUN_DIR` (an A/A run, or an
earlier run of the lane: its control's passes), read on the guardrail's cells (or its
metric's rows anywhere): the median recorded `log_se`, the median requests per pass, and
the boot sd = √max(0, var(ln value across boots) − mean c·log_se²); else assumed and
labelled so: boot sd = ln(1 + the registered band), else the statistic's measured default
(`guardrails.DEFAULT_JITTER`), never the throughput's band; log_se from the requests per
pass the campaign configures (`showable.assumed_log_se`).

Absolute guardrails (a failure share such as `error_rate`) are not simulated: the plan
takes both arms to fail no request (they hold); their power against a candidate that fails
requests is not modelled. Fidelity guardrails (`catalog.FIDELITY_METRICS`, relative or
absolute) are not simulated either: the verdict judges them against the control's own
agreement with no pair-to-pair noise (`guardrails._fidelity_check`), so a lossless
candidate holds them, and the plan takes the candidate to be lossless. Both still count in
the family (k).

`look_states` adds what a sequential design's look reads beside each state: shown beyond
the limit at the campaign's one-sided α (the guardrail's futility).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from campaign.campaignfile import Campaign, Guardrail
from campaign.plan.kernel import RuleSpec
from campaign.results.store import load_run
from campaign.verdict import guardstats as gs
from campaign.verdict import rule as rl
from campaign.verdict import sampling
from campaign.verdict import stats as st
from campaign.verdict.aa import is_aa
from campaign.verdict.guardrails import prior_extra
from campaign.verdict.showable import (
    DEFAULT_JITTER,
    PRIOR_DF,
    assumed_log_se,
    guard_cells,
    other_cells,
    relative,
    requests_at,
)
from campaign.verdict.tidy import counting_rows

ASSUMED_REQUESTS = 100.0
"""Requests per pass assumed where the campaign does not fix them (duration-bound, a trace
or a sessions class: their file's)."""
HOLDS, UNCLEAR, BROKEN = 0, 1, 2


@dataclass(frozen=True)
class GuardNoise:
    """The noise a relative guardrail's test reads, and the lane's true boot noise."""

    metric: str
    log_se: float
    """Sampling sd of ln(statistic) a pass records (`log_se`)."""
    requests: float
    """Requests per pass at its cells (what each simulated pass records)."""
    boot_sd: float
    """The lane's boot-to-boot sd of ln(metric) (drawn; the test assumes the band)."""
    source: str
    measured: bool = False

    @property
    def inflation(self) -> float:
        return sampling.inflation(sampling.statistic_of(self.metric), self.requests)


@dataclass(frozen=True)
class GuardModel:
    """One relative guardrail as the plan simulates and tests it."""

    index: int
    """Its place among the registered guardrails (`Rule.guardrail_band(index)`)."""
    guardrail: Guardrail
    cells: tuple[tuple[str, str], ...]
    band: float
    """The boot-to-boot band the plan draws with when nothing is measured."""
    noise: GuardNoise
    direction: st.Direction
    others: tuple[tuple[str, str], ...] = ()
    """Its deterioration cells: every other configured cell of its metric."""
    prior: float = 0.0
    """τ² the verdict starts from (`guardrails.prior_extra`)."""

    @property
    def all_cells(self) -> tuple[tuple[str, str], ...]:
        """Its own cells, then its deterioration cells (the draws' cell axis)."""
        return self.cells + self.others

    @property
    def limit(self) -> float:
        """The limit on the log worsening (positive)."""
        return -rl.worse_d(self.guardrail.max_worsening, self.direction)

    def true_log(self, worsening: float) -> float:
        """ln(candidate ÷ control) of a true worsening (a fraction of the metric)."""
        return math.log1p(worsening) if self.direction == "lower" else math.log1p(-worsening)


def requests_per_pass(campaign: Campaign, cells: Sequence[tuple[str, str]]) -> float | None:
    """The fewest requests per pass the campaign configures at `cells` (None: unknown,
    e.g. duration-bound knee passes): each cell's own (`Workloads.requests_in`)."""
    return requests_at(campaign, cells)


def assumed_noise(metric: str, band: float | None, requests: float | None) -> GuardNoise:
    """The noise assumed without a measured run: the statistic's sampling sd per pass, and
    as its pass-to-pass sd the guardrail's registered band, else the statistic's measured
    default (`guardrails.DEFAULT_JITTER`): never the throughput's band."""
    se = assumed_log_se(metric, ASSUMED_REQUESTS if requests is None else requests)
    n = (f"{ASSUMED_REQUESTS:.0f} requests per pass assumed" if requests is None else
         f"{requests:.0f} requests per pass, the campaign's")
    if band is None:
        stat = sampling.statistic_of(metric) or "avg"
        sd = DEFAULT_JITTER.get(stat, DEFAULT_JITTER["p99"])
        what = f"the measured default for a {stat}, {sd:.0%}"
    else:
        sd, what = math.log1p(band), f"its registered band {band:.1%}"
    return GuardNoise(metric, se, ASSUMED_REQUESTS if requests is None else requests, sd,
                      f"assumed: {metric} pass-to-pass sd = {what}, sampling "
                      f"sd of ln({metric}) per pass {se:.0%} ({n}); measure it with "
                      "--noise RUN_DIR")


def measured_noise(run_dir: Path, metric: str, cells: Sequence[tuple[str, str]]
                   ) -> GuardNoise | None:
    """The guardrail metric's noise read from a run (module docstring); None when the run
    has no valid rows of it with a recorded `log_se` on 3 or more boots."""
    data = load_run(run_dir)
    df = counting_rows(data.passes)
    if data.campaign is None or not is_aa(data.campaign, data.campaign.arm_names):
        control = data.campaign.arm_names[0] if data.campaign is not None else None
        if control is not None:
            df = df[df["arm"] == control]
    where = df[[(w, str(lvl)) in set(cells) for w, lvl in zip(df["workload"], df["level"],
                                                               strict=True)]]
    if (where["metric"] == metric).any():
        df = where
    rows = df[(df["metric"] == metric) & (df["value"] > 0)]
    if "log_se" not in rows.columns:
        return None
    se = pd.to_numeric(rows["log_se"], errors="coerce")
    rows = rows[se.notna()].assign(log_se=se[se.notna()])
    if rows["slot"].nunique() < 3:
        return None
    reqs = df[df["metric"] == "requests_completed"]["value"]
    n = float(reqs.median()) if len(reqs) else ASSUMED_REQUESTS
    c = sampling.inflation(sampling.statistic_of(metric), n)
    logs = np.log(rows["value"].to_numpy(dtype=float))
    keys = (rows["workload"] + " " + rows["level"].astype(str)).to_numpy()
    resid = np.concatenate([logs[keys == k] - logs[keys == k].mean() for k in set(keys)])
    dof = len(resid) - len(set(keys))
    total = float(np.sum(resid**2) / max(1, dof))
    log_se = float(rows["log_se"].median())
    boot = math.sqrt(max(0.0, total - c * float(np.mean(rows["log_se"] ** 2))))
    return GuardNoise(metric, log_se, n, boot,
                      f"measured on run {data.run_dir.name}: {rows['slot'].nunique()} boots "
                      f"of {metric}, sampling sd per pass {log_se:.1%} (median log_se), "
                      f"{n:.0f} requests per pass, "
                      f"boot-to-boot sd {boot:.1%}", measured=True)


def guard_models(campaign: Campaign, spec: RuleSpec, noise_run: Path | None
                 ) -> list[GuardModel]:
    """Every relative guardrail of the campaign with its cells, deterioration cells, band,
    prior and noise."""
    out = []
    rule = spec.guard_rule()
    others = other_cells(spec.guardrails, campaign, spec.cells)
    for i, g in enumerate(spec.guardrails):
        if not relative(g):  # a failure share, a fidelity figure, an absolute difference
            continue
        cells = tuple(guard_cells(g, campaign, spec.cells))
        if not cells:
            continue
        band = spec.guard_band(i)
        registered = rule.guardrail_registered_band(i)
        noise = measured_noise(noise_run, g.metric, cells) if noise_run is not None else None
        if noise is None:
            noise = assumed_noise(g.metric, registered,
                                  requests_per_pass(campaign, cells))
            if noise_run is not None:
                noise = GuardNoise(noise.metric, noise.log_se, noise.requests, noise.boot_sd,
                                   f"{noise.source} ({noise_run.name} has no {g.metric} "
                                   "rows with a recorded log_se on 3 boots)")
        prior, _ = prior_extra(g.metric, registered, "")
        out.append(GuardModel(i, g, cells, band, noise, spec.rule.direction_of(g.metric),
                              tuple(others[i]), prior))
    return out


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class GuardDraws:
    """Simulated values of every relative guardrail, ln(metric): x[sim, pair, cell] the
    control's, y[sim, pair, cell, candidate], per model."""

    models: tuple[GuardModel, ...]
    x: tuple[np.ndarray, ...]
    y: tuple[np.ndarray, ...]
    checks: int
    alpha: float
    shown: float = 0.05
    """One-sided level of the bound that shows a guardrail within its limit."""
    futile: float | None = None
    """One-sided level at which a look reads it as shown beyond its limit (`verdict.
    guardrails.Family.futility`: the campaign's α); None: `shown`."""

    @property
    def each(self) -> float:
        return self.alpha / max(1, self.checks)


def simulate_guards(models: Sequence[GuardModel], worsening: Sequence[float], *, pairs: int,
                    candidates: int, sims: int, checks: int, alpha: float,
                    rng: np.random.Generator, alpha_shown: float | None = None) -> GuardDraws:
    """Each model's passes (module docstring) at a true worsening per model, at its own
    cells and its deterioration cells (the worsening at every one)."""
    xs, ys = [], []
    for m, w in zip(models, worsening, strict=True):
        cells, arms = len(m.all_cells), candidates + 1
        samp = math.sqrt(m.noise.inflation) * m.noise.log_se
        g = (rng.standard_normal((sims, pairs, 1, arms)) * m.noise.boot_sd
             + rng.standard_normal((sims, pairs, cells, arms)) * samp)
        xs.append(g[..., 0])
        ys.append(g[..., 1:] + m.true_log(w))
    return GuardDraws(tuple(models), tuple(xs), tuple(ys), checks, alpha,
                      alpha if alpha_shown is None else alpha_shown)


def guard_states(gd: GuardDraws, i: int) -> np.ndarray:
    """`verdict.guardrails`' state of model i at each of its cells, own then deterioration
    cells: states[sim, cell, cand]. The noise beyond sampling is pooled over every cell
    with the prior (`guardstats.pooled_extra`), each cell's pairs that disagree beyond it
    judged on their own spread (`guardstats.spread_beyond_model`)."""
    return look_states(gd, i)[0]


def look_states(gd: GuardDraws, i: int) -> tuple[np.ndarray, np.ndarray]:
    """`guard_states` and, beside it, `GuardrailCheck.shown_beyond` at each cell: the
    worsening's lower bound at the futility level (`gd.futile`, else `gd.shown`) is beyond
    the limit (`guardstats.beyond_at`), or it is broken — what a sequential design's look
    reads as the guardrail's futility. Both [sim, cell, cand]."""
    m = gd.models[i]
    sign = 1.0 if m.direction == "lower" else -1.0
    w = sign * (gd.y[i] - gd.x[i][..., None])
    n, cells = w.shape[1], w.shape[2]
    cv = m.noise.inflation * 2 * m.noise.log_se**2
    wbar = w.mean(axis=1)
    if n >= 2:
        df = cells * (n - 1)
        dev = ((w - wbar[:, None]) ** 2).sum(axis=(1, 2))  # [sim, cand]
        data = np.maximum(0.0, (dev - cells * (n - 1) * cv) / df)
        extra = ((PRIOR_DF * m.prior + df * data) / (PRIOR_DF + df))[:, None, :]
        dof: float | None = PRIOR_DF + df
    else:
        extra, dof = np.full((w.shape[0], 1, w.shape[3]), m.prior), PRIOR_DF
    se = np.sqrt(cv / n + extra / n)
    broken = wbar - gs.critical(gd.each, dof) * se > m.limit + 1e-9
    holds = wbar + gs.critical(gd.shown, dof) * se <= m.limit + 1e-9
    futile = gd.futile or gd.shown
    beyond = wbar - gs.critical(futile, dof) * se > m.limit
    if n >= 2:
        q = ((w - wbar[:, None]) ** 2).sum(axis=1) / (cv + extra)
        spread = q > float(sps.chi2.isf(gs.MODEL_CHECK_ALPHA, n - 1))
        sd = w.std(axis=1, ddof=1) / math.sqrt(n)
        broken = np.where(spread, wbar - st.t_critical(1 - gd.each, n - 1) * sd
                          > m.limit + 1e-9, broken)
        holds = np.where(spread, wbar + st.t_critical(1 - gd.shown, n - 1) * sd
                         <= m.limit + 1e-9, holds)
        beyond = np.where(spread, wbar - st.t_critical(1 - futile, n - 1) * sd > m.limit,
                          beyond)
    states = np.where(broken, BROKEN, np.where(holds, HOLDS, UNCLEAR))
    return states, np.asarray(beyond | broken)


def first_pairs(gd: GuardDraws, n: int) -> GuardDraws:
    """The draws of the first `n` pairs only (a sequential design's look)."""
    return replace(gd, x=tuple(x[:, :n] for x in gd.x), y=tuple(y[:, :n] for y in gd.y))


def stopping(gd: GuardDraws, i: int, states: np.ndarray) -> np.ndarray:
    """[sim, cell, cand]: where model i stops adoption — its own cells unless shown within
    the limit, its deterioration cells when shown beyond it."""
    own = len(gd.models[i].cells)
    return np.concatenate([states[:, :own] != HOLDS, states[:, own:] == BROKEN], axis=1)


def guard_stops(gd: GuardDraws) -> np.ndarray:
    """[sim, candidate]: some guardrail stops adoption."""
    stop: np.ndarray | None = None
    for i in range(len(gd.models)):
        any_cell = np.asarray(stopping(gd, i, guard_states(gd, i)).any(axis=1))
        stop = any_cell if stop is None else stop | any_cell
    return np.asarray(stop) if stop is not None else np.zeros((0, 0), dtype=bool)
