"""The JSON report: the machine contract of a verdict (nightly CI, dashboards).

`schema_version` (REPORT_SCHEMA_VERSION) changes when a key changes meaning or disappears;
new keys may appear in any version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from campaign import catalog
from campaign.report.model import REPORT_SCHEMA_VERSION, Report, RunReport
from campaign.report.sequential import sequential_dict
from campaign.verdict.judge import lane_changes
from campaign.verdict.outcome import Cell, GuardrailCheck


def _num(x: float | None) -> float | None:
    """9 significant digits: exact enough for any use, stable across libm versions."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return float(f"{x:.9g}")


def cell_dict(c: Cell, lanes: Mapping[int, str] | None = None) -> dict[str, Any]:
    """One cell; `lanes` (pair → lane of a pooled run) adds each pair's `lane`."""
    s = c.stats
    return {
        "workload": c.workload,
        "level": c.level,
        "metric": c.metric,
        "arm": c.arm,
        "unit": catalog.METRICS[c.metric].unit if c.metric in catalog.METRICS else "",
        "direction": c.direction,
        "kind": c.kind,
        "decision_cell": c.decision_cell,
        "n": 0 if s is None else s.n,
        "control": _num(c.control),
        "candidate": _num(c.candidate),
        "change": _num(c.change),
        "better": c.better,
        "change_ci": None if c.change_ci is None else [_num(v) for v in c.change_ci],
        "gain": _num(c.gain),
        "ci": None if s is None or s.ci is None else [_num(s.ci[0]), _num(s.ci[1])],
        "ci_note": (None if s is None or s.ci is not None
                    else "one pair: no confidence interval"),
        "confidence": None if s is None else s.confidence,
        "pairs": [{"pair": p.pair, "control": _num(p.control), "candidate": _num(p.candidate),
                   "change": _num(p.change), "gain": _num(p.gain),
                   **({"lane": lanes.get(p.pair)} if lanes else {})} for p in c.pairs],
        "left_out": [{"pair": lo.pair, "arm": lo.arm, "reason": lo.reason} for lo in c.left_out],
        "verdict": c.verdict,
        "flags": list(c.flags),
        "reasons": list(c.reasons),
        "control_trend": _num(c.control_trend),
    }


def run_dict(run: RunReport) -> dict[str, Any]:
    v = run.verdict
    return {
        "decision": v.decision,
        "reason": v.reason,
        "settle": v.settle or None,
        "adopt_arm": v.adopt_arm,
        "reasons": list(v.reasons),
        "notes": [*run.notes, *v.notes],
        "exploratory": run.exploratory,
        **({"running": run.running} if run.running else {}),
        **({"never_ready_arms": [{"arm": n.arm, "pair": n.pair, "status": n.status,
                                  "error": n.error or None} for n in run.never_ready]}
           if run.never_ready else {}),
        "rule": {
            **run.rule_dict,
            "drift_band_used": _num(run.rule.band),
            "sha256": run.rule_sha256,
            "registered_sha256": run.registered_sha256,
            "pre_registered": not run.exploratory,
            "overrides": dict(run.overrides),
            "edited_after_registration": list(run.edited_after_registration),
            "text": run.rule.describe(),
            # only when edited, so reports of intact runs keep their exact bytes
            **({"registration_intact": False,
                "registration_edited": list(run.registration_edits)}
               if run.registration_edits else {}),
        },
        "integrity": {
            "journal_sha256": run.journal_sha256,
            "chained": run.journal_chained,
            "copies_agree": not run.disagreements,
            "disagreements": list(run.disagreements),
        },
        "metrics_shown": (None if run.shown_metrics is None
                          else sorted(run.shown_metrics)),
        "cells": [cell_dict(c, run.lane_of) for cv in v.candidates for c in cv.cells
                  if run.shows(c)],
        "lanes": lanes_dict(run),
        **{f"guardrails_{k}": sum(g.state == s for cv in v.candidates for g in cv.guardrails)
           for k, s in (("held", "holds"), ("broken", "broken"), ("unclear", "unclear"),
                        ("missing", "missing"))},
        "guardrails_stopping": sum(g.stops for cv in v.candidates for g in cv.guardrails),
        "guardrails": [guardrail_dict(cv.arm, g) for cv in v.candidates
                       for g in cv.guardrails],
        "candidates": [
            {"arm": cv.arm, "decision": cv.decision, "reason": cv.reason,
             "settle": cv.settle or None, "reasons": list(cv.reasons),
             "window_stable": cv.window_stable, "mean_gain": _num(cv.score),
             **({"sequential": sequential_dict(cv.sequential, run.rule)}
                if cv.sequential is not None else {})}
            for cv in v.candidates
        ],
        "ranking": [
            {"rank": r.rank, "arm": r.arm, "decision": r.decision, "mean_gain": _num(r.gain),
             "worst_gain": _num(r.worst)} for r in v.ranking
        ],
        "best_by_level": [
            {"workload": b.workload, "level": b.level, "arm": b.arm, "change": _num(b.change)}
            for b in v.best_by_level
        ],
        "run": {
            "run_id": run.run_id,
            "run_dir": str(run.run_dir),
            "campaign": run.campaign,
            "lane": run.lane,
            "registered_at": run.registered_at,
            "arms": list(run.arms),
            "complete": run.complete,
            "incomplete": run.incomplete,
            "pairs_measured": v.pairs_measured,
            "pairs_planned": v.pairs_planned,
            "pairs_left_out": v.left_out,
            "window_stable": v.window_stable,
        },
        "aa": aa_dict(run),
        **({"rate_sweep": rate_sweep_dict(run)} if run.rate_sweep is not None else {}),
        **({"session_turns": turns_dict(run)} if run.session_turns is not None else {}),
    }


