"""The report's rows and lines, computed once; each format only lays them out.

Like a comparison table made of `headers, rows` first and rendered per format after: the
cell table, the history table, the decision label and the rule/pairs lines are built here
and nowhere else, so the terminal, Markdown, JSON and HTML reports cannot disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from campaign import catalog
from campaign.fmt import fmt_gain, fmt_value, pct
from campaign.report.model import EXPLORATORY, Report, RunReport
from campaign.report.sequential import look_lines
from campaign.verdict.judge import lane_changes
from campaign.verdict.outcome import CandidateVerdict, Cell, GuardrailCheck
from campaign.verdict.reasons import below_bar_sentence, change_text
from campaign.verdict.rule import change_of


def decision_label(run: RunReport, *, upper: bool = True) -> str:
    """ADOPT / KEEP-DEFAULT, with the adopted arm when there are several candidates."""
    v = run.verdict
    word = v.decision.upper() if upper else v.decision
    return word + (f" ({v.adopt_arm})" if v.adopt_arm and len(run.arms) > 2 else "")


def pairs_text(c: Cell) -> str:
    """Each pair's change of the metric itself."""
    return " ".join(fmt_gain(p.change, c.kind) for p in c.pairs) or "—"


def ci_text(c: Cell) -> str:
    if c.stats is None:
        return "—"
    if c.change_ci is None:
        return "no CI (1 pair)"
    lo, hi = c.change_ci
    return f"{fmt_gain(lo, c.kind)} … {fmt_gain(hi, c.kind)}"


def change_cell(c: Cell) -> str:
    """The change of the metric itself, marked better or worse: "-18.4% better"."""
    return change_text(c).replace(" (", " ").replace(")", "")


REASON_TEXT = {
    "rule-met": "the pre-registered rule is met",
    "below-bar": "the change does not clear the pre-registered bar",
    "loss": "the candidate is worse",
    "guardrail": "a guardrail stops adoption",
    "guardrail-unresolved": "a guardrail is not shown within its limit",
    "inconclusive": "the evidence cannot carry a decision",
}


EXPLORATORY_REASON_TEXT = {
    **REASON_TEXT,
    "rule-met": "the rule is met, a rule not pre-registered",
    "below-bar": "the change does not clear the bar of a rule not pre-registered",
}
"""The same reasons for an exploratory run (`--rule` overrides, or copies that disagree):
its headline must not call the rule it was judged on pre-registered."""


def whose_decision(report: Report) -> str | None:
    """With several runs, which one the decision is of (the newest); None with one."""
    if len(report.runs) < 2:
        return None
    return (f"the decision of run {report.latest.run_id}, the newest of {len(report.runs)} "
            "runs (each in History below)")


def headline(run: RunReport) -> str:
    """The first line of every text format: the decision and why, in plain words (the
    reason's label is JSON's `reason`); below the bar, in the file's own numbers."""
    v = run.verdict
    why = (EXPLORATORY_REASON_TEXT if run.exploratory else REASON_TEXT)[v.reason]
    below = [cv for cv in v.candidates if cv.reason == "below-bar"]
    if v.reason == "below-bar" and below:
        many = len(v.candidates) > 1
        why = "; ".join((f"{cv.arm}: " if many else "")
                        + below_bar_sentence(cv, run.rule, len(v.candidates))
                        for cv in below)
        if run.exploratory:
            why += "; a rule not pre-registered"
    if v.settle:
        why += f" — to settle it: {v.settle}"
    return f"Decision: {decision_label(run)} ({why})"


def cell_word(c: Cell) -> str:
    """A cell's verdict in the text formats: a decision cell's in the decision's own words
    (adopt, keep-default, undecided: a design still going, a gate), any other cell's label
    in plain words ("no clear change"); JSON keeps the label (`Cell.verdict`)."""
    if not c.decision_cell or c.verdict in ("adopt", "no-data", "not-applicable"):
        return c.verdict.replace("-", " ")
    if c.verdict == "inconclusive" or (c.look is not None and c.look.outcome == "continue"
                                       and c.verdict != "loss"):
        return "undecided"
    return "keep-default"


