"""Paired statistics of one cell (workload × level × metric), and the noise tests of flags.

Why paired log ratios: the lane drifts ~3% from day to day, so only the two arms of one
pair (booted minutes apart) are comparable. Each pair i gives d_i = ln(y_i / x_i) for the
candidate y against the control x, with the sign flipped for lower-is-better metrics so that
a positive d always means "better". The gain is g = exp(mean d) − 1 (the ratio of the arms'
geometric means) and, for n ≥ 2 pairs, the t confidence interval

    CI = exp(mean d ± t(1 − α/2, n − 1) · sd(d) / √n) − 1,    α = 1 − confidence.

One pair gives no interval (there is no spread to estimate), and says so: `ci` is None.

Metrics that are often 0 (error rate) cannot be put in a ratio; they are compared by
absolute differences (`kind="absolute"`): d_i = y_i − x_i, sign flipped likewise, gain =
mean d, CI = mean d ± t · sd / √n.

Pure functions on plain numbers: no pandas, no I/O. The verdicts (`verdict.py`) read these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from scipy import special as _special
from scipy import stats as _sp

from campaign.catalog import Direction as Direction
from campaign.catalog import Kind as Kind


@dataclass(frozen=True)
class Paired:
    """The paired statistics of one cell over its complete pairs (positive = better)."""

    kind: Kind
    n: int
    d: tuple[float, ...]
    """Per-pair log ratios (`ratio`) or differences (`absolute`), positive = better."""
    mean: float
    sd: float | None
    """Sample standard deviation of d (n − 1 in the denominator); None for one pair."""
    gain: float
    """exp(mean d) − 1 for ratios (+0.15 = 15% better); mean d for absolute differences."""
    pair_gains: tuple[float, ...]
    """Each pair's own gain: exp(d_i) − 1, or d_i for absolute differences."""
    ci: tuple[float, float] | None
    """Two-sided CI of the gain at `confidence`; None when n < 2 (no spread to estimate)."""
    confidence: float

    @property
    def se(self) -> float | None:
        """Standard error of mean d (None for one pair)."""
        return None if self.sd is None else self.sd / math.sqrt(self.n)

    @property
    def mean_ci(self) -> tuple[float, float]:
        """Two-sided CI of mean d at `confidence` (n ≥ 2; a point for one pair)."""
        if self.sd is None:
            return (self.mean, self.mean)
        half = t_critical(1 - (1 - self.confidence) / 2, self.n - 1) * self.sd / math.sqrt(
            self.n)
        return (self.mean - half, self.mean + half)

    def to_gain(self, d: float) -> float:
        """A value on the d scale as a gain (exp(d) − 1 for ratios)."""
        return math.expm1(d) if self.kind == "ratio" else d

    def to_d(self, gain: float) -> float:
        """A gain as a value on the d scale (ln(1 + gain) for ratios)."""
        return math.log1p(gain) if self.kind == "ratio" else gain


@lru_cache(maxsize=4096)
def t_critical(q: float, df: int) -> float:
    """The q-quantile of Student's t with df degrees of freedom (cached: scipy is slow per
    call and a history report asks the same few (q, df) thousands of times)."""
    return float(_sp.t.ppf(q, df))


def log_ratios(
    control: Sequence[float], candidate: Sequence[float], direction: Direction
) -> list[float]:
    """d_i = ln(y_i / x_i), negated for lower-is-better metrics.

    Raises ValueError when a value is zero, negative or not a number: a ratio of them means
    nothing, and the caller names the file the value came from.
    """
    if len(control) != len(candidate):
        raise ValueError(f"{len(control)} control values but {len(candidate)} candidate values")
    sign = 1.0 if direction == "higher" else -1.0
    out = []
    for x, y in zip(control, candidate, strict=True):
        if not (x > 0 and y > 0) or math.isinf(x) or math.isinf(y):
            raise ValueError(f"cannot take the ratio of {y!r} to {x!r}: values must be > 0")
        out.append(sign * math.log(y / x))
    return out


def differences(
    control: Sequence[float], candidate: Sequence[float], direction: Direction
) -> list[float]:
    """d_i = y_i − x_i, negated for lower-is-better metrics (for metrics often 0)."""
    if len(control) != len(candidate):
        raise ValueError(f"{len(control)} control values but {len(candidate)} candidate values")
    sign = 1.0 if direction == "higher" else -1.0
    out = []
    for x, y in zip(control, candidate, strict=True):
        if math.isnan(x) or math.isnan(y):
            raise ValueError("a value is not a number")
        out.append(sign * (y - x))
    return out


