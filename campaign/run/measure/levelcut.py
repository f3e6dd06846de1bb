"""A multi-level pass's server counters cut at its level boundaries: the spec-decode
figures of each knee level, not only of the whole sweep.

AIPerf sweeps the knee's levels in one process, so the two scrapes around the pass give the
sweep's total only. While such a pass runs, `Ticker` also scrapes `/metrics` on a timer
(every `TICK_S`). AIPerf boots its system again between two levels (~5 s on 2 cores), so
the server is idle from the last response of one level to the first request of the next
(both read from the level's per-request records, `records.request_window`). A tick taken
wholly inside that gap reads every counter exactly at the boundary; `cut` takes the last
such tick (the farthest from the level that ended). A level's delta runs from the cut
before it to the cut after it, the first level's from the `before` scrape and the last
one's to the `after` scrape, so the levels' deltas add up to the pass's, counter by
counter, by construction.

A boundary with no tick inside its gap (a gap shorter than a tick, a slow scrape) is cut at
the tick nearest to it, and the two levels beside it carry the reason: their figures are
filed invalid (the sum still holds). Without a tick or without any level's request times,
`cut` gives nothing and only the sweep's total is filed.

Why a timer and not one AIPerf process per level (exact without timing, but one more
AIPerf start-up per level) or AIPerf's own server-metrics export (one more poller whose
export format is AIPerf's to change): docs/results.md.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import httpx

from campaign.run.measure import metrics

TICK_S = 0.5
"""Seconds between two timer scrapes: ~10 inside AIPerf's ~5 s between two levels."""
KEPT = frozenset({metrics.DRAFTS, metrics.DRAFT_TOKENS, metrics.ACCEPTED,
                  metrics.ACCEPTED_PER_POS, metrics.GENERATION_TOKENS, metrics.PROMPT_TOKENS,
                  metrics.PROCESS_START})
"""The series a tick keeps (what a level's delta reads): a night's sweep scrapes thousands
of times, and vLLM's whole /metrics text is mostly histograms."""
MARGIN_S = 0.05
"""A tick counts as inside a gap only when sent this long after the level's last response
(the server may book a request's counters just after sending its last token)."""


@dataclass(frozen=True)
class Tick:
    """One timer scrape: when its request was sent and its answer received (wall clock)."""

    sent: float
    received: float
    snapshot: metrics.Snapshot


@dataclass(frozen=True)
class LevelCut:
    """One level's counters: from the cut before it to the cut after it."""

    concurrency: int
    delta: metrics.PassDelta
    start: float | None
    """Wall-clock time of the cut before the level (None: the pass's `before` scrape)."""
    end: float | None
    """Wall-clock time of the cut after it (None: the pass's `after` scrape)."""
    reasons: tuple[str, ...] = ()
    """Why its boundaries are not exact ([]: both inside idle gaps)."""

    @property
    def exact(self) -> bool:
        return not self.reasons


def _boundary(ticks: Sequence[Tick], ended: float, starts: float) -> tuple[Tick, str | None]:
    """The tick to cut at between a level whose last response ended at `ended` and the next
    one, whose first request was sent at `starts`; and why it is not exact (or None)."""
    inside = [t for t in ticks if t.sent >= ended + MARGIN_S and t.received <= starts]
    if inside:
        return max(inside, key=lambda t: t.received), None
    middle = (ended + starts) / 2
    nearest = min(ticks, key=lambda t: abs((t.sent + t.received) / 2 - middle))
    gap = starts - ended
    return nearest, (f"no /metrics tick between two levels (idle gap {gap:.2f} s, a tick "
                     f"every {TICK_S:g} s): the boundary is cut at the nearest tick, "
                     f"{(nearest.sent + nearest.received) / 2 - middle:+.2f} s off")


def cut(before: metrics.Snapshot, after: metrics.Snapshot, ticks: Sequence[Tick],
        windows: Mapping[int, tuple[float, float]]) -> list[LevelCut]:
    """Each level's counter delta (module docstring), in the order the levels ran;
    `windows`: concurrency → (first request sent, last response ended). [] when there is
    nothing to cut: one level, no tick, or the counters went down (a restart, which the
    pass's own delta reports)."""
    order = sorted(windows, key=lambda c: windows[c][0])
    if len(order) < 2 or not ticks:
        return []
    points: list[tuple[metrics.Snapshot, float | None, str | None]] = [(before, None, None)]
    for prev, nxt in itertools.pairwise(order):
        tick, why = _boundary(ticks, windows[prev][1], windows[nxt][0])
        points.append((tick.snapshot, tick.received, why))
    points.append((after, None, None))
    out = []
    try:
        for i, conc in enumerate(order):
            (a, t0, why0), (b, t1, why1) = points[i], points[i + 1]
            delta = metrics.pass_delta(a, b)
            out.append(LevelCut(conc, delta, t0, t1,
                                tuple(w for w in (why0, why1) if w is not None)))
    except metrics.CounterReset:
        return []
    return out


class Ticker:
    """Scrapes `/metrics` every `period_s` on a thread of its own while the block runs
    (the first scrape one period in: the pass's own `before` scrape precedes it), keeping
    the counters a cut reads. Failed scrapes are skipped: a tick is only ever a candidate
    cut."""

    def __init__(self, client: Callable[[], httpx.Client], base_url: str, *,
                 period_s: float = TICK_S,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._url = base_url
        self._period = period_s
        self._clock = wall_clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-ticker", daemon=True)
        self._lock = threading.Lock()
        self._ticks: list[Tick] = []

    @property
    def ticks(self) -> list[Tick]:
        with self._lock:
            return list(self._ticks)

    def _loop(self) -> None:
        with self._client() as client:
            while not self._stop.wait(self._period):
                sent = self._clock()
                try:
                    snap = metrics.scrape(client, self._url, wall_clock=self._clock)
                except metrics.MetricsError:
                    continue
                with self._lock:
                    self._ticks.append(Tick(sent, snap.taken_at, self._kept(snap)))

    def _kept(self, snap: metrics.Snapshot) -> metrics.Snapshot:
        """The tick's counters (`KEPT`), with the scrape's text only when nothing moved
        since the last tick: the server idle, so a candidate cut worth keeping on disk."""
        series = {k: v for k, v in snap.series.items() if k[0] in KEPT}
        idle = bool(self._ticks) and self._ticks[-1].snapshot.series == series
        return metrics.Snapshot(series, snap.text if idle else "", snap.taken_at)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=metrics.SCRAPE_TIMEOUT_S + 1.0)
