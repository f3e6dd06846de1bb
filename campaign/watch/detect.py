"""Change points in a series of nights, and the nights that are only outliers.

Change points come from an established detector, `ruptures`' binary segmentation (least
squares, a BIC-like penalty of the series' own noise, `MIN_SEGMENT` nights at least
between two points), never a hand-written threshold; each point it proposes must then
pass Welch's t-test between the stretches on its two sides (scipy), the weakest failing
point merged away and the rest tested again, as Otava's e-divisive merge does (Otava
itself pins numpy to one release and brings cloud clients: it is not a dependency).
Before it runs, one bad night is set apart as an outlier, so it cannot read as a lasting
step:

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

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from campaign.watch.series import Series

MAX_PVALUE = 1e-5
PENALTY = 3.0
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
    where = [i for i, v in enumerate(series.values) if v is not None]
    x = np.array([series.values[i] for i in where], dtype=float)
    odd = outliers(x)
    bad = {i for i, _ in odd}
    keep = [j for j in range(len(x)) if j not in bad]
    y = x[keep]
    changes: list[Change] = []
    if len(y) >= 2 * MIN_SEGMENT:
        for index, before, after, p in _tested(y, _proposed(y), series.band):
            changes.append(Change(where[keep[index]], before, after, p))
    return Finding(series, tuple(changes),
                   tuple(Outlier(where[i], float(x[i]), e) for i, e in odd))


def _proposed(y: np.ndarray[Any, Any]) -> list[int]:
    """Where binary segmentation splits `y` (the first index of each new stretch), with a
    penalty of PENALTY · σ² · ln n, σ the series' night-to-night noise."""
    import ruptures  # type: ignore[import-untyped]  # here: --help imports no scipy

    sigma = noise(y) or float(np.std(y)) or 1.0
    algo = ruptures.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(y.reshape(-1, 1))
    ends = algo.predict(pen=PENALTY * sigma * sigma * math.log(len(y)))
    return [int(e) for e in ends[:-1]]  # the last end is len(y)


def _tested(y: np.ndarray[Any, Any], points: list[int], band: float
            ) -> list[tuple[int, float, float, float]]:
    """The points whose two sides differ by Welch's t-test (p < MAX_PVALUE) and by at
    least `band` of the mean before: of the points that fail, the weakest goes and the
    others are tested again against their new neighbours."""
    from scipy import stats

    points = sorted(points)
    while points:
        edges = [0, *points, len(y)]
        tested = []
        for k, cut in enumerate(points):
            a, b = y[edges[k]:cut], y[cut:edges[k + 2]]
            before, after = float(a.mean()), float(b.mean())
            with warnings.catch_warnings():  # two stretches of equal nights: no spread
                warnings.simplefilter("ignore", RuntimeWarning)
                p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
            if not math.isfinite(p):  # no spread on either side: the means say it all
                p = 0.0 if before != after else 1.0
            size = abs(after / before - 1) if before else math.inf
            tested.append((cut, before, after, p if size >= band else 1.0))
        failing = [t for t in tested if not t[3] < MAX_PVALUE]
        if not failing:
            return tested
        points.remove(max(failing, key=lambda t: t[3])[0])
    return []
