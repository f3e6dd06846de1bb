"""What `spec-ab watch` found: every series' change points and outliers, the refused
nights, the changes for the worse among each lane's newest nights (exit 1), and advice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from campaign.errors import UsageError
from campaign.watch import detect, nights, series

DEFAULT_SINCE = 7


@dataclass(frozen=True)
class Reported:
    """One change, as JSON and the table say it."""

    lane: str
    metric: str
    cell: str
    run: str
    """The folder of the first night after the change."""
    before: float
    after: float
    change: float
    direction: str
    recent: bool
    """Among its lane's newest `since` nights."""

    def doc(self) -> dict[str, object]:
        change = self.change if math.isfinite(self.change) else None  # before was 0
        return {"lane": self.lane, "metric": self.metric, "cell": self.cell,
                "run": self.run, "before": self.before, "after": self.after,
                "change": change, "direction": self.direction, "recent": self.recent}


@dataclass(frozen=True)
class Watch:
    findings: tuple[detect.Finding, ...]
    refused: tuple[nights.Refused, ...]
    since: int
    changes: tuple[Reported, ...]

    @property
    def failing(self) -> tuple[Reported, ...]:
        """The changes for the worse among the newest nights: nightly CI fails on them."""
        return tuple(c for c in self.changes if c.recent and c.direction == "worse")

    def advice(self) -> list[str]:
        """What to do, in words, per lane whose control changed lately."""
        out = []
        for lane in dict.fromkeys(c.lane for c in self.changes if c.recent):
            moved = [c for c in self.changes if c.lane == lane and c.recent]
            what = "; ".join(f"{c.metric} at {c.cell} {c.change:+.1%} ({c.direction}) from "
                             f"{Path(c.run).name}" for c in moved)
            out.append(f"lane {lane}: its control changed lately: {what}. If the cause is "
                       "known and kept (an upgrade), re-measure the lane's drift band with "
                       "an A/A (`spec-ab init --template aa -o aa.yaml`, then `spec-ab run "
                       "aa.yaml` on this lane) before its next verdicts; if not, look at "
                       "what changed on the lane that night.")
        return out


def watch(paths: Sequence[Path], since: int = DEFAULT_SINCE) -> Watch:
    if since < 1:
        raise UsageError(f"--since {since}: give a number of nights, 1 or more",
                         hint="e.g. --since 7")
    found, refused = nights.read_nights(nights.run_folders(paths))
    findings = tuple(detect.detect(s) for s in series.build(found))
    changes = []
    for f in findings:
        n = len(f.series.nights)
        for c in f.changes:
            night = f.series.nights[c.index]
            changes.append(Reported(f.series.lane, f.series.metric, f.series.cell,
                                    night.run_dir, c.before, c.after, c.change,
                                    f.direction(c), c.index >= n - since))
    return Watch(findings, tuple(refused), since, tuple(changes))
