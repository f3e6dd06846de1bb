"""Change points in a series of nights, and the nights that are only outliers.

Change points come from an established detector, Apache Otava's e-divisive means (the
split-and-merge form of Fleming et al., "Hunter", ICPE 2023: sliding windows, a t-test
per split, weak points merged away), never a hand-written threshold. Before it runs, one
bad night is set apart as an outlier, so it cannot read as a lasting step:

- a night is an outlier when it lies more than `OUTLIER_SIGMAS` of the series' own
  night-to-night noise from the median of its `NEIGHBOURS` nights on *each* side (a step
  lies near the nights after it, a bad night near neither side);
- the newest night has no nights after it: when it lies that far from the nights before,
  it is an outlier until the next night says whether it lasts.

A change point needs `MIN_SEGMENT` nights on each side of it before the next (a shorter
stretch is merged into its neighbour, the weaker point going), a p-value below `MAX_PVALUE`
and a size above the lane's registered drift band (the boot-to-boot noise of one night's measure):
a change smaller than that is within what the lane does between two boots. Its false-alarm
rate on stationary series is measured by scripts/false-alarms-watch (docs/nightly-ci.md).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from campaign.watch.series import Series

MAX_PVALUE = 1e-5
WINDOW = 50
OUTLIER_SIGMAS = 5.0
NEIGHBOURS = 3
MIN_SEGMENT = 5


@dataclass(frozen=True)
class Change:
    index: int
    """The first night after the change (an index into the series' nights)."""
    before: float
    after: float
    """The means of the stretches before and after it."""
    pvalue: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.nan


@dataclass(frozen=True)
class Outlier:
    index: int
    value: float
    expected: float
    """The median of the nights around it."""


@dataclass(frozen=True)
class Finding:
    series: Series
    changes: tuple[Change, ...]
    outliers: tuple[Outlier, ...]

    def direction(self, change: Change) -> str:
        up = change.after > change.before
        return "better" if up == (self.series.direction == "higher") else "worse"


def noise(x: np.ndarray[Any, Any]) -> float:
    """The night-to-night noise σ of a series, robustly: the MAD of its first differences
    over √2 (a step or a bad night moves one or two differences, not the median)."""
    if len(x) < 3:
        return 0.0
    d = np.diff(x)
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2))


def outliers(x: np.ndarray[Any, Any]) -> list[tuple[int, float]]:
    """(position, expected value) of each outlier in `x` (no gaps)."""
    sigma = noise(x)
    if sigma <= 0 or len(x) < NEIGHBOURS + 1:
        return []
    out = []
    for i in range(len(x)):
        before, after = x[max(0, i - NEIGHBOURS):i], x[i + 1:i + 1 + NEIGHBOURS]
        sides = [float(np.median(s)) for s in (before, after) if len(s)]
        if len(sides) == 1 and not len(before):
            continue  # the first night: the nights after it may be a step's far side
        if all(abs(x[i] - m) > OUTLIER_SIGMAS * sigma for m in sides):
            out.append((i, sides[0]))
    return out


def detect(series: Series) -> Finding:
    """The change points and the outliers of one series."""
    from otava.analysis import (  # type: ignore[import-untyped]  # numpy, scipy only
        compute_change_points,
        merge,
    )

    where = [i for i, v in enumerate(series.values) if v is not None]
    x = np.array([series.values[i] for i in where], dtype=float)
    odd = outliers(x)
    bad = {i for i, _ in odd}
    keep = [j for j in range(len(x)) if j not in bad]
    y = x[keep]
    changes: list[Change] = []
    if len(y) >= 2 * MIN_SEGMENT:
        # a list: Otava slices its windows from a sequence (an array would go unsliced)
        values: list[float] = [float(v) for v in y]
        points, _ = compute_change_points(values, window_len=WINDOW, max_pvalue=MAX_PVALUE,
                                          min_magnitude=series.band)
        points = merge(_long_stretches(points, values), values, MAX_PVALUE, series.band)
        for cp in points:
            changes.append(Change(where[keep[cp.index]], float(cp.stats.mean_1),
                                  float(cp.stats.mean_2), float(cp.stats.pvalue)))
    return Finding(series, tuple(changes),
                   tuple(Outlier(where[i], float(x[i]), e) for i, e in odd))


def _long_stretches(points: list[Any], values: list[float]) -> list[Any]:
    """The change points with every stretch between two of them (or an end) at least
    `MIN_SEGMENT` nights long: of the two points around a shorter stretch the weaker
    (higher p-value) goes, and the others' statistics are computed again."""
    from otava.analysis import TTestSignificanceTester  # type: ignore[import-untyped]

    tester = TTestSignificanceTester(MAX_PVALUE)
    points = sorted(points, key=lambda p: p.index)
    while points:
        edges = [0, *(p.index for p in points), len(values)]
        lengths = [b - a for a, b in itertools.pairwise(edges)]
        short = min(range(len(lengths)), key=lengths.__getitem__)
        if lengths[short] >= MIN_SEGMENT:
            break
        around = [k for k in (short - 1, short) if 0 <= k < len(points)]
        del points[max(around, key=lambda k: points[k].stats.pvalue)]
        intervals = tester.get_intervals(points)
        points = [tester.change_point(p.to_candidate(), values, intervals) for p in points]
    return points
