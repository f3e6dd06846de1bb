"""A sequential design's looks as a report shows them: one line per look (every format) and
the JSON `sequential` object of a candidate (docs/report-json.md).

The sequential design is one concept at five stages; here it is reported. It is also
registered (`campaign.campaignfile.sequential`), followed by the runner
(`campaign.run.sequential`), judged (`campaign.verdict.sequential`), planned
(`campaign.plan.sequential`).
"""

from __future__ import annotations

import math
from typing import Any

from campaign.verdict.outcome import CandidateVerdict, SequentialPath
from campaign.verdict.rule import Rule
from campaign.verdict.sequential import look_line


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def look_lines(cv: CandidateVerdict, rule: Rule) -> list[str]:
    """Every look of the candidate's design, in order, and where it ended."""
    path, design = cv.sequential, rule.prereg.sequential
    if path is None or design is None:
        return []
    lines = [look_line(step, design) for step in path.steps]
    if path.stopped_at is not None:
        lines.append(f"stopped after pair {path.stopped_at} of ≤ {path.max_pairs}: "
                     f"{path.state}")
    elif path.state == "continue":
        lines.append(f"not decided yet: up to {path.max_pairs} pairs registered")
    else:
        lines.append(f"no boundary crossed by max_pairs {path.max_pairs}: inconclusive")
    return lines


def sequential_dict(path: SequentialPath | None, rule: Rule) -> dict[str, Any] | None:
    """The JSON `sequential` object of a candidate (None: a fixed design)."""
    design = rule.prereg.sequential
    if path is None or design is None:
        return None
    return {
        "state": path.state, "stopped_at": path.stopped_at, "max_pairs": path.max_pairs,
        "min_pairs": path.min_pairs, "look": path.look, "max_looks": path.max_looks,
        "power": design.power,
        "looks": [{
            "look": s.look, "pairs": s.pairs, "state": s.state, "why": s.why,
            "line": look_line(s, design),
            "cells": [{"workload": c.workload, "level": c.level, "n": c.n,
                       "change": _num(c.change), "bound": _num(c.boundary),
                       "statistic": _num(c.statistic), "critical": _num(c.bound),
                       "futility_statistic": _num(c.futility_statistic),
                       "futility_critical": _num(c.futility_bound), "outcome": c.outcome}
                      for c in s.cells]}
            for s in path.steps],
    }
