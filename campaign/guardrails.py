"""Guardrails: where each pre-registered guardrail is checked, and whether it holds."""

from __future__ import annotations

import math
from collections.abc import Sequence

from campaign.fmt import pct
from campaign.outcome import Cell, GuardrailCheck
from campaign.rule import EPS
from campaign.spec import Guardrail
from campaign.tidy import RunTable


def guardrail_targets(
    g: Guardrail, decisions: Sequence[tuple[str, str]], table: RunTable
) -> list[tuple[str, str]]:
    """Where a guardrail is checked: the decision cells when it names no place; otherwise
    every measured level matching its workload and level."""
    if g.workload == "*" and g.level == "*":
        return list(decisions)
    return sorted(
        {
            (w, lvl)
            for (w, lvl, m) in table.cells
            if m == g.metric
            and (g.workload in ("*", w))
            and (g.level in ("*", lvl))
        }
    )


def check_guardrail(g: Guardrail, cell: Cell | None, where: tuple[str, str]) -> GuardrailCheck:
    """Relative: the candidate's value may exceed (or, higher-is-better, fall below) the
    control's by at most `max_worsening` of it; absolute: by at most that difference. The
    point estimate is checked; a guardrail that cannot be checked counts as broken."""
    w, lvl = where
    label = f"guardrail {g.metric} at {w} {lvl}"
    allowed = f"{g.max_worsening:+.4g}" if g.absolute else pct(g.max_worsening)
    if cell is None or cell.stats is None:
        why = "not measured" if cell is None else "no complete pair"
        return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, None, True,
                              f"{label} cannot be checked ({why}): counts as broken")
    p = cell.stats
    if p.kind == "absolute" or g.absolute:
        if p.kind == "absolute":
            worse = -p.mean
        else:
            sign = 1.0 if cell.direction == "higher" else -1.0
            worse = -sign * math.fsum(pg.candidate - pg.control for pg in cell.pairs) / p.n
        worse += 0.0  # no "-0"
        shown = f"{worse:+.4g}"
    else:
        ratio = math.exp(-p.mean) if cell.direction == "lower" else math.exp(p.mean)
        worse = ratio - 1 if cell.direction == "lower" else 1 - ratio
        shown = pct(worse)
    broken = worse > g.max_worsening + EPS
    verb = "broken" if broken else "holds"
    if worse > EPS:
        change = f"{shown} worse"
    elif worse < -EPS:
        change = f"{shown.replace('-', '', 1)} better"
    else:
        change = "no worse"
    return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, worse, broken,
                          f"{label} {verb}: {change} (allowed: {allowed} worse)")
