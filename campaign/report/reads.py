"""Which rows a report reads, and what of them the plots and the load shapes need.

The newest run is judged in full; older runs of a history only where their decision
needs (`rows_needed`). A capacity at SLO is read from the rate levels' `slo_attainment`
(`verdict.capacity`): wherever it is needed, so are they. A run with an open-loop rate
sweep also shows the request latency p50 (the crossover's metric) and its capacity at SLO; one with
session passes, acceptance per session turn from its journal.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from campaign import catalog
from campaign.report import ratesweep, turns
from campaign.report.model import PreparedRule
from campaign.results.store import RunDir
from campaign.verdict import capacity
from campaign.verdict import outcome as oc
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td

PLOTTED = frozenset({"output_token_throughput", "acceptance_rate", "tokens_per_decode_step",
                     "itl_p50", *ratesweep.PLOTTED,
                     *(f"acceptance_pos{i}" for i in range(catalog.MAX_POSITIONS))})
"""Metrics the plots read from the newest run's rows, whether or not they are shown."""


SLO_SHOWN = ("slo_attainment", "ttft_slo_attainment", "itl_slo_attainment", "goodput")
"""Described beside `verdict.DESCRIPTIVE_METRICS` when the run registered an SLO (those
of them its passes measured)."""

RATE_SHOWN = (ratesweep.CROSSOVER_METRIC, capacity.METRIC)
"""Described beside them when the run swept offered rates (the crossover's metric and
the capacity at SLO)."""


def has_rate_sweep(rows: pd.DataFrame) -> bool:
    return bool((rows["workload"] == capacity.WORKLOAD).any())


def slo_targets(runs: Sequence[RunDir], prepared: Sequence[PreparedRule]
                ) -> dict[str, float]:
    """run → the share of requests its capacity at SLO reads a rate level against."""
    return {run.run_id: capacity.slo_target(prep.rule_dict)
            for run, prep in zip(runs, prepared, strict=True)}


def rows_needed(
    rows: pd.DataFrame,
    runs: Sequence[RunDir],
    prepared: Sequence[PreparedRule],
    newest: int,
    shown: set[str],
) -> pd.DataFrame:
    """The tidy rows the verdicts read: all shown metrics of the newest run; of older runs
    only the decision and guardrail places (vectorised, one mask per distinct rule)."""
    if capacity.METRIC in shown:
        shown = shown | {capacity.SHARE}
    if len(runs) == 1:
        return rows[rows["metric"].isin(shown | set(td.TOKEN_METRICS))]
    wanted = shown | set(td.TOKEN_METRICS)
    for prep in prepared:
        rule = prep.rule
        wanted |= {rule.metric, *(g.metric for g in rule.prereg.guardrails), capacity.SHARE}
    rows = rows[rows["metric"].isin(wanted)]  # cheap hash test first, string compares after
    run_col, metric, workload, level = (rows[c] for c in ("run", "metric", "workload", "level"))
    keep = (run_col == runs[newest].run_id) & metric.isin(shown | set(td.TOKEN_METRICS))
    groups: dict[int, tuple[rl.Rule, list[str]]] = {}
    for i, (run, prep) in enumerate(zip(runs, prepared, strict=True)):
        if i != newest:
            groups.setdefault(id(prep.rule), (prep.rule, []))[1].append(run.run_id)
    for rule, ids in groups.values():
        in_group = run_col.isin(ids)
        places: set[tuple[str, str]] = {
            (d.workload, d.level) for d in rule.prereg.decision_cells}
        for g in rule.prereg.guardrails:
            if g.workload != "*" or g.level != "*":
                places.add((g.workload, g.level))
        places |= {(w, "*") for w, lvl in places if lvl == "all"}  # sizes of a whole sweep
        key_metrics = {rule.metric, *(g.metric for g in rule.prereg.guardrails),
                       *td.TOKEN_METRICS}
        if capacity.METRIC in key_metrics:  # read from the sweep's shares
            key_metrics.add(capacity.SHARE)
            places.add((capacity.WORKLOAD, "*"))
        at_place = pd.Series(False, index=rows.index)
        for w, lvl in places:
            m = pd.Series(True, index=rows.index) if w == "*" else workload == w
            if lvl != "*":
                m &= level == lvl
            at_place |= m
        keep |= in_group & metric.isin(key_metrics) & at_place
    return rows[keep]


def measurements(table: td.RunTable) -> dict[tuple[str, str, str], dict[int, dict[str, float]]]:
    """The plotted metrics' values: cell → pair → arm → value."""
    return {key: {p: {a: v.value for a, v in arms.items()} for p, arms in data.values.items()}
            for key, data in table.cells.items() if key[2] in PLOTTED}


def load_shapes(run: RunDir, table: td.RunTable, verdict: oc.RunVerdict,
                arms: Sequence[str], rule: rl.Rule, target: float
                ) -> tuple[ratesweep.RateSweep | None, turns.SessionTurns | None]:
    """The newest run's rate sweep and acceptance per session turn (None: it has none);
    the journal is read only when the run measured session passes."""
    sweep = ratesweep.rate_sweep(table, verdict, arms, target, rule.metric)
    sessions = None
    if "workload" in run.passes.columns and (run.passes["workload"] == "sessions").any():
        sessions = turns.session_turns(turns.from_journal(run.journal), arms)
    return sweep, sessions
