"""A sequential design followed by the runner: after each pair the design looks at, judge
the registered rule on what is measured (the report's own verdict, `verdict.judge_run`),
journal the look, say it, and stop the night when every candidate is decided.

A look reads the run directory as `spec-ab report` would (the registered rule, bands and
cells), so what the runner stops on is what the morning report shows. A look that cannot
be judged (a damaged file) is journaled with its problem and the night goes on: a look
never costs a measurement.

The sequential design is one concept at five stages; here it is followed by the runner. It
is also registered (`campaign.campaignfile.sequential`), judged
(`campaign.verdict.sequential`), planned (`campaign.plan.sequential`), reported
(`campaign.report.sequential`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from campaign.campaignfile import Campaign
from campaign.errors import ResultsError
from campaign.results import journal as jr
from campaign.results.store import RunStore, load_run
from campaign.run.runtime import Runtime
from campaign.verdict import capacity
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td
from campaign.verdict.judge import judge_run
from campaign.verdict.outcome import DataProblem, RunVerdict
from campaign.verdict.sequential import look_line


def due(campaign: Campaign, pair: int) -> bool:
    design = campaign.preregistration.sequential
    return design is not None and pair in design.schedule()


def decided_before(events: jr.Events) -> int | None:
    """The pair after which a journaled look stopped the night (None: not stopped)."""
    stops = [p for p, ev in jr.looks_of(events).items() if ev.get("stop")]
    return min(stops) if stops else None


def judge_now(store: RunStore) -> RunVerdict:
    """The run judged as its report would judge it now."""
    run = load_run(store.run_dir)
    reg = run.registration
    rule = rl.parse_rule(reg.rule, reg.drift_band, tuple(reg.guardrail_bands or ()))
    table = td.tidy_tables(run.passes, slo_target=capacity.slo_target(reg.rule)).get(
        run.run_id, td.RunTable(run=run.run_id))  # capacity at the registered SLO target
    levels = reg.levels
    return judge_run(table, rule, reg.arm_order,
                     levels=None if levels is None else levels.decision_levels(),
                     guard_cells=None if levels is None else levels.guardrail_cells(),
                     metrics=(), resume_command=f"spec-ab run --resume {store.run_dir}")


def take_look(campaign: Campaign, store: RunStore, rt: Runtime, pair: int) -> bool:
    """Look after `pair` if the design is due; True when every candidate is decided (the
    night stops)."""
    design = campaign.preregistration.sequential
    if design is None or not due(campaign, pair):
        return False
    try:
        verdict = judge_now(store)
    except (ResultsError, DataProblem, OSError) as exc:
        store.journal("look", pair=pair, stop=False, problem=str(exc))
        rt.progress("look", pair=pair, lines=[f"look after pair {pair}: not judged ({exc}); "
                                                "going on"], stop=False)
        return False
    paths = {cv.arm: cv.sequential for cv in verdict.candidates}
    stop = all(p is not None and p.decided for p in paths.values())
    lines, per_arm = [], {}
    for arm, path in paths.items():
        if path is None or not path.steps:
            continue
        step = path.steps[-1]
        many = f"{arm}: " if len(paths) > 1 else ""
        lines.append(many + look_line(step, design))
        per_arm[arm] = _step_doc(path.state, step)
    store.journal("look", pair=pair, look=max((len(p.steps) for p in paths.values()
                                               if p is not None), default=0),
                  stop=stop, candidates=per_arm)
    rt.progress("look", pair=pair, lines=lines, stop=stop)
    return stop


def _step_doc(state: str, step: Any) -> dict[str, Any]:
    def finite(v: Any) -> Any:  # JSON has no infinity: a bound never crossed is null
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {"state": state, "why": step.why, "pairs": step.pairs,
            "cells": [{k: finite(v) for k, v in dataclasses.asdict(c).items()}
                      for c in step.cells]}
