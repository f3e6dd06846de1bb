"""`spec-ab plan`'s outputs: a rich table for the terminal and the JSON document.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from campaign import fmt as fm
from campaign.plan.campaign import (
    GuardrailRow,
    PlanResult,
)
from campaign.plan.guards import GuardModel
from campaign.plan.kernel import (
    FALSE_AT,
    FALSE_MAX,
    GUARDRAIL_VIOLATION,
    HV_POWER_AT,
    POWER_AT,
    POWER_MIN,
    WD_POWER_AT,
    Rate,
)
from campaign.plan.sequential import EXACT_LOOKS, SeqGuardRow, SeqRow
from campaign.verdict import rule as rl

# --------------------------------------------------------------------------- rendering


def _rate(r: Rate | None) -> str:
    if r is None:
        return "—"
    return f"{fm.abs_pct(r.p)} [{fm.abs_pct(r.lo)}–{fm.abs_pct(r.hi)}]"


def _change(r: PlanResult, e: float, digits: int = 1) -> str:
    """An effect as the change of the metric (a reduction shows as −)."""
    return fm.pct(e if r.direction == "higher" else -e, digits)


def plan_json(r: PlanResult) -> dict[str, Any]:
    """The plan as JSON-ready data (keys: see the module docstring)."""
    nm = r.noise
    names = [n for n, _ in r.effects]
    return {
        "campaign": r.campaign,
        "decision_cells": list(r.cells),
        "candidates": r.candidates,
        "order": r.order,
        "registered_pairs": r.pairs,
        "pooled_lanes": r.pooled_lanes,
        "rule": {"registered": r.registered_rule, "used": r.rule,
                 "exploratory": r.exploratory, "text": r.rule_text, "margin": r.margin,
                 "band": r.band, "confidence": r.confidence, "direction": r.direction},
        "noise": {"boot_sd": nm.boot_sd, "pass_sd": nm.pass_sd,
                  "window_drift": nm.window_drift, "pair_sd": nm.pair_sd,
                  "source": nm.source},
        "invalid_rate": r.invalid_rate,
        "sims": r.sims,
        "seed": r.seed,
        "exact_checked": r.exact_checked,
        "effects": [{"name": n, "effect": e} for n, e in r.effects],
        "table": [{
            "pairs": row.pairs,
            "adopt": {n: rate.as_dict() for n, rate in zip(names, row.adopt, strict=True)},
            "lost_to_invalid": row.lost_to_invalid.as_dict(),
            "meets": row.meets,
            "false_adopt_half_margin": {"single": row.false_single.as_dict(),
                                        "campaign": row.false_campaign.as_dict(),
                                        "candidates": r.multi_candidates},
            "guardrails": [_guard_json(g) for g in row.guardrails],
            "adopt_rule_only": {n: rate.as_dict() for n, rate in
                                zip(names, row.adopt_rule_only, strict=True)},
            "flags": row.flags.as_dict(),
        } for row in r.rows],
        "recommendation": {
            "pairs": r.recommended, "pairs_per_lane": (
                None if r.recommended is None else -(-r.recommended // r.pooled_lanes)),
            "power_at": POWER_AT * r.margin, "power_min": POWER_MIN,
            "false_at": FALSE_AT * r.margin, "false_max": FALSE_MAX,
            "wall_s": None if r.recommended is None else r.wall_per_pair * r.recommended,
            "alternatives": [{"change": a.change, "pairs": a.pairs} for a in r.alternatives],
        },
        "orders": [{"order": o.order, "pairs": o.pairs, "bias": o.bias,
                    "null": o.null.as_dict(), "at_effect": o.at_effect.as_dict()}
                   for o in r.orders],
        "order_drift": r.order_drift,
        "wall_s_per_pair": r.wall_per_pair,
        "lanes": [{"lanes": x.lanes, "pairs_total": x.pairs_total, "night_s": x.night_s,
                   "false_adopt_half_margin": x.false_adopt.as_dict(),
                   "power_at_1_5m": x.power.as_dict(), "campaign": x.campaign,
                   "sims": x.power.n, "exact_checked": x.exact_checked} for x in r.lanes],
        "lanes_unequal": None if r.unequal_lanes is None else {
            "second_lane_noise": r.unequal_lanes.noisier,
            "false_adopt_half_margin": r.unequal_lanes.false_adopt.as_dict(),
            "power_at_1_5m": r.unequal_lanes.power.as_dict(),
            "lanes_disagree_no_change": None if r.unequal_lanes.disagree is None
            else r.unequal_lanes.disagree.as_dict()},
        "notes": list(r.notes),
        **sequential_json(r),
    }


def sequential_json(r: PlanResult) -> dict[str, Any]:
    """`sequential` (one entry per true effect) and `sequential_design` for a sequential
    campaign; nothing for a fixed one."""
    sp = r.sequential
    if sp is None:
        return {}

    def row_json(row: SeqRow) -> dict[str, Any]:
        return {"adopt": row.adopt, "keep_default": row.keep_default,
                "inconclusive": row.inconclusive, "expected_pairs": row.expected_pairs,
                "p90_pairs": row.p90_pairs,
                "expected_night_s": row.expected_pairs * r.wall_per_pair}

    return {
        "sequential": [{
            "name": row.label, "effect": row.effect, **row_json(row),
            "guardrail_stops": row.guardrail_stops,
            "rule_only": row_json(row.rule_only or row),
            "fixed_adopt": None if math.isnan(row.fixed_adopt) else row.fixed_adopt,
        } for row in sp.rows],
        "sequential_design": {
            "max_pairs": sp.max_pairs, "pair_sd": float(sp.sigma), "sims": sp.sims,
            "fixed_pairs": sp.fixed_pairs, "recommended_max_pairs": sp.recommended_max_pairs,
            "recommended_max_pairs_rule_only": sp.recommended_rule_only,
            "guardrails_modelled": sp.guarded,
            "guardrails": [_seq_guard_json(g) for g in sp.guardrails],
            "judge_run_checked": sp.checked,
            "judge_run_checked_guardrails": sp.guard_checked,
            "judge_run_disagree": int(sp.disagree),
            "looks": sp.looks, "exact_boundaries": sp.exact,
            "power": sp.power, "alpha": sp.alpha,
        },
    }


def _seq_guard_json(g: SeqGuardRow) -> dict[str, Any]:
    m, nz = g.model, g.model.noise
    return {"metric": m.guardrail.metric, "limit": m.guardrail.max_worsening,
            "cells": [f"{w} {lvl}" for w, lvl in m.cells],
            "deterioration_cells": [f"{w} {lvl}" for w, lvl in m.others],
            "alpha_each": g.alpha_each, "alpha_shown": g.alpha_shown,
            "break_at_0": g.break_at_0.as_dict(), "stops_at_0": g.stops_at_0.as_dict(),
            "passes_at_2x": g.passes_at_2x.as_dict(),
            "noise": {"log_se": nz.log_se, "requests": nz.requests,
                      "inflation": nz.inflation, "boot_sd": nz.boot_sd,
                      "prior_extra": m.prior, "measured": nz.measured, "source": nz.source}}


def print_sequential(console: Console, r: PlanResult) -> None:
    """The registered sequential design's figures (with its guardrails when it has relative
    ones, the rule alone beside them) beside the fixed design that meets the same targets
    (the rule alone), then the verdict on the design and each guardrail in it."""
    sp = r.sequential
    if sp is None:
        return
    fixed = (f"the fixed design meeting the targets: {sp.fixed_pairs} pairs"
             if sp.fixed_pairs else "no fixed design up to 32 pairs meets the targets")
    rough = ", approximate" if not sp.exact else ""
    said = r.pairs_said or f"max_pairs {sp.max_pairs}"
    what = ("with its guardrails (" + ", ".join(g.model.guardrail.metric for g in sp.guardrails)
            + ", each on its own noise, at no true change; one decision cell, no invalid "
            "passes)" if sp.guarded else
            "the rule alone (one decision cell, no relative guardrail to model, no invalid "
            "passes)")
    t = Table(title=f"the registered design: sequential, {said}{rough} — {what}",
              caption=f"pair sd {sp.sigma:.1%}; {sp.sims} sequences per row; {fixed}",
              title_justify="left", caption_justify="left")
    fixed_col = (f"fixed {sp.fixed_pairs} pairs: P(adopt), rule alone" if sp.fixed_pairs
                 else "fixed: P(adopt), rule alone")
    cols = ["true effect", "P(adopt)", "P(keep-default)", "P(inconclusive)",
            "pairs: mean (p90)", "night"]
    if sp.guarded:
        cols += ["P(adopt), rule alone", "pairs, rule alone"]
    for col in (*cols, fixed_col):
        t.add_column(col, justify="right")
    for row in sp.rows:
        alone = row.rule_only
        t.add_row(f"{row.label} ({fm.pct(row.effect, 1)})", f"{row.adopt:.1%}",
                  f"{row.keep_default:.1%}", f"{row.inconclusive:.1%}",
                  f"{row.expected_pairs:.1f} ({row.p90_pairs})",
                  fm.clock(row.expected_pairs * r.wall_per_pair),
                  *(() if alone is None else (f"{alone.adopt:.1%}",
                                              f"{alone.expected_pairs:.1f}")),
                  "—" if math.isnan(row.fixed_adopt) else f"{row.fixed_adopt:.1%}")
    console.print(t)
    rows = {row.label: row for row in sp.rows}
    hi, lo = rows["1.5m"], rows["m/2"]
    meets = hi.adopt >= sp.power and lo.adopt <= sp.alpha
    which = "with its guardrails" if sp.guarded else "the rule alone"
    console.print(f"verdict on the registered design: it {'meets' if meets else 'misses'} "
                  f"the targets: P(adopt) {hi.adopt:.1%} at 1.5m "
                  f"({_change(r, POWER_AT * r.margin)}; target ≥ {sp.power:.0%}) and "
                  f"{lo.adopt:.1%} at m/2 ({_change(r, FALSE_AT * r.margin)}; target ≤ "
                  f"{sp.alpha:.0%}), {hi.expected_pairs:.1f} pairs on average at 1.5m "
                  f"({which})", markup=False)
    rec = sp.recommended_max_pairs
    alone_rec = (f"; the rule alone would need {sp.recommended_rule_only or 'more than 24'}"
                 if sp.guarded else "")
    checked = sp.checked + sp.guard_checked
    guarded_check = f" ({sp.guard_checked} with their guardrails)" if sp.guarded else ""
    console.print(f"recommended max_pairs: {rec if rec else 'none up to 24'} (the smallest "
                  f"with P(adopt) ≥ {sp.power:.0%} at 1.5m and ≤ {sp.alpha:.0%} at m/2, "
                  f"{which}; registered: {sp.max_pairs}{alone_rec}); {checked} sequences "
                  f"re-judged by verdict.judge_run{guarded_check}, {sp.disagree} disagree",
                  markup=False)
    for g in sp.guardrails:
        m = g.model
        console.print(f"in the design: guardrail {m.guardrail.metric} (at {_where(m)};"
                      f" shown within at {g.alpha_shown:.2%}, broken at {g.alpha_each:.3%} "
                      f"each: α split over the {sp.looks} looks; candidate truly "
                      f"{_change(r, POWER_AT * r.margin)}): broken with no change "
                      f"{_rate(g.break_at_0)}, stops adoption with no change (not shown "
                      f"within its limit by max_pairs, or shown beyond it) "
                      f"{_rate(g.stops_at_0)}; lets a candidate truly "
                      f"{fm.pct(GUARDRAIL_VIOLATION * m.guardrail.max_worsening, 0)} worse "
                      f"through {_rate(g.passes_at_2x)}; noise: {m.noise.source}",
                      markup=False)
    if not sp.exact:
        console.print(
            f"approximate: {sp.looks} looks are more than the {EXACT_LOOKS} planned with the "
            "judge's own boundaries (simulated anew at each look, minutes for this design): "
            "these figures use the boundaries of the whole schedule, simulated once; they "
            "differ from the judge's by their Monte Carlo error, large at the looks that "
            "spend almost no α, so some re-judged sequences stop at another look; only "
            f"sequences decided within {EXACT_LOOKS} looks are re-judged", markup=False)


def _guard_json(g: GuardrailRow) -> dict[str, Any]:
    m, nz = g.model, g.model.noise
    return {"metric": g.metric, "limit": g.limit,
            "hold_at_2x": g.hold_at_2x.as_dict(), "hold_at_0": g.hold_at_0.as_dict(),
            "break_at_0": g.break_at_0.as_dict(), "stops_at_0": g.stops_at_0.as_dict(),
            "passes_at_2x": g.passes_at_2x.as_dict(),
            "cells": [f"{w} {lvl}" for w, lvl in m.cells],
            "deterioration_cells": [f"{w} {lvl}" for w, lvl in m.others],
            "alpha_each": g.family_alpha, "unclear_stops": True,
            "noise": {"log_se": nz.log_se, "requests": nz.requests,
                      "inflation": nz.inflation, "boot_sd": nz.boot_sd, "band": m.band,
                      "prior_extra": m.prior,
                      "measured": nz.measured, "source": nz.source}}


def print_plan(console: Console, result: PlanResult, *, full: bool = False) -> None:
    """Render a plan: the campaign, its rule and noise, then the design the file registers
    (a sequential design's table, or a fixed design's row) and the verdict on it, its
    guardrails and the wall clock. `full` (`plan --all`) adds P(adopt) by pairs, the
    guardrails, flags and candidates by pairs, AB vs ABBA and the lanes."""
    r = result
    _print_header(console, r)
    if r.sequential is not None:
        print_sequential(console, r)
    else:
        console.print(_adopt_table(r, only=True))
        _print_verdict(console, r)
        _print_recommendation(console, r)
    if r.sequential is None or not r.sequential.guarded:
        _print_guardrails(console, r)
    lane_pairs = r.pairs // r.pooled_lanes
    per_lane = " per lane" if len(r.lane_names) > 1 else ""
    pairs = "" if r.estimate.min_pairs < lane_pairs else f" for {lane_pairs} pairs"
    each = fm.clock(r.estimate.total_s / lane_pairs)
    console.print(f"wall clock: about {r.estimate.length()}{pairs}{per_lane} "
                  f"({each} per pair; {r.estimate.assumptions})")
    if full:
        if r.sequential is not None:
            console.print(_adopt_table(r))
            _print_recommendation(console, r)
        else:
            console.print(_adopt_table(r))
        console.print(_checks_table(r))
        _print_registered(console, r)
        if r.orders:
            console.print(_orders_table(r))
        print_lanes(console, r)
    # the notes are of the fixed design's P(adopt), shown first only for a fixed design
    for note in r.notes if full or r.sequential is None else ():
        console.print(f"note: {note}")
    if not full:
        console.print("more: `spec-ab plan FILE --all` adds the tables by number of pairs "
                      "(P(adopt); guardrails, flags, candidates), AB vs ABBA and the lanes",
                      markup=False)


def _print_header(console: Console, r: PlanResult) -> None:
    """The campaign, its rule, its noise and the Monte Carlo's size."""
    nm = r.noise
    tag = " [bold red](exploratory: not the registered rule)[/]" if r.exploratory else ""
    design = (f"sequential design, {r.pairs_said}" if r.sequential is not None
              else f"{r.per_lane(r.pairs)} registered")
    console.print(f"[bold]plan[/] {r.campaign}: {design}; {r.candidates} candidate(s), "
                  f"order {r.order}, decision cells {', '.join(r.cells)}")
    console.print(f"rule: {r.rule_text}{tag}")
    console.print(f"noise: per-boot sd {fm.abs_pct(nm.boot_sd, 2)}, within-pass sd "
                  f"{fm.abs_pct(nm.pass_sd, 2)}, window drift {fm.pct(nm.window_drift, 2)} "
                  f"(one pair's log-ratio sd {fm.abs_pct(nm.pair_sd, 2)}) — {nm.source}; "
                  f"invalid passes {fm.abs_pct(r.invalid_rate)}")
    console.print(f"Monte Carlo: {r.sims} campaigns per cell of the table, seed {r.seed}; "
                  f"[95% Clopper–Pearson intervals]; {r.exact_checked} campaigns re-judged "
                  "by verdict.judge_run / check_guardrail, all agree")


