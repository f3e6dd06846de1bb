"""The pre-registered rule: its parsed form, `--rule` overrides, and the label kernel.

A rule is the frozen `preregistration` of a campaign plus its resolved drift band δ. Per
cell (workload × level × metric) over its complete pairs, with gains signed so that
positive = better:

- `point`: adopt when g ≥ margin and every pair's gain ≥ +δ;
- `ci`: adopt when the CI's lower bound ≥ margin (over several decision cells, Holm-
  corrected one-sided tests: see `verdict`);
- otherwise a label: `gain-below-bar` (every pair ≥ +δ, bar not cleared), `within-drift`
  (|g| < δ), `loss` (every pair ≤ −δ), `mixed` (pairs disagree beyond δ); `no-data` when
  no complete pair is left.

`label_of`, `adopts_point` and `adopts_ci` are the kernel that `verdict` applies to one
cell and `plan` applies, vectorised, to thousands of simulated campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from campaign import catalog
from campaign import stats as st
from campaign.errors import UsageError
from campaign.fmt import abs_pct, pct
from campaign.spec import Preregistration

Label = Literal["adopt", "gain-below-bar", "within-drift", "loss", "mixed", "no-data"]
Decision = Literal["adopt", "keep-default"]

LABELS: tuple[Label, ...] = (
    "adopt", "gain-below-bar", "within-drift", "loss", "mixed", "no-data",
)
ABSOLUTE_METRICS = frozenset({"error_rate"})
"""Metrics compared by absolute differences: they are often exactly 0."""
EPS = 1e-9
"""Comparisons tolerate float round-off: +15% built as 115/100 must clear a 15% bar."""

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
            f"{'.'.join(str(p) for p in e['loc'] if not str(p)[:1].isupper())}: {e['msg']}"
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


def _fraction_override(key: str, value: str) -> float:
    try:
        band = float(value)
    except ValueError:
        raise UsageError(f"--rule {key}={value}: give a fraction, e.g. 0.03") from None
    if not 0 <= band < 1:
        raise UsageError(f"--rule {key}={value}: must be a fraction in [0, 1), e.g. 0.03")
    return band


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
