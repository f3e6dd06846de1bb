"""The pre-registered rule: its parsed form, `--rule` overrides, and the label kernel.

A rule is the frozen `preregistration` of a campaign plus its resolved drift band δ. One
scale everywhere: every percentage is the change of the metric itself (candidate ÷
control − 1), and "better" follows the metric's direction. So for a lower-is-better
primary metric, "+10% margin" means a 10% *reduction*.

Per cell, over its complete pairs, with d_i = ln(y_i / x_i) signed so that positive =
better (`stats.Paired`), α = 1 − confidence and k the candidates when they are corrected for:

- `bound` (the default): adopt when n ≥ 2, the cell's change is better by at least the
  margin, and the one-sided (1 − α/k) t lower confidence bound of mean d,
  mean − t(1 − α/k, n − 1)·s/√n, is better by at least max(margin/2, δ). Valid for any pair
  noise under normality: P(adopt | a true change of half the margin) ≤ α/k, and more pairs
  raise the power;
- `point`: adopt when the cell's change is better by at least the margin and every pair
  is better by at least δ;
- `ci`: adopt when the CI's far end (the worse one) is better by at least the margin;
- otherwise a label: `loss` (n ≥ 2, the change is worse beyond δ and the one-sided (1 − α)
  t upper bound of mean d is at most 0: evidence of a loss, as adopt needs evidence of a
  gain), `mixed` (some pair better and some pair worse, each beyond δ), `gain-below-bar`
  (every pair better beyond δ, the rule not met), `within-drift` (the change is inside
  ±δ), `unclear` (the change is beyond δ but not every pair is, or every pair is worse
  without the evidence of a loss); `no-data` when no complete pair is left;
  `inconclusive` when the rule is met on the pairs measured but the cell is short of its
  pairs, small-sample or in an unstable window (see `verdict`).

Only decision cells carry these labels. Every other cell is described, not judged:
`better`, `worse` or `no-clear-change` by its confidence interval (`describe`).

`label_of`, `adopts_bound`, `adopts_point` and `adopts_ci` are the kernel that `verdict`
applies to one cell and `plan` applies, vectorised, to thousands of simulated campaigns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from scipy import stats as sps

from campaign import catalog
from campaign.campaignfile import Preregistration
from campaign.campaignfile.base import READ_BACK, FractionOf
from campaign.errors import UsageError
from campaign.fmt import abs_pct, pct
from campaign.verdict import stats as st
from campaign.verdict.showable import FAILURE_SHARES

Label = Literal[
    "adopt", "inconclusive", "gain-below-bar", "within-drift", "loss", "mixed", "unclear",
    "no-data", "better", "worse", "no-clear-change", "not-applicable",
]
Decision = Literal["adopt", "keep-default"]
Reason = Literal["rule-met", "below-bar", "loss", "guardrail", "guardrail-unresolved",
                 "inconclusive"]
"""Why a decision is what it is (one per candidate and per run)."""

RULE_LABELS: tuple[Label, ...] = (
    "adopt", "inconclusive", "gain-below-bar", "within-drift", "loss", "mixed", "unclear",
    "no-data",
)
"""Labels of decision cells (the rule's)."""
DESCRIPTIVE_LABELS: tuple[Label, ...] = (
    "better", "worse", "no-clear-change", "no-data", "not-applicable")
"""Labels of every other cell (a description, not a recommendation)."""
LABELS: tuple[Label, ...] = (*RULE_LABELS, "better", "worse", "no-clear-change",
                             "not-applicable")
ABSOLUTE_METRICS = frozenset({"error_rate"}) | catalog.SLO_SHARES | catalog.DIFFERENCE_MS
"""Metrics compared by absolute differences: they are often exactly 0 (error_rate, queue
delays and send lag in ms), or shares of requests near 1 whose change reads in points
(the SLO attainments)."""
FAILURE_METRICS = FAILURE_SHARES
"""Metrics whose value in a failed (invalid) pass still counts against its arm (defined
beside the light guardrail assessment, which `check` loads without scipy)."""
EPS = 1e-9
"""Comparisons tolerate float round-off: +15% built as 115/100 must clear a 15% bar."""
DEFAULT_PASS_SD = 0.01
"""Within-pass noise (log sd) the flags assume beside the band's per-boot drift."""
FLAG_FAMILY_ALPHA = 0.05
"""False-alarm rate of all noise flags of a campaign's decision cells together (over every
decision cell, candidate and noise flag in play: `flag_alpha`)."""


def flag_alpha(cells: int, candidates: int = 1, lanes: int = 1) -> float:
    """Level of each noise flag's test: the family's 5% shared (Bonferroni) over the
    decision cells × candidates × noise flags in play (high-variance and window-drift, and
    lanes-disagree when two lanes or more are pooled)."""
    flags = 3 if lanes > 1 else 2
    return FLAG_FAMILY_ALPHA / (flags * max(1, cells) * max(1, candidates))

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
    if "drift_band" in overrides:
        out["drift_band"] = _fraction_override("drift_band", overrides["drift_band"])
    try:
        pre = Preregistration.model_validate(out)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if not _is_branch(str(p)))}: "
            f"{str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise UsageError(f"--rule overrides are invalid: {problems}") from None
    band = out.get("drift_band")
    if isinstance(band, float | int) and not isinstance(band, bool) and band > pre.margin:
        raise UsageError(
            f"--rule: drift band {band:g} is larger than the margin {pre.margin:g}: such a "
            "rule can never tell a gain from noise",
            hint="give a drift_band below the margin (or a larger margin)")
    return out


