"""The tests a guardrail is judged by, on plain numbers (`guardrails` says where and how it
reads). Each answers "is the candidate worse than the control by more than the limit?"
with three states:

- `broken`: the data show a worsening beyond the limit (the worse-side bound is beyond it);
- `holds`: the data show the worsening within the limit (the far bound is within it);
- `unclear`: the interval holds the limit: the data cannot tell.

Two one-sided bounds decide. The worse-side bound (`alpha`: the caller divides the
campaign's α by every check of the candidate, Bonferroni) breaks: a candidate truly at the
limit is called broken at most α ÷ k of the time. The far bound (`alpha_shown`: α, split
only over a sequential design's looks, never over the guardrails, since each must be
shown: an intersection–union test) shows the guardrail within its limit: a candidate truly
at the limit is shown within it at most α of the time, whatever else holds.

- `own_noise` (relative metrics, the default): the mean per-pair log worsening w̄ against
  SE² = Σ cᵢ·vᵢ / n² + τ²/n, vᵢ the two passes' sampling variances of ln(value) from their
  own requests, cᵢ the calibrated inflation of a tail quantile from few requests, τ² each
  pair's variance beyond sampling (the two passes' pass-to-pass and boot noise of the
  metric itself: `pooled_extra`, from the campaign's own pairs pooled over the metric's
  cells and a prior), with a t critical value on τ²'s degrees of freedom;
- `pairs_spread` (the fallback: no per-request sampling error recorded, differences, or
  pairs that disagree beyond what `own_noise` assumes (`spread_beyond_model`, Cochran's Q
  at 5%)): the pairs' own spread, SE = s/√n with a t(n − 1) critical value; one pair: no
  test;
- `counts` (failure shares such as the error rate): the requests pooled over pairs,
  one-sided Fisher exact test (limit 0) or Farrington–Manning score test (limit > 0) of
  "the candidate's failure share exceeds the control's by more than the limit"; holds when
  the candidate's pooled share is within the control's + the limit; the interval is
  Newcombe's hybrid score interval of the difference.

`Family` holds the levels: α ÷ k to break, the level that shows a guardrail within, and
a sequential design's futility level.

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


def three_states(estimate: float, half: float, limit: float,
                 half_shown: float | None = None) -> Tested:
    """broken when estimate − half > limit, holds when estimate + half_shown ≤ limit
    (`half_shown`: the half-width of the bound that shows it within, default `half`)."""
    low, high = estimate - half, estimate + (half if half_shown is None else half_shown)
    state: State = ("broken" if low > limit + EPS else
                    "holds" if high <= limit + EPS else "unclear")
    return Tested(state, estimate, low, high, limit)


def own_noise_se(cv: Sequence[float], extra: float) -> float:
    """SE of the mean log worsening: Σ cᵢ·vᵢ / n² (the passes' own sampling) + τ²/n (`extra`:
    each pair's variance beyond sampling, its two passes' pass-to-pass and boot noise)."""
    n = len(cv)
    return math.sqrt(math.fsum(cv) / n**2 + extra / n)


def critical(alpha: float, df: float | None) -> float:
    """t(1 − α, df), or z(1 − α) when the noise is taken as known (`df` None)."""
    if df is None or df > 1000:
        return z_critical(alpha)
    return st.t_critical(1 - alpha, max(1, round(df)))


def own_noise(w: Sequence[float], cv: Sequence[float], extra: float, limit: float,
              alpha: float, alpha_shown: float | None = None,
              df: float | None = None) -> Tested:
    """The relative test on the passes' own noise and the pass-to-pass noise beyond it
    (module docstring); `alpha_shown` the level of the bound that shows it within (default
    `alpha`), `df` the degrees of freedom of `extra` (None: known, a z test)."""
    se = own_noise_se(cv, extra)
    wbar = math.fsum(w) / len(w)
    shown = None if alpha_shown is None else critical(alpha_shown, df) * se
    out = three_states(wbar, critical(alpha, df) * se, limit, shown)
    return Tested(out.state, out.estimate, out.low, out.high, limit, se)


@dataclass(frozen=True)
class Pooled:
    """A metric's per-pair variance beyond its passes' sampling (τ²: both passes' pass-to-
    pass and boot noise), pooled from a prior and the campaign's own pairs."""

    extra: float
    """τ² used by the tests."""
    df: float
    """Its degrees of freedom: the prior's plus the pairs' (each cell's pairs − 1)."""
    data_extra: float | None
    """τ² the campaign's pairs alone show (None: no cell with two pairs)."""
    data_df: int