def rate_sweep_dict(run: RunReport) -> dict[str, Any] | None:
    """Each arm's capacity at SLO (per pair too) and each candidate's crossover."""
    s = run.rate_sweep
    if s is None:
        return None
    return {
        "target": _num(s.target),
        "levels": list(s.levels),
        "capacity": [{"arm": c.arm, "value": _num(c.value), "bound": c.bound,
                      "censored_pairs": c.censored, "text": c.text,
                      "pairs": [{"pair": p, "value": _num(v), "bound": b}
                                for p, v, b in c.pairs],
                      "missing": list(c.missing)} for c in s.capacities],
        "crossover": [{"arm": x.arm, "metric": x.metric, "line": x.line,
                       "between": None if x.between is None else [_num(v) for v in x.between],
                       "levels": [{"level": st.level, "rate": _num(st.rate),
                                   "verdict": st.verdict, "change": st.change}
                                  for st in x.steps]} for x in s.crossovers],
    }


def turns_dict(run: RunReport) -> dict[str, Any] | None:
    """Arm → session class → its turns' figures (acceptance per session turn)."""
    t = run.session_turns
    if t is None:
        return None
    out: dict[str, Any] = {}
    for arm, rows in t.arms:
        by_class = out.setdefault(arm, {})
        for r in rows:
            by_class.setdefault(r.klass, []).append(
                {"turn": r.turn, "requests": r.requests, "acceptance": _num(r.acceptance),
                 "tokens_per_step": _num(r.tokens_per_step), "ttft_p50": _num(r.ttft_p50)})
    return out


def guardrail_dict(arm: str, g: GuardrailCheck) -> dict[str, Any]:
    """One guardrail check of one candidate (`role`: at a registered guardrail's cell, or a
    deterioration check at another measured cell of its metric)."""
    return {
        "arm": arm, "metric": g.metric, "workload": g.workload, "level": g.level,
        "role": g.role,
        "max_worsening": g.max_worsening, "absolute": g.absolute, "direction": g.direction,
        "state": g.state, "stops": g.stops, "change": _num(g.change),
        "ci": None if g.ci is None else [_num(g.ci[0]), _num(g.ci[1])],
        "ci_level": _num(g.ci_level), "worsening": _num(g.worsening),
        "pair_worsening": [_num(w) for w in g.pair_worsening],
        "evidence": g.evidence, "resolve": g.resolve or None,
        "broken": g.broken, "reason": g.reason,
    }


def aa_dict(run: RunReport) -> dict[str, Any] | None:
    """An A/A run's recommended bands: the primary's and one per guardrail metric."""
    if run.aa is None:
        return None
    return {
        "recommended_drift_band": run.aa.band, "n": run.aa.n, "rms": _num(run.aa.rms),
        "largest": _num(run.aa.largest), "text": run.aa.text,
        "guardrails": [
            {"metric": g.metric, "recommended_drift_band": g.band, "n": g.n,
             "rms": _num(g.rms), "explained": _num(g.explained), "boot": _num(g.boot),
             "cells": list(g.cells), "text": g.text} for g in run.aa.guardrails],
    }