def _is_branch(part: str) -> bool:
    """A union member in an error location (`DriftFrom`, `function-before[…]`)."""
    return part[:1].isupper() or "[" in part


def _fraction_override(key: str, value: str) -> float:
    """A fraction as the campaign file reads one (`0.03` or `3%`: `FractionOf`)."""
    try:
        band = FractionOf(below_one=True).check(value, None)
    except ValueError as exc:
        raise UsageError(f"--rule {key}={value}: must be a fraction in [0, 1), e.g. 0.03 or "
                         f"3%: {exc}") from None
    try:
        return float(band)
    except ValueError:
        raise UsageError(f"--rule {key}={value}: give a fraction, e.g. 0.03 or 3%") from None


# --------------------------------------------------------------------------- one scale


def better_d(frac: float, direction: st.Direction, kind: st.Kind = "ratio") -> float:
    """The d (positive = better) of a change that is better by `frac` of the metric:
    +frac for higher-is-better, −frac (a reduction) for lower-is-better."""
    if kind == "absolute":
        return frac
    if direction == "higher":
        return math.log1p(frac)
    return -math.log1p(-frac) if frac < 1 else math.inf


def worse_d(frac: float, direction: st.Direction, kind: st.Kind = "ratio") -> float:
    """The d of a change that is worse by `frac` of the metric (a negative number)."""
    if kind == "absolute":
        return -frac
    if direction == "higher":
        return math.log1p(-frac) if frac < 1 else -math.inf
    return -math.log1p(frac)


def change_of(d: float, direction: st.Direction, kind: st.Kind = "ratio") -> float:
    """The change of the metric itself (candidate ÷ control − 1, or the difference) of a
    d signed positive = better."""
    if kind == "absolute":
        return d if direction == "higher" else -d
    return math.expm1(d if direction == "higher" else -d)


