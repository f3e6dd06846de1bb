"""The pre-registered rule → per-cell verdicts, flags, guardrails and the campaign decision.

Pure: a tidy table (pandas) and the frozen rule in, verdicts with their reasons out; no
files, no clock. `report.py` loads run directories and renders what this module decides.

The rule (DESIGN.md, "Statistics of a verdict"), per cell = workload × level × metric over
its complete pairs, with gains signed so that positive = better:

- `point`: adopt when g ≥ margin and every pair's gain ≥ +δ (δ = the drift band);
- `ci`: adopt when the CI's lower bound ≥ margin; over several decision cells the one-sided
  tests are Holm-corrected (adjusted p ≤ α/2, the level of the CI's lower end);
- otherwise a label: `gain-below-bar` (every pair ≥ +δ, bar not cleared), `within-drift`
  (|g| < δ), `loss` (every pair ≤ −δ), `mixed` (pairs disagree beyond δ); `no-data` when no
  complete pair is left.

Flags add what a careful reader must know: `high-variance` (pairs or repeats disagree by
more than the band: "a sign, not a size"), `small-sample` ("a hint, not a number"),
`window-drift` (the control itself moved beyond the band across the window), `split-pair`
(a pair's arms started further apart than the pre-registered gap), `invalid-pass` (pairs
left out of the cell, counted).

The campaign adopts only when every decision cell adopts and no guardrail is broken (or
left unchecked); otherwise it keeps the default, with the reasons.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import ValidationError

from campaign import catalog
from campaign import stats as st
from campaign.errors import UsageError
from campaign.spec import Guardrail, Preregistration

Label = Literal["adopt", "gain-below-bar", "within-drift", "loss", "mixed", "no-data",
                "not-applicable"]
Decision = Literal["adopt", "keep-default"]

LABELS: tuple[Label, ...] = (
    "adopt", "gain-below-bar", "within-drift", "loss", "mixed", "no-data", "not-applicable",
)
FLAG_MEANING = {
    "high-variance": "a sign, not a size",
    "small-sample": "a hint, not a number",
    "window-drift": "the window was not stable",
    "split-pair": "arms of a pair not in one window",
    "invalid-pass": "pairs left out",
}
TOKEN_METRICS = ("output_tokens", "requests_completed")
"""Pass-size metrics read for the `small-sample` flag."""
DESCRIPTIVE_METRICS = (
    "output_token_throughput", "ttft_p99", "itl_p99", "request_latency_p99",
    "error_rate", "acceptance_rate", "tokens_per_decode_step", "implied_a",
)
"""Cells computed beside the primary metric and the guardrails (when measured)."""
ABSOLUTE_METRICS = frozenset({"error_rate"})
"""Metrics compared by absolute differences: they are often exactly 0."""
EPS = 1e-9
"""Comparisons tolerate float round-off: +15% built as 115/100 must clear a 15% bar."""

# --------------------------------------------------------------------------- the rule


OVERRIDABLE = (
    "primary_metric", "direction", "margin", "drift_band", "rule", "confidence",
)


def apply_overrides(rule: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """The registered rule with `--rule key=value` overrides applied (validated).

    Only the numbers of the rule itself can be overridden; a report that uses them is
    exploratory, not pre-registered (the caller marks every output so).
    """
    out = dict(rule)
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise UsageError(
                f"--rule {key}={value}: '{key}' cannot be overridden",
                hint=f"overridable: {', '.join(OVERRIDABLE)}",
            )
        out[key] = value
    try:
        Preregistration.model_validate(out)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise UsageError(f"--rule overrides are invalid: {problems}") from None
    return out


@dataclass(frozen=True)
class Rule:
    """The rule a verdict is computed under: the frozen preregistration and its band."""

    prereg: Preregistration
    band: float
    """Drift band δ as a fraction (resolved at registration when it came from an A/A run)."""

    @property
    def alpha(self) -> float:
        return 1 - self.prereg.confidence

    @property
    def metric(self) -> str:
        return self.prereg.primary_metric

    def direction_of(self, metric: str) -> st.Direction:
        if metric == self.prereg.primary_metric:
            return self.prereg.metric_direction
        return catalog.direction(metric)

    def kind_of(self, metric: str) -> st.Kind:
        absolute = {g.metric for g in self.prereg.guardrails if g.absolute}
        return "absolute" if metric in ABSOLUTE_METRICS | absolute else "ratio"

    def describe(self) -> str:
        p = self.prereg
        arrow = "higher" if p.metric_direction == "higher" else "lower"
        if p.rule == "point":
            how = (f"adopt when the gain ≥ {pct(p.margin)} and every pair's gain ≥ "
                   f"{pct(self.band)}")
        else:
            how = (f"adopt when the {p.confidence:.0%} CI's lower bound ≥ {pct(p.margin)} "
                   "(Holm-corrected over decision cells)")
        return (f"{p.primary_metric} ({arrow} is better), rule {p.rule}: {how}; "
                f"drift band ±{abs_pct(self.band)}")


def parse_rule(rule: Mapping[str, Any], band: float) -> Rule:
    return Rule(prereg=Preregistration.model_validate(dict(rule)), band=float(band))


# --------------------------------------------------------------------------- formatting


def pct(x: float | None, digits: int = 1) -> str:
    """+15.0% style (signed); '—' for None."""
    if x is None or math.isnan(x):
        return "—"
    v = round(x * 100, digits)
    if v == 0:
        v = 0.0  # no "-0.0%"
    return f"{v:+.{digits}f}%"


def abs_pct(x: float, digits: int = 1) -> str:
    return f"{abs(x) * 100:.{digits}f}%"


def fmt_gain(x: float | None, kind: st.Kind) -> str:
    if kind == "ratio":
        return pct(x)
    return "—" if x is None else f"{x + 0.0:+.4g}"  # + 0.0: no "-0"


# --------------------------------------------------------------------------- tidy → pairs


@dataclass(frozen=True)
class ArmValue:
    """One arm's value in one pair of a cell (the mean of its repeats, if any)."""

    value: float
    lo: float
    hi: float
    repeats: int


