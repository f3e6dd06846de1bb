"""The tests a guardrail is judged by, on plain numbers (`guardrails` says where and how it
reads). Each answers "is the candidate worse than the control by more than the limit?"
with three states:

- `broken`: the data show a worsening beyond the limit (the worse-side bound is beyond it);
- `holds`: the data show the worsening within the limit (the far bound is within it);
- `unclear`: the interval holds the limit: the data cannot tell.

Each bound is one-sided at level α (the caller divides the campaign's α by every guardrail
check of the candidate: Bonferroni, family-wise), so a candidate truly at the limit is
called broken at most α of the time, and one truly beyond it by more than the noise is
called broken with high probability.

- `own_noise` (relative metrics, the default): the mean per-pair log worsening w̄ against
  SE² = Σ cᵢ·vᵢ / n² + 2·b²/n, vᵢ the two passes' sampling variances of ln(value) from their
  own requests, cᵢ the calibrated inflation of a tail quantile from few requests, b the
  metric's boot-to-boot drift (ln(1 + band)): a normal (z) test;
- `pairs_spread` (the fallback: no per-request sampling error recorded, differences, or
  pairs that disagree beyond what `own_noise` assumes (`spread_beyond_model`, Cochran's Q
  at 5%)): the pairs' own spread, SE = s/√n with a t(n − 1) critical value; one pair: no
  test;
- `counts` (failure shares such as the error rate): the requests pooled over pairs,
  one-sided Fisher exact test (limit 0) or Farrington–Manning score test (limit > 0) of
  "the candidate's failure share exceeds the control's by more than the limit"; holds when
  the candidate's pooled share is within the control's + the limit; the interval is
  Newcombe's hybrid score interval of the difference.

Pure: scipy and math, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from scipy import stats as sps

from campaign.verdict import stats as st

State = Literal["holds", "unclear", "broken"]
EPS = 1e-9


@dataclass(frozen=True)
class Tested:
    """A guardrail test's outcome, on the test's own scale (log worsening, a difference, or
    a difference of shares; positive = worse)."""

    state: State
    estimate: float
    low: float
    high: float
    """The interval whose ends decide: one-sided (1 − α) bounds on either side."""
    limit: float
    se: float | None = None
    """Standard error of the estimate (None for the counts test)."""
    p_value: float | None = None
    """One-sided p-value of "not beyond the limit" (the counts test)."""


def three_states(estimate: float, half: float, limit: float) -> Tested:
    """broken when estimate − half > limit, holds when estimate + half ≤ limit."""
    low, high = estimate - half, estimate + half
    state: State = ("broken" if low > limit + EPS else
                    "holds" if high <= limit + EPS else "unclear")
    return Tested(state, estimate, low, high, limit)


def own_noise_se(cv: Sequence[float], band: float) -> float:
    """SE of the mean log worsening: Σ cᵢ·vᵢ / n² (the passes' own sampling) + 2b²/n (the
    two boots of each pair), b = ln(1 + band)."""
    n = len(cv)
    b = math.log1p(band)
    return math.sqrt(math.fsum(cv) / n**2 + 2 * b * b / n)


def own_noise(w: Sequence[float], cv: Sequence[float], band: float, limit: float,
              alpha: float) -> Tested:
    """The relative test on the passes' own noise and the boot noise (module docstring)."""
    se = own_noise_se(cv, band)
    wbar = math.fsum(w) / len(w)
    out = three_states(wbar, z_critical(alpha) * se, limit)
    return Tested(out.state, out.estimate, out.low, out.high, limit, se)


def pairs_spread(w: Sequence[float], limit: float, alpha: float) -> Tested | None:
    """The distribution-free test on the pairs' own spread: SE = s/√n, t(1 − α, n − 1).
    None for one pair (no spread, no test)."""
    n = len(w)
    if n < 2:
        return None
    mean = math.fsum(w) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in w) / (n - 1))
    se = sd / math.sqrt(n)
    out = three_states(mean, st.t_critical(1 - alpha, n - 1) * se, limit)
    return Tested(out.state, out.estimate, out.low, out.high, limit, se)


MODEL_CHECK_ALPHA = 0.05
"""Level of the check that the pairs' spread is what the passes' own noise and the boot
noise explain (`spread_beyond_model`)."""


