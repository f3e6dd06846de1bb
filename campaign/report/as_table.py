"""The terminal report: rich tables (colour on a terminal, plain text when piped)."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from campaign.outcome import CandidateVerdict
from campaign.report.model import EXPLORATORY, Report, RunReport
from campaign.report.rows import (
    HISTORY_HEADERS,
    RANKING_HEADERS,
    cell_headers,
    cell_rows,
    confidence_header,
    detail_lines,
    headline,
    history_rows,
    pairs_line,
    ranking_rows,
    rule_line,
)

VERDICT_STYLE = {
    "adopt": "bold green",
    "inconclusive": "yellow",
    "gain-below-bar": "yellow",
    "within-drift": "dim",
    "loss": "bold red",
    "mixed": "magenta",
    "unclear": "magenta",
    "no-data": "dim",
    "better": "green",
    "worse": "red",
    "no-clear-change": "dim",
}
DECISION_STYLE = {"adopt": "bold green", "keep-default": "bold yellow"}
WIDE = 130
"""Below this console width the per-cell table folds CI, pairs and flags into one column."""


def table_renderables(report: Report, width: int = 160) -> list[RenderableType]:
    """What `print_table` prints: a history table (several runs), then the newest run."""
    out: list[RenderableType] = []
    if report.exploratory:
        out.append(Text(f"*** {EXPLORATORY} ***", style="bold red"))
    if len(report.runs) > 1:
        out.append(_history_table(report))
        out.append(Text(""))
    out.extend(_run_renderables(report.latest, compact=width < WIDE))
    return out


def print_table(report: Report, console: Console) -> None:
    """Print the report as rich tables to `console` (the terminal format); a narrow
    console gets the compact layout."""
    for r in table_renderables(report, width=console.width):
        console.print(r)


def render_table(report: Report, width: int = 160) -> str:
    """The terminal table as plain text (what golden tests pin)."""
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(Group(*table_renderables(report, width=width)))
    return console.export_text()


def _history_table(report: Report) -> Table:
    t = Table(title=f"History: {len(report.runs)} runs", title_justify="left")
    for col in HISTORY_HEADERS:
        t.add_column(col, overflow="fold")
    for row in history_rows(report):
        dec = row.decision + row.adopt_arm + (" *" if row.exploratory else "")
        t.add_row(row.run_id, row.registered, row.pairs,
                  Text(dec, style=DECISION_STYLE[row.decision]),
                  row.cells_text(with_arm=True), row.guardrails, row.flags)
    return t


def _run_renderables(run: RunReport, *, compact: bool = False) -> list[RenderableType]:
    v = run.verdict
    dec = Text(headline(run), style=DECISION_STYLE[v.decision])
    if run.exploratory:
        dec.append(f"  [{EXPLORATORY}]", style="bold red")
    out: list[RenderableType] = [dec]
    for r in v.reasons:
        out.append(Text(f"  - {r}"))
    for n in (*run.notes, *v.notes):
        out.append(Text(f"  note: {n}", style="yellow"))
    out += [
        Text(f"spec-ab report — {run.campaign} — {run.run_id}", style="bold"),
        Text(pairs_line(run)),
        Text(rule_line(run)),
    ]
    for cv in run.verdict.candidates:
        title = f"{cv.arm} vs {run.arms[0]}   (★ = pre-registered decision cell)"
        out.append(_compact_cells(run, cv, title) if compact else _wide_cells(run, cv, title))
        _guardrail_lines(out, cv)
    if len(run.verdict.candidates) > 1:
        out.append(_ranking_table(run))
    if run.aa is not None:
        out.append(Text(f"A/A run: {run.aa.text}", style="cyan"))
    return out


def _cell_name(where: str, decision_cell: bool) -> str:
    return ("★ " if decision_cell else "  ") + where


def _compact_cells(run: RunReport, cv: CandidateVerdict, title: str) -> Table:
    """Narrow terminals: cell and metric stacked, CI / pairs / flags stacked."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              show_lines=False)
    t.add_column("cell · metric", no_wrap=True)
    t.add_column("gain", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column(f"{confidence_header(run)} · pairs · flags", overflow="fold")
    for row in cell_rows(cv):
        detail = f"{row.ci}\npairs {row.pairs}{row.left_out}"
        if row.flags:
            detail += "\n" + ", ".join(row.flags)
        t.add_row(f"{_cell_name(row.where, row.decision_cell)}\n  {row.metric}", row.gain,
                  Text(row.verdict, style=VERDICT_STYLE[row.verdict]), detail)
        t.add_row()
    return t


def _wide_cells(run: RunReport, cv: CandidateVerdict, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(cell_headers(run, cv)):
        # numbers right-aligned; only pairs and flags may wrap
        t.add_column(col, justify="right" if 2 <= i <= 5 else "left", overflow="fold",
                     no_wrap=i not in (6, 8))
    for row in cell_rows(cv):
        t.add_row(
            _cell_name(row.where, row.decision_cell), row.metric, row.control, row.candidate,
            row.gain, row.ci, row.pairs + row.left_out,
            Text(row.verdict, style=VERDICT_STYLE[row.verdict]), "\n".join(row.flags),
        )
    return t


def _guardrail_lines(out: list[RenderableType], cv: CandidateVerdict) -> None:
    if cv.guardrails:
        out.append(Text("Guardrails:"))
        for g in cv.guardrails:
            out.append(Text(f"  {'✗' if g.broken else '✓'} {g.reason}",
                            style="red" if g.broken else ""))
    detail = detail_lines(cv)
    if detail:
        out.append(Text("Decision cells, in detail:"))
        for where, r in detail:
            out.append(Text(f"  {where}: {r}"))


def _ranking_table(run: RunReport) -> Table:
    t = Table(title="Ranking of candidates", title_justify="left")
    for col in RANKING_HEADERS:
        t.add_column(col)
    for rank, arm, decision, gain, worst in ranking_rows(run):
        t.add_row(rank, arm, Text(decision, style=DECISION_STYLE[decision]), gain, worst)
    return t


render = render_table