def pooled_extra(cells: Sequence[tuple[Sequence[float], Sequence[float]]], prior: float,
                 prior_df: float) -> Pooled:
    """τ² from every cell of a metric ((w, cv) per cell, w the pairs' log worsenings and cv
    their sampling variances): each cell's spread about its own mean, less what sampling
    explains, pooled over the cells (a method-of-moments estimate: E Σ(wᵢ − w̄)² =
    (n − 1)/n · Σ(cvᵢ + τ²)), then combined with the prior τ² as a scaled-χ² prior of
    `prior_df` degrees of freedom (what a measured or registered noise is worth)."""
    dev = explained = 0.0
    df = 0
    for w, cv in cells:
        n = len(w)
        if n < 2:
            continue
        mean = math.fsum(w) / n
        dev += math.fsum((x - mean) ** 2 for x in w)
        explained += (n - 1) / n * math.fsum(cv)
        df += n - 1
    if df == 0:
        return Pooled(prior, prior_df, None, 0)
    data = max(0.0, (dev - explained) / df)
    return Pooled((prior_df * prior + df * data) / (prior_df + df), prior_df + df, data, df)


def pairs_spread(w: Sequence[float], limit: float, alpha: float,
                 alpha_shown: float | None = None) -> Tested | None:
    """The distribution-free test on the pairs' own spread: SE = s/√n, t(1 − α, n − 1).
    None for one pair (no spread, no test)."""
    n = len(w)
    if n < 2:
        return None
    mean = math.fsum(w) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in w) / (n - 1))
    se = sd / math.sqrt(n)
    shown = (None if alpha_shown is None
             else st.t_critical(1 - alpha_shown, n - 1) * se)
    out = three_states(mean, st.t_critical(1 - alpha, n - 1) * se, limit, shown)
    return Tested(out.state, out.estimate, out.low, out.high, limit, se)


def beyond_at(tested: Tested, critical: float) -> bool:
    """The worsening's lower bound at this critical value is beyond the limit."""
    return tested.se is not None and tested.estimate - critical * tested.se > tested.limit


MODEL_CHECK_ALPHA = 0.05
"""Level of the check that the pairs' spread is what the passes' own noise and the boot
noise explain (`spread_beyond_model`)."""


def spread_beyond_model(w: Sequence[float], cv: Sequence[float], extra: float) -> bool:
    """Whether the pairs disagree beyond what `own_noise` assumes: Cochran's Q of the pairs'
    log worsenings against their model variances cᵢ·vᵢ + τ² is beyond its χ²(n − 1)
    (1 − MODEL_CHECK_ALPHA) quantile. Then the model's SE is too small (a loaded host, a
    lane noisier than its band) and the pairs' own spread must judge instead. One pair:
    nothing to check."""
    n = len(w)
    if n < 2:
        return False
    var = [max(c + extra, 1e-12) for c in cv]
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


@dataclass(frozen=True)
class Family:
    """The family a check belongs to: the campaign's α over k checks of one candidate."""

    alpha: float
    checks: int
    shown: float | None = None
    """One-sided level of the bound that shows a guardrail within its limit (no split over
    the guardrails: every one must be shown, an intersection–union test); None: α ÷ k."""
    futility: float | None = None
    """One-sided level at which a sequential design's look reads a guardrail as shown
    beyond its limit (`GuardrailCheck.shown_beyond`: stop, keep the default): the campaign's
    α, not split over the looks, as stopping for futility can never adopt; None: `shown`."""

    @property
    def beyond(self) -> float:
        """The level of `shown_beyond`."""
        return self.futility or self.shown or self.each

    @property
    def each(self) -> float:
        """One-sided level of each bound: α ÷ k."""
        return self.alpha / max(1, self.checks)

    @property
    def ci_level(self) -> float:
        return 1 - 2 * self.each

    @property
    def ci_text(self) -> str:
        """A two-sided interval with both ends at α ÷ k."""
        return f"{self.ci_level:.1%}".replace(".0%", "%") + " CI"

    def interval_text(self, direction: st.Direction, asymmetric: bool) -> str:
        """How a check's interval reads: `ci_text` when both ends are at α ÷ k, else each
        end's one-sided level — the end that decides `broken` at α ÷ k, the one that shows
        the guardrail within its limit at `shown` (the lower end of a lower-is-better
        metric's change decides `broken`, its upper end `holds`; reversed for higher)."""
        if not asymmetric or self.shown is None or abs(self.shown - self.each) < 1e-12:
            return self.ci_text
        worse, within = _level(1 - self.each), _level(1 - self.shown)
        low, high = (worse, within) if direction == "lower" else (within, worse)
        return f"one-sided: lower end {low}, upper end {high}"


def _level(q: float) -> str:
    return f"{q:.1%}".replace(".0%", "%")


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
