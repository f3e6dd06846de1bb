"""What a report says of an open-loop rate sweep: each arm's capacity at SLO, and per
candidate where it stops paying (the crossover), in one line per sweep.

Capacity at SLO per arm is the median over its pairs of `verdict.capacity` (each pair's
highest offered rate whose `slo_attainment` meets `preregistration.slo.target`); a value
censored in every pair keeps its mark (`≥` every rate met the target, `<` none did), one
censored in some pairs says how many. The crossover reads the candidate's judged cells of
one latency metric at each rate level (the primary metric when it is measured per rate
level, else the request latency p50, where drafts pay or cost: a deeper draft may leave the
first token as it was and change every later one): better at the low rates and worse at a
higher one means the candidate stops paying between the last rate it was better at and the
first rate above it where it was worse.

Pure: the run's tidy table and verdict in, a `RateSweep` out; the renderers lay it out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from campaign.fmt import fmt_gain, fmt_value
from campaign.verdict import capacity as cap
from campaign.verdict.outcome import CandidateVerdict, Cell, RunVerdict
from campaign.verdict.tidy import RunTable

CROSSOVER_METRIC = "request_latency_p50"
"""The latency a crossover is read on when the primary metric is not one of the sweep's."""
PLOTTED = ("ttft_p50", "ttft_p99", "slo_attainment")
"""Per rate level and arm, what the sweep's plot draws (from the report's measurements)."""
_NAMES = {"ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "itl_p50": "ITL p50",
          "itl_p99": "ITL p99", "request_latency_p50": "latency p50",
          "request_latency_p99": "latency p99"}


@dataclass(frozen=True)
class ArmCapacity:
    """One arm's capacity at SLO over its pairs."""

    arm: str
    value: float | None
    """Median over the pairs that have one (None: no pair has)."""
    bound: str
    """`≥` or `<` when every pair's value is censored that way, else ""."""
    pairs: tuple[tuple[int, float | None, str], ...]
    """(pair, value, bound) of each pair; value None: no capacity (see `missing`)."""
    censored: int
    missing: tuple[str, ...] = ()
    """Why a pair has no capacity (`pair N: …`)."""

    @property
    def text(self) -> str:
        if self.value is None:
            return "none: " + "; ".join(self.missing) if self.missing else "none"
        mark = f"{self.bound} " if self.bound else ""
        n = sum(1 for _, v, _ in self.pairs if v is not None)
        out = f"{mark}{fmt_value(self.value, cap.METRIC)} req/s"
        if n > 1:
            lo = min(v for _, v, _ in self.pairs if v is not None)
            hi = max(v for _, v, _ in self.pairs if v is not None)
            out += (f" (median of {n} pairs, {fmt_value(lo, cap.METRIC)}–"
                    f"{fmt_value(hi, cap.METRIC)})")
        if self.censored and not self.bound:
            out += f"; censored in {self.censored} of {n} pair(s)"
        if self.missing:
            out += f"; none in {len(self.missing)} pair(s): " + "; ".join(self.missing)
        return out


@dataclass(frozen=True)
class Step:
    """One rate level of a crossover: the candidate's verdict and change there."""

    level: str
    rate: float
    verdict: str
    """`better`, `worse` or `no clear change`."""
    change: str


@dataclass(frozen=True)
class Crossover:
    """Where one candidate stops paying over the sweep (one line)."""

    arm: str
    control: str
    metric: str
    steps: tuple[Step, ...]
    between: tuple[float, float] | None
    """(last rate better, first rate worse above it), when the candidate crosses."""

    @property
    def line(self) -> str:
        name = _NAMES.get(self.metric, self.metric)
        steps = "; ".join(f"{s.level}: candidate {s.verdict} ({name} {s.change})"
                          if i == 0 else f"{s.level}: {s.verdict} ({s.change})"
                          for i, s in enumerate(self.steps))
        verdicts = {s.verdict for s in self.steps}
        if self.between is not None:
            lo, hi = self.between
            end = (f"{self.arm} stops paying between {format(lo, 'g')} and "
                   f"{format(hi, 'g')} req/s")
        elif verdicts == {"better"}:
            end = f"{self.arm} is better at every rate measured"
        elif verdicts == {"worse"}:
            end = f"{self.arm} is worse at every rate measured"
        else:
            end = "no crossover shown"
        return f"rate sweep, {self.arm} vs {self.control}: {steps}: {end}"


