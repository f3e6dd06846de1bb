"""A sequential look (`run.sequential.take_look`) on a rule deciding on capacity at SLO
reads each arm's capacity at the REGISTERED `preregistration.slo.target`, as `spec-ab
report` does (`report.reads.slo_targets`), not at the default 0.90: what the night stops
on is what the morning report shows.

The sweep is built so the target decides: at 0.95 the candidate misses the target even at
4 req/s (capacity < 3.96 req/s, censored) while the control holds it there (~4.09 req/s),
so the look keeps the default; read at 0.90 instead, the candidate meets it at every rate (≥ 8
req/s) against the control's ~4.5 req/s, and the look would adopt it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from campaign.campaignfile import Preregistration, load_campaign
from campaign.results import journal as jr
from campaign.results.journal import PassRow
from campaign.results.registration import registered_levels
from campaign.results.store import RunStore
from campaign.run import sequential
from campaign.run.runtime import Runtime
from tests.runs import T0, Values, frame, record_passes

SHARES = {"r4": (0.96, 0.94), "r8": (0.50, 0.91)}
"""Rate level → (control, candidate) share of requests meeting the SLO, in every pair."""


def _night(tmp_path: Path, target: float) -> RunStore:
    """A sequential night of 3 pairs over rate levels r4 and r8 (what `spec-ab run` writes,
    through the store's API), registered with `slo.target: target`."""
    rule = Preregistration(
        primary_metric="capacity_at_slo", drift_band=0.08, guardrails=[],
        decision_cells=[{"workload": "rate", "level": "capacity"}],
        slo={"ttft_ms": 2000, "target": target}, sequential={"max_pairs": 6},
    ).model_dump(mode="json", by_alias=True)
    campaign = {"name": "cap", "hypothesis": "Deeper drafts serve more at the SLO.",
                "lane": "sim", "preregistration": rule,
                "server": {"backend": "process", "command": ["serve"], "port": 8000},
                "arms": {"control": {}, "cand": {"env": {"K": "7"}}},
                "workloads": {"model": "m", "tokenizer": "t",
                              "rate": {"rates": [4, 8], "requests_per_level": 300}}}
    store = RunStore.create(tmp_path, "cap", json.dumps(campaign).encode(),
                            clock=lambda: T0, short_id="aaaaaa")
    levels = registered_levels(load_campaign(store.run_dir / "campaign.yaml",
                                             check_files=False))
    digest = store.register(rule, campaign="cap", arms=["control", "cand"], drift_band=0.08,
                            levels=levels, guardrail_bands=[])
    store.journal_registered(sha256=digest, lane="sim")
    spec: dict[tuple[str, str, str], list[tuple[Values, ...]]] = {
        ("rate", lvl, "slo_attainment"): [(c + p / 1000, k + p / 1000) for p in range(3)]
        for lvl, (c, k) in SHARES.items()}
    rows = frame(spec, run=store.run_id, tokens=20000, requests=300).to_dict("records")
    record_passes(store, [PassRow(**r) for r in rows], complete=False)  # type: ignore[arg-type]
    return store


def _look(tmp_path: Path, target: float) -> dict[str, Any]:
    store = _night(tmp_path, target)
    campaign = load_campaign(store.run_dir / "campaign.yaml", check_files=False)
    sequential.take_look(campaign, store, Runtime(progress=lambda *a, **k: None), 3)
    (look,) = jr.of_kind(store.read_journal(), "look")
    assert "problem" not in look, look
    cand: dict[str, Any] = look["candidates"]["cand"]
    return cand


@pytest.mark.parametrize(("target", "state"), [(0.95, "keep-default"), (0.90, "adopt")])
def test_a_sequential_look_judges_capacity_at_the_registered_target(
        tmp_path: Path, target: float, state: str) -> None:
    cand = _look(tmp_path, target)
    (cell,) = cand["cells"]
    assert cand["state"] == state
    assert (cell["change"] < 0) if target == 0.95 else (cell["change"] > 0.5)