@dataclass
class CellData:
    """The measured values of one cell of one run, by pair and arm."""

    workload: str
    level: str
    metric: str
    values: dict[int, dict[str, ArmValue]] = field(default_factory=dict)
    invalid: dict[int, dict[str, str]] = field(default_factory=dict)
    """pair → arm → why no valid pass counts (the reason of its last attempt)."""
    missing: list[tuple[int, str]] = field(default_factory=list)
    """(pair, arm) of valid rows whose value is empty or not a number (damaged file)."""


@dataclass
class RunTable:
    """A run's tidy rows arranged for pairing: cells, pairs, arm start times and slots."""

    run: str
    cells: dict[tuple[str, str, str], CellData] = field(default_factory=dict)
    pairs: list[int] = field(default_factory=list)
    started: dict[int, dict[str, dt.datetime | None]] = field(default_factory=dict)
    slots: dict[int, dict[str, int]] = field(default_factory=dict)


_KEY = ["run", "workload", "level", "metric", "pair", "arm"]


def tidy_tables(passes: pd.DataFrame, metrics: Iterable[str] | None = None) -> dict[str, RunTable]:
    """Arrange the tidy rows of one or more runs into `RunTable`s (one per `run`).

    Only each pair's latest `pair_attempt` counts (a pair redone after a crash is redone
    whole). Of a pass retried, the latest valid attempt counts; a pass with no valid attempt
    leaves its pair out of that cell, and the reason of its last attempt is kept. Several
    valid rows of one key (repeats) are averaged and their spread kept.

    Vectorised over all runs at once: a nightly history of 1,000 runs is one groupby.
    """
    df = passes
    if metrics is not None:
        wanted = set(metrics) | set(TOKEN_METRICS)
        df = df[df["metric"].isin(wanted)]
    df = df.copy()
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    if "pair_attempt" in df.columns and len(df):
        latest = df.groupby(["run", "pair"], sort=False)["pair_attempt"].transform("max")
        df = df[df["pair_attempt"] == latest]
    if "attempt" not in df.columns:
        df["attempt"] = 1
    valid_mask = df["valid"]
    if valid_mask.dtype != bool:
        # "true"/"false" text (a CSV read without conversion) must not all count as True
        valid_mask = valid_mask.astype(str).str.lower().isin(["true", "1", "1.0"])
    valid = df[valid_mask]
    if len(valid) and valid["attempt"].nunique() > 1:
        last_valid = valid.groupby(_KEY, sort=False)["attempt"].transform("max")
        valid = valid[valid["attempt"] == last_valid]
    bad = valid[valid["value"].isna()]
    valid = valid[valid["value"].notna()]

    tables: dict[str, RunTable] = {}

    def table(run: str) -> RunTable:
        t = tables.get(run)
        if t is None:
            t = tables[run] = RunTable(run=run)
        return t

    def cell(run: str, w: str, lvl: str, m: str) -> CellData:
        t = table(run)
        c = t.cells.get((w, lvl, m))
        if c is None:
            c = t.cells[(w, lvl, m)] = CellData(w, lvl, m)
        return c

    if len(valid):
        agg = valid.groupby(_KEY, sort=False)["value"].agg(["mean", "min", "max", "count"])
        for (run, w, lvl, m, pair, arm), mean, lo, hi, cnt in zip(
            agg.index, agg["mean"], agg["min"], agg["max"], agg["count"], strict=True
        ):
            cell(run, w, lvl, m).values.setdefault(int(pair), {})[arm] = ArmValue(
                float(mean), float(lo), float(hi), int(cnt)
            )
    for row in bad[_KEY].itertuples(index=False):
        run, w, lvl, m, pair, arm = row
        c = cell(run, w, lvl, m)
        if arm not in c.values.get(int(pair), {}):
            c.missing.append((int(pair), arm))
    invalid = df[~valid_mask]
    if len(invalid):
        invalid = invalid.sort_values("attempt").groupby(_KEY, sort=False).tail(1)
        for row in invalid[[*_KEY, "reason", "attempt"]].itertuples(index=False):
            run, w, lvl, m, pair, arm, reason, attempt = row
            c = cell(run, w, lvl, m)
            if arm in c.values.get(int(pair), {}):
                continue  # a later (or earlier) attempt is valid: that one counts
            why = str(reason) if isinstance(reason, str) and reason else "invalid pass"
            tries = int(attempt) if attempt == attempt else 1  # attempts count from 1
            if tries > 1:
                why += f" (after {tries} attempts)"
            c.invalid.setdefault(int(pair), {})[arm] = why
    if len(df):
        cols = ["run", "pair", "arm"]
        has_start = "started_at" in df.columns
        has_slot = "slot" in df.columns
        first = df.drop_duplicates(cols)
        for rec in first.to_dict("records"):
            t = table(str(rec["run"]))
            pair = int(rec["pair"])
            if pair not in t.started:
                t.pairs.append(pair)
            t.started.setdefault(pair, {})[rec["arm"]] = (
                _parse_time(rec.get("started_at")) if has_start else None
            )
            if has_slot:
                t.slots.setdefault(pair, {})[rec["arm"]] = int(rec["slot"])
        for t in tables.values():
            t.pairs.sort()
    return tables


