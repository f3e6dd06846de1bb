"""Guardrails in the plan, on their own noise: where each is checked, the noise its test
reads, simulated guardrail values, and the verdict's three states on arrays.

`spec-ab report` judges a relative guardrail (`verdict.guardrails`, `verdict.guardstats.
own_noise`) on the mean per-pair log worsening w̄ against SE² = Σ c(N)·vᵢ / n² + 2b²/n:
vᵢ the two passes' recorded sampling variances of ln(statistic) (`log_se`, from the pass's
own requests), c(N) the tail inflation for N requests (`sampling.inflation`), b = ln(1 +
the guardrail's registered band); each bound one-sided at α ÷ k, k every guardrail check of
the candidate (family-wise). `broken` stops adoption; `unclear` stops it when
`unclear_stops` says so.

The plan simulates a guardrail metric's pass as ln(value) = boot effect (sd `boot_sd`, the
lane's TRUE boot-to-boot noise of that metric, shared by the cells of a boot) + sampling
noise (sd √c(N)·log_se: the variance the verdict's inflation stands for) + the true
worsening on the candidate; each pass records `log_se`. When the lane's true boot noise is
larger than the registered band, the test breaks more often than α: the plan shows it.

Where the noise comes from (`GuardNoise.source`): `--noise RUN_DIR` (an A/A run, or an
earlier run of the lane: its control's passes), read on the guardrail's cells (or its
metric's rows anywhere): the median recorded `log_se`, the median requests per pass, and
the boot sd = √max(0, var(ln value across boots) − mean c·log_se²); else assumed and
labelled so: boot sd = ln(1 + the registered band), log_se `ASSUMED_LOG_SE` (a tail
quantile) or `ASSUMED_MEAN_LOG_SE`, requests per pass from the campaign's workloads.

Absolute guardrails (a failure share such as `error_rate`) are not simulated: the plan
takes both arms to fail no request (they hold); their power against a candidate that fails
requests is not modelled. They still count in the family (k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from campaign import catalog
from campaign.campaignfile import Campaign, Guardrail
from campaign.plan.kernel import RuleSpec
from campaign.results.store import load_run
from campaign.verdict import guardstats as gs
from campaign.verdict import rule as rl
from campaign.verdict import sampling
from campaign.verdict import stats as st
from campaign.verdict.aa import is_aa
from campaign.verdict.guardrails import at_decision_cells
from campaign.verdict.guardstats import z_critical
from campaign.verdict.tidy import counting_rows

ASSUMED_LOG_SE = 0.10
"""Assumed sampling sd of ln(a tail quantile) of one pass (p90 and beyond)."""
ASSUMED_MEAN_LOG_SE = 0.03
"""Assumed sampling sd of ln(a mean or median) of one pass."""
ASSUMED_REQUESTS = 100.0
"""Requests per pass assumed where the campaign does not fix them (duration-bound)."""
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
    """The registered boot-to-boot band the test assumes."""
    noise: GuardNoise
    direction: st.Direction

    @property
    def limit(self) -> float:
        """The limit on the log worsening (positive)."""
        return -rl.worse_d(self.guardrail.max_worsening, self.direction)

    def true_log(self, worsening: float) -> float:
        """ln(candidate ÷ control) of a true worsening (a fraction of the metric)."""
        return math.log1p(worsening) if self.direction == "lower" else math.log1p(-worsening)


def guard_cells(g: Guardrail, campaign: Campaign,
                decisions: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Where `spec-ab report` checks the guardrail (`guardrails.guardrail_targets`), from
    the campaign's configured cells instead of a run's rows."""
    named = at_decision_cells(g, decisions)
    if named is not None:
        return named
    out = []
    for w in ("knee", "agentfix", "fidelity"):  # fidelity: not modelled, it holds
        levels = campaign.workloads.levels(w) if getattr(campaign.workloads, w) else []
        out += [(w, lvl) for lvl in levels if g.workload in ("*", w)
                and g.level in ("*", lvl) and catalog.has_rows_at(g.metric, w, lvl)]
    return out


def family_checks(campaign: Campaign, decisions: Sequence[tuple[str, str]]) -> int:
    """k: every guardrail check of one candidate (absolute ones too), as
    `decide.guardrail_checks` counts them."""
    return sum(max(1, len(guard_cells(g, campaign, decisions)))
               for g in campaign.preregistration.guardrails)


def requests_per_pass(campaign: Campaign, cells: Sequence[tuple[str, str]]) -> float | None:
    """The fewest requests per pass the campaign configures at `cells` (None: unknown,
    e.g. duration-bound knee passes)."""
    wl = campaign.workloads
    got: list[float] = []
    for w, _ in cells:
        n = (wl.knee.requests_each_level if w == "knee" and wl.knee else
             wl.agentfix.requests if w == "agentfix" and wl.agentfix else None)
        if n is None:
            return None
        got.append(float(n))
    return min(got) if got else None


