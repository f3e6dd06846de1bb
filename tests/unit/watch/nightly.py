"""Nights of a lane written through the store's own API (what `spec-ab run` leaves, and
what `spec-ab verify` accepts): the control's figures per night, a candidate beside it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from campaign.campaignfile import Preregistration
from campaign.results.store import RunStore

T0 = dt.datetime(2026, 1, 1, 22, 0, tzinfo=dt.UTC)


def write_night(root: Path, lane: str, night: int, tput: float,
                acceptance: float | None = 0.6, ttft: float = 200.0, *,
                lane_in_journal: bool = True) -> Path:
    """One finished night on `lane`: 2 pairs × (control, cand) at knee c1, the control's
    throughput `tput` (its passes ±0.5%), TTFT, and the spec-decode figures at knee `all`
    (none when `acceptance` is None: a server without /metrics). Without
    `lane_in_journal`, as an older spec-ab: the lane in manifest.json only."""
    rule = Preregistration(pairs=2, decision_cells=[{"workload": "knee", "level": "c1"}]
                           ).model_dump(mode="json", by_alias=True)
    campaign = {"name": f"nightly-{lane}", "hypothesis": "watch", "lane": lane,
                "preregistration": rule,
                "arms": {"control": {"description": "k=5"},
                         "cand": {"description": "k=7", "env": {"K": "7"}}},
                "workloads": {"knee": {"concurrency": [1]}}}
    when = T0 + dt.timedelta(days=night)
    store = RunStore.create(root, f"nightly-{lane}", json.dumps(campaign).encode(),
                            clock=lambda: when, short_id=f"{night:06d}")
    digest = store.register(rule, campaign=f"nightly-{lane}", arms=["control", "cand"],
                            drift_band=0.03)
    if lane_in_journal:
        store.journal_registered(sha256=digest, lane=lane)
    else:
        store.write_manifest({"campaign": {"lane": lane}})
        store.journal_registered(sha256=digest)
    for pair in (1, 2):
        for a, arm in enumerate(("control", "cand")):
            start = when + dt.timedelta(minutes=20 * (pair - 1) + 10 * a)
            common = dict(run=store.run_id, pair=pair, pair_attempt=1, arm=arm,
                          slot=2 * (pair - 1) + a,
                          started_at=start.isoformat().replace("+00:00", "Z"),
                          valid=True, attempt=1, reason="", log_se=None)
            wob = 1 + 0.005 * (1 if pair == 1 else -1)
            lift = 1.0 if arm == "control" else 1.1
            cells = [("c1", "output_token_throughput", tput * wob * lift),
                     ("c1", "ttft_p50", ttft * wob), ("c1", "ttft_p99", 2 * ttft * wob),
                     ("c1", "output_tokens", 4096.0), ("c1", "requests_completed", 32.0)]
            if acceptance is not None:
                cells += [("all", "acceptance_rate", acceptance * lift),
                          ("all", "accepted_per_draft", 5 * acceptance * lift),
                          ("all", "tokens_per_decode_step", 1 + 5 * acceptance * lift)]
            store.journal("pass", rows=[{**common, "workload": "knee", "level": lvl,
                                         "metric": m, "value": v} for lvl, m, v in cells])
    store.finish(complete=True)
    return store.run_dir


def write_lane(root: Path, lane: str, tputs: Sequence[float],
               acceptances: Sequence[float | None] | None = None) -> list[Path]:
    acc = list(acceptances) if acceptances is not None else [0.6] * len(tputs)
    return [write_night(root, lane, i, t, a) for i, (t, a) in enumerate(zip(tputs, acc,
                                                                           strict=True))]


def noisy(n: int, seed: int, cv: float = 0.02, level: float = 100.0) -> np.ndarray:
    """A stationary series at the lane's noise (`cv` of a night's median)."""
    return level * (1 + cv * np.random.default_rng(seed).standard_normal(n))
