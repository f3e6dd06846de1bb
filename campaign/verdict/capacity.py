"""Capacity at SLO: the offered rate an arm serves within the registered SLO, per pair.

An open-loop rate sweep measures, at each offered rate `r<rate>` (cell `("rate",
"r<rate>")`), the share of requests meeting every bound of `preregistration.slo`
(`slo_attainment`). An arm's capacity at SLO in one pair is, over its VALID rate levels
of that pair (a level whose pass was invalid — e.g. the load generator could not send
the offered rate — does not count):

- the highest offered rate whose share is ≥ the target (`preregistration.slo.target`,
  default 0.90), linearly interpolated between that level and the next rate above it
  (which misses the target);
- every level meets it → the top rate, censored: the capacity is at least that (`≥`);
- no level meets it → the lowest rate × its share ÷ target, censored: at most that (`<`);
  none when not one request met the SLO even there (0 req/s is no ratio);
- fewer than 2 valid levels → no capacity for that pair and arm (an invalid row, with
  the reason).

The values are the cell `("rate", "capacity")` of metric `capacity_at_slo` (higher is
better), added to each run's table by `tidy.tidy_tables` (`tidy.add_capacity`) before any
verdict reads it, so
the report, `watch` and the sequential looks judge the same numbers. The cell's size
figures (output tokens, requests) are the sums over the arm's valid levels, so the
small-sample flag reads the whole sweep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from campaign.fmt import fmt_value

WORKLOAD = "rate"
LEVEL = "capacity"
METRIC = "capacity_at_slo"
SHARE = "slo_attainment"
DEFAULT_TARGET = 0.90
"""`preregistration.slo.target` when the registration gives none."""
MIN_LEVELS = 2
_RATE = re.compile(r"^r(\d+(?:\.\d+)?(?:e[+-]?\d+)?)$")

Bound = Literal["", "≥", "<"]
"""A censored capacity: `≥` every level met the target (at least the top rate), `<` none
did (at most the lowest rate × share ÷ target); "" interpolated between two levels."""


def rate_of(level: str) -> float | None:
    """The offered rate of a rate level (`r4` → 4.0, `r0.5` → 0.5); None for any other."""
    m = _RATE.match(level)
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class Capacity:
    """One arm's capacity at SLO in one pair."""

    value: float | None
    bound: Bound
    levels: int
    """Valid rate levels it was read from."""
    reason: str = ""
    """Why there is none (value None)."""

    def words(self, unit: str = "req/s") -> str:
        """`≥ 16 req/s`, `9.6 req/s`, `< 1.3 req/s`, or why there is none."""
        if self.value is None:
            return f"none ({self.reason})"
        return f"{self.bound + ' ' if self.bound else ''}{fmt_value(self.value, METRIC)} {unit}"


def capacity_at(levels: Sequence[tuple[float, float]], target: float) -> Capacity:
    """Capacity from (offered rate, share meeting the SLO) of one arm's valid levels."""
    pts = sorted(levels)
    if len(pts) < MIN_LEVELS:
        return Capacity(None, "", len(pts), f"{len(pts)} valid rate level(s): capacity at "
                        f"SLO needs {MIN_LEVELS} or more")
    meets = [i for i, (_, s) in enumerate(pts) if s >= target]
    if not meets:
        rate, share = pts[0]
        if share <= 0:
            return Capacity(None, "", len(pts), "no request met the SLO even at the lowest "
                            f"rate measured ({format(rate, 'g')} req/s): add lower rates")
        return Capacity(rate * share / target, "<", len(pts))
    k = meets[-1]
    if k == len(pts) - 1:
        return Capacity(pts[k][0], "≥", len(pts))
    (r0, s0), (r1, s1) = pts[k], pts[k + 1]
    return Capacity(r0 + (r1 - r0) * (s0 - target) / (s0 - s1), "", len(pts))


def slo_target(prereg: Any) -> float:
    """`preregistration.slo.target` of a registration (model or dict), read defensively:
    absent, null or not a share in (0, 1] → `DEFAULT_TARGET`."""
    slo = prereg.get("slo") if isinstance(prereg, Mapping) else getattr(prereg, "slo", None)
    raw = slo.get("target") if isinstance(slo, Mapping) else getattr(slo, "target", None)
    try:
        value = float(raw) if raw is not None else DEFAULT_TARGET
    except (TypeError, ValueError):
        return DEFAULT_TARGET
    return value if math.isfinite(value) and 0 < value <= 1 else DEFAULT_TARGET


@dataclass(frozen=True)
class Sweep:
    """One arm's rate levels in one pair: valid (rate, share) and the reasons of the
    invalid ones."""

    valid: tuple[tuple[float, float], ...]
    invalid: tuple[tuple[str, str], ...]


