"""The primary metric's noise a plan reads from a run (`--noise RUN_DIR`, or the campaign's
own A/A run named by `drift_band: {from: RUN_DIR}`).

Every arm of an A/A run counts; of any other run of the lane, its control's passes only
(its candidates' would count their change as noise). The rows are the run's own, except
for capacity at SLO (`verdict.capacity`), which no pass records: it is read from the run's
rate levels (`tidy.capacity_rows`: each arm's capacity per pair from its levels' SLO
shares) at the PLANNED campaign's `preregistration.slo.target`, as its verdict will read
it. A run with no capacity to read (no rate sweep, or fewer than 2 valid rate levels per
arm) is refused with what to give instead (exit 2): a plan is never made on nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from campaign.errors import ResultsError
from campaign.results.store import RunDir, load_run
from campaign.verdict import capacity, tidy
from campaign.verdict.aa import is_aa
from campaign.verdict.noise import NoiseModel, estimate_noise


def with_primary(data: RunDir, metric: str, target: float) -> RunDir:
    """`data` with the rows of `metric` a verdict reads: for capacity at SLO, its
    capacity rows at `target` added (refused when there is none to read)."""
    if metric != capacity.METRIC:
        return data
    rows = tidy.capacity_rows(data.passes, target)
    if rows.empty or not rows["valid"].astype(bool).any():
        raise ResultsError(
            f"{data.run_dir}: no capacity at SLO to read: capacity_at_slo is read between "
            "the slo_attainment of 2 or more valid rate levels of one arm in one pair, and "
            "this run has " + ("none" if rows.empty else "no arm with 2 valid ones"),
            hint="give --noise a run of this lane with a rate sweep (workloads.rate) and an "
                 "SLO (preregistration.slo), or give the per-boot drift of the capacity "
                 "yourself with --drift")
    return dataclasses.replace(data, passes=pd.concat([data.passes, rows],
                                                      ignore_index=True))


def run_noise(run_dir: Path, metric: str, workloads: Sequence[str],
              target: float = capacity.DEFAULT_TARGET) -> NoiseModel:
    """The primary's noise measured on `run_dir` (module docstring)."""
    data = with_primary(load_run(run_dir), metric, target)
    if data.campaign is None or is_aa(data.campaign, data.campaign.arm_names):
        return estimate_noise(data, metric=metric, workloads=workloads).model
    control = data.campaign.arm_names[0]
    own = dataclasses.replace(data, passes=data.passes[data.passes["arm"] == control])
    model = estimate_noise(own, metric=metric, workloads=workloads).model
    return dataclasses.replace(model, source=model.source.replace(
        "measured on A/A run", "measured on run") + f" (its control's passes, {control})")


def aa_noise(run_dir: Path, metric: str, workloads: Sequence[str],
             target: float = capacity.DEFAULT_TARGET) -> NoiseModel:
    """The primary's noise measured on the campaign's own A/A run (every arm)."""
    data = with_primary(load_run(run_dir), metric, target)
    return estimate_noise(data, metric=metric, workloads=workloads).model