def _parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class PairGain:
    pair: int
    control: float
    candidate: float
    gain: float


@dataclass(frozen=True)
class LeftOut:
    pair: int
    arm: str
    reason: str


@dataclass(frozen=True)
class HolmInfo:
    """The `ci` rule over m decision cells: this cell's one-sided p, Holm-adjusted p, and
    the lower bound at the level Holm tested it at."""

    m: int
    p: float | None
    p_adjusted: float
    lower_bound: float | None


@dataclass(frozen=True)
class Cell:
    """One cell's verdict for one candidate against the control."""

    workload: str
    level: str
    metric: str
    arm: str
    direction: st.Direction
    kind: st.Kind
    control: float | None
    """Geometric mean of the control over complete pairs (arithmetic for absolute cells)."""
    candidate: float | None
    stats: st.Paired | None
    pairs: tuple[PairGain, ...]
    left_out: tuple[LeftOut, ...]
    verdict: Label
    flags: tuple[str, ...]
    reasons: tuple[str, ...]
    decision_cell: bool = False
    holm: HolmInfo | None = None
    control_trend: float | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.workload, self.level, self.metric)

    @property
    def where(self) -> str:
        return f"{self.workload} {self.level}"

    @property
    def gain(self) -> float | None:
        return None if self.stats is None else self.stats.gain

    @property
    def ci(self) -> tuple[float, float] | None:
        return None if self.stats is None else self.stats.ci


@dataclass(frozen=True)
class GuardrailCheck:
    metric: str
    workload: str
    level: str
    max_worsening: float
    absolute: bool
    worsening: float | None
    """How much worse the candidate is (fraction of the control, or absolute); None when
    the guardrail could not be checked."""
    broken: bool
    reason: str


@dataclass(frozen=True)
class CandidateVerdict:
    arm: str
    decision: Decision
    reasons: tuple[str, ...]
    cells: tuple[Cell, ...]
    guardrails: tuple[GuardrailCheck, ...]
    window_stable: bool
    score: float | None
    """Mean log gain over the decision cells, as a gain (for ranking candidates)."""


@dataclass(frozen=True)
class Ranked:
    rank: int
    arm: str
    decision: Decision
    gain: float | None
    worst: float | None


@dataclass(frozen=True)
class RunVerdict:
    run: str
    decision: Decision
    adopt_arm: str | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    candidates: tuple[CandidateVerdict, ...]
    ranking: tuple[Ranked, ...]
    pairs_measured: int
    pairs_planned: int
    left_out: int
    window_stable: bool

    @property
    def incomplete(self) -> bool:
        return self.left_out > 0 or self.pairs_measured < self.pairs_planned


class DataProblem(ValueError):
    """A value the verdict depends on is missing, zero or damaged (report names the file)."""


def label_of(p: st.Paired, band: float, adopts: bool) -> Label:
    """The verdict label of a cell's statistics (see the module docstring)."""
    if adopts:
        return "adopt"
    if abs(p.gain) < band - EPS or abs(p.gain) <= EPS:
        return "within-drift"
    if all(g >= band - EPS for g in p.pair_gains):
        return "gain-below-bar"
    if all(g <= -band + EPS for g in p.pair_gains):
        return "loss"
    return "mixed"


