"""The sampling error of a pass's statistic from its own requests (verdict/sampling.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from campaign.verdict import sampling


def test_quantile_bootstrap_matches_the_spread_of_resampled_p99() -> None:
    """With 400 requests (4 beyond the p99) the bootstrap's variance of ln p99, averaged
    over passes, is close to (a little above) the true one."""
    rng = np.random.default_rng(5)
    ses = [sampling.quantile_log_se(np.exp(rng.normal(3.0, 0.3, size=400)), 0.99)
           for _ in range(60)]
    assert all(se is not None for se in ses)
    fresh = [math.log(np.percentile(np.exp(rng.normal(3.0, 0.3, size=400)), 99))
             for _ in range(1000)]
    ratio = float(np.mean(np.square(ses))) / float(np.var(fresh, ddof=1))
    assert 0.8 < ratio < 2.0, ratio
    x = np.exp(rng.normal(3.0, 0.3, size=50))
    assert sampling.quantile_log_se(x, 0.99) == sampling.quantile_log_se(x, 0.99)  # fixed seed


def test_mean_by_the_delta_method() -> None:
    x = np.array([10.0, 12.0, 8.0, 10.0])
    assert sampling.mean_log_se(x) == pytest.approx(x.std(ddof=1) / (2 * 10.0))


def test_no_estimate_from_one_value_or_a_zero() -> None:
    assert sampling.quantile_log_se([5.0], 0.5) is None
    assert sampling.quantile_log_se([5.0, 0.0, 3.0], 0.5) is None
    assert sampling.log_se("p99", [1.0]) is None


def test_statistic_names_and_their_inflation() -> None:
    assert sampling.statistic_of("ttft_p99") == "p99"
    assert sampling.statistic_of("output_token_throughput") is None
    assert [sampling.inflation("p99", n) for n in (16, 32, 99, 100, 299, 300)] == [
        4.0, 3.0, 3.0, 1.5, 1.5, 1.0]
    assert sampling.inflation("p50", 16) == 1.0
    assert sampling.inflation("avg", 50) == 1.5 and sampling.inflation("avg", 100) == 1.0
