"""The Markdown report (a PR comment, a wiki page, a CI summary)."""

from __future__ import annotations

from campaign.report.model import EXPLORATORY, Report
from campaign.report.rows import (
    cell_headers,
    cell_rows,
    decision_label,
    detail_lines,
    headline,
    history_rows,
    pairs_line,
    ranking_rows,
    rule_line,
)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def render_markdown(report: Report) -> str:
    run = report.latest
    v = run.verdict
    lines: list[str] = [f"# {headline(run)}", ""]
    if report.exploratory:
        lines += [f"> **{EXPLORATORY}**: these verdicts use `--rule` overrides.", ""]
    lines += [f"- {_md_escape(r)}" for r in v.reasons]
    lines += [f"- note: {_md_escape(n)}" for n in (*run.notes, *v.notes)]
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
              f"- {rule_line(run)}", ""]
    for cv in v.candidates:
        headers = cell_headers(run, cv)
        lines += [f"## {cv.arm} vs {run.arms[0]}", "",
                  "| " + " | ".join(headers) + " |",
                  "|---|---|---:|---:|---:|---:|---|---|---|"]
        for row in cell_rows(cv):
            name = f"**{row.where}** ★" if row.decision_cell else row.where
            lines.append(
                f"| {name} | {row.metric} | {row.control} | {row.candidate} | {row.gain} | "
                f"{row.ci} | {row.pairs}{row.left_out} | {row.verdict} | "
                f"{', '.join(row.flags)} |"
            )
        lines += ["", "★ pre-registered decision cell.", ""]
        if cv.guardrails:
            lines += ["Guardrails:", ""]
            lines += [f"- {'✗' if g.broken else '✓'} {g.reason}" for g in cv.guardrails]
            lines.append("")
        detail = detail_lines(cv)
        if detail:
            lines += ["Decision cells, in detail:", ""]
            lines += [f"- {where}: {_md_escape(r)}" for where, r in detail]
            lines.append("")
    if len(v.candidates) > 1:
        lines += ["## Ranking", "", "| rank | arm | decision | mean gain | worst cell |",
                  "|---:|---|---|---:|---:|"]
        lines += [f"| {rank} | {arm} | {dec} | {gain} | {worst} |"
                  for rank, arm, dec, gain, worst in ranking_rows(run)]
        lines.append("")
    if run.aa is not None:
        lines += [f"A/A run: {run.aa.text}", ""]
    return "\n".join(lines)


render = render_markdown
