"""The A/A drift band: how far identical arms drift apart on a lane, and `drift_band`.

An A/A campaign runs the control against an identical control; its pair gains measure the
lane's own noise, which a real change must clear. `aa_band` turns the decision cells of
such a run into a recommended band; `resolve_drift_band` is the one place that turns a
campaign's `drift_band` (a number, or `{from: RUN_DIR}` naming an A/A run) into the number
that is registered — for `run`, `check` and `plan` alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from campaign.campaignfile import Campaign, DriftFrom
from campaign.campaignfile.loader import band_over_margin
from campaign.errors import CampaignError, ResultsError, SpecError
from campaign.fmt import abs_pct
from campaign.results.store import RunDir, load_run
from campaign.verdict import stats as st
from campaign.verdict.judge import judge_run
from campaign.verdict.outcome import Cell, DataProblem
from campaign.verdict.rule import parse_rule
from campaign.verdict.tidy import RunTable, tidy_tables


@dataclass(frozen=True)
class BandRecommendation:
    """The drift band an A/A campaign (control against an identical control) measured."""

    band: float
    """Recommended band (fraction), rounded up to 0.1%."""
    n: int
    rms: float
    """Root mean square of the A/A log ratios (their true mean is 0)."""
    largest: float
    """Largest |pair gain| seen."""
    cells: tuple[str, ...]
    text: str


def aa_band(cells: Sequence[Cell], confidence: float = 0.95) -> BandRecommendation:
    """The band that holds `confidence` of single-pair A/A gains, from the cells' spread.

    An A/A pair's log ratio d has true mean 0, so its spread is the root mean square of the
    observed d's; the band is exp(t(1 − α/2, N) · rms) − 1 over N pair ratios (t rather than
    z: few pairs make the rms itself uncertain). Never below the largest gain seen.
    """
    ds = [d for c in cells if c.stats is not None and c.kind == "ratio" for d in c.stats.d]
    names = tuple(f"{c.where} {c.metric}" for c in cells if c.stats is not None)
    if not ds:
        raise DataProblem("the A/A run has no complete pair of its primary metric")
    n = len(ds)
    rms = math.sqrt(math.fsum(d * d for d in ds) / n)
    largest = max(abs(math.expm1(d)) for d in ds)
    raw = math.expm1(st.t_critical(1 - (1 - confidence) / 2, n) * rms)
    band = math.ceil(max(raw, largest) * 1000 - 1e-9) / 1000
    text = (
        f"A/A spread: {n} pair ratios over {len(names)} cell(s), rms {abs_pct(rms, 2)}, "
        f"largest |gain| {abs_pct(largest, 2)} → recommended drift band ±{abs_pct(band)} "
        f"(holds {confidence:.0%} of single-pair A/A gains); use it with "
        "`drift_band: {from: <this run dir>}`"
    )
    if n < 6:
        text += f"; only {n} pair ratios — run more A/A pairs for a firmer band"
    return BandRecommendation(band, n, rms, largest, names, text)


def is_aa(campaign: Campaign, arms: Sequence[str]) -> bool:
    """An A/A run: every candidate arm changes nothing but its description/warm-up."""
    if len(arms) < 2:
        return False
    specs = campaign.arms
    return all(arm in specs and not specs[arm].overrides for arm in arms[1:])


def measure_band(run_dir: Path | str, *,
                 loader: Callable[[Path], RunDir] = load_run) -> BandRecommendation:
    """The band an A/A results directory measured, judged under its registered rule."""
    run = loader(Path(run_dir))
    reg = run.registration
    # the same check as the report's: the rule refused when edited, band and arms hashed
    reg.verify(run.run_dir / "preregistration.json", list(reg.arms))
    arms = reg.arm_order
    rule = parse_rule(reg.rule, reg.drift_band)
    table = tidy_tables(run.passes, [rule.metric]).get(run.run_id, RunTable(run=run.run_id))
    try:
        verdict = judge_run(table, rule, arms, metrics=[rule.metric])
        return aa_band([c for c in verdict.candidates[0].cells if c.decision_cell])
    except DataProblem as exc:
        raise ResultsError(f"{run.run_dir / 'passes.csv'}: {exc}") from None


def aa_run_of(campaign: Campaign) -> Path | None:
    """The A/A results directory `drift_band: {from: RUN_DIR}` names (resolved against the
    campaign file's folder), or None when the band is a number."""
    band = campaign.preregistration.drift_band
    return campaign.resolve(band.from_) if isinstance(band, DriftFrom) else None


def resolve_drift_band(campaign: Campaign) -> float:
    """The campaign's drift band as a number: as written, or measured on its A/A run."""
    run_dir = aa_run_of(campaign)
    if run_dir is None:
        return float(campaign.preregistration.drift_band)  # type: ignore[arg-type]
    return measure_band(run_dir).band


def checked_drift_band(campaign: Campaign) -> float:
    """`resolve_drift_band`, refused (SpecError naming the YAML path, exit 2) when the A/A
    run gives no band or a band larger than the margin. `check` and `run` call it before
    anything is registered."""
    run_dir = aa_run_of(campaign)
    if run_dir is None:
        return resolve_drift_band(campaign)
    where = "preregistration.drift_band.from"
    declared = campaign.preregistration.drift_band
    name = declared.from_ if isinstance(declared, DriftFrom) else str(run_dir)
    try:
        band = measure_band(run_dir).band
    except CampaignError as exc:
        raise SpecError(str(campaign.source or "campaign"),
                        [f"{where}: the A/A run {name} gives no band: {exc.message}"]) from None
    margin = campaign.preregistration.margin
    if band > margin:
        raise SpecError(str(campaign.source or "campaign"),
                        [f"{where}: measured on {name}: {band_over_margin(band, margin)}"])
    return band
