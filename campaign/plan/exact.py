"""Exactness: simulated campaigns re-judged by `verdict.judge_run` and
`guardrails.check_guardrail` themselves; any disagreement with the arrays is a bug.
A sharded campaign's simulated lanes are re-judged as `spec-ab report` pools them: one
`RunTable` of every lane's pairs, numbered in start order, each pair's lane and its lane's
own slots, under the registered rule with pairs × lanes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from campaign.catalog import FIDELITY_METRICS
from campaign.plan.guards import BROKEN, HOLDS, UNCLEAR, GuardDraws
from campaign.plan.kernel import (
    EXACT_SAMPLE,
    RuleSpec,
)
from campaign.plan.simulate import (
    Draws,
    pooled_lane_of,
)
from campaign.verdict import judge as vd
from campaign.verdict import tidy as td
from campaign.verdict.outcome import RunVerdict

# --------------------------------------------------------------------------- exactness


def exact_judge(spec: RuleSpec, ctrl: np.ndarray, cand: np.ndarray,
                ctrl_ok: np.ndarray | None = None, cand_ok: np.ndarray | None = None,
                slots: np.ndarray | None = None,
                lanes: Sequence[str] | None = None,
                guard: tuple[GuardDraws, int] | None = None) -> RunVerdict:
    """One simulated campaign judged by `verdict.judge_run` itself: ctrl[pair, cell] and
    cand[pair, cell, candidate] on the better-signed log scale; invalid passes are recorded
    as such; slots[arm, pair] are the arms' slot indices. With `lanes` (each pair's lane)
    the table is a pooled one (`RunTable.lanes`): slots are then each lane's own, and the
    rule's `pairs` should count every lane's (`RuleSpec.pooled`). With `guard` (the draws
    and the simulated campaign's index) the run carries every registered guardrail's cells
    (`_guard_cells`) and is judged under the rule with its guardrails."""
    rule = spec.rule
    sign = 1.0 if rule.direction == "higher" else -1.0
    n, _, k = cand.shape
    arms = spec.arms[:k + 1]
    table = td.RunTable(run="plan")
    table.pairs = list(range(1, n + 1))
    if slots is not None:
        table.slots = {p + 1: {a: int(slots[j, p]) for j, a in enumerate(arms)}
                       for p in range(n)}
    if lanes is not None:
        if len(lanes) != n:
            raise ValueError(f"{len(lanes)} lanes given for {n} pairs")
        table.lanes = {p + 1: lane for p, lane in enumerate(lanes)}
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
    if guard is None:
        return vd.judge_run(table, rule, list(arms), metrics=[rule.metric])
    metrics = _guard_cells(table, spec, arms, guard)
    return vd.judge_run(table, spec.guard_rule(), list(arms), metrics=[rule.metric, *metrics],
                        guard_cells=[list(p) for p in spec.guard_places])


def _guard_cells(table: td.RunTable, spec: RuleSpec, arms: Sequence[str],
                 guard: tuple[GuardDraws, int]) -> list[str]:
    """Every guardrail's cells in `table`, as a run records them: a relative guardrail's
    simulated values with their `log_se`, a failure share (`error_rate`) of 0 in every pass,
    the requests of each pass; a pass invalid in a decision cell is invalid for every metric
    of that cell. Returns the metrics added."""
    gd, i = guard
    by_index = {m.index: (j, m) for j, m in enumerate(gd.models)}
    requests = {w: m.noise.requests for m in gd.models for w in m.all_cells}
    invalid = {(w, lvl): table.cells[(w, lvl, spec.rule.metric)].invalid
               for w, lvl in spec.cells}
    added: list[str] = []
    others = spec.guard_others or tuple(() for _ in spec.guardrails)
    for gi, (g, places, more) in enumerate(zip(spec.guardrails, spec.guard_places, others,
                                              strict=True)):
        added.append(g.metric)
        for c, where in enumerate(places + more):
            data = td.CellData(*where, g.metric)
            for p in table.pairs:
                if gi in by_index:
                    j, m = by_index[gi]
                    logs = [float(gd.x[j][i, p - 1, c]),
                            *(float(v) for v in gd.y[j][i, p - 1, c])]
                    vals = [100.0 * math.exp(x) for x in logs]
                    se: float | None = m.noise.log_se
                else:  # a failure share of 0; a fidelity figure: every answer matches
                    vals = [1.0 if g.metric in FIDELITY_METRICS else 0.0] * len(arms)
                    se = None
                data.values[p] = {a: td.ArmValue(v, v, v, 1, log_se=se)
                                  for a, v in zip(arms, vals, strict=False)}
                bad = invalid.get(where, {}).get(p)
                if bad:
                    data.invalid[p] = dict(bad)
                    for a in bad:
                        data.values[p].pop(a, None)
            table.cells[(*where, g.metric)] = data
            req = table.cells.setdefault((*where, "requests_completed"),
                                         td.CellData(*where, "requests_completed"))
            n_req = requests.get(where, 100.0)
            for p in table.pairs:
                req.values[p] = {a: td.ArmValue(n_req, n_req, n_req, 1) for a in arms
                                 if a not in invalid.get(where, {}).get(p, {})}
    return added


def exact_adopts(d: np.ndarray, spec: RuleSpec) -> bool:
    """One simulated campaign d[pair, cell] (one candidate, control at 0, every pass valid)
    or d[pair, cell, candidate] judged by `verdict.judge_run`: does it adopt?"""
    cand = d if d.ndim == 3 else d[..., None]
    ctrl = np.zeros(cand.shape[:2])
    return bool(exact_judge(spec, ctrl, cand).decision == "adopt")


def _agree(v: RunVerdict, decided: np.ndarray, what: str, rule: str, where: str) -> None:
    """Raise (a bug) when `verdict.judge_run`'s decisions differ from the vectorised ones."""
    got = [cv.decision == "adopt" for cv in v.candidates]
    if got != [bool(x) for x in decided]:
        raise AssertionError(
            f"plan's vectorised {rule} disagrees with verdict.judge_run ({what}: {got} vs "
            f"{decided.tolist()}): a bug in {where}")


def _cross_check(spec: RuleSpec, draws: Draws, shift: float, decided: np.ndarray,
                 what: str) -> int:
    """Re-judge a sample of simulated campaigns through `verdict.judge_run`; raise on any
    disagreement. Returns the number checked."""
    sims = decided.shape[0]
    checked = 0
    for i in range(min(EXACT_SAMPLE, sims)):
        v = exact_judge(spec, draws.ctrl[i], draws.cand[i] + shift, draws.ctrl_ok[i],
                        draws.cand_ok[i], draws.slots,
                        guard=None if draws.guard is None else (draws.guard, i))
        _agree(v, decided[i], f"{what}, simulated campaign {i}", "rule", "campaign/plan/")
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


# --------------------------------------------------------------------------- pooled lanes


def lane_name(lane: int) -> str:
    return f"lane-{lane + 1}"


def pooled_campaign(lanes: Sequence[Draws], i: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                               list[str]]:
    """Simulated campaign `i` of every lane as `spec-ab report` pools its shards: (ctrl,
    cand, ctrl_ok, cand_ok, slots, lane of each pair) with the pairs in start order — the
    lanes start together, so a pair's start is its first slot in its own lane's schedule,
    ties going by lane — and each pair's slots its own lane's (they overlap across
    lanes)."""
    lane_of = pooled_lane_of(lanes)
    slots = np.concatenate([x.slots for x in lanes], axis=1)
    order = np.lexsort((lane_of, slots.min(axis=0)))

    def pool(arrays: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays, axis=0)[order]

    return (pool([x.ctrl[i] for x in lanes]), pool([x.cand[i] for x in lanes]),
            pool([x.ctrl_ok[i] for x in lanes]), pool([x.cand_ok[i] for x in lanes]),
            slots[:, order], [lane_name(int(j)) for j in lane_of[order]])


def _cross_check_lanes(spec: RuleSpec, lanes: Sequence[Draws], shift: float,
                       decided: np.ndarray, what: str) -> int:
    """Re-judge a sample of simulated pooled campaigns (decided[sim, candidate] by
    `lanes.decide_lanes`) through `verdict.judge_run` on the pooled table under the pooled
    rule (`RuleSpec.pooled`: the registered one with pairs × lanes); raise
    on any disagreement. Returns the number checked."""
    pooled = spec.pooled(len(lanes))
    checked = 0
    for i in range(min(EXACT_SAMPLE, decided.shape[0])):
        ctrl, cand, ctrl_ok, cand_ok, slots, names = pooled_campaign(lanes, i)
        v = exact_judge(pooled, ctrl, cand + shift, ctrl_ok, cand_ok, slots, names)
        _agree(v, decided[i], f"{what}, simulated campaign {i}", "pooled rule",
               "campaign/plan/lanes.py")
        checked += 1
    return checked


def _cross_check_guard(spec: RuleSpec, gd: GuardDraws, j: int, states: np.ndarray) -> int:
    """Re-judge a sample of simulated guardrail draws through `verdict.judge_run` (a
    campaign with every primary pair at no change, every guardrail in its cells) and
    compare model j's state at each cell with states[sim, cell]; raise on any
    disagreement. Returns the number checked."""
    m = gd.models[j]
    n = gd.x[j].shape[1]
    names = {HOLDS: "holds", UNCLEAR: "unclear", BROKEN: "broken"}
    one = spec.at(candidates=1)
    checked = 0
    for i in range(min(EXACT_SAMPLE, states.shape[0])):
        v = exact_judge(one, np.zeros((n, len(spec.cells))), np.zeros((n, len(spec.cells), 1)),
                        guard=(gd, i))
        got = {(c.workload, c.level): c.state for c in v.candidates[0].guardrails
               if c.metric == m.guardrail.metric}
        want = {where: names[int(states[i, c])] for c, where in enumerate(m.all_cells)}
        if got != want:
            raise AssertionError(
                f"plan's guardrail test disagrees with verdict.judge_run ({m.guardrail.metric},"
                f" {n} pairs, simulated campaign {i}: {got} vs {want}): a bug in "
                "campaign/plan/guards.py")
        checked += 1
    return checked
