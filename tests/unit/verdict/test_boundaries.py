"""The sequential design's kernel (verdict/boundaries.py): its bounds spend exactly the
registered error over the looks taken, and a look says adopt / futile / continue."""

from __future__ import annotations

import math

import numpy as np
import pytest

from campaign.verdict import boundaries as sq

M, FLOOR, POWERED = math.log(1.10), math.log(1.05), math.log(1.15)


def test_bounds_match_the_obrien_fleming_spending_of_the_t_statistics() -> None:
    c = sq.bounds(tuple(range(2, 9)), 8, 0.05)
    # independent simulation (other seed, 400k sequences): 3756, 19.96, 6.06, 3.79, 2.91,
    # 2.46, 2.18; the first look spends < 1e-4
    assert c[0] > 1000
    assert [round(x, 1) for x in c[2:]] == pytest.approx([6.06, 3.79, 2.91, 2.46, 2.18],
                                                         abs=0.15)
    assert sq.spent(1.0, 0.05) == pytest.approx(0.05)
    assert sq.bounds(tuple(range(2, 9)), 8, 0.05) is c  # cached


def test_the_spent_error_is_exact_for_estimated_noise() -> None:
    """Pivotal: whatever σ, sequences at the null cross the adopt bound ~α of the time."""
    looks = tuple(range(2, 7))
    rng = np.random.default_rng(3)
    for sigma in (0.02, 0.09):
        d = FLOOR + sigma * rng.standard_normal((4000, 6))
        crossed = 0
        for row in d:
            for j, n in enumerate(looks):
                lk = sq.look(list(row[:n]), looks=looks[:j + 1], max_pairs=6,
                             margin_d=-1.0, floor_d=FLOOR, powered_d=POWERED, alpha=0.05,
                             beta=0.10)
                if lk.outcome == "adopt":
                    crossed += 1
                    break
        assert 0.035 < crossed / 4000 < 0.065, (sigma, crossed)


def test_a_look_says_adopt_futile_or_continue() -> None:
    kw = dict(max_pairs=8, margin_d=M, floor_d=FLOOR, powered_d=POWERED, alpha=0.05,
              beta=0.10)
    clear = [math.log(1.25) + e for e in (0.01, -0.01, 0.005, -0.004)]
    assert sq.look(clear, looks=(2, 3, 4), **kw).outcome == "adopt"
    flat = [0.01, -0.01, 0.0, 0.005, -0.004, 0.002]
    assert sq.look(flat, looks=(2, 3, 4, 5, 6), **kw).outcome == "futile"
    noisy = [0.3, -0.1]
    assert sq.look(noisy, looks=(2,), **kw).outcome == "continue"
    with pytest.raises(ValueError):
        sq.look(clear, looks=(2, 3), **kw)