def left_out_text(c: Cell) -> str:
    return f" (+{len(c.left_out)} left out)" if c.left_out else ""


def overrides_text(run: RunReport) -> str:
    return ", ".join(f"{k}={v}" for k, v in run.overrides.items())


def rule_line(run: RunReport) -> str:
    if run.disagreements:
        src = (f"NOT pre-registered — the run's copies disagree; registered sha256 "
               f"{run.registered_sha256[:12]}")
    elif run.registered_exploratory and not run.overrides:
        src = (f"{EXPLORATORY} — {run.registered_exploratory}; registered "
               f"{run.registered_at}, sha256 {run.registered_sha256[:12]}")
    elif run.exploratory:
        src = (f"{EXPLORATORY} — overrides {overrides_text(run)} on the registered rule "
               f"sha256 {run.registered_sha256[:12]}; used rule sha256 {run.rule_sha256[:12]}")
    else:
        src = f"pre-registered {run.registered_at}, sha256 {run.registered_sha256[:12]}"
    return f"Rule ({src}): {run.rule.describe()}"


def pairs_line(run: RunReport) -> str:
    v = run.verdict
    state = "complete" if not run.incomplete else "INCOMPLETE"
    design = run.rule.prereg.sequential
    if design is not None:
        state = ("sequential, decided" if v.decided else "sequential, not decided")
        return (f"{v.pairs_measured} of ≤ {v.pairs_planned} pairs ({run.rule.prereg.order}, "
                f"a look after each {design.look} from {design.min_pairs}), {state}; arms "
                f"{', '.join(run.arms)}; lane {run.lane or '?'}")
    return (f"{v.pairs_measured} of {v.pairs_planned} pairs ({run.rule.prereg.order}), "
            f"{state}; arms {', '.join(run.arms)}; lane {run.lane or '?'}")


def guardrails_text(run: RunReport) -> str:
    """A history row's guardrails: "hold", "hold (2 deterioration checks unclear)" or what
    stopped adoption."""
    checks = [g for cv in run.verdict.candidates for g in cv.guardrails]
    stopping = [g for g in checks if g.stops]
    if not stopping:
        unclear = sum(g.state == "unclear" for g in checks)
        what = "deterioration check" if all(
            g.role != "guardrail" for g in checks if g.state == "unclear") else "check"
        return "hold" + (f" ({unclear} {what}{'s' if unclear > 1 else ''} unclear)"
                         if unclear else "")
    return "stop: " + ", ".join(dict.fromkeys(f"{g.metric} {g.level} ({g.state})"
                                              for g in stopping))


def confidence_header(run: RunReport) -> str:
    return f"{run.rule.prereg.confidence:.0%} CI"


@dataclass(frozen=True)
class CellRow:
    """One cell of one candidate, as text."""

    where: str
    """"workload level"."""
    decision_cell: bool
    metric: str
    control: str
    candidate: str
    gain: str
    ci: str
    pairs: str
    left_out: str
    verdict: str
    """In plain words (`cell_word`)."""
    flags: tuple[str, ...]
    reasons: tuple[str, ...]
    label: str = ""
    """The cell's label, as JSON has it (the terminal's colour)."""


def unit_of(metric: str) -> str:
    return catalog.METRICS[metric].unit if metric in catalog.METRICS else ""


def with_unit(value: str, metric: str) -> str:
    """"948.6 tok/s"; a fraction or a count reads without a unit."""
    unit = unit_of(metric)
    return value if value == "—" or unit in ("", "fraction", "count") else f"{value} {unit}"


def metric_with_unit(metric: str) -> str:
    unit = unit_of(metric)
    return f"{metric} ({unit})" if unit else metric


STOPPING_PREFIX = "guardrail(s) stopping adoption: "
"""A decision reason naming the guardrails that stop it: the guardrail section right
under the decision lists each in full, so the decision block leaves it out (each
decision-relevant line once)."""


def lead_lines(run: RunReport) -> list[str]:
    """What a report leads with, before its decision: a run still being measured, each
    arm that never became ready."""
    return [*([run.running] if run.running else []), *(n.line for n in run.never_ready)]