def _adopt_table(r: PlanResult, *, only: bool = False) -> Table:
    """P(adopt) by pairs (rows) and true effect (columns), with the guardrails and invalid
    passes, and at 1.5m the rule alone; `only`: the registered row (and the recommended
    one), titled as the registered design."""
    what = (f"P(adopt) by true effect (m = margin {_change(r, r.margin)}; {r.candidates} "
            "candidate(s))")
    if only:
        title = (f"the registered design: {r.per_lane(r.pairs)}, with guardrails and invalid "
                 f"passes — {what}")
    else:
        fixed = " (a fixed number of pairs)" if r.sequential is not None else ""
        title = (f"P(adopt) by pairs and true effect{fixed}, with guardrails and invalid "
                 f"passes (m = margin {_change(r, r.margin)}; {r.candidates} candidate(s))")
    table = Table(title=title + (" — exploratory" if r.exploratory else ""),
                  title_justify="left")
    table.add_column("pairs", justify="right")
    for n, e in r.effects:
        table.add_column(f"{n} ({_change(r, e)})" if n != "0" else "0 (+0%)", justify="right")
    names = [n for n, _ in r.effects]
    alone = names.index("1.5m") if "1.5m" in names else None
    if alone is not None:
        table.add_column("1.5m, rule alone", justify="right")
    table.add_column("short of pairs", justify="right")
    table.add_column("✓ meets the targets", justify="right")
    keep = {r.pairs, r.recommended} if only else None
    for row in r.rows:
        if keep is not None and row.pairs not in keep:
            continue
        mark = "registered" if row.pairs == r.pairs else ""
        if row.pairs == r.recommended and row.pairs != r.pairs:
            mark = "recommended"
        if row.meets:
            mark = (mark + " ✓").strip()
        table.add_row(str(row.pairs), *(_rate(x) for x in row.adopt),
                      *(() if alone is None else (_rate(row.adopt_rule_only[alone]),)),
                      _rate(row.lost_to_invalid), mark)
    return table