def spread_beyond_model(w: Sequence[float], cv: Sequence[float], band: float) -> bool:
    """Whether the pairs disagree beyond what `own_noise` assumes: Cochran's Q of the pairs'
    log worsenings against their model variances cᵢ·vᵢ + 2b² is beyond its χ²(n − 1)
    (1 − MODEL_CHECK_ALPHA) quantile. Then the model's SE is too small (a loaded host, a
    lane noisier than its band) and the pairs' own spread must judge instead. One pair:
    nothing to check."""
    n = len(w)
    if n < 2:
        return False
    b2 = 2 * math.log1p(band) ** 2
    var = [max(c + b2, 1e-12) for c in cv]
    weights = [1 / v for v in var]
    centre = math.fsum(x * k for x, k in zip(w, weights, strict=True)) / math.fsum(weights)
    q = math.fsum((x - centre) ** 2 * k for x, k in zip(w, weights, strict=True))
    return q > _chi2_critical(n - 1)


@lru_cache(maxsize=64)
def _chi2_critical(df: int) -> float:
    """χ²(df)'s (1 − MODEL_CHECK_ALPHA) quantile (cached: a history asks it per check)."""
    return float(sps.chi2.isf(MODEL_CHECK_ALPHA, df))


@lru_cache(maxsize=256)
def z_critical(alpha: float) -> float:
    """z(1 − α) (cached: a history report asks the same few levels thousands of times)."""
    return float(sps.norm.isf(alpha))


# --------------------------------------------------------------------------- counts


@lru_cache(maxsize=4096)
def counts(failed_y: int, total_y: int, failed_x: int, total_x: int, limit: float,
           alpha: float) -> Tested:
    """The failure shares of the candidate (y) and the control (x), requests pooled over
    pairs (module docstring). Both totals must be > 0. Within the limit it holds without a
    test (`p_value` None); beyond it the test decides broken or unclear."""
    py, px = failed_y / total_y, failed_x / total_x
    diff = py - px
    low, high = newcombe(failed_y, total_y, failed_x, total_x, alpha)
    if diff <= limit + EPS:
        return Tested("holds", diff, low, high, limit)
    if limit <= 0:
        table = [[failed_y, total_y - failed_y], [failed_x, total_x - failed_x]]
        p = float(sps.fisher_exact(table, alternative="greater").pvalue)
    else:
        p = farrington_manning(failed_y, total_y, failed_x, total_x, limit)
    return Tested("broken" if p < alpha else "unclear", diff, low, high, limit, None, p)


def farrington_manning(x1: int, n1: int, x2: int, n2: int, delta: float) -> float:
    """One-sided p-value of H0: p1 − p2 ≤ delta against p1 − p2 > delta (Farrington and
    Manning's score test: the variance at the maximum-likelihood shares restricted to
    p1 − p2 = delta)."""
    p1, p2 = x1 / n1, x2 / n2
    r1, r2 = _restricted(p1, n1, p2, n2, delta)
    var = r1 * (1 - r1) / n1 + r2 * (1 - r2) / n2
    diff = p1 - p2 - delta
    if var <= 0:
        return 0.0 if diff > 0 else 1.0
    return float(sps.norm.sf(diff / math.sqrt(var)))


def _restricted(p1: float, n1: int, p2: float, n2: int, delta: float) -> tuple[float, float]:
    """The shares (p1, p2) maximising the binomial likelihood under p1 − p2 = delta (the
    closed form of Farrington and Manning, 1990)."""
    theta = n2 / n1
    a = 1 + theta
    b = -(1 + theta + p1 + theta * p2 + delta * (theta + 2))
    c = delta * delta + delta * (2 * p1 + theta + 1) + p1 + theta * p2
    d = -p1 * delta * (1 + delta)
    v = b**3 / (27 * a**3) - b * c / (6 * a * a) + d / (2 * a)
    u2 = b * b / (9 * a * a) - c / (3 * a)
    u = math.copysign(math.sqrt(max(u2, 0.0)), v)
    if u == 0:
        r1 = -b / (3 * a)
    else:
        w = (math.pi + math.acos(max(-1.0, min(1.0, v / u**3)))) / 3
        r1 = 2 * u * math.cos(w) - b / (3 * a)
    r1 = min(1.0, max(delta, r1))
    return r1, min(1.0, max(0.0, r1 - delta))


def newcombe(x1: int, n1: int, x2: int, n2: int, alpha: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval of p1 − p2, each end one-sided at α (Wilson score
    intervals of each share combined)."""
    z = z_critical(alpha)
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = _wilson(p1, n1, z)
    l2, u2 = _wilson(p2, n2, z)
    d = p1 - p2
    return (d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
            d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def _wilson(p: float, n: int, z: float) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
