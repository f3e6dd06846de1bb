"""A registered sequential design: look after each pair (or ABBA block), stop when decided.

The design is a group-sequential one-sided t-test with Lan–DeMets alpha spending of the
O'Brien–Fleming type (Lan & DeMets 1983; O'Brien & Fleming 1979), on the mean paired log
ratio d̄ of a decision cell, with a non-binding futility bound of the same shape:

- **adopt** at a look with n valid pairs when T_n = √n (d̄ − L)/s ≥ c_n and d̄ ≥ ln(1 + m),
  where L = ln(1 + max(m/2, δ)) (the `bound` rule's floor): the boundary for "better than
  the bar" is crossed;
- **not worth it** when F_n = √n (d̄ − H)/s ≤ −f_n, with H = ln(1 + 1.5 m): the data rule out
  the change the design is powered for (futility, β = 1 − power);
- otherwise **continue**; at `max_pairs` without a crossing, **inconclusive**.

The spending functions α(t) = 2 − 2Φ(z(1 − α/2)/√t) (and β(t) likewise), t = n / max_pairs,
give each look its share of the error. Because T_n at μ = L (and F_n at μ = H) is pivotal —
its law does not depend on the unknown pair noise σ — the bounds are exact for estimated
variance: they are solved by simulating that pivotal law for the looks actually taken
(`bounds`), with a fixed seed, so any look sequence (invalid pairs shift n) gets bounds that
spend exactly the registered α. The design assumes iid normal pair log ratios; it never
uses the assumed lane noise (that is for planning only).

Several candidates: α is shared Bonferroni-wise (α/k). Several decision cells: every cell
must cross (an intersection–union test); any cell's futility stops for keep-default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats as sps

SIMULATIONS = 200_000
"""Pivotal sequences simulated per set of bounds (the 5% is hit to ±0.1 point)."""
SEED = 20261201

LookOutcome = Literal["adopt", "futile", "continue"]


def spent(t: float | np.ndarray, level: float) -> np.ndarray:
    """The O'Brien–Fleming-type spending function: the error spent by information time t."""
    tt = np.clip(np.asarray(t, dtype=float), 1e-12, 1.0)
    return np.asarray(2.0 - 2.0 * sps.norm.cdf(sps.norm.ppf(1 - level / 2) / np.sqrt(tt)))


@lru_cache(maxsize=256)
def bounds(looks: tuple[int, ...], max_pairs: int, level: float,
           simulations: int = SIMULATIONS) -> tuple[float, ...]:
    """The critical values c_j of the one-sided t statistics at `looks` (valid pairs at each
    look, increasing, each ≥ 2): P(T crosses first at look j | μ at the null) = α(t_j) −
    α(t_{j−1}), by simulating the pivotal law of the looks' t statistics (seeded). A look
    that spends nothing has an infinite bound."""
    if not looks or any(n < 2 for n in looks) or list(looks) != sorted(set(looks)):
        raise ValueError(f"looks must be increasing pair counts ≥ 2, got {looks}")
    rng = np.random.default_rng([SEED, max_pairs, *looks])
    n_last = looks[-1]
    d = rng.standard_normal((simulations, n_last))
    csum = np.cumsum(d, axis=1)
    csq = np.cumsum(d * d, axis=1)
    alive = np.ones(simulations, dtype=bool)
    out: list[float] = []
    previous = 0.0
    for n in looks:
        mean = csum[:, n - 1] / n
        var = (csq[:, n - 1] - n * mean * mean) / (n - 1)
        t_stat = math.sqrt(n) * mean / np.sqrt(np.maximum(var, 1e-300))
        total = float(spent(min(1.0, n / max_pairs), level))
        share = max(0.0, total - previous)
        previous = max(previous, total)
        k = round(share * simulations)
        if k <= 0:
            out.append(math.inf)
            continue
        ranked = np.sort(t_stat[alive])[::-1]
        bound = float(ranked[min(k, ranked.size) - 1])
        out.append(bound)
        alive &= t_stat < bound
    return tuple(out)


@dataclass(frozen=True)
class Look:
    """One decision cell at one look: its statistics, the bounds and what they say."""

    n: int
    mean: float
    sd: float
    statistic: float
    """T_n = √n (d̄ − L)/s (+∞ when s = 0 and d̄ > L)."""
    bound: float
    """c_n, the adopt boundary on T_n."""
    futility_statistic: float
    futility_bound: float
    """f_n: futility when F_n ≤ −f_n."""
    outcome: LookOutcome

    @property
    def lower(self) -> float:
        """The adopt boundary as a bound on d̄: crossing means d̄ − c_n s/√n ≥ L."""
        return self.mean - self.bound * self.sd / math.sqrt(self.n) if math.isfinite(
            self.bound) else -math.inf


def look(d: Sequence[float], *, looks: Sequence[int], max_pairs: int, margin_d: float,
         floor_d: float, powered_d: float, alpha: float, beta: float) -> Look:
    """One decision cell judged at the last of `looks` (its pair log ratios `d`, positive =
    better; `looks` the valid pair counts of every look taken so far, this one last).

    `margin_d` = ln(1 + m): the mean must clear it to adopt; `floor_d` = ln(1 + max(m/2,
    δ)): the null of the adopt test; `powered_d` = ln(1 + 1.5 m): the alternative of the
    futility test."""
    n = len(d)
    if n != looks[-1]:
        raise ValueError(f"{n} pairs but the look is at {looks[-1]}")
    mean = math.fsum(d) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1)) if n > 1 else 0.0
    c = bounds(tuple(looks), max_pairs, alpha)[-1]
    f = bounds(tuple(looks), max_pairs, beta)[-1]
    t_adopt = _t(mean - floor_d, sd, n)
    t_futile = _t(mean - powered_d, sd, n)
    if t_adopt >= c and mean >= margin_d - 1e-12:
        outcome: LookOutcome = "adopt"
    elif -t_futile >= f:
        outcome = "futile"
    else:
        outcome = "continue"
    return Look(n, mean, sd, t_adopt, c, t_futile, f, outcome)


def _t(diff: float, sd: float, n: int) -> float:
    if sd > 0:
        return math.sqrt(n) * diff / sd
    return math.inf if diff > 0 else (-math.inf if diff < 0 else 0.0)


def path(pairs: Sequence[int], d: Sequence[float], schedule: Sequence[int], last: int, *,
         max_pairs: int, margin_d: float, floor_d: float, powered_d: float, alpha: float,
         beta: float) -> list[tuple[int, Look]]:
    """One decision cell's looks: for each pair count p of the design's `schedule` up to
    `last` (the last pair measured), the look on the cell's complete pairs numbered ≤ p
    (`pairs` and their log ratios `d`). A look that adds no valid pair (or has fewer than
    two) is not taken: the bounds spend the error over the valid pair counts of the looks
    actually taken."""
    order = sorted(zip(pairs, d, strict=True))
    taken: list[int] = []
    out: list[tuple[int, Look]] = []
    for p in schedule:
        if p > last:
            break
        sub = [v for i, v in order if i <= p]
        if len(sub) < 2 or (taken and len(sub) <= taken[-1]):
            continue
        taken.append(len(sub))
        out.append((p, look(sub, looks=tuple(taken), max_pairs=max_pairs, margin_d=margin_d,
                            floor_d=floor_d, powered_d=powered_d, alpha=alpha, beta=beta)))
    return out