def assumed_noise(metric: str, band: float, requests: float | None) -> GuardNoise:
    q = catalog.quantile_of(metric)
    se = ASSUMED_LOG_SE if q is not None and q >= 0.9 else ASSUMED_MEAN_LOG_SE
    n = (f"{ASSUMED_REQUESTS:.0f} requests per pass assumed" if requests is None else
         f"{requests:.0f} requests per pass, the campaign's")
    return GuardNoise(metric, se, ASSUMED_REQUESTS if requests is None else requests,
                      math.log1p(band),
                      f"assumed: {metric} boot-to-boot sd = its band {band:.1%}, sampling "
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
    """Every relative guardrail of the campaign with its cells, band and noise."""
    out = []
    for i, g in enumerate(spec.guardrails):
        if g.absolute or g.metric in rl.FAILURE_METRICS:
            continue
        cells = tuple(guard_cells(g, campaign, spec.cells))
        if not cells:
            continue
        band = spec.guard_band(i)
        noise = measured_noise(noise_run, g.metric, cells) if noise_run is not None else None
        if noise is None:
            noise = assumed_noise(g.metric, band, requests_per_pass(campaign, cells))
            if noise_run is not None:
                noise = GuardNoise(noise.metric, noise.log_se, noise.requests, noise.boot_sd,
                                   f"{noise.source} ({noise_run.name} has no {g.metric} "
                                   "rows with a recorded log_se on 3 boots)")
        out.append(GuardModel(i, g, cells, band, noise, spec.rule.direction_of(g.metric)))
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

    @property
    def each(self) -> float:
        return self.alpha / max(1, self.checks)


def simulate_guards(models: Sequence[GuardModel], worsening: Sequence[float], *, pairs: int,
                    candidates: int, sims: int, checks: int, alpha: float,
                    rng: np.random.Generator) -> GuardDraws:
    """Each model's passes (module docstring) at a true worsening per model."""
    xs, ys = [], []
    for m, w in zip(models, worsening, strict=True):
        cells, arms = len(m.cells), candidates + 1
        samp = math.sqrt(m.noise.inflation) * m.noise.log_se
        g = (rng.standard_normal((sims, pairs, 1, arms)) * m.noise.boot_sd
             + rng.standard_normal((sims, pairs, cells, arms)) * samp)
        xs.append(g[..., 0])
        ys.append(g[..., 1:] + m.true_log(w))
    return GuardDraws(tuple(models), tuple(xs), tuple(ys), checks, alpha)


def guard_states(gd: GuardDraws, i: int) -> np.ndarray:
    """`guardstats.own_noise`'s state of model i at each cell: states[sim, cell, cand]."""
    m = gd.models[i]
    sign = 1.0 if m.direction == "lower" else -1.0
    w = sign * (gd.y[i] - gd.x[i][..., None])
    n = w.shape[1]
    cv = m.noise.inflation * 2 * m.noise.log_se**2
    b = math.log1p(m.band)
    se = math.sqrt(n * cv / n**2 + 2 * b * b / n)
    half = z_critical(gd.each) * se
    wbar = w.mean(axis=1)
    broken = wbar - half > m.limit + 1e-9
    holds = wbar + half <= m.limit + 1e-9
    if n >= 2:
        # `guardstats.spread_beyond_model`: pairs that disagree beyond the model are judged
        # on their own spread (`guardstats.pairs_spread`)
        q = ((w - wbar[:, None]) ** 2).sum(axis=1) / (cv + 2 * b * b)
        beyond = q > float(sps.chi2.isf(gs.MODEL_CHECK_ALPHA, n - 1))
        spread = st.t_critical(1 - gd.each, n - 1) * w.std(axis=1, ddof=1) / math.sqrt(n)
        broken = np.where(beyond, wbar - spread > m.limit + 1e-9, broken)
        holds = np.where(beyond, wbar + spread <= m.limit + 1e-9, holds)
    return np.where(broken, BROKEN, np.where(holds, HOLDS, UNCLEAR))


def guard_stops(gd: GuardDraws) -> np.ndarray:
    """[sim, candidate]: some guardrail stops adoption (broken, or unclear where
    `unclear_stops`)."""
    stop: np.ndarray | None = None
    for i, m in enumerate(gd.models):
        s = guard_states(gd, i)
        hit = (s == BROKEN) | ((s == UNCLEAR) & m.guardrail.stops_when_unclear)
        any_cell = hit.any(axis=1)
        stop = any_cell if stop is None else stop | any_cell
    return np.asarray(stop) if stop is not None else np.zeros((0, 0), dtype=bool)