def _print_verdict(console: Console, r: PlanResult) -> None:
    """The verdict on the registered fixed design: does it meet the targets."""
    reg = r.row(r.pairs)
    names = [n for n, _ in r.effects]
    hi, lo = reg.adopt[names.index("1.5m")], reg.adopt[names.index("m/2")]
    console.print(f"verdict on the registered design: {r.per_lane(r.pairs)} "
                  f"{'meet' if reg.meets else 'miss'} the targets: P(adopt) "
                  f"{fm.abs_pct(hi.p)} at 1.5m ({_change(r, POWER_AT * r.margin)}; target ≥ "
                  f"{POWER_MIN:.0%}) and {fm.abs_pct(lo.p)} at m/2 "
                  f"({_change(r, FALSE_AT * r.margin)}; target ≤ {FALSE_MAX:.0%}), with "
                  "guardrails and invalid passes", markup=False)


def _print_recommendation(console: Console, r: PlanResult) -> None:
    """The fewest pairs that meet the power and false-adopt bars, or what would."""
    power_txt = f"≥ {POWER_MIN:.0%} at 1.5m ({_change(r, POWER_AT * r.margin)})"
    false_txt = f"≤ {FALSE_MAX:.0%} at m/2 ({_change(r, FALSE_AT * r.margin)})"
    if r.recommended is not None:
        wall = fm.clock(r.wall_per_pair * r.recommended)
        rec = (f"{r.recommended} pair(s)" if r.pooled_lanes <= 1
               else r.per_lane(r.recommended))
        console.print(f"[bold]recommended: {rec}[/] — the fewest with "
                      f"P(adopt) {power_txt} and {false_txt} (about {wall})")
        return
    n_max = max(row.pairs for row in r.rows)
    console.print(f"[bold]recommended: none up to {n_max} pairs[/] has P(adopt) "
                  f"{power_txt} and {false_txt}; what would:")
    for a in r.alternatives:
        got = f"{a.pairs} pair(s)" if a.pairs is not None else "not enough either"
        console.print(f"  {a.change}: {got}")


