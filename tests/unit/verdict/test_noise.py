"""The noise model measured on A/A runs written through the store's own API: hand-worked
cases (pure trend, pure slot effects, pure residuals) and a seeded synthetic lane whose
parameters the estimate must recover."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from campaign.campaignfile import Preregistration
from campaign.errors import ResultsError
from campaign.results.journal import PassRow
from campaign.results.store import RunStore
from campaign.verdict import noise as nz
from tests.runs import record_passes

ARMS = ("control", "control-b")


def aa_run(root: Path, values: Callable[[int, int], float], *, pairs: int,
           levels: tuple[str, ...] = ("c1", "c4"), invalid: set[tuple[int, str]] = frozenset(),
           metric: str = "output_token_throughput") -> Path:
    """An A/A results directory: `values(slot, level_index)` gives each knee value."""
    rule = Preregistration(pairs=pairs).model_dump(mode="json", by_alias=True)
    doc = {"name": "aa", "hypothesis": "nothing changes", "lane": "sim",
           "preregistration": rule, "arms": {a: {"description": a} for a in ARMS}}
    store = RunStore.create(root, "aa", json.dumps(doc).encode(), short_id="abcdef")
    digest = store.register(rule, campaign="aa", arms=list(ARMS), drift_band=0.03)
    store.journal_registered(sha256=digest, lane="sim")  # the runner's first line
    rows: list[PassRow] = []
    slot = 0
    for pair in range(1, pairs + 1):
        for arm in ARMS:
            for j, lvl in enumerate(levels):
                rows.append(PassRow(
                    run=store.run_id, pair=pair, pair_attempt=1, arm=arm, slot=slot,
                    started_at="2026-11-29T10:00:00.000Z", workload="knee", level=lvl,
                    metric=metric, value=values(slot, j), valid=(slot, lvl) not in invalid,
                    attempt=1, reason="" if (slot, lvl) not in invalid else "errors"))
                # a metric the noise model must ignore
                rows.append(dataclasses.replace(rows[-1], metric="ttft_p99", value=1.0 + slot))
            slot += 1
    return record_passes(store, rows)


def test_pure_linear_trend(tmp_path: Path) -> None:
    # +1% per slot (log scale) on every level, nothing else: 8 slots span 7 steps
    run = aa_run(tmp_path, lambda s, j: 100.0 * (1 + j) * math.exp(0.01 * s), pairs=4)
    est = nz.estimate_noise(run)
    assert est.slots == 8 and est.levels == ("knee c1", "knee c4")
    assert est.model.window_drift == pytest.approx(math.expm1(0.07), abs=1e-12)
    assert est.model.boot_sd == pytest.approx(0.0, abs=1e-9)
    assert est.model.pass_sd == pytest.approx(0.0, abs=1e-9)
    assert "8 boots × 2 cell(s)" in est.model.source


def test_pure_slot_effects_are_boot_drift(tmp_path: Path) -> None:
    # each boot shifts every level by the same factor: alternating ±2% around a flat lane
    shifts = [0.02, -0.02, 0.02, -0.02, 0.02, -0.02]
    run = aa_run(tmp_path, lambda s, j: 50.0 * (2 + j) * math.exp(shifts[s]), pairs=3)
    m = nz.estimate_noise(run).model
    assert m.pass_sd == pytest.approx(0.0, abs=1e-9)
    # worked: positions −2.5…2.5, Σx² = 17.5, Σx·shift = −0.06 → slope −0.06/17.5, whose
    # standard error (residual variance / Σx²)^½ is far larger: no trend, and the boot sd
    # is the shifts' own sd around their mean (0) over 5 degrees of freedom
    slope = -0.06 / 17.5
    resid = [sh - slope * (s - 2.5) for s, sh in enumerate(shifts)]
    se = math.sqrt(sum(r * r for r in resid) / 4 / 17.5)
    assert abs(slope) < 2 * se
    assert m.window_drift == 0.0
    assert m.boot_sd == pytest.approx(math.sqrt(sum(x * x for x in shifts) / 5), rel=1e-9)


def test_a_trend_that_stands_out_is_kept(tmp_path: Path) -> None:
    # +1% per slot plus the same alternating ±0.2% boots: slope 0.01 ≫ 2 standard errors
    shifts = [0.002, -0.002] * 4
    run = aa_run(tmp_path, lambda s, j: 100.0 * math.exp(0.01 * s + shifts[s]), pairs=4)
    m = nz.estimate_noise(run).model
    slope = 0.01 + (-0.008 / 42)  # Σx·shift = −0.008 over positions −3.5…3.5 (Σx² = 42)
    assert m.window_drift == pytest.approx(math.expm1(slope * 7), rel=1e-9)
    assert 0 < m.boot_sd < 0.003


def test_pure_residuals_are_pass_noise(tmp_path: Path) -> None:
    # level c1 and c4 move in opposite directions in each slot: the slot means stay flat
    eps = [0.03, -0.01, 0.02, -0.03]
    run = aa_run(tmp_path, lambda s, j: 100.0 * math.exp(eps[s] * (1 if j == 0 else -1)),
                 pairs=2)
    m = nz.estimate_noise(run).model
    # worked: each level's mean (±0.0025) removed, residuals ±(eps − 0.0025) in both
    # levels, over (S − 1)(L − 1) = 3 degrees of freedom
    ss = 2 * sum((e - 0.0025) ** 2 for e in eps)
    assert m.pass_sd == pytest.approx(math.sqrt(ss / 3), rel=1e-9)
    assert m.boot_sd == 0.0  # the slot means' spread is below what residuals explain
    assert m.window_drift == pytest.approx(0.0, abs=1e-12)


def test_recovers_a_seeded_synthetic_lane(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    slots, levels = 120, 4
    boot = rng.normal(0, 0.03, slots)
    passes = rng.normal(0, 0.015, (slots, levels))
    trend = math.log(1.05) * np.arange(slots) / (slots - 1)
    run = aa_run(tmp_path, lambda s, j: 800.0 * math.exp(boot[s] + passes[s, j] + trend[s]),
                 pairs=slots // 2, levels=("c1", "c2", "c4", "c8"))
    m = nz.estimate_noise(run).model
    assert m.boot_sd == pytest.approx(0.03, rel=0.2)
    assert m.pass_sd == pytest.approx(0.015, rel=0.1)
    assert m.window_drift == pytest.approx(0.05, abs=0.02)
    assert m.pair_sd == pytest.approx(math.sqrt(2 * (m.boot_sd**2 + m.pass_sd**2)))


def test_invalid_passes_and_other_metrics_are_ignored(tmp_path: Path) -> None:
    # the invalid slot carries a wild value that would dominate if it were read
    run = aa_run(tmp_path, lambda s, j: 9999.0 if s == 2 else 100.0 * math.exp(0.01 * s),
                 pairs=3, invalid={(2, "c1"), (2, "c4")})
    est = nz.estimate_noise(run)
    assert est.slots == 5
    assert est.model.window_drift == pytest.approx(math.expm1(0.05), abs=1e-9)


def test_one_level_puts_all_noise_on_the_boot(tmp_path: Path) -> None:
    shifts = [0.0, 0.04, 0.0, 0.04]
    run = aa_run(tmp_path, lambda s, j: 100.0 * math.exp(shifts[s]), pairs=2, levels=("c1",))
    m = nz.estimate_noise(run).model
    assert m.pass_sd == 0.0 and m.boot_sd > 0.0


def test_too_few_slots_is_an_error_naming_the_run(tmp_path: Path) -> None:
    run = aa_run(tmp_path, lambda s, j: 100.0, pairs=1)
    with pytest.raises(ResultsError, match="needs at least 3"):
        nz.estimate_noise(run)
    with pytest.raises(ResultsError, match="no valid rows"):
        nz.estimate_noise(run, metric="itl_p50")


def test_from_drift() -> None:
    m = nz.from_drift(0.03)
    assert m.boot_sd == pytest.approx(math.log(1.03))
    assert m.pass_sd == nz.DEFAULT_PASS_SD and m.window_drift == 0.0
    with pytest.raises(ValueError):
        nz.from_drift(-0.01)


def test_plan_reads_noise_from_an_aa_run(tmp_path: Path, tokenizer_dir: Path) -> None:
    from campaign import plan
    from tests.unit.plan.test_plan import campaign_file

    rng = np.random.default_rng(3)
    boot = rng.normal(0, 0.05, 12)
    run = aa_run(tmp_path / "runs", lambda s, j: 100.0 * math.exp(boot[s]), pairs=6)
    c = campaign_file(tmp_path / "c", tokenizer_dir)
    noisy = plan.plan_campaign(c, effect=0.15, noise_run=run, drift=None, sims=500)
    assert noisy.noise.source.startswith("measured on A/A run")
    assert noisy.noise.boot_sd == pytest.approx(nz.estimate_noise(run).model.boot_sd)
