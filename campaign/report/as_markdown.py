"""The Markdown report (a PR comment, a wiki page, a CI summary): the decision and its
reason first, the decision cells, the guardrails, then the other cells by workload."""

from __future__ import annotations

from campaign.report.model import EXPLORATORY, Report
from campaign.report.rows import (
    collapsed_lines,
    decision_headers,
    decision_label,
    decision_lines,
    decision_rows,
    detail_lines,
    guardrail_summary,
    headline,
    history_rows,
    lane_lines,
    lead_lines,
    metric_with_unit,
    other_cell_groups,
    other_headers,
    pairs_line,
    ranking_rows,
    rule_line,
    whose_decision,
)
from campaign.report.turns import HEADERS as TURN_HEADERS


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def _row(cells: list[str] | tuple[str, ...]) -> str:
    return "| " + " | ".join(_md_escape(c) for c in cells) + " |"


def render_markdown(report: Report) -> str:
    run = report.latest
    v = run.verdict
    lead = [f"**{_md_escape(line)}**" for line in lead_lines(run)]
    lines: list[str] = [*lead, *([""] if lead else []), f"# {headline(run)}", ""]
    whose = whose_decision(report)
    if whose:
        lines += [f"*{_md_escape(whose)}*", ""]
    if report.exploratory:
        lines += [f"> **{EXPLORATORY}**: {_md_escape(report.why_exploratory)}.", ""]
    lines += [_md_escape(line if line.startswith("- ") else "- " + line)
              for line in decision_lines(run)]
    lines += ["", "## Decision cells", "", _row(decision_headers(run)),
              "|---|---:|---:|---:|---:|---|---|---|"]
    for r in decision_rows(run):
        lines.append(_row((f"**{r.cell}**", r.control, r.candidate, r.change, r.ci, r.pairs,
                           f"**{r.verdict}**", ", ".join(r.flags))))
    lanes = lane_lines(run)
    if lanes:
        lines += ["", "**Lanes** (shards pooled into this verdict):", ""]
        lines += [f"- {_md_escape(line)}" for line in lanes]
    shown, held = guardrail_summary(run)
    lines += ["", f"**Guardrails:** {_md_escape(held)}", ""]
    lines += [f"- {line.mark} {_md_escape(line.text)}" for line in shown]
    if shown:
        lines.append("")
    detail = [d for cv in v.candidates for d in detail_lines(cv)]
    if detail:
        lines += ["Decision cells, in detail:", ""]
        lines += [f"- {where}: {_md_escape(r)}" for where, r in detail]
        lines.append("")
    if len(report.runs) > 1:
        lines += [f"## History ({len(report.runs)} runs)", "",
                  "| run | registered | pairs | decision | decision cells | guardrails |",
                  "|---|---|---|---|---|---|"]
        for h in history_rows(report):
            lines.append(f"| {h.run_id} | {h.registered} | {h.pairs} | "
                         f"**{h.decision}** | {_md_escape(h.cells_text(with_arm=False))} | "
                         f"{_md_escape(h.guardrails)} |")
        lines.append("")
    lines += [f"## {run.campaign}: **{decision_label(run, upper=False)}**", ""]
    if run.hypothesis:
        lines += [f"_Hypothesis:_ {run.hypothesis}", ""]
    lines += [f"- Run: `{run.run_id}` — {pairs_line(run)}",
              f"- {rule_line(run)}", *(f"- {line}" for line in collapsed_lines(run)), ""]
    if run.rate_sweep is not None:
        lines += ["### Rate sweep", "", *(f"- {_md_escape(x)}" for x in run.rate_sweep.lines()),
                  ""]
    if run.session_turns is not None:
        for arm, turn_rows in run.session_turns.arms:
            lines += [f"### {run.session_turns.title(arm)}", "", _row(TURN_HEADERS),
                      "|---|---:|---:|---:|---:|---:|",
                      *(_row(r.cells()) for r in turn_rows), ""]
    for cv in v.candidates:
        for title, rows in other_cell_groups(run, cv):
            lines += [f"### {title}: {cv.arm} vs {run.arms[0]}", "",
                      _row(other_headers(run, cv)),
                      "|---|---|---:|---:|---:|---:|---|---|---|"]
            for row in rows:
                lines.append(_row((row.where, metric_with_unit(row.metric), row.control,
                                   row.candidate, row.gain, row.ci, row.pairs + row.left_out,
                                   row.verdict, ", ".join(row.flags))))
            lines.append("")
    if len(v.candidates) > 1:
        lines += ["## Ranking", "", "| rank | arm | decision | mean gain | worst cell |",
                  "|---:|---|---|---:|---:|"]
        lines += [f"| {rank} | {arm} | {dec} | {gain} | {worst} |"
                  for rank, arm, dec, gain, worst in ranking_rows(run)]
        lines.append("")
    if run.aa is not None:
        lines += [*(f"A/A run: {_md_escape(line)}  " for line in run.aa.lines), ""]
    return "\n".join(lines)


render = render_markdown
