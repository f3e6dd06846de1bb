"""verdict/guardstats.py's hand-made tests for failure shares against known answers.

- Newcombe's hybrid score interval is statsmodels' `newcomb` interval (two-sided at 2α:
  each end one-sided at α): equal to 1e-6 over the grid.
- Farrington and Manning's score test at a margin of 0 is statsmodels' `score` test
  without the Miettinen–Nurminen n/(n−1) correction: equal to 1e-6.
- At a margin δ > 0 the score test needs the shares that maximise the likelihood under
  p1 − p2 = δ. statsmodels 0.14's closed form misses that maximum (at 1 of 20 against
  1 of 20, δ = 0.05, its shares have log-likelihood −8.18241 where the maximum is
  −8.18221), so its p-values there differ from the test's by up to ~0.02 on this grid
  (19 of 20 against 372 of 400, δ = 0.05: 0.776 against 0.794). The reference at a
  margin is therefore the likelihood maximised numerically (scipy), which ours matches
  to 1e-6.
"""

from __future__ import annotations

import itertools
import math

import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import norm
from statsmodels.stats import proportion as smp

from campaign.verdict import guardstats as gs

SIZES = (20, 97, 400, 2000)
SHARES = (0.0, 0.004, 0.03, 0.2, 0.5, 0.93, 1.0)
DELTAS = (0.001, 0.01, 0.05, 0.2)
def _inside(x: int, n: int) -> bool:
    return 0 < x < n


GRID = [(round(p1 * n1), n1, round(p2 * n2), n2)
        for n1, n2 in itertools.product(SIZES, repeat=2)
        for p1, p2 in itertools.product(SHARES, repeat=2)]


def _nll(c: tuple[int, int, int, int], delta: float, r1: float) -> float:
    x1, n1, x2, n2 = c
    out = 0.0
    for x, n, r in ((x1, n1, r1), (x2, n2, r1 - delta)):
        out -= (x * math.log(r) if x else 0.0) + ((n - x) * math.log1p(-r) if n - x else 0.0)
    return out


def _numeric_p(c: tuple[int, int, int, int], delta: float) -> float:
    x1, n1, x2, n2 = c
    r1 = minimize_scalar(lambda r: _nll(c, delta, r), bounds=(delta + 1e-12, 1 - 1e-12),
                         method="bounded", options={"xatol": 1e-13}).x
    r2 = r1 - delta
    z = (x1 / n1 - x2 / n2 - delta) / math.sqrt(r1 * (1 - r1) / n1 + r2 * (1 - r2) / n2)
    return float(norm.sf(z))


def _statsmodels_p(c: tuple[int, int, int, int], delta: float) -> float:
    return float(smp.test_proportions_2indep(*c, value=delta, method="score", compare="diff",
                                             alternative="larger", correction=False).pvalue)


INSIDE = [c for c in GRID if _inside(*c[:2]) and _inside(*c[2:])]


def test_the_score_test_at_no_margin_agrees_with_statsmodels() -> None:
    assert len(INSIDE) > 150
    for c in INSIDE:
        assert gs.farrington_manning(*c, 0.0) == pytest.approx(_statsmodels_p(c, 0.0),
                                                               abs=1e-6), c


@pytest.mark.parametrize("delta", DELTAS)
def test_the_score_test_at_a_margin_agrees_with_the_likelihood(delta: float) -> None:
    for c in INSIDE:
        ours = gs.farrington_manning(*c, delta)
        assert ours == pytest.approx(_numeric_p(c, delta), abs=1e-6), (c, delta)


@pytest.mark.parametrize("delta", DELTAS)
def test_the_restricted_shares_maximise_the_likelihood_at_the_edges(delta: float) -> None:
    edges = [c for c in GRID if not (_inside(*c[:2]) and _inside(*c[2:]))]
    for c in edges:
        x1, n1, x2, n2 = c
        best = minimize_scalar(lambda r, c=c: _nll(c, delta, r),
                               bounds=(delta + 1e-12, 1 - 1e-12), method="bounded",
                               options={"xatol": 1e-12}).x
        r1, r2 = gs._restricted(x1 / n1, n1, x2 / n2, n2, delta)
        assert r2 == pytest.approx(r1 - delta, abs=1e-12)
        assert _nll(c, delta, r1) <= _nll(c, delta, best) + 1e-6, (c, delta, r1, best)


@pytest.mark.parametrize("alpha", (0.025, 0.05 / 6))
def test_newcombe_agrees_with_statsmodels(alpha: float) -> None:
    for x1, n1, x2, n2 in GRID:
        ours = gs.newcombe(x1, n1, x2, n2, alpha)
        ref = smp.confint_proportions_2indep(x1, n1, x2, n2, method="newcomb",
                                             compare="diff", alpha=2 * alpha)
        assert ours == pytest.approx(ref, abs=1e-6), (x1, n1, x2, n2, alpha)