@dataclass(frozen=True)
class RateSweep:
    """A run's rate sweep as the report shows it."""

    target: float
    levels: tuple[str, ...]
    capacities: tuple[ArmCapacity, ...]
    crossovers: tuple[Crossover, ...]

    def lines(self) -> list[str]:
        """The report's lines: one per arm's capacity, one per candidate's crossover."""
        out = [f"capacity at SLO ({self.target:.0%} of requests within the SLO), "
               f"{cap_.arm}: {cap_.text}" for cap_ in self.capacities]
        return out + [c.line for c in self.crossovers]


def rate_sweep(table: RunTable, verdict: RunVerdict, arms: Sequence[str], target: float,
               metric: str) -> RateSweep | None:
    """The sweep of a run with rate levels (None without any)."""
    levels = cap.rate_levels(table.cells)
    if not levels:
        levels = sorted({lvl for (w, lvl, _m) in table.cells if w == cap.WORKLOAD
                         and cap.rate_of(lvl) is not None}, key=lambda x: cap.rate_of(x) or 0)
    if not levels:
        return None
    per_pair = cap.capacities(table, target)
    caps = tuple(_arm_capacity(arm, per_pair) for arm in arms)
    crossing = metric if any(c.metric == metric and c.workload == cap.WORKLOAD
                             and cap.rate_of(c.level) is not None
                             for cv in verdict.candidates for c in cv.cells) else CROSSOVER_METRIC
    crossovers = tuple(x for cv in verdict.candidates
                       if (x := _crossover(cv, arms[0], crossing)) is not None)
    return RateSweep(target, tuple(levels), caps, crossovers)


def _arm_capacity(arm: str, per_pair: dict[int, dict[str, cap.Capacity]]) -> ArmCapacity:
    pairs: list[tuple[int, float | None, str]] = []
    missing: list[str] = []
    for pair, arms in sorted(per_pair.items()):
        c = arms.get(arm)
        if c is None:
            continue
        pairs.append((pair, c.value, c.bound))
        if c.value is None:
            missing.append(f"pair {pair}: {c.reason}")
    values = [v for _, v, _ in pairs if v is not None]
    bounds = {b for _, v, b in pairs if v is not None}
    censored = sum(1 for _, v, b in pairs if v is not None and b)
    return ArmCapacity(arm, statistics.median(values) if values else None,
                       next(iter(bounds)) if len(bounds) == 1 else "",
                       tuple(pairs), censored, tuple(missing))


def _word(c: Cell) -> str:
    if c.verdict in ("better", "adopt") or (c.verdict == "gain-below-bar" and c.better):
        return "better"
    if c.verdict in ("worse", "loss"):
        return "worse"
    return "no clear change"


def _crossover(cv: CandidateVerdict, control: str, metric: str) -> Crossover | None:
    cells = sorted((c for c in cv.cells if c.metric == metric and c.workload == cap.WORKLOAD
                    and cap.rate_of(c.level) is not None and c.stats is not None),
                   key=lambda c: cap.rate_of(c.level) or 0.0)
    if not cells:
        return None
    steps = tuple(Step(c.level, cap.rate_of(c.level) or math.nan, _word(c),
                       fmt_gain(c.change, c.kind)) for c in cells)
    between = None
    better = [i for i, s in enumerate(steps) if s.verdict == "better"]
    if better:
        worse = [i for i, s in enumerate(steps) if s.verdict == "worse" and i > better[0]]
        if worse:
            last = max(i for i in better if i < worse[0])
            between = (steps[last].rate, steps[worse[0]].rate)
    return Crossover(cv.arm, control, metric, steps, between)