def adopts_point(p: st.Paired, margin: float, band: float) -> bool:
    """`point`: g ≥ margin and every pair's gain ≥ +δ."""
    return p.gain >= margin - EPS and all(g >= band - EPS for g in p.pair_gains)


def adopts_ci(p: st.Paired, margin: float) -> bool:
    """`ci` (one cell): the CI's lower bound ≥ margin; one pair has no CI, never adopts."""
    return p.ci is not None and p.ci[0] >= margin - EPS


@dataclass(frozen=True)
class Context:
    """What a cell's flags need beyond its own values."""

    tokens: Mapping[tuple[int, str], float]
    """(pair, arm) → output tokens measured in the cell's pass(es)."""
    requests: Mapping[tuple[int, str], float]
    started: Mapping[int, Mapping[str, dt.datetime | None]]
    slots: Mapping[int, Mapping[str, int]]


def judge_cell(
    data: CellData,
    arm: str,
    rule: Rule,
    ctx: Context,
    *,
    control: str = "control",
    decision: bool = False,
    pairs: Sequence[int] = (),
) -> Cell:
    """Paired statistics, label, flags and reasons of one cell (candidate `arm`).

    Raises DataProblem when a value is missing or cannot enter a ratio (zero) — the caller
    decides whether the cell matters enough to stop the report.
    """
    direction = rule.direction_of(data.metric)
    kind = rule.kind_of(data.metric)
    band = rule.band if kind == "ratio" else 0.0
    gates = rule.prereg.gates
    for pair, a in data.missing:
        if a in (control, arm):
            raise DataProblem(
                f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {a} has "
                "a valid row with no value"
            )
    complete: list[PairGain] = []
    left: list[LeftOut] = []
    # A spec-decode figure an arm's valid passes did not yield: its server has no such
    # counters (spec decoding off). Not applicable, not a pass left out.
    info = catalog.METRICS.get(data.metric)
    counters_only = info is not None and info.source == "spec_decode"
    not_applicable: set[str] = set()
    xs: list[float] = []
    ys: list[float] = []
    for pair in sorted(set(pairs) | set(data.values) | set(data.invalid)):
        vals = data.values.get(pair, {})
        if control in vals and arm in vals:
            x, y = vals[control].value, vals[arm].value
            if kind == "ratio" and not (x > 0 and y > 0):
                who = control if not x > 0 else arm
                raise DataProblem(
                    f"{data.metric} at {data.workload} {data.level}: pair {pair}, arm {who} "
                    f"is {x if who == control else y!r}; a ratio needs values > 0"
                )
            xs.append(x)
            ys.append(y)
            complete.append(PairGain(pair, x, y, math.nan))
            continue
        for a in (control, arm):
            if a in vals:
                continue
            if counters_only and a not in data.invalid.get(pair, {}):
                not_applicable.add(a)
                continue
            reason = data.invalid.get(pair, {}).get(a, "not measured")
            left.append(LeftOut(pair, a, reason))
    flags: list[str] = []
    reasons: list[str] = []
    stats_: st.Paired | None = None
    verdict: Label = "no-data"
    if complete:
        stats_ = st.paired(xs, ys, direction, confidence=rule.prereg.confidence, kind=kind)
        complete = [
            PairGain(pg.pair, pg.control, pg.candidate, g)
            for pg, g in zip(complete, stats_.pair_gains, strict=True)
        ]
        adopts = (
            adopts_point(stats_, rule.prereg.margin, band)
            if rule.prereg.rule == "point"
            else adopts_ci(stats_, rule.prereg.margin)
        )
        verdict = label_of(stats_, band, adopts)
        reasons.append(_label_reason(verdict, stats_, rule, band))
        if stats_.ci is None:
            reasons.append("one pair: no confidence interval (nothing to estimate spread from)")
    elif not_applicable and not left:
        verdict = "not-applicable"
        reasons.append(f"not applicable: {', '.join(sorted(not_applicable))} reported no "
                       f"{data.metric} (no spec-decode counters: spec decoding off)")
    else:
        reasons.append(f"no complete pair: {len(left)} arm pass(es) missing or invalid")

    # -- flags
    if stats_ is not None and kind == "ratio":
        spread = max(stats_.pair_gains) - min(stats_.pair_gains)
        if stats_.n >= 2 and spread > band + EPS:
            flags.append("high-variance")
            reasons.append(
                f"high-variance — a sign, not a size: pair gains range "
                f"{pct(min(stats_.pair_gains))} … {pct(max(stats_.pair_gains))} "
                f"(spread {spread * 100:.1f} points > band {abs_pct(band)})"
            )
        else:
            worst = _repeat_spread(data, (control, arm), [pg.pair for pg in complete])
            if worst is not None and worst[0] > band + EPS:
                flags.append("high-variance")
                reasons.append(
                    f"high-variance — a sign, not a size: repeats of pair {worst[1]} "
                    f"({worst[2]}) disagree by {abs_pct(worst[0])} > band {abs_pct(band)}"
                )
    small = _small_sample(ctx, gates.min_output_tokens, gates.min_completed_requests,
                          [pg.pair for pg in complete], (control, arm))
    if small:
        flags.append("small-sample")
        reasons.append(f"small-sample — a hint, not a number: {small}")
    trend = None
    if kind == "ratio":
        ctrl = sorted(
            (ctx.slots.get(p, {}).get(control, p), v[control].value)
            for p, v in data.values.items()
            if control in v
        )
        if len(ctrl) >= 2:
            trend = st.trend([v for _, v in ctrl], [s for s, _ in ctrl])
        if trend is not None and abs(trend) > band + EPS:
            flags.append("window-drift")
            reasons.append(
                f"window-drift: the control itself moved {pct(trend)} across the window "
                f"(band ±{abs_pct(band)}): the window was not stable"
            )
    gap_s = gates.max_pair_gap_s
    split = []
    for pg in complete:
        starts = ctx.started.get(pg.pair, {})
        t0, t1 = starts.get(control), starts.get(arm)
        if t0 is not None and t1 is not None and abs((t1 - t0).total_seconds()) > gap_s:
            split.append(f"pair {pg.pair} ({_duration(abs((t1 - t0).total_seconds()))})")
    if split:
        flags.append("split-pair")
        reasons.append(
            f"split-pair: arms started further apart than {_duration(gap_s)}: "
            + ", ".join(split)
        )
    if left:
        flags.append("invalid-pass")
        n_left = len({lo.pair for lo in left})
        total = n_left + len(complete)
        detail = "; ".join(f"pair {lo.pair} {lo.arm}: {lo.reason}" for lo in left)
        reasons.append(f"invalid-pass: {n_left} of {total} pairs left out ({detail})")
    return Cell(
        workload=data.workload,
        level=data.level,
        metric=data.metric,
        arm=arm,
        direction=direction,
        kind=kind,
        control=_centre([pg.control for pg in complete], kind),
        candidate=_centre([pg.candidate for pg in complete], kind) if complete else
        _centre([v[arm].value for v in data.values.values() if arm in v], kind)
        if verdict == "not-applicable" else None,
        stats=stats_,
        pairs=tuple(complete),
        left_out=tuple(left),
        verdict=verdict,
        flags=tuple(flags),
        reasons=tuple(reasons),
        decision_cell=decision,
        control_trend=trend,
    )


