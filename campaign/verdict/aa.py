"""The A/A drift band: how far identical arms drift apart on a lane, and `drift_band`.

An A/A campaign runs the control against an identical control; its pair gains measure the
lane's own noise, which a real change must clear. `aa_band` turns the decision cells of
such a run into a recommended band; `resolve_drift_band` is the one place that turns a
campaign's `drift_band` (a number, or `{from: RUN_DIR}` naming an A/A run) into the number
that is registered — for `run`, `check` and `plan` alike.

Each relative guardrail metric gets its own band (`guardrail_band`): the boot-to-boot part
of its A/A pairs' spread beyond what the passes' own requests explain. A/A pair log ratios
w have E w² = 2b² + c·v (two boots, and both passes' sampling variances inflated by the
calibrated c(N)), so b̂² = max(0, mean(w²)/2 − mean(c·v)/2); without a sampling error on
the passes the whole spread is counted as boot noise (an upper bound). The band is
exp(b̂) − 1 rounded up to a whole percent (at least 1%): few A/A pairs estimate it loosely.
`resolve_guardrail_bands` turns each guardrail's `drift_band` into its registered number.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from campaign.campaignfile import Campaign, DriftFrom
from campaign.campaignfile.loader import band_over_margin
from campaign.errors import CampaignError, ResultsError, SpecError
from campaign.fmt import abs_pct
from campaign.results.store import RunDir, load_run
from campaign.verdict import sampling
from campaign.verdict import stats as st
from campaign.verdict.capacity import slo_target
from campaign.verdict.guardrails import requests_of
from campaign.verdict.judge import judge_run
from campaign.verdict.outcome import Cell, DataProblem, RunVerdict
from campaign.verdict.rule import FAILURE_METRICS, parse_rule
from campaign.verdict.tidy import RunTable, tidy_tables


@dataclass(frozen=True)
class GuardrailBand:
    """The boot-to-boot band one guardrail metric's A/A pairs measured."""

    metric: str
    band: float
    """Recommended band (fraction), rounded up to a whole percent, at least 1%."""
    n: int
    rms: float
    """Root mean square of the A/A pairs' log ratios."""
    explained: float | None
    """√mean(c·v): the part of the pairs' spread the passes' own requests explain (None
    without a sampling error on every pass)."""
    boot: float
    """b̂: the boot-to-boot sd (log) beyond it."""
    cells: tuple[str, ...]
    text: str


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
    guardrails: tuple[GuardrailBand, ...] = ()
    """A band per relative guardrail metric (`guardrail_band`)."""

    @property
    def lines(self) -> list[str]:
        """The recommendation in words: the primary's band, then each guardrail's."""
        return [self.text, *(f"guardrail {g.text}" for g in self.guardrails)]


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


def guardrail_band(metric: str, cells: Sequence[Cell], table: RunTable,
                   control: str = "control") -> GuardrailBand:
    """The boot-to-boot band of `metric` from the A/A pairs of `cells` (its cells of one
    candidate; see the module docstring). Raises DataProblem with no complete pair."""
    stat = sampling.statistic_of(metric)
    w2: list[float] = []
    cv: list[float | None] = []
    for c in cells:
        data = table.cells.get(c.key)
        reqs = requests_of(table, (c.workload, c.level))
        for pg in c.pairs:
            if c.kind != "ratio" or pg.control <= 0 or pg.candidate <= 0:
                continue
            w2.append(math.log(pg.candidate / pg.control) ** 2)
            arms = {} if data is None else data.values.get(pg.pair, {})
            ses = [arms[a].log_se if a in arms else None for a in (control, c.arm)]
            ns = [reqs.get((pg.pair, a)) for a in (control, c.arm)]
            if any(se is None for se in ses):
                cv.append(None)
                continue
            fewest = min((n for n in ns if n is not None), default=1.0)
            cv.append(sampling.inflation(stat, fewest)
                      * math.fsum(se * se for se in ses if se is not None))
    if not w2:
        raise DataProblem(f"the A/A run has no complete pair of {metric}")
    names = tuple(f"{c.where}" for c in cells if c.pairs)
    n = len(w2)
    mean_w2 = math.fsum(w2) / n
    known = [x for x in cv if x is not None]
    explained = math.sqrt(math.fsum(known) / n) if len(known) == n else None
    boot = math.sqrt(max(0.0, mean_w2 / 2 - (explained or 0.0) ** 2 / 2))
    band = max(0.01, math.ceil(math.expm1(boot) * 100 - 1e-9) / 100)
    rms = math.sqrt(mean_w2)
    split = (f"the passes' own requests explain {abs_pct(explained)}"
             if explained is not None else
             "no sampling error on the passes, so all of it is counted as boot noise")
    text = (f"{metric}: A/A pairs spread rms {abs_pct(rms)} over {n} pair(s) at "
            f"{', '.join(names)}, {split}, boot to boot ±{abs_pct(math.expm1(boot))} → "
            f"`guardrails: [{{metric: {metric}, drift_band: {band:g}}}]` (or "
            "`drift_band: {from: <this run dir>}` on the guardrail)")
    if n < 6:
        text += f"; only {n} pair ratios — run more A/A pairs for a firmer band"
    return GuardrailBand(metric, band, n, rms, explained, boot, names, text)