def _checks_table(r: PlanResult) -> Table:
    """False adopts, guardrails and flags by pairs."""
    checks = Table(title="guardrails, flags and candidates by pairs", title_justify="left")
    checks.add_column("pairs", justify="right")
    checks.add_column("false adopt at m/2: 1 candidate", justify="right")
    checks.add_column(f"{r.multi_candidates} candidates", justify="right")
    for g in r.rows[0].guardrails:
        checks.add_column(f"{g.metric} stops at no change (limit {fm.pct(g.limit, 0)}: not "
                          "shown within, or broken)", justify="right")
        checks.add_column(f"{g.metric} lets through "
                          f"{fm.pct(GUARDRAIL_VIOLATION * g.limit, 0)} worse", justify="right")
    checks.add_column("flag false alarm (A/A)", justify="right")
    checks.add_column(f"high-variance power (sd ×{HV_POWER_AT:g})", justify="right")
    checks.add_column(f"window-drift power (drift {fm.pct(WD_POWER_AT * r.band, 0)})",
                      justify="right")
    for row in r.rows:
        checks.add_row(str(row.pairs), _rate(row.false_single), _rate(row.false_campaign),
                       *(x for g in row.guardrails
                         for x in (_rate(g.stops_at_0), _rate(g.passes_at_2x))),
                       _rate(row.flags.any_false), _rate(row.flags.high_variance_power),
                       _rate(row.flags.window_drift_power))
    return checks