@dataclass(frozen=True)
class Rule:
    """The rule a verdict is computed under: the frozen preregistration and its band."""

    prereg: Preregistration
    band: float
    """Drift band δ as a fraction (resolved at registration when it came from an A/A run)."""
    guardrail_bands: tuple[float, ...] = ()
    """Each registered guardrail's boot-to-boot band, resolved (one per guardrail, in
    order); empty: each guardrail's own numeric `drift_band`, else the campaign's band."""

    def guardrail_band(self, index: int) -> float:
        """The boot-to-boot band of guardrail `index` (see `guardrail_bands`)."""
        if index < len(self.guardrail_bands):
            return float(self.guardrail_bands[index])
        own = self.prereg.guardrails[index].drift_band
        return float(own) if isinstance(own, float | int) else self.band

    def guardrail_registered_band(self, index: int) -> float | None:
        """Guardrail `index`'s own band (registered, or resolved from its A/A run); None
        when it has none (its noise is then the metric's own, never the campaign's band)."""
        own = self.prereg.guardrails[index].drift_band
        if own is None:
            return None
        if index < len(self.guardrail_bands):
            return float(self.guardrail_bands[index])
        return float(own) if isinstance(own, float | int) else None

    def guardrail_band_source(self, index: int) -> str:
        """Where guardrail `index`'s band comes from, in words."""
        own = self.prereg.guardrails[index].drift_band
        if index < len(self.guardrail_bands):
            return "registered" if own is not None else "the campaign's band"
        if isinstance(own, float | int):
            return "registered"
        if own is not None:
            return (f"the campaign's band: its A/A run ({own.from_}) was not resolved at "
                    "registration")
        return "the campaign's band"

    @property
    def alpha(self) -> float:
        return 1 - self.prereg.confidence

    @property
    def metric(self) -> str:
        return self.prereg.primary_metric

    @property
    def direction(self) -> st.Direction:
        return self.prereg.metric_direction

    def direction_of(self, metric: str) -> st.Direction:
        if metric == self.prereg.primary_metric:
            return self.prereg.metric_direction
        return catalog.direction(metric)

    def kind_of(self, metric: str) -> st.Kind:
        absolute = {g.metric for g in self.prereg.guardrails if g.absolute}
        return "absolute" if metric in ABSOLUTE_METRICS | absolute else "ratio"

    # -- the noise the flags are calibrated on

    @property
    def boot_sd(self) -> float:
        """Per-boot drift (log sd) the rule assumes: the band."""
        return math.log1p(self.band)

    @property
    def control_sd(self) -> float:
        """sd of one arm's ln(value) from boot to boot (per-boot drift and pass noise)."""
        return math.sqrt(self.boot_sd**2 + DEFAULT_PASS_SD**2)

    @property
    def pair_sd(self) -> float:
        """sd of one pair's log ratio under the assumed noise (both arms)."""
        return math.sqrt(2.0) * self.control_sd

    @property
    def window_limit(self) -> float:
        """Largest movement of the control across the window that still counts as a stable
        window (`gates.max_window_drift`, default: the band)."""
        limit = self.prereg.gates.max_window_drift
        return self.band if limit is None else limit

    # -- several candidates

    def bar_d(self, candidates: int = 1, kind: st.Kind = "ratio") -> float:
        """The d a decision cell's mean must reach to adopt: the margin (as a change of the
        metric); under `point` raised when the best of several candidates is taken (`bound`
        and `ci` correct their confidence bound instead: `ci_alpha`).

        The `point` correction keeps the campaign's false-adopt rate at half the margin no
        higher than a single candidate's: with k candidates each must clear a bar whose
        single false-adopt chance is 1/k of the uncorrected one (normal model of the mean
        of the pre-registered pairs under the assumed noise; the per-pair gate only lowers
        it).
        """
        base = better_d(self.prereg.margin, self.direction, kind)
        if (candidates <= 1 or self.prereg.multiple_candidates == "none" or kind != "ratio"
                or self.prereg.rule != "point"):
            return base
        half = better_d(self.prereg.margin / 2, self.direction)
        se = self.pair_sd / math.sqrt(self.prereg.pairs)
        p1 = float(sps.norm.sf((base - half) / se))
        return max(base, half + se * float(sps.norm.isf(p1 / candidates)))

    def ci_alpha(self, candidates: int = 1) -> float:
        """α of the bound a cell is judged on, Bonferroni'd over candidates: two-sided for
        `ci`'s CI, one-sided for `bound`'s lower bound."""
        if candidates <= 1 or self.prereg.multiple_candidates == "none":
            return self.alpha
        return self.alpha / candidates

    @property
    def floor(self) -> float:
        """What `bound`'s lower confidence bound must clear: max(margin/2, δ), a fraction."""
        return max(self.prereg.margin / 2, self.band)

    def floor_d(self, kind: st.Kind = "ratio") -> float:
        return better_d(self.floor, self.direction, kind)

    def floor_source(self) -> str:
        """Where the bound's floor comes from: "half your +10.0% margin" (or "your ±3.0%
        drift band", the larger)."""
        if self.prereg.margin / 2 >= self.band:
            return f"half your {self.margin_text()} margin"
        return f"your ±{abs_pct(self.band)} drift band"

    def floor_words(self) -> str:
        """The bound's floor and where it comes from, in the file's own numbers: "+5.0%,
        the bound's floor = half your +10.0% margin"."""
        return (f"{_change_text(self.floor, self.prereg.metric_direction)}, the bound's "
                f"floor = {self.floor_source()}")

    def margin_text(self) -> str:
        """The registered margin on the metric's own scale: "+10.0%" ("-10.0%": lower is
        better)."""
        return _change_text(self.prereg.margin, self.prereg.metric_direction)

    def powered_gain(self) -> str:
        """A sequential design's power point: "a +15.0% gain"."""
        return f"a {_change_text(1.5 * self.prereg.margin, self.prereg.metric_direction)} gain"

    def powered_source(self) -> str:
        """Where the power point comes from: "1.5 × your +10.0% margin, the gain the design
        is powered for"."""
        return f"1.5 × your {self.margin_text()} margin, the gain the design is powered for"

    def powered_words(self) -> str:
        """"a +15.0% gain = 1.5 × your +10.0% margin, the gain the design is powered for"."""
        return f"{self.powered_gain()} = {self.powered_source()}"

    def describe(self) -> str:
        p = self.prereg
        better = "higher" if p.metric_direction == "higher" else "lower"
        bar = _change_text(p.margin, p.metric_direction)
        if p.rule == "bound":
            many = ("" if p.multiple_candidates == "none"
                    else " (Bonferroni over candidates)")
            side = "lower" if p.metric_direction == "higher" else "upper"
            how = (f"adopt when the change is {bar} or better and its one-sided "
                   f"{p.confidence:.0%} {side} confidence bound{many} is "
                   f"{_change_text(self.floor, p.metric_direction)} or better (the bound's "
                   f"floor: {self.floor_source()})")
        elif p.rule == "point":
            how = (f"adopt when the change is {bar} or better and every pair is "
                   f"{_change_text(self.band, p.metric_direction)} or better")
        else:
            how = (f"adopt when the {p.confidence:.0%} CI's worse end is {bar} or better")
        if p.sequential is not None:
            sq = p.sequential
            many = "" if p.multiple_candidates == "none" else " (Bonferroni over candidates)"
            how = (f"adopt when the change is {bar} or better and a group-sequential "
                   f"{p.confidence:.0%} bound{many} "
                   f"is {_change_text(self.floor, p.metric_direction)} or better (the "
                   f"bound's floor: {self.floor_source()}); a look "
                   f"after each {sq.look} from {sq.min_pairs} up to {sq.max_pairs} pairs, "
                   f"stopping for keep-default when the data rule out "
                   f"{self.powered_words()} (power {sq.power:.0%})")
        return (f"{p.primary_metric} ({better} is better), rule {p.rule}: {how}; "
                f"drift band ±{abs_pct(self.band)}")


