"""The lane's noise model, and its estimation from an A/A run (control against itself).

Why three parts: a campaign's paired log ratio d_i = ln(y_i / x_i) is disturbed in three
different ways, and the adoption rule (and the arm order) reacts differently to each.

- **per-boot drift** (`boot_sd`): every boot of a server lands at a slightly different
  speed (placement, clocks, caches). It is shared by every cell (knee level, content class)
  measured in that boot, so several decision cells do not average it away;
- **within-pass noise** (`pass_sd`): one cell's own measurement noise, independent from
  cell to cell;
- **linear drift across the window** (`window_drift`): the lane slowly speeding up or
  slowing down over the night. Under `AB` the candidate always runs after its control, so
  a trend biases every pair the same way; `ABBA` cancels it.

All three are on the log scale (sd of ln(value)); `window_drift` is the total relative
change from the first to the last slot of a campaign.

Estimation from an A/A run (both arms are the same launch, so every slot is a sample of
the lane): y[slot, level] = ln(value) is fitted as level mean + linear trend over slots +
a slot effect + residual (a two-way layout). The residual variance gives `pass_sd`; the
spread of the slot effects around the trend gives `boot_sd` (minus the part the residuals
contribute to a slot mean); the trend gives `window_drift` when it stands out from the
noise (beyond two standard errors; otherwise it is 0 and the slots' spread is all boot
noise: a trend fitted on a handful of slots would bias every simulated AB pair). With one
level the two noise parts cannot be told apart: all of it is attributed to the boot (the
conservative choice for several cells; the same thing for one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from campaign.errors import ResultsError
from campaign.results.store import RunDir, load_run
from campaign.verdict.tidy import counting_rows

TREND_SE = 2.0
"""A trend across the A/A window counts only beyond this many standard errors."""
DEFAULT_PASS_SD = 0.01
"""Within-pass noise assumed when only a per-boot drift is given (1%: a knee point of a
few thousand tokens on a quiet lane)."""


@dataclass(frozen=True)
class NoiseModel:
    """The lane's noise on the log scale (see the module docstring)."""

    boot_sd: float
    pass_sd: float
    window_drift: float
    source: str
    """Where the numbers come from, in words (shown by `spec-ab plan`)."""

    @property
    def pair_sd(self) -> float:
        """sd of one pair's log ratio in one cell (both arms' boot and pass noise)."""
        return math.sqrt(2.0 * (self.boot_sd**2 + self.pass_sd**2))


@dataclass(frozen=True)
class NoiseEstimate:
    """A noise model measured on an A/A run, with what it was measured on."""

    model: NoiseModel
    slots: int
    levels: tuple[str, ...]
    metric: str
    run_dir: Path


def from_drift(drift: float, *, pass_sd: float = DEFAULT_PASS_SD,
               window_drift: float = 0.0, source: str | None = None) -> NoiseModel:
    """A model from a per-boot drift given as a fraction (3% → sd ln(1.03))."""
    if drift < 0:
        raise ValueError(f"drift {drift} must be ≥ 0")
    return NoiseModel(
        boot_sd=math.log1p(drift),
        pass_sd=pass_sd,
        window_drift=window_drift,
        source=source or f"assumed: per-boot drift sd {drift:.1%}, within-pass sd "
        f"{pass_sd:.1%}, no trend across the window",
    )


def estimate_noise(run: RunDir | Path | str, *, metric: str = "output_token_throughput",
                   workloads: Sequence[str] = ("knee",)) -> NoiseEstimate:
    """The noise model an A/A run measured on `metric` over the levels of `workloads`.

    Raises ResultsError when the run has too few complete slots (fewer than 3) to tell a
    trend from noise.
    """
    data = run if isinstance(run, RunDir) else load_run(Path(run))
    df = data.passes
    df = counting_rows(df[df["metric"] == metric])
    df = df[df["value"] > 0]
    chosen = df[df["workload"].isin(list(workloads))]
    if chosen.empty:
        chosen = df  # the A/A run measured other workloads: use what it has
    if chosen.empty:
        raise ResultsError(f"{data.run_dir / 'passes.csv'}: no valid rows of {metric}",
                           hint="give the results directory of an A/A campaign "
                           "(spec-ab init --template aa)")
    chosen = chosen.assign(cell=chosen["workload"] + " " + chosen["level"].astype(str))
    table = chosen.pivot_table(index="slot", columns="cell", values="value", aggfunc="mean")
    table = table.dropna(axis=0, how="any")
    if len(table) < 3:
        raise ResultsError(
            f"{data.run_dir}: only {len(table)} complete slot(s) of {metric}; the noise model "
            "needs at least 3 (an A/A campaign of 2 pairs or more)",
            hint="run a longer A/A campaign: spec-ab init --template aa")
    y = np.log(table.to_numpy(dtype=float))
    slots = table.index.to_numpy(dtype=float)
    model = fit_noise(y, slots, source="")
    levels = tuple(str(c) for c in table.columns)
    model = NoiseModel(
        model.boot_sd, model.pass_sd, model.window_drift,
        source=f"measured on A/A run {data.run_dir.name}: {len(table)} boots × "
        f"{len(levels)} cell(s) of {metric}",
    )
    return NoiseEstimate(model, len(table), levels, metric, data.run_dir)


def fit_noise(y: np.ndarray, slots: np.ndarray, *, source: str) -> NoiseModel:
    """Fit the model to y[slot, cell] = ln(value) of identical arms (see the docstring).

    `slots` are the slots' positions in the run (their order in time); the trend is fitted
    over them and reported across the whole observed window.
    """
    n_slots, n_cells = y.shape
    if n_slots < 3:
        raise ValueError("need at least 3 slots")
    r = y - y.mean(axis=0, keepdims=True)  # remove each cell's own level
    slot_mean = r.mean(axis=1)
    pos = slots - slots.mean()
    sxx = float(np.sum(pos**2))
    slope = float(np.sum(pos * slot_mean) / sxx) if sxx > 0 else 0.0
    resid = slot_mean - slope * pos
    var_slot = float(np.sum(resid**2) / (n_slots - 2))
    # A trend fitted on a few slots is mostly noise, and under AB it would bias every
    # simulated pair: keep it only when it stands out (|slope| > 2 standard errors);
    # otherwise the slots' whole spread is boot noise.
    se = math.sqrt(var_slot / sxx) if sxx > 0 else math.inf
    if not abs(slope) > TREND_SE * se:
        slope = 0.0
        var_slot = float(np.sum(slot_mean**2) / (n_slots - 1))
    if n_cells > 1:
        within = r - slot_mean[:, None]
        pass_var = float(np.sum(within**2) / ((n_slots - 1) * (n_cells - 1)))
        boot_var = max(0.0, var_slot - pass_var / n_cells)
    else:
        pass_var = 0.0
        boot_var = var_slot
    span = float(slots.max() - slots.min())
    return NoiseModel(
        boot_sd=math.sqrt(boot_var),
        pass_sd=math.sqrt(pass_var),
        window_drift=math.expm1(slope * span),
        source=source,
    )