def sweeps(share_cells: Mapping[str, Any]) -> dict[int, dict[str, Sweep]]:
    """pair → arm → its sweep, from the `slo_attainment` cells of the rate levels
    (level → `tidy.CellData`)."""
    valid: dict[tuple[int, str], list[tuple[float, float]]] = {}
    bad: dict[tuple[int, str], list[tuple[str, str]]] = {}
    for level, data in share_cells.items():
        rate = rate_of(level)
        if rate is None:
            continue
        for pair, arms in data.values.items():
            for arm, v in arms.items():
                if math.isfinite(v.value):
                    valid.setdefault((pair, arm), []).append((rate, v.value))
        for pair, arms in data.invalid.items():
            for arm, why in arms.items():
                if arm not in data.values.get(pair, {}):
                    bad.setdefault((pair, arm), []).append((level, why))
    out: dict[int, dict[str, Sweep]] = {}
    for key in sorted(set(valid) | set(bad)):
        pair, arm = key
        out.setdefault(pair, {})[arm] = Sweep(tuple(sorted(valid.get(key, []))),
                                              tuple(sorted(bad.get(key, []))))
    return out


def of_sweep(sweep: Sweep, target: float) -> Capacity:
    """The capacity of one arm's sweep; when there is none, the reason names the invalid
    levels."""
    cap = capacity_at(sweep.valid, target)
    if cap.value is None and sweep.invalid:
        left = "; ".join(f"{lvl}: {why}" for lvl, why in sweep.invalid)
        cap = Capacity(None, "", cap.levels, f"{cap.reason} (invalid: {left})")
    return cap


def rate_levels(cells: Mapping[tuple[str, str, str], Any]) -> list[str]:
    """The rate levels with `slo_attainment` rows, by offered rate."""
    found = {lvl for (w, lvl, m) in cells if w == WORKLOAD and m == SHARE
             and rate_of(lvl) is not None}
    return sorted(found, key=lambda lvl: rate_of(lvl) or 0.0)


def capacities(table: Any, target: float) -> dict[int, dict[str, Capacity]]:
    """pair → arm → capacity at SLO, from a `tidy.RunTable`'s rate levels."""
    shares = {lvl: table.cells[(WORKLOAD, lvl, SHARE)] for lvl in rate_levels(table.cells)}
    return {pair: {arm: of_sweep(s, target) for arm, s in arms.items()}
            for pair, arms in sweeps(shares).items()}


def sweep_cells(metric: str, decisions: Sequence[tuple[str, str]],
                cells: Iterable[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """Decision cells as a guardrail of `metric` sees them: the capacity cell `(rate,
    capacity)` stands for the rate levels where `metric` is measured (its sweep), the
    others are kept."""
    if (WORKLOAD, LEVEL) not in decisions or metric == METRIC:
        return list(decisions)
    sweep = sorted({lvl for (w, lvl, m) in cells if w == WORKLOAD and m == metric
                    and rate_of(lvl) is not None}, key=lambda lvl: rate_of(lvl) or 0.0)
    out: list[tuple[str, str]] = []
    for d in decisions:
        for k in ([(WORKLOAD, lvl) for lvl in sweep] if d == (WORKLOAD, LEVEL) else [d]):
            if k not in out:
                out.append(k)
    return out


def censored_words(data: Any, control: str, arm: str) -> str:
    """What the reader of a capacity cell must know of its censored values ("" none)."""
    parts = []
    for who in (control, arm):
        marks = [(p, b[who]) for p, b in sorted(data.bounds.items()) if who in b]
        if not marks:
            continue
        at_least = [p for p, b in marks if b == "≥"]
        at_most = [p for p, b in marks if b == "<"]
        if at_least:
            parts.append(f"{who} met the SLO target at every rate measured in "
                         f"{len(at_least)} pair(s): its capacity there is at least the top "
                         "rate (≥), not measured beyond it")
        if at_most:
            parts.append(f"{who} missed the SLO target at every rate measured in "
                         f"{len(at_most)} pair(s): its capacity there is below the lowest "
                         "rate (<), extrapolated as rate × share ÷ target")
    return ("capacity censored: " + "; ".join(parts)) if parts else ""


BEYOND = "both arms met the SLO target at every rate measured"
"""How a capacity cell's sentence begins when the sweep stopped short of both arms'
capacity (`beyond_the_sweep`): the verdict's headline quotes it instead of a change."""


def beyond_the_sweep(data: Any, control: str, arm: str,
                     complete: Sequence[tuple[int, float, float]]) -> str:
    """The cell's first words when the sweep stopped short of both arms' capacity in every
    complete pair (both `≥` the top rate: the same censored value, a +0.0% that measures
    nothing); "" otherwise."""
    if not data.bounds or not complete:
        return ""
    if any(data.bounds.get(pair, {}).get(who) != "≥" for pair, _, _ in complete
           for who in (control, arm)):
        return ""
    top = fmt_value(max(max(x, y) for _, x, y in complete), METRIC) + " req/s"
    return (f"{BEYOND}, up to {top}, in each of the {len(complete)} pair(s): the sweep "
            f"stops short of either capacity (both ≥ {top}), so it cannot show a change; "
            f"register rates above {top} (workloads.rate.rates)")
