"""Paired statistics against independent computations (scipy) and worked examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from campaign.verdict import stats as st

X = [100.0, 200.0, 50.0]
Y = [110.0, 230.0, 52.0]


def test_log_ratios_worked_example() -> None:
    # ln(110/100) = 0.0953101798, ln(230/200) = 0.1397619424, ln(52/50) = 0.0392207132
    d = st.log_ratios(X, Y, "higher")
    assert d == pytest.approx([0.0953101798, 0.1397619424, 0.0392207132], abs=1e-9)
    # lower-is-better flips the sign: a lower TTFT is a gain
    assert st.log_ratios(X, Y, "lower") == pytest.approx([-v for v in d])


def test_gain_is_ratio_of_geometric_means() -> None:
    p = st.paired(X, Y, "higher")
    # worked: mean d = 0.2742928354 / 3 = 0.0914309451; exp(.) - 1 = 0.0957413...
    assert p.mean == pytest.approx(0.0914309451, abs=1e-9)
    assert p.gain == pytest.approx(math.exp(0.0914309451) - 1, abs=1e-9)
    assert p.gain == pytest.approx(sp.gmean(Y) / sp.gmean(X) - 1, rel=1e-12)
    assert p.pair_gains == pytest.approx((0.10, 0.15, 0.04))
    # lower-is-better: the candidate's higher values are a loss of the same size in logs
    q = st.paired(X, Y, "lower")
    assert q.gain == pytest.approx(sp.gmean(X) / sp.gmean(Y) - 1, rel=1e-12)
    assert q.gain < 0


@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95, 0.99])
def test_ci_matches_scipy_t_interval(confidence: float) -> None:
    p = st.paired(X, Y, "higher", confidence=confidence)
    d = np.log(np.array(Y) / np.array(X))
    lo, hi = sp.t.interval(confidence, df=len(d) - 1, loc=d.mean(), scale=sp.sem(d))
    assert p.ci is not None
    assert p.ci[0] == pytest.approx(math.expm1(lo), rel=1e-10)
    assert p.ci[1] == pytest.approx(math.expm1(hi), rel=1e-10)
    assert p.sd == pytest.approx(float(np.std(d, ddof=1)), rel=1e-12)


def test_ci_worked_example_two_pairs() -> None:
    # d = ln 1.15 = 0.1397619, ln 1.05 = 0.0487902: mean 0.0942761, sd = |a - b|/sqrt 2 =
    # 0.0643268; t(0.975, 1) = 12.7062047; half = 12.7062047 * 0.0643268 / sqrt 2 = 0.5779530
    p = st.paired([100, 100], [115, 105], "higher")
    assert st.t_critical(0.975, 1) == pytest.approx(12.7062047, abs=1e-6)
    assert p.ci is not None
    assert p.ci[0] == pytest.approx(math.exp(0.0942761 - 0.5779530) - 1, abs=1e-5)
    assert p.ci[1] == pytest.approx(math.exp(0.0942761 + 0.5779530) - 1, abs=1e-5)


def test_one_pair_gives_no_ci() -> None:
    p = st.paired([100], [115], "higher")
    assert p.n == 1
    assert p.ci is None and p.sd is None and p.se is None
    assert p.gain == pytest.approx(0.15)
    assert st.p_above(p, 0.10) is None
    assert st.lower_bound(p, 0.025) is None


def test_zero_or_negative_values_cannot_enter_a_ratio() -> None:
    with pytest.raises(ValueError, match="> 0"):
        st.log_ratios([100, 0], [110, 5], "higher")
    with pytest.raises(ValueError, match="> 0"):
        st.log_ratios([100], [-1], "higher")
    with pytest.raises(ValueError):
        st.log_ratios([100], [1, 2], "higher")


def test_absolute_differences_for_rates_that_are_often_zero() -> None:
    p = st.paired([0.0, 0.0, 0.01], [0.02, 0.0, 0.01], "lower", kind="absolute")
    # lower is better: candidate's +0.02 error rate in pair 1 is a d of -0.02
    assert p.d == pytest.approx((-0.02, 0.0, 0.0))
    assert p.gain == pytest.approx(-0.02 / 3)
    d = np.array(p.d)
    lo, hi = sp.t.interval(0.95, df=2, loc=d.mean(), scale=sp.sem(d))
    assert p.ci == pytest.approx((lo, hi))


def test_p_above_matches_scipy_one_sided_t_test_and_the_ci() -> None:
    p = st.paired(X, Y, "higher", confidence=0.9)
    d = np.log(np.array(Y) / np.array(X))
    for bar in (0.0, 0.05, 0.10):
        ref = sp.ttest_1samp(d, popmean=math.log1p(bar), alternative="greater").pvalue
        assert st.p_above(p, bar) == pytest.approx(ref, rel=1e-9)
    # CI lower end >= bar  <=>  p <= alpha/2
    assert p.ci is not None
    bar = p.ci[0]
    assert st.p_above(p, bar) == pytest.approx(0.05, rel=1e-6)
    assert st.lower_bound(p, 0.05) == pytest.approx(p.ci[0], rel=1e-12)


def test_p_above_with_zero_spread() -> None:
    p = st.paired([100, 100], [115, 115], "higher")
    assert p.sd == 0
    assert st.p_above(p, 0.10) == 0.0
    assert st.p_above(p, 0.20) == 1.0


def test_trend_of_the_control_across_the_window() -> None:
    assert st.trend([100, 104], [0, 1]) == pytest.approx(0.04)
    # steady +2% per slot over 2 slots: 1.02^2 - 1
    assert st.trend([100, 102, 104.04], [0, 2, 4]) == pytest.approx(0.0404)
    assert st.trend([100], [0]) is None
    assert st.trend([100, 101], [3, 3]) is None