LOOK_LINE = re.compile(r"(^|— )look \d+ of ≤ \d+ ")
"""A reason that is a sequential design's look line (shown with every look instead)."""


def decision_lines(run: RunReport) -> list[str]:
    """What follows the headline: each reason (but the guardrails', listed in full
    under guardrails), then the notes."""
    v = run.verdict
    settled = f"; to settle it: {v.settle}"  # the headline says it
    many = len(v.candidates) > 1
    # a sequential design: every look in order (the reasons' own look line is one of them)
    looks = [f"- {cv.arm + ': ' if many else ''}{line}" for cv in v.candidates
             for line in look_lines(cv, run.rule)]
    return [*(f"- {r.replace(settled, '') if v.settle else r}" for r in v.reasons
              if not r.startswith(STOPPING_PREFIX) and not LOOK_LINE.search(r)),
            *looks, *(f"note: {n}" for n in (*run.notes, *v.notes))]


def lane_lines(run: RunReport) -> list[str]:
    """A pooled run, lane by lane: each shard and its pairs, the lanes with no shard, then
    each decision cell's change on each lane (and whether the lanes agree)."""
    pooled = run.pooled
    if pooled is None:
        return []
    out = [f"{s.lane}: {len(s.pairs)} pair(s) (pooled {', '.join(map(str, s.pairs)) or '—'})"
           f", {'complete' if s.complete else 'INCOMPLETE'}, run {s.run_id}"
           for s in pooled.shards]
    out += [f"{lane}: no shard given" for lane in pooled.missing_lanes]
    return out + lane_cell_lines(run)


def lane_cell_lines(run: RunReport) -> list[str]:
    """Each decision cell of a pooled run, lane by lane, and whether the lanes agree."""
    pooled = run.pooled
    if pooled is None:
        return []
    out: list[str] = []
    many = len(run.arms) > 2
    for c in run.decision_cells():
        by_lane = lane_changes(c, pooled.lane_of)
        if not by_lane:
            continue
        agree = ("the lanes DISAGREE (lanes-disagree)" if "lanes-disagree" in c.flags
                 else "the lanes agree within their noise" if len(by_lane) > 1 else "one lane")
        out.append((f"{c.arm}: " if many else "") + f"{c.where} {c.metric} by lane: "
                   + ", ".join(f"{lane} {fmt_gain(ch, c.kind)} ({n} pair{'s' if n > 1 else ''})"
                               for lane, n, ch in by_lane) + f" — {agree}")
    return out


DECISION_HEADERS = ("cell", "control", "candidate", "change", "CI", "pairs", "verdict",
                    "flags")


@dataclass(frozen=True)
class DecisionRow:
    """One decision cell of one candidate, compact: values carry their unit."""

    cell: str
    """"knee c1 output_token_throughput" (with the arm when several candidates)."""
    control: str
    candidate: str
    change: str
    ci: str
    pairs: str
    verdict: str
    """In plain words (`cell_word`)."""
    flags: tuple[str, ...]
    label: str = ""
    """The cell's label, as JSON has it (the terminal's colour)."""


def decision_headers(run: RunReport) -> tuple[str, ...]:
    cand = run.arms[1] if len(run.arms) == 2 else "candidate"
    return ("decision cell", run.arms[0], cand, "change", confidence_header(run), "pairs",
            "verdict", "flags")


def decision_rows(run: RunReport) -> list[DecisionRow]:
    many = len(run.arms) > 2
    return [
        DecisionRow(
            cell=(f"{c.arm}: " if many else "") + f"{c.where} {c.metric}",
            control=with_unit(fmt_value(c.control, c.metric), c.metric),
            candidate=with_unit(fmt_value(c.candidate, c.metric), c.metric),
            change=change_cell(c), ci=ci_text(c), pairs=pairs_text(c) + left_out_text(c),
            verdict=cell_word(c), flags=c.flags, label=c.verdict,
        )
        for c in run.decision_cells()
    ]


def guardrail_checks(run: RunReport) -> list[tuple[str, GuardrailCheck]]:
    """(arm, check) of every guardrail check of every candidate."""
    return [(cv.arm, g) for cv in run.verdict.candidates for g in cv.guardrails]


