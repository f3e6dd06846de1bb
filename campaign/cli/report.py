"""`spec-ab report`: run directories → verdicts, as a table, Markdown, JSON or HTML."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from campaign.cli.app import FailOnChoice, FormatChoice, app, err, guarded
from campaign.errors import EXIT_INCOMPLETE, UsageError
from campaign.report.formats import FAIL_ON, FORMATS
from campaign.textfiles import (
    check_output_folder,
    check_output_path,
    make_output_folder,
    output_folder_error,
    write_output,
)


@app.command()
@guarded
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories "
                                                   "(several: a history side by side).")],
    fmt: Annotated[FormatChoice, typer.Option(
        "--format", "-f",
        help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()))] = FormatChoice("table"),
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file "
                                                "instead of stdout.")] = None,
    rule: Annotated[list[str] | None, typer.Option(
        "--rule", help="Exploratory override of the registered rule, e.g. margin=0.05 or "
        "rule=ci; every output is then marked not pre-registered.")] = None,
    fail_on: Annotated[list[FailOnChoice] | None, typer.Option(
        "--fail-on",
        help="Exit 4 when (repeatable): " + "; ".join(
            f"{k}: {v}" for k, v in FAIL_ON.items()))] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="Metrics to show, comma-separated, e.g. ttft_p99,itl_p99 (the "
        "decision and guardrail metrics are always shown).")] = None,
) -> None:
    """Per-cell and overall adopt / keep-default verdicts under the pre-registered rule.

    With `--format html -o DIR/report.html` the plots are also written as PNG and SVG to
    DIR/plots/."""
    from campaign import report as report_mod

    conditions = [c.value for c in fail_on or []]
    if output is not None:
        check_output_path(output, "--output")
        if fmt.value == "html":  # its plots go to a folder beside it: checked alike
            check_output_folder(output.parent / "plots", "--output", output)
    overrides: dict[str, str] = {}
    for item in rule or []:
        if "=" not in item:
            raise UsageError(f"--rule {item}: write KEY=VALUE, e.g. margin=0.05")
        k, v = item.split("=", 1)
        overrides[k.strip()] = v.strip()
    _refuse_repeats(run_dirs)
    rep = report_mod.build_report(run_dirs, rule_overrides=overrides or None,
                                  metrics=None if metrics is None else [metrics])
    held = report_mod.fail_on_held(rep, conditions)
    # a closed pipe (`| head -1`: exit 0), a full or closed stdout (exit 3): `cli.streams`
    _show_report(rep, fmt.value, output)
    if held:
        for line in held:
            err.print(line, markup=False)
        raise typer.Exit(EXIT_INCOMPLETE)


PIPED_WIDTH = 180
"""The tables' width when stdout is not a terminal and COLUMNS is unset (as `spec-ab run`)."""


def _refuse_repeats(run_dirs: list[Path]) -> None:
    """The same run directory given twice (`RUN RUN`, `RUN RUN/`, a symlink to it) would
    read as a history of two nights: refused (exit 2), naming both spellings."""
    seen: dict[Path, Path] = {}
    for d in run_dirs:
        try:
            key = d.resolve()
        except (OSError, RuntimeError):
            continue  # a path that cannot be resolved is refused by the reader
        if key in seen:
            same = "" if str(seen[key]) == str(d) else f" (as {seen[key]} and {d})"
            raise UsageError(f"run directory {key} is given twice{same}; each run counts once "
                             "in a report", hint="give each run directory once")
        seen[key] = d


def _show_report(rep: Any, fmt: str, output: Path | None) -> None:
    """Print or write the report; html to a file also writes its plots beside it."""
    from campaign import report as report_mod

    if fmt == "table" and output is None:
        # the terminal's width, or COLUMNS; piped without COLUMNS (a CI log, `| grep`):
        # wide tables and each line of text on one line, so grep finds it whole
        piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
        report_mod.print_table(rep, Console(highlight=False, width=PIPED_WIDTH if piped
                                            else None), piped=piped)
        return
    if fmt == "html" and output is not None:
        from campaign.report import as_html, plots

        folder = output.parent / "plots"
        make_output_folder(folder, "--output", output)
        try:
            figs = plots.write_files(rep, folder)
        except OSError as exc:  # a full disk, a file in a plot's place
            raise output_folder_error(folder, "--output", output, exc,
                                      writing=True) from None
        text = as_html.render_html(rep, plots.pngs(rep))
        write_output(output, text, "--output")
        err.print(f"wrote {output} and {len(figs)} plot files in {folder}", markup=False)
        return
    text = report_mod.render(rep, fmt)
    if output is not None:
        write_output(output, text, "--output")
        err.print(f"wrote {output}", markup=False)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
