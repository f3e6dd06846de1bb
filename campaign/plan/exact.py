"""Exactness: simulated campaigns re-judged by `verdict.judge_run` and
`guardrails.check_guardrail` themselves; any disagreement with the arrays is a bug.
"""

from __future__ import annotations

import math

import numpy as np

from campaign import tidy as td
from campaign import verdict as vd
from campaign.outcome import RunVerdict
from campaign.plan.kernel import (
    EXACT_SAMPLE,
    RuleSpec,
)
from campaign.plan.simulate import (
    Draws,
)

# --------------------------------------------------------------------------- exactness


def exact_judge(spec: RuleSpec, ctrl: np.ndarray, cand: np.ndarray,
                ctrl_ok: np.ndarray | None = None, cand_ok: np.ndarray | None = None,
                slots: np.ndarray | None = None) -> RunVerdict:
    """One simulated campaign judged by `verdict.judge_run` itself: ctrl[pair, cell] and
    cand[pair, cell, candidate] on the better-signed log scale; invalid passes are recorded
    as such; slots[arm, pair] are the arms' slot indices."""
    rule = spec.rule
    sign = 1.0 if rule.direction == "higher" else -1.0
    n, _, k = cand.shape
    arms = spec.arms[:k + 1]
    table = td.RunTable(run="plan")
    table.pairs = list(range(1, n + 1))
    if slots is not None:
        table.slots = {p + 1: {a: int(slots[j, p]) for j, a in enumerate(arms)}
                       for p in range(n)}
    for c, (w, lvl) in enumerate(spec.cells):
        data = td.CellData(w, lvl, rule.metric)
        for i in range(n):
            vals: dict[str, td.ArmValue] = {}
            bad: dict[str, str] = {}
            for j, a in enumerate(arms):
                g = float(ctrl[i, c]) if j == 0 else float(cand[i, c, j - 1])
                ok = (ctrl_ok is None or bool(ctrl_ok[i, c])) if j == 0 else \
                    (cand_ok is None or bool(cand_ok[i, c, j - 1]))
                if ok:
                    v = 1000.0 * math.exp(sign * g)
                    vals[a] = td.ArmValue(v, v, v, 1)
                else:
                    bad[a] = "invalid (simulated)"
            data.values[i + 1] = vals
            if bad:
                data.invalid[i + 1] = bad
        table.cells[(w, lvl, rule.metric)] = data
    return vd.judge_run(table, rule, list(arms), metrics=[rule.metric])


def exact_adopts(d: np.ndarray, spec: RuleSpec) -> bool:
    """One simulated campaign d[pair, cell] (one candidate, control at 0, every pass valid)
    or d[pair, cell, candidate] judged by `verdict.judge_run`: does it adopt?"""
    cand = d if d.ndim == 3 else d[..., None]
    ctrl = np.zeros(cand.shape[:2])
    return bool(exact_judge(spec, ctrl, cand).decision == "adopt")


def _cross_check(spec: RuleSpec, draws: Draws, shift: float, decided: np.ndarray,
                 what: str) -> int:
    """Re-judge a sample of simulated campaigns through `verdict.judge_run`; raise on any
    disagreement. Returns the number checked."""
    sims = decided.shape[0]
    checked = 0
    for i in range(min(EXACT_SAMPLE, sims)):
        v = exact_judge(spec, draws.ctrl[i], draws.cand[i] + shift, draws.ctrl_ok[i],
                        draws.cand_ok[i], draws.slots)
        got = [cv.decision == "adopt" for cv in v.candidates]
        if got != [bool(x) for x in decided[i]]:
            raise AssertionError(
                f"plan's vectorised rule disagrees with verdict.judge_run ({what}, "
                f"simulated campaign {i}: {got} vs {decided[i].tolist()}): a bug in "
                "campaign/plan.py")
        checked += 1
    return checked


def _cross_check_flags(spec: RuleSpec, draws: Draws, hv: np.ndarray, wd: np.ndarray) -> int:
    checked = 0
    for i in range(min(EXACT_SAMPLE, hv.size)):
        v = exact_judge(spec, draws.ctrl[i], draws.cand[i], slots=draws.slots)
        flags = {f for c in v.candidates[0].cells if c.decision_cell for f in c.flags}
        if ("high-variance" in flags, "window-drift" in flags) != (bool(hv[i]), bool(wd[i])):
            raise AssertionError(
                f"plan's flags disagree with verdict.judge_run ({spec.pairs} pairs, simulated "
                f"campaign {i}: {sorted(flags)}): a bug in campaign/plan.py")
        checked += 1
    return checked