def _change_text(frac: float, direction: st.Direction) -> str:
    return pct(frac if direction == "higher" else -frac)


def parse_rule(rule: Mapping[str, Any], band: float,
               guardrail_bands: Sequence[float] = ()) -> Rule:
    """The registered rule (a dict, hashed as registered) as a `Rule`.

    A guardrail registered before `at` existed was checked at every measured cell of its
    metric: it is read as `at: all`, its registered meaning (the dict itself, and so its
    hash, is left alone)."""
    data = dict(rule)
    guards = data.get("guardrails")
    if isinstance(guards, list):
        data["guardrails"] = [{**g, "at": "all"} if isinstance(g, Mapping) and "at" not in g
                              else g for g in guards]
    # registered: what was valid then stays readable (a margin above 1 from before fractions
    # were bounded)
    return Rule(prereg=Preregistration.model_validate(data, context={READ_BACK: True}),
                band=float(band),
                guardrail_bands=tuple(float(b) for b in guardrail_bands))


# --------------------------------------------------------------------------- the kernel


def label_of(p: st.Paired, band: float, adopts: bool,
             direction: st.Direction = "higher", alpha: float = 0.05) -> Label:
    """The rule's label of a decision cell's statistics (see the module docstring); `alpha`
    is the one-sided level of the loss test."""
    if adopts:
        return "adopt"
    if is_loss(p, band, alpha, direction):
        return "loss"
    up, down = better_d(band, direction, p.kind), worse_d(band, direction, p.kind)
    better = [v >= up - EPS for v in p.d]
    worse = [v <= down + EPS for v in p.d]
    if any(better) and any(worse):
        return "mixed"
    if down + EPS < p.mean < up - EPS or abs(p.mean) <= EPS:
        return "within-drift"
    if all(better):
        return "gain-below-bar"
    return "unclear"