@dataclass(frozen=True)
class GuardrailLine:
    """One guardrail check shown in full (or the one line of the deterioration checks that
    neither hold nor stop): its mark (✗ stops adoption, ? does not), its line (with the arm
    when several candidates) and whether it stops adoption."""

    mark: str
    text: str
    stops: bool


def guardrail_summary(run: RunReport) -> tuple[list[GuardrailLine], str]:
    """Every check that does not hold, in full (each once), and one line counting them
    all: "1 broken, 2 unclear (1 stops adoption); 7 hold (ttft_p99, error_rate)".

    A deterioration check (a guardrail's metric at another measured cell) is in full only
    when it stops adoption (a worsening shown beyond the limit); the others that do not
    hold share one `?` line, and they are counted after the guardrails ("; deterioration
    checks at other cells: 1 unclear; 3 hold"), so they never bury the guardrails."""
    many = len(run.arms) > 2
    checks = guardrail_checks(run)
    if not checks:
        return [], "no guardrails were pre-registered"
    never = run.never_ready_arms()
    # an arm that never booted: one line, not one "cannot be checked" per guardrail
    shown = [GuardrailLine("✗", f"{arm}: none of its {n} guardrail check(s) can be made: it "
                           "never became ready", True)
             for arm in sorted(never) if (n := sum(a == arm for a, _ in checks))]
    live = [(arm, g) for arm, g in checks if arm not in never and g.state != "holds"]
    shown += [GuardrailLine("✗" if g.stops else "?", (f"{arm}: " if many else "") + g.reason,
                            g.stops) for arm, g in live
              if g.role == "guardrail" or g.stops]
    quiet = [(arm, g) for arm, g in live if g.role != "guardrail" and not g.stops]
    if quiet:
        shown.append(GuardrailLine("?", _quiet_line(quiet, many), False))
    guards = [g for _, g in checks if g.role == "guardrail"]
    dets = [g for _, g in checks if g.role != "guardrail"]
    return shown, "; ".join(t for t in (_guardrail_counts(guards), _deterioration_counts(dets))
                            if t)


def _guardrail_counts(checks: list[GuardrailCheck]) -> str:
    """"all 2 hold (ttft_p99, error_rate)", or "1 broken, 2 unclear (1 stops adoption);
    1 hold (error_rate)"."""
    if not checks:
        return ""
    held = [g for g in checks if g.state == "holds"]
    metrics = ", ".join(dict.fromkeys(g.metric for g in held))
    if len(held) == len(checks):
        return f"all {len(held)} hold ({metrics})"
    counts = [f"{k} {state}" for state in ("broken", "missing", "unclear")
              if (k := sum(g.state == state for g in checks))]
    unclear_stops = sum(g.state == "unclear" and g.stops for g in checks)
    if unclear_stops:
        counts[-1] += f" ({unclear_stops} stop{'s' if unclear_stops == 1 else ''} adoption)"
    return ", ".join(counts) + (f"; {len(held)} hold ({metrics})" if held else "; none holds")


def _deterioration_counts(checks: list[GuardrailCheck]) -> str:
    """"3 deterioration checks at other cells hold", or "deterioration checks at other
    cells: 1 broken (stops adoption), 1 unclear; 3 hold"."""
    if not checks:
        return ""
    held = sum(g.state == "holds" for g in checks)
    if held == len(checks):
        return ("1 deterioration check at another cell holds" if held == 1 else
                f"{held} deterioration checks at other cells hold")
    counts = []
    for state in ("broken", "missing", "unclear"):
        k = sum(g.state == state for g in checks)
        stop = sum(g.state == state and g.stops for g in checks)
        if k:
            counts.append(f"{k} {state}" + (" (stops adoption)" if stop == k == 1 else
                                              f" ({stop} stop adoption)" if stop else ""))
    return ("deterioration checks at other cells: " + ", ".join(counts)
            + (f"; {held} hold" if held else "; none holds"))