def _centre(values: Sequence[float], kind: st.Kind) -> float | None:
    if not values:
        return None
    if kind == "ratio":
        return math.exp(math.fsum(math.log(v) for v in values) / len(values))
    return math.fsum(values) / len(values)


def _label_reason(verdict: Label, p: st.Paired, rule: Rule, band: float) -> str:
    pairs = ", ".join(fmt_gain(g, p.kind) for g in p.pair_gains)
    g = fmt_gain(p.gain, p.kind)
    margin = pct(rule.prereg.margin)
    ci = (
        f"CI lower bound {pct(p.ci[0])}" if p.ci is not None else "no CI with one pair"
    )
    if verdict == "adopt":
        if rule.prereg.rule == "point":
            return f"adopt: {g} ≥ {margin} and every pair ≥ {pct(band)} (pairs {pairs})"
        return f"adopt: {ci} ≥ {margin} (gain {g}, pairs {pairs})"
    if verdict == "gain-below-bar":
        if rule.prereg.rule == "ci" and p.gain >= rule.prereg.margin - EPS:
            return f"gain-below-bar: {ci} < {margin} (gain {g}, pairs {pairs})"
        return f"gain-below-bar: every pair beyond {pct(band)} but {g} < {margin} (pairs {pairs})"
    if verdict == "within-drift":
        return f"within-drift: {g} is inside the ±{abs_pct(band)} band (pairs {pairs})"
    if verdict == "loss":
        return f"loss: every pair worse than {pct(-band)} ({g}; pairs {pairs})"
    return f"mixed: pairs disagree beyond the ±{abs_pct(band)} band ({g}; pairs {pairs})"


def _repeat_spread(
    data: CellData, arms: Sequence[str], pairs: Sequence[int]
) -> tuple[float, int, str] | None:
    worst: tuple[float, int, str] | None = None
    for pair in pairs:
        for a in arms:
            v = data.values[pair][a]
            if v.repeats > 1 and v.lo > 0:
                spread = v.hi / v.lo - 1
                if worst is None or spread > worst[0]:
                    worst = (spread, pair, a)
    return worst


