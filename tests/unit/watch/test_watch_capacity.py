"""`spec-ab watch` on nights decided on capacity at SLO (issue 41): no pass records
`capacity_at_slo`, so a night's control capacity is read from its rate levels' SLO shares
(`tidy.capacity_rows`, at the night's registered `slo.target`) and watched at its decision
cell `rate/capacity` like any primary metric.

Error rates: the series is the lane's noise (2% cv of the control's capacity, as the knee
tests assume) with a 20% drop at night 24 of 30; the same detector finds a 12% step at
this noise at its night (`test_watch.py`), and the 20% drop is found within a night of
its own in every seed tried (0–2)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from campaign.campaignfile import Preregistration
from campaign.results.store import RunStore
from tests.cli import invoke
from tests.unit.watch.nightly import T0, noisy

LOW, HIGH = 4.0, 12.0
"""The sweep's two rates (req/s): the control meets the SLO target (0.95) at 4 and misses
it at 12, so its capacity interpolates between them."""
TARGET = 0.95


def _share_at_high(capacity: float) -> float:
    """The share at 12 req/s that puts the capacity at `capacity` (0.99 at 4 req/s)."""
    return 0.99 - (0.99 - TARGET) * (HIGH - LOW) / (capacity - LOW)


def write_capacity_night(root: Path, lane: str, night: int, capacity: float) -> Path:
    """One finished night: 2 pairs × (control, cand) over rate levels r4 and r12, the
    control's capacity `capacity` (its pairs ±0.5%), the candidate's 10% above."""
    rule = Preregistration(pairs=2, primary_metric="capacity_at_slo",
                           decision_cells=[{"workload": "rate", "level": "capacity"}],
                           slo={"ttft_ms": 2000, "target": TARGET}
                           ).model_dump(mode="json", by_alias=True)
    name = f"nightly-{lane}"
    campaign = {"name": name, "hypothesis": "watch", "lane": lane, "preregistration": rule,
                "arms": {"control": {"description": "k=5"},
                         "cand": {"description": "k=7", "env": {"K": "7"}}},
                "workloads": {"rate": {"rates": [LOW, HIGH]}}}
    when = T0 + dt.timedelta(days=night)
    store = RunStore.create(root, name, json.dumps(campaign).encode(), clock=lambda: when,
                            short_id=f"{night:06d}")
    digest = store.register(rule, campaign=name, arms=["control", "cand"], drift_band=0.03)
    store.journal_registered(sha256=digest, lane=lane)
    for pair in (1, 2):
        for a, arm in enumerate(("control", "cand")):
            start = when + dt.timedelta(minutes=20 * (pair - 1) + 10 * a)
            common = dict(run=store.run_id, pair=pair, pair_attempt=1, arm=arm,
                          slot=2 * (pair - 1) + a,
                          started_at=start.isoformat().replace("+00:00", "Z"),
                          valid=True, attempt=1, reason="", log_se=None, workload="rate")
            cap = capacity * (1 + 0.005 * (1 if pair == 1 else -1)) * (1.1 if a else 1.0)
            cells = [("r4", "slo_attainment", 0.99), ("r12", "slo_attainment",
                                                      _share_at_high(cap))]
            cells += [(lvl, m, v) for lvl in ("r4", "r12")
                      for m, v in (("output_tokens", 4096.0), ("requests_completed", 64.0))]
            store.journal("pass", rows=[{**common, "level": lvl, "metric": m, "value": v}
                                        for lvl, m, v in cells])
    store.finish(complete=True)
    return store.run_dir


@pytest.mark.parametrize("seed", range(3))
def test_a_20pct_drop_in_the_controls_capacity_is_found_at_its_night(
        tmp_path: Path, seed: int) -> None:
    caps = noisy(30, seed=seed, level=8.0)
    caps[24:] *= 0.80
    dirs = [write_capacity_night(tmp_path, "gb10-a", i, float(c)) for i, c in enumerate(caps)]
    r = invoke("watch", str(tmp_path), "--format", "json")
    assert r.code == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    (series,) = [s for s in doc["series"] if s["metric"] == "capacity_at_slo"]
    assert series["cell"] == "rate/capacity"
    # each night's value is its control's capacity at the registered target (0.95)
    assert [n["value"] for n in series["nights"]] == pytest.approx(list(caps), rel=1e-9)
    (change,) = [c for c in doc["changes"] if c["metric"] == "capacity_at_slo"]
    assert change["cell"] == "rate/capacity" and change["direction"] == "worse"
    assert abs([str(d) for d in dirs].index(change["run"]) - 24) <= 1
    assert -0.24 < change["change"] < -0.16