def _quiet_line(quiet: list[tuple[str, GuardrailCheck]], many: bool) -> str:
    """The deterioration checks that neither hold nor stop adoption, briefly, in one line
    (each one's full line is in the JSON report's `guardrails`)."""
    def brief(arm: str, g: GuardrailCheck) -> str:
        where = (f"{arm}: " if many else "") + f"{g.metric} at {g.workload} {g.level}"
        if g.change is None:
            return f"{where} {g.state}"
        kind = g.kind
        ci = "" if g.ci is None else (
            f", {fmt_gain(g.ci[0], kind)} … {fmt_gain(g.ci[1], kind)}")
        limit = "" if g.limit is None else f", limit {fmt_gain(g.limit, kind)}"
        sense = ("" if not g.worsening else
                 " (worse)" if g.worsening > 0 else " (better)")
        return f"{where} {g.state}: {fmt_gain(g.change, kind)}{sense}{ci}{limit}"

    head = ("deterioration checks at other cells not shown within the limit, which do"
            if len(quiet) > 1 else
            "deterioration check at another cell not shown within the limit, which does")
    return (head + " not stop adoption (only a worsening shown beyond it does there): "
            + "; ".join(brief(arm, g) for arm, g in quiet))


GROUP_TITLES = {"knee": "knee (concurrency sweep)", "agentfix": "agent fixtures (by content "
                "class)", "all": "spec-decode figures (whole knee sweep, level all)"}


def group_of(c: Cell) -> str:
    """knee / agentfix / all (the spec-decode figures over a whole sweep) / other."""
    if c.level == "all":
        return "all"
    return c.workload


def other_cell_groups(run: RunReport, cv: CandidateVerdict) -> list[tuple[str, list[CellRow]]]:
    """The cells that are not decision cells, grouped by workload (title, rows)."""
    groups: dict[str, list[CellRow]] = {}
    if cv.arm in run.never_ready_arms():
        return []  # nothing measured: `collapsed_lines` counts them
    cells = [c for c in cv.cells if not c.decision_cell and run.shows(c)]
    for c, row in zip(cells, cell_rows(cv, cells), strict=True):
        g = group_of(c)
        # under a workload's title a cell is named by its level alone
        groups.setdefault(g, []).append(row if g == "all" else replace(row, where=c.level))
    order = {"knee": 0, "agentfix": 1, "all": 2}
    return [(GROUP_TITLES.get(g, g), rows)
            for g, rows in sorted(groups.items(), key=lambda kv: (order.get(kv[0], 3), kv[0]))]


def collapsed_lines(run: RunReport) -> list[str]:
    """One line per candidate that never became ready, for its cells (none has data)."""
    never = run.never_ready_arms()
    return [f"{cv.arm}: {sum(not c.decision_cell and run.shows(c) for c in cv.cells)} "
            "cells, none measured (it never became ready); not listed"
            for cv in run.verdict.candidates if cv.arm in never]


def other_headers(run: RunReport, cv: CandidateVerdict) -> tuple[str, ...]:
    return ("cell", "metric (unit)", run.arms[0], cv.arm, "change", confidence_header(run),
            "pairs", "verdict", "flags")


def cell_headers(run: RunReport, cv: CandidateVerdict) -> tuple[str, ...]:
    return ("cell", "metric", run.arms[0], cv.arm, "change", confidence_header(run), "pairs",
            "verdict", "flags")


def cell_rows(cv: CandidateVerdict, cells: list[Cell] | None = None) -> list[CellRow]:
    return [
        CellRow(
            where=f"{c.workload} {c.level}", decision_cell=c.decision_cell, metric=c.metric,
            control=fmt_value(c.control, c.metric), candidate=fmt_value(c.candidate, c.metric),
            gain=change_cell(c), ci=ci_text(c), pairs=pairs_text(c),
            left_out=left_out_text(c), verdict=cell_word(c), flags=c.flags, reasons=c.reasons,
            label=c.verdict,
        )
        for c in (cv.cells if cells is None else cells)
    ]


def detail_lines(cv: CandidateVerdict) -> list[tuple[str, str]]:
    """(where, reason) of each decision cell's reasons beyond its label."""
    return [(c.where, r) for c in cv.cells if c.decision_cell for r in c.reasons[1:]]