def _small_sample(
    ctx: Context, min_tokens: int, min_requests: int, pairs: Sequence[int], arms: Sequence[str]
) -> str:
    parts = []
    toks = [(ctx.tokens[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.tokens]
    if toks and min_tokens > 0:
        least = min(toks)
        if least[0] < min_tokens:
            parts.append(
                f"{least[0]:.0f} output tokens in pair {least[1]} ({least[2]}) < "
                f"{min_tokens} pre-registered"
            )
    reqs = [(ctx.requests[(p, a)], p, a) for p in pairs for a in arms if (p, a) in ctx.requests]
    if reqs:
        least = min(reqs)
        if least[0] < min_requests:
            parts.append(
                f"{least[0]:.0f} requests in pair {least[1]} ({least[2]}) < {min_requests}"
            )
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


# --------------------------------------------------------------------------- a whole run


WORKLOAD_ORDER = {"knee": 0, "agentfix": 1}


def cell_sort_key(key: tuple[str, str, str], order: Sequence[str] = ()) -> tuple[Any, ...]:
    """Knee before agent fixtures, then levels, then metrics by name."""
    w, lvl, m = key
    return (WORKLOAD_ORDER.get(w, 2), w, level_sort_key(lvl, order), m)


def level_sort_key(level: str, order: Sequence[str] = ()) -> tuple[int, int, str]:
    """Knee levels by concurrency, then classes in the campaign's order, `all` last."""
    if level == "all":
        return (3, 0, level)
    if level in order:
        return (0, list(order).index(level), level)
    if level[:1] == "c" and level[1:].isdigit():
        return (1, int(level[1:]), level)
    return (2, 0, level)


def decision_keys(rule: Rule, table: RunTable, order: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The (workload, level) decision cells, `*` expanded to the measured levels."""
    measured = sorted(
        {(w, lvl) for (w, lvl, m) in table.cells if m == rule.metric},
        key=lambda k: cell_sort_key((*k, ""), order),
    )
    out: list[tuple[str, str]] = []
    for dc in rule.prereg.decision_cells:
        if dc.level == "*":
            levels = [lvl for (w, lvl) in measured if w == dc.workload]
            specific = [lvl for lvl in levels if lvl != "all"]
            chosen = specific or levels
            if not chosen:
                raise DataProblem(
                    f"no rows of {rule.metric} for workload {dc.workload} "
                    "(a pre-registered decision cell)"
                )
            keys = [(dc.workload, lvl) for lvl in chosen]
        else:
            if (dc.workload, dc.level) not in measured:
                raise DataProblem(
                    f"no rows of {rule.metric} at {dc.workload} {dc.level} "
                    "(a pre-registered decision cell)"
                )
            keys = [(dc.workload, dc.level)]
        out.extend(k for k in keys if k not in out)
    return out


def guardrail_targets(
    g: Guardrail, decisions: Sequence[tuple[str, str]], table: RunTable
) -> list[tuple[str, str]]:
    """Where a guardrail is checked: the decision cells when it names no place; otherwise
    every measured level matching its workload and level."""
    if g.workload == "*" and g.level == "*":
        return list(decisions)
    return sorted(
        {
            (w, lvl)
            for (w, lvl, m) in table.cells
            if m == g.metric
            and (g.workload in ("*", w))
            and (g.level in ("*", lvl))
        }
    )


def check_guardrail(g: Guardrail, cell: Cell | None, where: tuple[str, str]) -> GuardrailCheck:
    """Relative: the candidate's value may exceed (or, higher-is-better, fall below) the
    control's by at most `max_worsening` of it; absolute: by at most that difference. The
    point estimate is checked; a guardrail that cannot be checked counts as broken."""
    w, lvl = where
    label = f"guardrail {g.metric} at {w} {lvl}"
    allowed = f"{g.max_worsening:+.4g}" if g.absolute else pct(g.max_worsening)
    if cell is None or cell.stats is None:
        why = "not measured" if cell is None else "no complete pair"
        return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, None, True,
                              f"{label} cannot be checked ({why}): counts as broken")
    p = cell.stats
    if p.kind == "absolute" or g.absolute:
        if p.kind == "absolute":
            worse = -p.mean
        else:
            sign = 1.0 if cell.direction == "higher" else -1.0
            worse = -sign * math.fsum(pg.candidate - pg.control for pg in cell.pairs) / p.n
        worse += 0.0  # no "-0"
        shown = f"{worse:+.4g}"
    else:
        ratio = math.exp(-p.mean) if cell.direction == "lower" else math.exp(p.mean)
        worse = ratio - 1 if cell.direction == "lower" else 1 - ratio
        shown = pct(worse)
    broken = worse > g.max_worsening + EPS
    verb = "broken" if broken else "holds"
    if worse > EPS:
        change = f"{shown} worse"
    elif worse < -EPS:
        change = f"{shown.replace('-', '', 1)} better"
    else:
        change = "no worse"
    return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, worse, broken,
                          f"{label} {verb}: {change} (allowed: {allowed} worse)")


def judge_run(
    table: RunTable,
    rule: Rule,
    arms: Sequence[str],
    *,
    level_order: Sequence[str] = (),
    metrics: Iterable[str] | None = None,
) -> RunVerdict:
    """Every candidate against the control under `rule`, then the run's decision.

    Raises DataProblem when a decision cell or a guardrail's value is missing or zero.
    """
    control, candidates = arms[0], list(arms[1:])
    decisions = decision_keys(rule, table, level_order)
    guard_targets = {
        i: guardrail_targets(g, decisions, table) for i, g in enumerate(rule.prereg.guardrails)
    }
    key_cells = {(w, lvl, rule.metric) for w, lvl in decisions}
    for i, g in enumerate(rule.prereg.guardrails):
        key_cells |= {(w, lvl, g.metric) for w, lvl in guard_targets[i]}
    shown = set(metrics) if metrics is not None else None
    ctx_cache: dict[tuple[str, str], Context] = {}

    out: list[CandidateVerdict] = []
    for arm in candidates:
        cells: list[Cell] = []
        for key in sorted(table.cells, key=lambda k: cell_sort_key(k, level_order)):
            w, lvl, m = key
            if m in TOKEN_METRICS and m != rule.metric and key not in key_cells:
                continue
            if shown is not None and m not in shown and key not in key_cells:
                continue
            ctx = ctx_cache.get((w, lvl))
            if ctx is None:
                ctx = ctx_cache[(w, lvl)] = _context(table, w, lvl)
            try:
                c = judge_cell(
                    table.cells[key], arm, rule, ctx, control=control,
                    decision=(w, lvl) in decisions and m == rule.metric, pairs=table.pairs,
                )
            except DataProblem:
                if key in key_cells:
                    raise
                continue  # a descriptive cell with a zero (e.g. acceptance at position 7)
            cells.append(c)
        if rule.prereg.rule == "ci":
            cells = _apply_holm(cells, rule)
        out.append(_decide_candidate(arm, cells, rule, decisions, guard_targets))

    ranking = rank(out)
    adopting = [r for r in ranking if r.decision == "adopt"]
    adopt_arm = adopting[0].arm if adopting else None
    notes: list[str] = []
    measured = len(table.pairs)
    if measured < rule.prereg.pairs:
        notes.append(f"incomplete: {measured} of {rule.prereg.pairs} pre-registered pairs measured")
    left = {(lo.pair, lo.arm) for cv in out for c in cv.cells for lo in c.left_out}
    if left:
        in_decision = {
            lo.pair for cv in out for c in cv.cells if c.decision_cell for lo in c.left_out
        }
        where = (f", {len(in_decision)} of them in decision cells" if in_decision
                 else ", none in decision cells")
        notes.append(
            f"incomplete: {len({p for p, _ in left})} pair(s) left out of some cells by "
            f"invalid or missing passes{where}"
        )
    stable = all(cv.window_stable for cv in out)
    if len(out) == 1:
        reasons = out[0].reasons
    else:
        reasons = tuple(f"{cv.arm}: {cv.decision} — {r}" for cv in out for r in cv.reasons)
        if adopt_arm:
            reasons = (f"adopt {adopt_arm}: best-ranked candidate that adopts", *reasons)
    return RunVerdict(
        run=table.run,
        decision="adopt" if adopt_arm else "keep-default",
        adopt_arm=adopt_arm,
        reasons=reasons,
        notes=tuple(notes),
        candidates=tuple(out),
        ranking=tuple(ranking),
        pairs_measured=measured,
        pairs_planned=rule.prereg.pairs,
        left_out=len(left),
        window_stable=stable,
    )


def _context(table: RunTable, workload: str, level: str) -> Context:
    def sizes(metric: str) -> dict[tuple[int, str], float]:
        c = table.cells.get((workload, level, metric))
        if c is not None:
            return {(p, a): v.value for p, arms in c.values.items() for a, v in arms.items()}
        if level != "all":
            return {}
        # spec-decode figures of a whole sweep: the sizes of all its levels together
        total: dict[tuple[int, str], float] = defaultdict(float)
        for (w, _lvl, m), c in table.cells.items():
            if w == workload and m == metric:
                for p, arms in c.values.items():
                    for a, v in arms.items():
                        total[(p, a)] += v.value
        return dict(total)

    return Context(sizes("output_tokens"), sizes("requests_completed"), table.started,
                   table.slots)


def _apply_holm(cells: list[Cell], rule: Rule) -> list[Cell]:
    """The `ci` rule over m > 1 decision cells: each adopts only when its Holm-adjusted
    one-sided p ≤ α/2 (the level of the CI's lower end). With one cell, the CI itself."""
    idx = [i for i, c in enumerate(cells) if c.decision_cell and c.stats is not None]
    m = len([c for c in cells if c.decision_cell])
    if m < 2:
        return cells
    margin = rule.prereg.margin
    half = rule.alpha / 2
    ps = []
    for i in idx:
        p = st.p_above(cells[i].stats, margin)  # type: ignore[arg-type]
        ps.append(1.0 if p is None else p)
    ps_all = ps + [1.0] * (m - len(idx))  # cells without data count as not rejected
    adjusted = st.holm(ps_all)[: len(idx)]
    levels = st.holm_levels(ps_all, half)[: len(idx)]
    out = list(cells)
    for j, i in enumerate(idx):
        c = cells[i]
        assert c.stats is not None
        lb = st.lower_bound(c.stats, levels[j])
        adopts = adjusted[j] <= half + EPS and c.stats.n >= 2
        verdict = label_of(c.stats, rule.band if c.kind == "ratio" else 0.0, adopts)
        reasons = list(c.reasons)
        reasons[0] = (
            f"{verdict}: Holm over {m} decision cells — adjusted p {adjusted[j]:.3g} "
            f"{'≤' if adopts else '>'} {half:.3g}; lower bound at its Holm level {pct(lb)} "
            f"vs bar {pct(margin)} (gain {pct(c.stats.gain)})"
        )
        out[i] = replace(c, verdict=verdict, reasons=tuple(reasons),
                         holm=HolmInfo(m, ps[j], adjusted[j], lb))
    return out


def _decide_candidate(
    arm: str,
    cells: Sequence[Cell],
    rule: Rule,
    decisions: Sequence[tuple[str, str]],
    guard_targets: Mapping[int, Sequence[tuple[str, str]]],
) -> CandidateVerdict:
    by_key = {c.key: c for c in cells}
    reasons: list[str] = []
    all_adopt = True
    gains: list[float] = []
    for w, lvl in decisions:
        c = by_key.get((w, lvl, rule.metric))
        if c is None or c.verdict != "adopt":
            all_adopt = False
            why = c.reasons[0] if c is not None else "no data"
            reasons.append(f"{w} {lvl}: {why}")
        if c is not None and c.stats is not None and c.kind == "ratio":
            gains.append(c.stats.mean)
    checks: list[GuardrailCheck] = []
    for i, g in enumerate(rule.prereg.guardrails):
        for where in guard_targets[i]:
            checks.append(check_guardrail(g, by_key.get((*where, g.metric)), where))
    broken = [c for c in checks if c.broken]
    reasons.extend(c.reason for c in broken)
    decision: Decision = "adopt" if all_adopt and not broken else "keep-default"
    if decision == "adopt":
        reasons = [
            f"every decision cell adopts ({len(decisions)}) and every guardrail holds "
            f"({len(checks)})",
            *(f"{w} {lvl}: {by_key[(w, lvl, rule.metric)].reasons[0]}" for w, lvl in decisions),
        ]
    drifted = [
        c for c in cells if c.decision_cell and "window-drift" in c.flags
    ]
    stable = not drifted
    if drifted:
        reasons.append(
            "the window was not stable: the control moved beyond the band at "
            + ", ".join(f"{c.where} ({pct(c.control_trend)})" for c in drifted)
            + "; consider re-running the campaign"
        )
    score = math.expm1(math.fsum(gains) / len(gains)) if gains else None
    return CandidateVerdict(arm, decision, tuple(reasons), tuple(cells), tuple(checks),
                            stable, score)


def rank(candidates: Sequence[CandidateVerdict]) -> list[Ranked]:
    """Candidates ordered: adopting ones first, then by mean gain over decision cells."""
    def worst(cv: CandidateVerdict) -> float | None:
        gs = [c.gain for c in cv.cells if c.decision_cell and c.gain is not None]
        return min(gs) if gs else None

    order = sorted(
        candidates,
        key=lambda cv: (cv.decision != "adopt", -(cv.score if cv.score is not None else -1e9)),
    )
    return [Ranked(i + 1, cv.arm, cv.decision, cv.score, worst(cv)) for i, cv in enumerate(order)]


# --------------------------------------------------------------------------- A/A band


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


def recommend_band(run_dir: Path | str) -> BandRecommendation:
    """The band an A/A results directory measured (what `spec-ab report` prints for it)."""
    from campaign.report import recommend_band as _recommend  # the I/O side lives there

    return _recommend(Path(run_dir))


def drift_band_from_aa(run_dir: Path | str) -> float:
    """`drift_band: {from: RUN_DIR}` resolved at registration: the A/A run's band."""
    return recommend_band(run_dir).band
