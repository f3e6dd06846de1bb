"""The terminal report: rich tables (colour on a terminal, plain text when piped)."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from campaign.report.model import EXPLORATORY, Report, RunReport
from campaign.report.rows import (
    HISTORY_HEADERS,
    RANKING_HEADERS,
    CellRow,
    collapsed_lines,
    confidence_header,
    decision_headers,
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
from campaign.report.stacked import StackedRow, compact_fits, longest_word, stacked
from campaign.report.turns import HEADERS as TURN_HEADERS
from campaign.verdict.outcome import CandidateVerdict

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
    "not-applicable": "dim",
}
DECISION_STYLE = {"adopt": "bold green", "keep-default": "bold yellow"}
WIDE = 130
"""Below this console width the per-cell table folds CI, pairs and flags into one column."""


def table_renderables(report: Report, width: int = 160) -> list[RenderableType]:
    """What `print_table` prints: the newest run's decision, its decision cells and
    guardrails, a history table (several runs), then the other cells by workload."""
    compact = width < WIDE
    run = report.latest
    out: list[RenderableType] = _decision_renderables(run, compact=compact, width=width)
    whose = whose_decision(report)
    if whose:
        out.insert(1 + len(lead_lines(run)), Text(f"  {whose}", style="bold"))
    if report.exploratory:
        out.insert(1, Text(f"*** {EXPLORATORY} ***", style="bold red"))
    if len(report.runs) > 1:
        out.append(_history_table(report, width))
    out.extend(_run_renderables(run, compact=compact, width=width))
    return out


def print_table(report: Report, console: Console, *, piped: bool = False) -> None:
    """Print the report as rich tables to `console` (the terminal format); a narrow
    console gets the compact layout. `piped` (a CI log, `| grep`): each line of text stays
    one line, however long; only the tables keep to the console's width."""
    for r in table_renderables(report, width=console.width):
        console.print(r, soft_wrap=piped and isinstance(r, Text))


def render_table(report: Report, width: int = 160) -> str:
    """The terminal table as plain text (what golden tests pin)."""
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(Group(*table_renderables(report, width=width)))
    return console.export_text()


def render_table_file(report: Report, width: int = 160) -> str:
    """The terminal table as a file holds it (`report -o FILE`): no line of text is
    hard-wrapped (a file is read in an editor, grepped, diffed); a line longer than
    `width` is split at its "; " into its labelled parts, one under the other
    (`labelled_parts`). The tables keep to `width`."""
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None,
                      force_terminal=False, legacy_windows=False)
    for r in table_renderables(report, width=width):
        if isinstance(r, Text):
            for line in r.plain.split("\n"):
                for part in labelled_parts(line, width):
                    console.print(Text(part), soft_wrap=True)
        else:
            console.print(r)
    return console.export_text()


def labelled_parts(line: str, width: int) -> list[str]:
    """A line longer than `width` as its "; "-separated parts, each after the first on a
    line of its own, indented under it ("noise: …", "would resolve with …", "stops
    adoption: …"); a shorter line, or one with no such parts, as it is."""
    parts = line.split("; ")
    if len(line) <= width or len(parts) < 2:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return [parts[0], *(indent + p for p in parts[1:])]


def _history_table(report: Report, width: int = 160) -> RenderableType:
    """One row per run; when its words cannot fit `width` whole (a run id is long), one
    run under the other, each run id on a line of its own."""
    title = f"History: {len(report.runs)} runs"
    rows = history_rows(report)
    cols = [[r.run_id, r.registered, r.pairs, r.decision + r.adopt_arm + " *",
             r.cells_text(with_arm=True), r.guardrails, r.flags] for r in rows]
    need = sum(max(longest_word([h]), *(longest_word([c[i]]) for c in cols)) + 3
               for i, h in enumerate(HISTORY_HEADERS)) + 1
    if need > width:
        return stacked(title, [StackedRow(
            f"{r.run_id}: {r.decision}{r.adopt_arm}" + (" *" if r.exploratory else ""),
            (f"registered {r.registered}; pairs {r.pairs}; decision cells "
             f"{r.cells_text(with_arm=True)}; guardrails {r.guardrails}; flags {r.flags}",))
            for r in rows])
    t = Table(title=title, title_justify="left")
    for col in HISTORY_HEADERS:
        t.add_column(col, overflow="fold", no_wrap=col == "run")
    for row in rows:
        dec = row.decision + row.adopt_arm + (" *" if row.exploratory else "")
        t.add_row(row.run_id, row.registered, row.pairs,
                  Text(dec, style=DECISION_STYLE[row.decision]),
                  row.cells_text(with_arm=True), row.guardrails, row.flags)
    return t


def _decision_renderables(run: RunReport, *, compact: bool,
                          width: int = 160) -> list[RenderableType]:
    """(a) the decision, its reason and what would settle it; (b) the decision cells;
    (c) the guardrails: those that do not hold in full, a count of all."""
    v = run.verdict
    dec = Text(headline(run), style=DECISION_STYLE[v.decision])
    if run.exploratory:
        dec.append(f"  [{EXPLORATORY}]", style="bold red")
    out: list[RenderableType] = [Text(line, style="bold red") for line in lead_lines(run)]
    out.append(dec)
    for line in decision_lines(run):
        out.append(Text(f"  {line}", style="yellow" if line.startswith("note:") else ""))
    out.append(_decision_table(run, compact=compact, width=width))
    lanes = lane_lines(run)
    if lanes:
        out.append(Text("Lanes (shards pooled into this verdict):"))
        out += [Text(f"  {line}", style="red" if "DISAGREE" in line else "") for line in lanes]
    shown, held = guardrail_summary(run)
    stops = any(g.stops for g in shown)
    out.append(Text(f"Guardrails: {held}", style="red" if stops else ""))
    for g in shown:
        out.append(Text(f"  {g.mark} {g.text}", style="red" if g.stops else "yellow"))
    detail = [d for cv in v.candidates for d in detail_lines(cv)]
    if detail:
        out.append(Text("Decision cells, in detail:"))
        for where, r in detail:
            out.append(Text(f"  {where}: {r}"))
    out.append(Text(""))
    return out