def summarize(d: Sequence[float], *, kind: Kind, confidence: float) -> Paired:
    """Mean, sd, gain and t-CI of per-pair d values (see the module docstring)."""
    n = len(d)
    if n == 0:
        raise ValueError("no complete pairs")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not in (0.5, 1)")
    mean = math.fsum(d) / n
    to_gain = math.expm1 if kind == "ratio" else float
    sd: float | None = None
    ci: tuple[float, float] | None = None
    if n >= 2:
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1))
        half = t_critical(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
        ci = (to_gain(mean - half), to_gain(mean + half))
    return Paired(
        kind=kind,
        n=n,
        d=tuple(d),
        mean=mean,
        sd=sd,
        gain=to_gain(mean),
        pair_gains=tuple(to_gain(v) for v in d),
        ci=ci,
        confidence=confidence,
    )


def paired(
    control: Sequence[float],
    candidate: Sequence[float],
    direction: Direction,
    *,
    confidence: float = 0.95,
    kind: Kind = "ratio",
) -> Paired:
    """Paired statistics of complete pairs (control[i], candidate[i])."""
    d = (
        log_ratios(control, candidate, direction)
        if kind == "ratio"
        else differences(control, candidate, direction)
    )
    return summarize(d, kind=kind, confidence=confidence)


def p_above(p: Paired, bar: float) -> float | None:
    """One-sided p-value of "the true gain is at most `bar`" (a t-test of mean d against
    the bar on the d scale). Small p = the gain clears the bar. None for one pair.

    It matches the CI: the CI's lower bound ≥ bar exactly when p ≤ (1 − confidence)/2.
    A zero spread (identical pairs) gives 0 above the bar, 1 at or below it.
    """
    if p.sd is None:
        return None
    diff = p.mean - p.to_d(bar)
    se = p.sd / math.sqrt(p.n)
    if se == 0:
        return 0.0 if diff > 0 else 1.0
    # t(n − 1).sf through scipy.special, as scipy.stats computes it, without the distribution
    # object's ~0.1 ms of argument checks per call (a history's report calls it 10⁴ times)
    return float(_special.stdtr(p.n - 1, -diff / se))


def lower_bound(p: Paired, one_sided_alpha: float) -> float | None:
    """Lower confidence bound of the gain at one-sided level `one_sided_alpha` (None for
    one pair). With one_sided_alpha = (1 − confidence)/2 it is the CI's lower end."""
    if p.sd is None:
        return None
    t = t_critical(1 - one_sided_alpha, p.n - 1)
    return p.to_gain(p.mean - t * p.sd / math.sqrt(p.n))


def trend(values: Sequence[float], positions: Sequence[float]) -> float | None:
    """Relative change of `values` across the window: the least-squares slope of ln(value)
    on position, times the span of positions, as exp(·) − 1.

    For two points it is simply y2/y1 − 1. None with fewer than two points, a zero span or
    non-positive values. Used on the control arm: a lane that moves more than the drift band
    across one window was not stable, whatever the candidate did.
    """
    pts = [(float(p), v) for p, v in zip(positions, values, strict=True) if v > 0]
    if len(pts) < 2 or len(pts) != len(values):
        return None
    xs = [p for p, _ in pts]
    ys = [math.log(v) for _, v in pts]
    mx = math.fsum(xs) / len(xs)
    my = math.fsum(ys) / len(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return math.expm1(slope * (max(xs) - min(xs)))


def variance_test(d: Sequence[float], sd: float) -> float | None:
    """One-sided p-value of "the pairs' spread is no larger than the noise `sd` predicts"
    (χ² test of the sample variance of `d` against sd²). Small p = more spread than the
    lane's noise explains. None with fewer than two values or sd ≤ 0."""
    n = len(d)
    if n < 2 or sd <= 0:
        return None
    mean = math.fsum(d) / n
    ss = math.fsum((v - mean) ** 2 for v in d)
    return float(_special.chdtrc(n - 1, ss / sd**2))  # χ²(n − 1).sf (see above)


def trend_test(values: Sequence[float], positions: Sequence[float],
               sd: float) -> tuple[float, float] | None:
    """The control's movement across the window (as `trend`) and the two-sided p-value
    of "no trend", for ln(values) with a known per-point noise `sd` (z-test of the slope).
    None where `trend` is None or sd ≤ 0."""
    moved = trend(values, positions)
    if moved is None or sd <= 0:
        return None
    xs = [float(p) for p in positions]
    mx = math.fsum(xs) / len(xs)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    span = max(xs) - min(xs)
    slope = math.log1p(moved) / span
    z = slope / (sd / math.sqrt(sxx))
    return moved, float(2 * _special.ndtr(-abs(z)))  # 2·Φ(−|z|)


def lanes_test(d: Sequence[float], lanes: Sequence[str], sd: float) -> float | None:
    """p-value of "every lane measures the same change": the lanes' mean pair changes
    against their pooled mean, with a known per-pair noise `sd` (χ² test, one degree of
    freedom per lane beyond the first: Σ nₗ (meanₗ − mean)² / sd²). Small p = the lanes
    disagree by more than the noise explains. None with one lane or sd ≤ 0."""
    groups: dict[str, list[float]] = {}
    for v, lane in zip(d, lanes, strict=True):
        groups.setdefault(lane, []).append(v)
    if len(groups) < 2 or sd <= 0:
        return None
    mean = math.fsum(d) / len(d)
    stat = math.fsum(len(g) * (math.fsum(g) / len(g) - mean) ** 2 for g in groups.values())
    return float(_special.chdtrc(len(groups) - 1, stat / sd**2))  # χ²(k − 1).sf
