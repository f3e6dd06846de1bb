"""`spec-ab plan --noise RUN_DIR` for a campaign deciding on capacity at SLO: the primary's
noise is read from the run's capacity rows (`tidy.capacity_rows`: each arm's capacity per
pair, from its rate levels' SLO shares, at the planned campaign's `slo.target`), as the
verdict will read it; a run with no capacity to read is refused with what to give instead
(exit 2), never planned on nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from campaign import plan
from campaign.campaignfile import Campaign, Preregistration, load_campaign
from campaign.errors import ResultsError
from campaign.plan.campaign import with_guardrails
from campaign.results.journal import PassRow
from campaign.results.registration import registered_levels
from campaign.results.store import RunStore
from campaign.verdict import capacity as cap
from campaign.verdict.noise import fit_noise
from tests.runs import T0, Values, frame, record_passes

PAIRS = 4
R8 = [0.52, 0.61, 0.47, 0.70, 0.55, 0.66, 0.50, 0.58]
"""The share meeting the SLO at 8 req/s of each slot (pair p: control 2p−2, cand 2p−1);
every slot meets it at 4 req/s (0.97), so each capacity interpolates between 4 and 8."""


def _doc(primary: str, workloads: dict[str, Any], aa: bool, target: float,
         guardrails: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    rule = Preregistration(
        primary_metric=primary, drift_band=0.08, guardrails=list(guardrails), pairs=PAIRS,
        decision_cells=[{"workload": "rate", "level": "capacity"} if primary ==
                        cap.METRIC else {"workload": "knee", "level": "c1"}],
        slo={"ttft_ms": 2000, "target": target},
    ).model_dump(mode="json", by_alias=True)
    return {"name": "cap", "hypothesis": "Deeper drafts serve more at the SLO.",
            "lane": "sim", "preregistration": rule,
            "server": {"backend": "process", "command": ["serve"], "port": 8000},
            "arms": {"control": {}, "cand": {} if aa else {"env": {"K": "7"}}},
            "workloads": {"model": "m", "tokenizer": "t", **workloads}}


RATE = {"rate": {"rates": [4, 8], "requests_per_level": 300}}


def _noise_run(tmp_path: Path, *, rates: bool = True) -> Path:
    """An A/A run of the lane (through the store's API): a rate sweep, or a knee only."""
    doc = _doc(cap.METRIC if rates else "output_token_throughput",
               RATE if rates else {"knee": {"concurrency": [1]}}, aa=True, target=0.90)
    store = RunStore.create(tmp_path, "aa", json.dumps(doc).encode(), clock=lambda: T0,
                            short_id="bbbbbb")
    levels = registered_levels(load_campaign(store.run_dir / "campaign.yaml",
                                             check_files=False))
    digest = store.register(doc["preregistration"], campaign="aa", arms=["control", "cand"],
                            drift_band=0.08, levels=levels, guardrail_bands=[])
    store.journal_registered(sha256=digest, lane="sim")
    spec: dict[tuple[str, str, str], list[tuple[Values, ...]]]
    if rates:
        spec = {("rate", "r4", "slo_attainment"): [(0.97, 0.97)] * PAIRS,
                ("rate", "r8", "slo_attainment"): [(R8[2 * p], R8[2 * p + 1])
                                                   for p in range(PAIRS)]}
    else:
        spec = {("knee", "c1", "output_token_throughput"): [(100.0 + p, 101.0 + p)
                                                            for p in range(PAIRS)]}
    rows = frame(spec, run=store.run_id, tokens=20000, requests=300).to_dict("records")
    return record_passes(store, [PassRow(**r) for r in rows])  # type: ignore[arg-type]


def _planned(tmp_path: Path, target: float,
             guardrails: Sequence[dict[str, Any]] = ()) -> Campaign:
    path = tmp_path / "planned.yaml"
    path.write_text(json.dumps(_doc(cap.METRIC, RATE, aa=False, target=target,
                                    guardrails=guardrails)))
    return load_campaign(path, check_files=False)


@pytest.mark.parametrize("target", [0.90, 0.80])
def test_the_noise_of_capacity_is_read_from_the_runs_rate_levels(
        tmp_path: Path, target: float) -> None:
    """The boot-to-boot sd is the one `fit_noise` gives on the 8 slots' capacities at the
    planned campaign's target (interpolated between 4 and 8 req/s)."""
    run_dir = _noise_run(tmp_path / "runs")
    noise = plan.noise_for(_planned(tmp_path, target), noise_run=run_dir, drift=None,
                           band=0.08)
    caps = [cap.capacity_at([(4, 0.97), (8, s)], target).value or 0 for s in R8]
    want = fit_noise(np.log(np.array(caps, dtype=float))[:, None],
                     np.arange(len(caps), dtype=float), source="")
    assert math.isclose(noise.boot_sd, want.boot_sd, rel_tol=1e-9) and noise.boot_sd > 0.01
    assert f"{len(R8)} boots × 1 cell(s) of capacity_at_slo" in noise.source


def test_a_noise_run_without_a_rate_sweep_is_refused_with_what_to_give(
        tmp_path: Path) -> None:
    run_dir = _noise_run(tmp_path / "runs", rates=False)
    with pytest.raises(ResultsError) as err:
        plan.noise_for(_planned(tmp_path, 0.90), noise_run=run_dir, drift=None, band=0.08)
    said = str(err.value)
    assert err.value.exit_code == 2
    assert f"{run_dir}: no capacity at SLO to read" in said
    assert "rate levels" in said and "--drift" in said


def test_a_capacity_plan_draws_its_guardrail_at_the_sweeps_rate_levels(
        tmp_path: Path) -> None:
    """The TTFT guardrail of a rule deciding on capacity is checked at the rate levels the
    capacity is read from (as the verdict checks it), on the noise of their 300-request
    passes: the plan simulates it there instead of leaving it out."""
    campaign = _planned(tmp_path, 0.90, [{"metric": "ttft_p99", "max_worsening": 0.25}])
    spec = with_guardrails(plan.rule_spec(campaign), campaign, None)
    assert spec.guard_places == ((("rate", "r4"), ("rate", "r8")),)
    (model,) = spec.guard_models
    assert model.noise.requests == 300 and "300 requests per pass" in model.noise.source
