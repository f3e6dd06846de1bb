"""`spec-ab report`: run directories → verdicts, as a table, Markdown, JSON or HTML."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from campaign.cli.app import FailOnChoice, FormatChoice, app, err, guarded
from campaign.errors import EXIT_INCOMPLETE, ResultsError, UsageError
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
    _refuse_near_misses(run_dirs)
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


def _refuse_near_misses(run_dirs: list[Path]) -> None:
    """A run folder that does not exist but is one edit away in each wrong part of its
    path (`results/…-f06ad`, `result/…-f06adb`) from a run folder that does: refused
    (exit 2) with the folder meant. Anything else that does not exist is the reader's
    to refuse (it also names a run a few characters off)."""
    for d in run_dirs:
        if os.path.lexists(d):
            continue
        meant = _one_edit_away(d)
        if meant is not None:
            raise ResultsError(f"{d}: no such results directory",
                               hint=f"did you mean {meant}?")


def _one_edit_away(path: Path) -> Path | None:
    """The existing run folder (it holds preregistration.json) reached from `path` by
    mending each part that does not exist with the one sibling a single edit away (an
    insertion, a deletion or a substitution); None when there is none, or several."""
    parts = path.parts
    here = Path(parts[0]) if path.is_absolute() else Path(".")
    mended = False
    for part in parts[1:] if path.is_absolute() else parts:
        step = here / part
        if not os.path.lexists(step):
            try:
                near = [p for p in here.iterdir() if _one_edit(part, p.name)]
            except OSError:
                return None
            if len(near) != 1:
                return None
            step, mended = near[0], True
        here = step
    found = mended and (here / "preregistration.json").is_file()
    return (here if path.is_absolute() else Path(os.path.normpath(here))) if found else None


def _one_edit(a: str, b: str) -> bool:
    """Are `a` and `b` one insertion, deletion or substitution apart?"""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long, strict=False)) if x != y),
             len(short))
    return short[i:] == long[i + 1:]


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
    text = report_mod.render(rep, fmt, to_file=output is not None)
    if output is not None:
        write_output(output, text, "--output")
        err.print(f"wrote {output}", markup=False)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
