"""Guardrails: where each pre-registered guardrail is checked, and whether it holds.

A guardrail (say p99 TTFT may not get worse by more than 5%) is checked at every measured
cell of its metric, unless it names a workload or level. It holds only when

- the cell's change (geometric mean over pairs) is within the limit, and
- no pair violates it clearly: no pair is worse by more than the limit plus the drift
  band (for absolute metrics such as the error rate: by more than the limit).

A mean alone hides a pair at +30% behind one at −20%. A failed pass of the candidate still
counts on failure metrics (its measured error rate is a pair like any other). A guardrail
that cannot be checked anywhere counts as broken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from campaign.campaignfile import Guardrail
from campaign.fmt import pct
from campaign.verdict.outcome import Cell, GuardrailCheck
from campaign.verdict.rule import EPS, FAILURE_METRICS
from campaign.verdict.tidy import RunTable, cell_sort_key


def guardrail_targets(
    g: Guardrail, table: RunTable, order: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """Where a guardrail is checked: every measured level of its metric that matches its
    workload and level (`*` matches all)."""
    return sorted(
        {
            (w, lvl)
            for (w, lvl, m) in table.cells
            if m == g.metric and g.workload in ("*", w) and g.level in ("*", lvl)
        },
        key=lambda k: cell_sort_key((*k, ""), order),
    )


def _worsening(control: float, candidate: float, higher_is_better: bool,
               absolute: bool) -> float:
    """How much worse the candidate is (positive = worse): a fraction of the control, or a
    difference."""
    if absolute or control == 0:
        diff = candidate - control
        return (-diff if higher_is_better else diff) + 0.0
    ratio = candidate / control
    return (1 - ratio if higher_is_better else ratio - 1) + 0.0


def check_guardrail(
    g: Guardrail, cell: Cell | None, where: tuple[str, str], band: float,
    failed: Mapping[int, tuple[float, float]] | None = None,
) -> GuardrailCheck:
    """Check one guardrail at one cell (see the module docstring). `failed` holds, for a
    failure metric, pair → (control, candidate) of pairs whose candidate pass failed."""
    w, lvl = where
    label = f"guardrail {g.metric} at {w} {lvl}"
    allowed = f"{g.max_worsening:+.4g}" if g.absolute else pct(g.max_worsening)
    extra = dict(failed or {}) if g.metric in FAILURE_METRICS else {}
    pairs = [] if cell is None else [(pg.control, pg.candidate) for pg in cell.pairs]
    pairs += list(extra.values())
    if not pairs:
        why = "not measured" if cell is None else "no complete pair"
        return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, None, True,
                              f"{label} cannot be checked ({why}): counts as broken")
    higher = (cell.direction if cell is not None else "lower") == "higher"
    absolute = g.absolute or (cell is not None and cell.kind == "absolute")
    if not absolute and any(x <= 0 or y <= 0 for x, y in pairs):
        absolute = True  # a measured 0 (e.g. a one-burst stream's ITL): compare differences
    per_pair = [_worsening(x, y, higher, absolute) for x, y in pairs]
    if absolute:
        worse = math.fsum(per_pair) / len(per_pair) + 0.0
        limit = g.max_worsening
        if not g.absolute:  # a relative limit on a cell compared by differences
            ctrl = math.fsum(x for x, _ in pairs) / len(pairs)
            limit = g.max_worsening * ctrl
        clear = limit
    else:
        logs = [math.log(y / x) for x, y in pairs]
        ratio = math.exp(math.fsum(logs) / len(logs))
        worse = (1 - ratio if higher else ratio - 1) + 0.0
        limit = g.max_worsening
        clear = limit + band
    shown = (lambda v: f"{v:+.4g}") if absolute else pct
    violators = [(i, v) for i, v in enumerate(per_pair) if v > clear + EPS]
    broken = worse > limit + EPS or bool(violators)
    if worse > EPS:
        change = f"{shown(worse)} worse"
    elif worse < -EPS:
        change = f"{shown(-worse).lstrip('+')} better"
    else:
        change = "no worse"
    detail = f"(allowed: {allowed} worse"
    if not absolute:
        detail += f"; no pair beyond {pct(clear)}"
    detail += ")"
    if violators:
        detail += "; pairs beyond it: " + ", ".join(shown(v) for _, v in violators)
    if extra:
        detail += f"; {len(extra)} failed candidate pass(es) counted"
    verb = "broken" if broken else "holds"
    return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, worse, broken,
                          f"{label} {verb}: {change} {detail}", tuple(per_pair))
