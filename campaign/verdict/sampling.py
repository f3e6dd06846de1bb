"""The sampling error of a pass's statistic, from the pass's own requests.

A pass reports p99 TTFT as one number, but that number is computed from the pass's N
requests (AIPerf: `numpy.percentile` with linear interpolation over the successful
requests), and with N = 32 a p99 is essentially the largest of 32. Its noise is judged
here, on the log scale, so a guardrail can compare a change against what the statistic
itself can resolve:

- a quantile (p50, p99): the bootstrap over the pass's requests — `resamples` draws of N
  requests with replacement, the sd of ln(quantile) over the draws;
- a mean: the delta method, sd / (√N · mean) (the infinitely resampled bootstrap, linear).

`inflation` is the calibrated factor a verdict multiplies these variances by: the bootstrap
of a tail quantile from few requests underestimates its variance (measured on lognormal,
prefill-wave and heavy-tailed latencies: at N = 32 the bootstrap gives 0.4–0.6 of the true
variance of ln p99; at N ≥ 300 it is right). docs/verdict.md gives the figures.

Pure numpy; deterministic for the same values (a fixed seed), so a report recomputes the
same number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RESAMPLES = 200
"""Bootstrap draws per statistic (the sd of ln p99 is known to ~5% with 200)."""
SEED = 20261201


def quantile_log_se(values: Sequence[float] | np.ndarray, q: float, *,
                    resamples: int = RESAMPLES, seed: int = SEED) -> float | None:
    """The bootstrap sd of ln(the q-quantile) of `values` (q in (0, 1), numpy's linear
    interpolation as AIPerf computes it). None with fewer than 2 values or a value ≤ 0."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        return None
    rng = np.random.default_rng([seed, n])
    draws = x[rng.integers(0, n, size=(resamples, n))]
    stat = np.percentile(draws, q * 100, axis=1)
    return float(np.std(np.log(stat), ddof=1))


def mean_log_se(values: Sequence[float] | np.ndarray) -> float | None:
    """sd of ln(mean) by the delta method: sd / (√N · mean). None with fewer than 2 values
    or a mean ≤ 0."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        return None
    mean = float(x.mean())
    if mean <= 0:
        return None
    return float(x.std(ddof=1) / (math.sqrt(x.size) * mean))


STATISTICS: dict[str, tuple[str, float | None]] = {
    "p50": ("quantile", 0.50),
    "p90": ("quantile", 0.90),
    "p95": ("quantile", 0.95),
    "p99": ("quantile", 0.99),
    "avg": ("mean", None),
}
"""Statistic name (as a metric's suffix: `ttft_p99`) → how its sampling error is taken."""


def statistic_of(metric: str) -> str | None:
    """The statistic a metric name ends in (`ttft_p99` → p99), None for other metrics."""
    suffix = metric.rsplit("_", 1)[-1]
    return suffix if suffix in STATISTICS else None


def log_se(statistic: str, values: Sequence[float] | np.ndarray) -> float | None:
    """The sampling error (sd of ln) of `statistic` over a pass's per-request values."""
    how, q = STATISTICS[statistic]
    if how == "quantile":
        assert q is not None
        return quantile_log_se(values, q)
    return mean_log_se(values)


def inflation(statistic: str | None, requests: float | None) -> float:
    """The factor a verdict multiplies a pass's sampling variance by (see the module
    docstring). For a tail quantile it depends on how many requests lie beyond it,
    N(1 − q): below 1 (a p99 from fewer than 100 requests) the estimate rests on the largest
    few requests and the bootstrap misses up to 2/3 of the variance."""
    if statistic is None or requests is None or requests <= 0:
        return 1.0
    how, q = STATISTICS.get(statistic, ("mean", None))
    if how == "mean":
        return 1.5 if requests < 100 else 1.0
    assert q is not None
    if q <= 0.5:
        return 1.0
    beyond = requests * (1 - q)
    if beyond < 0.32:
        return 4.0
    if beyond < 1.0:
        return 3.0
    if beyond < 3.0:
        return 1.5
    return 1.0


def inflation_note(statistic: str | None, requests: float | None) -> str:
    """Why `inflation` is above 1, in words ("×3 for a p99 from < 100 requests"); "" at 1."""
    factor = inflation(statistic, requests)
    if factor == 1.0 or statistic is None:
        return ""
    how, q = STATISTICS.get(statistic, ("mean", None))
    if how == "mean":
        return f"×{factor:g} for a mean of < 100 requests"
    assert q is not None
    for beyond in (0.32, 1.0, 3.0):
        if requests is not None and requests * (1 - q) < beyond:
            return f"×{factor:g} for a {statistic} from < {round(beyond / (1 - q))} requests"
    return f"×{factor:g} for a {statistic}"