def upper_bound(p: st.Paired, alpha: float) -> float | None:
    """The one-sided (1 − α) t upper confidence bound of mean d (None for one pair)."""
    if p.sd is None or p.n < 2:
        return None
    return p.mean + st.t_critical(1 - alpha, p.n - 1) * p.sd / math.sqrt(p.n)


def lower_bound(p: st.Paired, alpha: float) -> float | None:
    """The one-sided (1 − α) t lower confidence bound of mean d (None for one pair)."""
    if p.sd is None or p.n < 2:
        return None
    return p.mean - st.t_critical(1 - alpha, p.n - 1) * p.sd / math.sqrt(p.n)


def is_loss(p: st.Paired, band: float, alpha: float,
            direction: st.Direction = "higher") -> bool:
    """`loss`: n ≥ 2, the change is worse beyond δ and the one-sided (1 − α) t upper bound
    of mean d excludes any gain (≤ 0). One pair is never a loss."""
    ucb = upper_bound(p, alpha)
    return (ucb is not None and p.mean <= worse_d(band, direction, p.kind) + EPS
            and ucb <= EPS)


def adopts_bound(p: st.Paired, bar: float, floor: float, alpha: float) -> bool:
    """`bound`: n ≥ 2, the mean d reaches `bar` (the margin) and the one-sided (1 − α) t
    lower confidence bound of mean d reaches `floor` (max(margin/2, δ) as a d; `alpha`
    already divided by the candidates, `Rule.ci_alpha`)."""
    lcb = lower_bound(p, alpha)
    return lcb is not None and p.mean >= bar - EPS and lcb >= floor - EPS


def adopts_point(p: st.Paired, bar: float, band: float,
                 direction: st.Direction = "higher") -> bool:
    """`point`: the mean d reaches `bar` (see `Rule.bar_d`) and every pair is better by at
    least δ."""
    up = better_d(band, direction, p.kind)
    return p.mean >= bar - EPS and all(v >= up - EPS for v in p.d)


def adopts_ci(p: st.Paired, bar: float, alpha: float) -> bool:
    """`ci`: the lower end of the two-sided (1 − α) CI of mean d reaches `bar`; one pair has
    no CI and never adopts."""
    if p.sd is None:
        return False
    t = st.t_critical(1 - alpha / 2, p.n - 1)
    return p.mean - t * p.sd / math.sqrt(p.n) >= bar - EPS


def describe(p: st.Paired) -> Label:
    """A cell that is not a decision cell: better or worse when its CI excludes no change,
    else no clear change (one pair has no CI: no clear change)."""
    if p.sd is None or p.n < 2:
        return "no-clear-change"
    lo, hi = p.mean_ci
    if lo > EPS:
        return "better"
    if hi < -EPS:
        return "worse"
    return "no-clear-change"