def _decision_table(run: RunReport, *, compact: bool, width: int = 160) -> RenderableType:
    title = ("Decision cells (exploratory, not pre-registered)" if run.exploratory
             else "Decision cells (pre-registered)")
    rows = decision_rows(run)
    if compact:
        first = [f"{r.cell}\n  {r.control} → {r.candidate}\n  {confidence_header(run)} "
                 f"{r.ci}\n  pairs {r.pairs}" for r in rows]
        if not compact_fits(width, first, [r.change for r in rows], [r.verdict for r in rows],
                            [f for r in rows for f in r.flags]):
            return stacked(title, [StackedRow(
                f"{r.cell}: {r.change}, {r.verdict}" + _flags(r.flags),
                (f"{r.control} → {r.candidate}",
                 f"{confidence_header(run)} {r.ci}; pairs {r.pairs}")) for r in rows])
        t = _compact_table(title)
        for text, r in zip(first, rows, strict=True):
            t.add_row(text, r.change, Text(r.verdict, style=VERDICT_STYLE[r.label]),
                      "\n".join(r.flags))
        return t
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(decision_headers(run)):
        t.add_column(col, justify="right" if 1 <= i <= 4 else "left", overflow="fold",
                     no_wrap=i not in (0, 5, 7))
    for r in rows:
        t.add_row(r.cell, r.control, r.candidate, r.change, r.ci, r.pairs,
                  Text(r.verdict, style=VERDICT_STYLE[r.label]), "\n".join(r.flags))
    return t


def _run_renderables(run: RunReport, *, compact: bool = False,
                     width: int = 160) -> list[RenderableType]:
    out: list[RenderableType] = [
        Text(f"spec-ab report — {run.campaign} — {run.run_id}", style="bold"),
        Text(pairs_line(run)),
        Text(rule_line(run)),
        *(Text(line, style="dim") for line in collapsed_lines(run)),
    ]
    if run.rate_sweep is not None:
        out += [Text(line) for line in run.rate_sweep.lines()]
    if run.session_turns is not None:
        for arm, turn_rows in run.session_turns.arms:
            t = Table(title=run.session_turns.title(arm), title_justify="left")
            for i, h in enumerate(TURN_HEADERS):
                t.add_column(h, justify="left" if i == 0 else "right")
            for r in turn_rows:
                t.add_row(*r.cells())
            out.append(t)
    for cv in run.verdict.candidates:
        for title, rows in other_cell_groups(run, cv):
            head = f"{title}: {cv.arm} vs {run.arms[0]}"
            out.append(_compact_cells(run, head, rows, width) if compact
                       else _wide_cells(run, cv, head, rows))
    if len(run.verdict.candidates) > 1:
        out.append(_ranking_table(run))
    if run.aa is not None:
        out += [Text(f"A/A run: {line}", style="cyan") for line in run.aa.lines]
    return out


def _compact_table(title: str) -> Table:
    """Narrow terminals: what a cell is, its CI and pairs stacked in the first column."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("cell · CI · pairs", overflow="fold", ratio=1)
    t.add_column("change", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    t.add_column("flags", overflow="fold", max_width=14)
    return t


def _flags(flags: tuple[str, ...]) -> str:
    return f" ({', '.join(flags)})" if flags else ""


def _compact_cells(run: RunReport, title: str, rows: list[CellRow],
                   width: int = 160) -> RenderableType:
    first = [f"{row.where} {metric_with_unit(row.metric)}\n  {confidence_header(run)} "
             f"{row.ci}\n  pairs {row.pairs}{row.left_out}" for row in rows]
    if not compact_fits(width, first, [r.gain for r in rows], [r.verdict for r in rows],
                        [f for r in rows for f in r.flags]):
        return stacked(title, [StackedRow(
            f"{r.where} {metric_with_unit(r.metric)}: {r.gain}, {r.verdict}" + _flags(r.flags),
            (f"{confidence_header(run)} {r.ci}; pairs {r.pairs}{r.left_out}",))
            for r in rows])
    t = _compact_table(title)
    for text, row in zip(first, rows, strict=True):
        t.add_row(text, row.gain, Text(row.verdict, style=VERDICT_STYLE[row.label]),
                  "\n".join(row.flags))
    return t


def _wide_cells(run: RunReport, cv: CandidateVerdict, title: str,
                rows: list[CellRow]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(other_headers(run, cv)):
        # numbers right-aligned; only pairs and flags may wrap
        t.add_column(col, justify="right" if 2 <= i <= 5 else "left", overflow="fold",
                     no_wrap=i not in (6, 8))
    for row in rows:
        t.add_row(
            row.where, metric_with_unit(row.metric), row.control, row.candidate,
            row.gain, row.ci, row.pairs + row.left_out,
            Text(row.verdict, style=VERDICT_STYLE[row.label]), "\n".join(row.flags),
        )
    return t


def _ranking_table(run: RunReport) -> Table:
    t = Table(title="Ranking of candidates", title_justify="left")
    for col in RANKING_HEADERS:
        t.add_column(col)
    for rank, arm, decision, gain, worst in ranking_rows(run):
        t.add_row(rank, arm, Text(decision, style=DECISION_STYLE[decision]), gain, worst)
    return t


render = render_table