def _print_registered(console: Console, r: PlanResult) -> None:
    """What the registered number of pairs does with more candidates and to the flags."""
    reg = r.row(r.pairs)
    console.print(f"with {r.pairs} pairs: campaign-level false adopt at m/2 with "
                  f"{r.multi_candidates} candidates {_rate(reg.false_campaign)} vs one "
                  f"candidate {_rate(reg.false_single)} (the bar's correction promises no "
                  "higher)")
    f = reg.flags
    if f.any_false is not None:
        console.print(f"with {r.pairs} pairs: flags on an A/A lane: high-variance "
                      f"{_rate(f.high_variance_false)}, window-drift "
                      f"{_rate(f.window_drift_false)}, either {_rate(f.any_false)} (target ≤ "
                      f"{rl.FLAG_FAMILY_ALPHA:.0%})")


def _where(m: GuardModel) -> str:
    """A guardrail model's own cells, and how many deterioration cells it has beside."""
    cells = ", ".join(f"{w} {lvl}" for w, lvl in m.cells)
    return cells + (f"; deterioration checks at {len(m.others)} other cell(s)"
                    if m.others else "")


def _print_guardrails(console: Console, r: PlanResult) -> None:
    """Each relative guardrail at the registered (most) pairs."""
    reg = r.row(r.pairs)
    for g in reg.guardrails:
        m = g.model
        console.print(f"with {r.pairs} pairs: guardrail {g.metric} (at {_where(m)}; "
                      f"broken at {g.family_alpha:.2%} each, family-wise; shown within at "
                      f"{1 - r.confidence:.0%}): broken with no change "
                      f"{_rate(g.break_at_0)}, stops adoption with no change (not shown "
                      "within its limit, or broken) "
                      f"{_rate(g.stops_at_0)}; lets a candidate truly "
                      f"{fm.pct(GUARDRAIL_VIOLATION * g.limit, 0)} worse through "
                      f"{_rate(g.passes_at_2x)}; noise: {m.noise.source}", markup=False)


