"""Nights → one series per lane, metric and decision cell, nights in registered order.

Lanes are never pooled (other hardware, another series). Per decision cell a lane's
control is tracked on the rule's primary metric and TTFT p50 and p99 at the cell, and on
the speculative-decoding figures at the cell, else at its workload's `all` level (where
the knee records them). A night that did not measure a metric is a gap (None), never 0:
an external server may have no `/metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from campaign import catalog
from campaign.watch.nights import LATENCY, SPEC, Night


@dataclass(frozen=True)
class Series:
    lane: str
    metric: str
    cell: str
    """The decision cell tracked, `workload/level`."""
    source: str
    """Where the values were measured (the cell, or its workload's `all` level)."""
    direction: str
    """`higher` or `lower` is better."""
    band: float
    """The lane's registered drift band (its newest night's)."""
    nights: tuple[Night, ...]
    values: tuple[float | None, ...]
    """One per night (None: a gap)."""

    @property
    def label(self) -> str:
        return f"{self.lane} · {self.metric} · {self.cell}"


def lanes(nights: Sequence[Night]) -> dict[str, list[Night]]:
    """lane → its nights by registered start (then folder name)."""
    out: dict[str, list[Night]] = {}
    for n in nights:
        out.setdefault(n.lane, []).append(n)
    return {lane: sorted(ns, key=lambda n: (n.started, n.name))
            for lane, ns in sorted(out.items())}


def build(nights: Sequence[Night]) -> list[Series]:
    """Every series with at least one value, lane by lane."""
    out: list[Series] = []
    for lane, ns in lanes(nights).items():
        cells = list(dict.fromkeys(c for n in ns for c in n.cells))
        primaries = list(dict.fromkeys(n.primary for n in ns))
        for cell in cells:
            workload = cell.split("/", 1)[0]
            for metric in dict.fromkeys([*primaries, *SPEC, *LATENCY]):
                source = cell
                if metric in SPEC and not _any(ns, metric, cell):
                    source = f"{workload}/all"
                values = tuple(n.values.get(f"{metric}@{source}") for n in ns)
                if all(v is None for v in values):
                    continue
                out.append(Series(lane, metric, cell, source, catalog.direction(metric),
                                  ns[-1].band, tuple(ns), values))
    return out


def _any(ns: Sequence[Night], metric: str, cell: str) -> bool:
    return any(f"{metric}@{cell}" in n.values for n in ns)