def aa_report(verdict: RunVerdict, table: RunTable,
              confidence: float = 0.95) -> BandRecommendation:
    """An A/A run's recommendations: the primary's band (`aa_band`) and one per relative
    guardrail metric at the cells it was checked (`guardrail_band`)."""
    cv = verdict.candidates[0]
    rec = aa_band([c for c in cv.cells if c.decision_cell], confidence)
    by_key = {c.key: c for c in cv.cells}
    bands: list[GuardrailBand] = []
    for metric in dict.fromkeys(g.metric for g in cv.guardrails
                                 if not g.absolute and g.metric not in FAILURE_METRICS):
        cells = [by_key[k] for k in dict.fromkeys(
            (g.workload, g.level, g.metric) for g in cv.guardrails if g.metric == metric)
            if k in by_key]
        try:
            bands.append(guardrail_band(metric, cells, table))
        except DataProblem:
            continue
    return dataclasses.replace(rec, guardrails=tuple(bands))


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
    rule = parse_rule(reg.rule, reg.drift_band, guardrail_bands=tuple(reg.guardrail_bands or ()))
    table = tidy_tables(run.passes, [rule.metric], slo_target=slo_target(reg.rule)).get(
        run.run_id, RunTable(run=run.run_id))
    try:
        verdict = judge_run(table, rule, arms, metrics=[rule.metric])
        return aa_band([c for c in verdict.candidates[0].cells if c.decision_cell])
    except DataProblem as exc:
        raise ResultsError(f"{run.run_dir / 'passes.csv'}: {exc}") from None


def measure_guardrail_band(run_dir: Path | str, metric: str, *,
                           loader: Callable[[Path], RunDir] = load_run) -> GuardrailBand:
    """The boot-to-boot band of `metric` an A/A results directory measured: at the cells
    its own guardrail of that metric was checked, else at every measured cell of it."""
    run = loader(Path(run_dir))
    reg = run.registration
    reg.verify(run.run_dir / "preregistration.json", list(reg.arms))
    rule = parse_rule(reg.rule, reg.drift_band, guardrail_bands=tuple(reg.guardrail_bands or ()))
    table = tidy_tables(run.passes, [rule.metric, metric],
                        slo_target=slo_target(reg.rule)).get(run.run_id,
                                                             RunTable(run=run.run_id))
    try:
        verdict = judge_run(table, rule, reg.arm_order, metrics=[rule.metric, metric])
        cv = verdict.candidates[0]
        checked = {(g.workload, g.level) for g in cv.guardrails if g.metric == metric}
        cells = [c for c in cv.cells if c.metric == metric
                 and (not checked or (c.workload, c.level) in checked)]
        return guardrail_band(metric, cells, table, reg.arm_order[0])
    except DataProblem as exc:
        raise ResultsError(f"{run.run_dir / 'passes.csv'}: {exc}") from None


def resolve_guardrail_bands(campaign: Campaign) -> tuple[float, ...]:
    """Each guardrail's boot-to-boot band as a number, in order: as written, measured on
    its A/A run (`{from: RUN_DIR}`), or the campaign's band (`resolve_drift_band`)."""
    out: list[float] = []
    default: float | None = None
    for g in campaign.preregistration.guardrails:
        if isinstance(g.drift_band, DriftFrom):
            out.append(measure_guardrail_band(campaign.resolve(g.drift_band.from_),
                                              g.metric).band)
        elif g.drift_band is not None:
            out.append(float(g.drift_band))
        else:
            default = resolve_drift_band(campaign) if default is None else default
            out.append(default)
    return tuple(out)


def checked_guardrail_bands(campaign: Campaign) -> tuple[float, ...]:
    """`resolve_guardrail_bands`, refused (SpecError naming the YAML path, exit 2) when a
    guardrail's A/A run gives no band. `check` and `run` call it before anything is
    registered."""
    for i, g in enumerate(campaign.preregistration.guardrails):
        if isinstance(g.drift_band, DriftFrom):
            try:
                measure_guardrail_band(campaign.resolve(g.drift_band.from_), g.metric)
            except CampaignError as exc:
                raise SpecError(str(campaign.source or "campaign"), [
                    f"preregistration.guardrails[{i}].drift_band.from: the A/A run "
                    f"{g.drift_band.from_} gives no band of {g.metric}: {exc.message}"]) from None
    return resolve_guardrail_bands(campaign)


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