def _orders_table(r: PlanResult) -> Table:
    """AB against ABBA under a linear drift across the window."""
    ot = Table(title=f"arm order under a linear drift of {fm.pct(r.order_drift, 1)} across "
               "the window (first candidate, no invalid pass)", title_justify="left")
    ot.add_column("order")
    ot.add_column("pairs", justify="right")
    ot.add_column("gain bias", justify="right")
    ot.add_column("P(adopt) at +0%", justify="right")
    ot.add_column(f"P(adopt) at {_change(r, r.effect, 0)}", justify="right")
    for o in r.orders:
        ot.add_row(o.order, str(o.pairs), fm.pct(o.bias, 2), _rate(o.null),
                   _rate(o.at_effect))
    return ot


def print_lanes(console: Console, r: PlanResult) -> None:
    """The lanes block: pairs, night and the pooled verdict's false adopt and power for 1, 2,
    4 lanes and the campaign's own."""
    if not r.lanes:
        return
    sims = r.lanes[0].power.n
    checked = sum(x.exact_checked for x in r.lanes)
    per_lane = r.pairs // r.pooled_lanes if r.pooled_lanes > 1 else r.pairs
    console.print(f"lanes (pairs per lane: {per_lane}; lanes run in parallel; one pooled "
                  f"verdict over every lane's pairs; {sims} campaigns per row; {checked} "
                  "re-judged by verdict.judge_run, two or more lanes as one pooled run, "
                  "all agree):")
    for x in r.lanes:
        mark = "  ← this campaign" if x.campaign else ""
        word = "lane " if x.lanes == 1 else "lanes"
        console.print(f"  {x.lanes:>2} {word} {x.pairs_total:>4} pairs  night ~"
                      f"{fm.clock(x.night_s)}  false adopt at m/2 {_rate(x.false_adopt)}  "
                      f"power at 1.5m {_rate(x.power)}{mark}", markup=False)
    u = r.unequal_lanes
    if u is not None:
        console.print(f"  {u.lanes} lanes, the second {u.noisier:g}× as noisy (the verdict "
                      f"assumes lanes of equal noise): false adopt at m/2 "
                      f"{_rate(u.false_adopt)}, power at 1.5m {_rate(u.power)}, "
                      f"lanes-disagree on no change {_rate(u.disagree)}", markup=False)
    first, last = r.lanes[0], r.lanes[-1]
    if r.rule == "point" and last.power.p < first.power.p:
        console.print("  under `point` every pooled pair must clear the band: more lanes "
                      "add chances for one to fall short (false adopts fall, so does power)")