HISTORY_HEADERS = ("run", "registered", "pairs", "decision", "decision cells", "guardrails",
                   "flags")


@dataclass(frozen=True)
class HistoryRow:
    """One run of a history, as text."""

    run_id: str
    registered: str
    pairs: str
    decision: str
    """keep-default / adopt (lower case, as a value)."""
    adopt_arm: str
    """" (arm)" when several candidates and one adopts, else ""."""
    exploratory: bool
    cells: tuple[tuple[str, str, str, str], ...]
    """(arm, level, gain, verdict) of each decision cell."""
    several_candidates: bool
    guardrails: str
    flags: str

    def cells_text(self, *, with_arm: bool) -> str:
        return "; ".join(
            f"{arm + ' ' if with_arm and self.several_candidates else ''}{lvl} {g} {v}"
            for arm, lvl, g, v in self.cells
        )


def history_rows(report: Report) -> list[HistoryRow]:
    rows = []
    for run in report.runs:
        many = len(run.arms) > 2
        cells = run.decision_cells()
        rows.append(HistoryRow(
            run_id=run.run_id, registered=run.registered_at[:16],
            pairs=f"{run.verdict.pairs_measured}/{run.verdict.pairs_planned}",
            decision=run.decision,
            adopt_arm=f" ({run.verdict.adopt_arm})" if many and run.verdict.adopt_arm else "",
            exploratory=run.exploratory,
            cells=tuple((c.arm, c.level, fmt_gain(c.change, c.kind), c.verdict) for c in cells),
            several_candidates=many, guardrails=guardrails_text(run),
            flags=", ".join(sorted({f for c in cells for f in c.flags})) or "—",
        ))
    return rows


RANKING_HEADERS = ("rank", "arm", "decision", "mean change (decision cells)", "worst cell")


def ranking_rows(run: RunReport) -> list[tuple[str, str, str, str, str]]:
    d = run.rule.direction

    def ch(g: float | None) -> str:
        return pct(None if g is None else change_of(math.log1p(g), d))

    return [(str(r.rank), r.arm, r.decision, ch(r.gain), ch(r.worst))
            for r in run.verdict.ranking]


def shard_summary_lines(report: Report) -> list[str]:
    """The end of `spec-ab run --lane`: a shard has no verdict of its own (its campaign's
    verdict pools every lane), so what it measured, lane by lane, and how to pool."""
    run = report.latest
    pooled = run.pooled
    assert pooled is not None
    (shard,) = pooled.shards
    others = [lane for lane in pooled.lanes if lane != shard.lane]
    per_lane = run.rule.prereg.pairs // max(1, len(pooled.lanes))
    lines = [f"Shard of lane {shard.lane}: {len(shard.pairs)} of {per_lane} pairs, "
             f"{'complete' if shard.complete else 'INCOMPLETE'}; no verdict until every "
             f"lane's shard is pooled ({', '.join(pooled.lanes)})"]
    lines += [f"  {line}" for line in lane_cell_lines(run)]
    lines.append(f"  pool: spec-ab report {shard.run_dir} "
                 + " ".join(f"<{lane}'s run directory>" for lane in others))
    return lines


def summary_lines(report: Report) -> list[str]:
    """A few plain lines for the end of `spec-ab run`."""
    run = report.latest
    if run.pooled is not None and len(run.pooled.shards) == 1 and run.pooled.missing_lanes:
        return shard_summary_lines(report)
    v = run.verdict
    head = headline(run)
    if run.exploratory:
        head += f" [{EXPLORATORY}]"
    lines = [*lead_lines(run), head,
             f"  rule {run.rule.prereg.rule}, sha256 {run.rule_sha256[:12]}"]
    for c in run.decision_cells():
        lines.append(
            f"  {c.arm} {c.where} {c.metric}: {change_cell(c)} "
            f"[pairs {pairs_text(c)}] {c.verdict}"
            + (f" ({', '.join(c.flags)})" if c.flags else "")
        )
    lines += [f"  - {r}" for r in v.reasons]
    lines += [f"  note: {n}" for n in (*run.notes, *v.notes)]
    return lines