def lanes_dict(run: RunReport) -> dict[str, Any] | None:
    """A pooled run's lanes: every lane the campaign lists, the shards given (with their
    pooled pair numbers), the lanes with no shard, and each decision cell lane by lane."""
    pooled = run.pooled
    if pooled is None:
        return None
    return {
        "lanes": list(pooled.lanes),
        "shards": [{"lane": s.lane, "run_id": s.run_id, "run_dir": str(s.run_dir),
                    "complete": s.complete, "pairs": list(s.pairs),
                    "shard_pairs": list(s.shard_pairs)} for s in pooled.shards],
        "missing": list(pooled.missing_lanes),
        "decision_cells": [
            {"arm": c.arm, "workload": c.workload, "level": c.level, "metric": c.metric,
             "agree": "lanes-disagree" not in c.flags,
             "by_lane": [{"lane": lane, "n": n, "change": _num(ch)}
                         for lane, n, ch in lane_changes(c, pooled.lane_of)]}
            for c in run.decision_cells()
        ],
    }


def to_dict(report: Report) -> dict[str, Any]:
    """The JSON report: the newest run's `decision`, `rule` (with hashes and any
    overrides), `cells`, `guardrails`, `candidates`, `ranking`, `run` and `aa` at the top
    level, beside the report schema and the results schema that run was written with;
    with several runs also `history`, one summary per run (oldest first) with its
    decision, decision cells and broken guardrails."""
    latest = run_dict(report.latest)
    never = report.latest.never_ready
    out: dict[str, Any] = {
        # first: a run whose arm never booted says so in the JSON's first lines (only
        # then, so the reports of other runs keep their exact bytes)
        **({"never_ready": "; ".join(n.line for n in never)} if never else {}),
        "decision": latest["decision"],
        "reason": latest["reason"],
        "settle": latest["settle"],
        "schema_version": REPORT_SCHEMA_VERSION,
        "results_schema_version": report.latest.results_schema_version,
        "tool": "spec-ab",
        "tool_version": report.tool_version,
        "run_ids": [r.run_id for r in report.runs],
        **latest,
        "exploratory": report.exploratory,
    }
    if len(report.runs) > 1:
        # older runs as summaries: a 1,000-night history stays a readable size
        out["history"] = [history_dict(r) for r in report.runs]
    return out


def history_dict(run: RunReport) -> dict[str, Any]:
    v = run.verdict
    return {
        "run_id": run.run_id,
        "run_dir": str(run.run_dir),
        "registered_at": run.registered_at,
        "decision": v.decision,
        "reason": v.reason,
        "adopt_arm": v.adopt_arm,
        "exploratory": run.exploratory,
        "incomplete": run.incomplete,
        "window_stable": v.window_stable,
        "rule_sha256": run.rule_sha256,
        "reasons": list(v.reasons),
        "notes": [*run.notes, *v.notes],
        "decision_cells": [
            {"arm": c.arm, "workload": c.workload, "level": c.level, "metric": c.metric,
             "gain": _num(c.gain), "ci": None if c.ci is None else [_num(c.ci[0]),
                                                                    _num(c.ci[1])],
             "pairs": [_num(p.gain) for p in c.pairs], "verdict": c.verdict,
             "flags": list(c.flags)}
            for c in run.decision_cells()
        ],
        "guardrails_broken": [g.reason for cv in v.candidates for g in cv.guardrails
                              if g.broken],
        "guardrails_stopping": [g.reason for cv in v.candidates for g in cv.guardrails
                                if g.stops],
    }


def _no_negative_zero(x: Any) -> Any:
    """-0.0 (a change rounded to nothing) written as 0.0."""
    if isinstance(x, float):
        return 0.0 if x == 0 else x
    if isinstance(x, dict):
        return {k: _no_negative_zero(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_no_negative_zero(v) for v in x]
    return x


def render_json(report: Report) -> str:
    """The JSON text; no `-0` anywhere (a negative zero is written 0.0)."""
    return json.dumps(_no_negative_zero(to_dict(report)), indent=2,
                      ensure_ascii=False) + "\n"


render = render_json
