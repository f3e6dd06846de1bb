"""`spec-ab watch`: the control arm of many nights, per lane, watched for lasting changes."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from campaign.cli.app import app, err, guarded
from campaign.errors import EXIT_USAGE
from campaign.textfiles import check_output_path, write_output

WATCH_FORMATS = ("table", "json", "markdown", "html")
WatchFormat = enum.Enum("WatchFormat", {k: k for k in WATCH_FORMATS}, type=str)  # type: ignore[misc]
EXIT_WORSE = 1
"""A change for the worse among the newest nights (nightly CI fails on it)."""


@app.command()
@guarded
def watch(
    run_dirs: Annotated[list[Path], typer.Argument(help="Finished run folders (the nights "
                                                   "of one or more lanes), or folders "
                                                   "holding them.")],
    fmt: Annotated[WatchFormat, typer.Option(
        "--format", "-f", help="table, json, markdown, or html (one plot per "
        "series).")] = WatchFormat("table"),
    since: Annotated[int, typer.Option(
        "--since", help="Exit 1 on a change for the worse among each lane's newest N "
        "nights.")] = 7,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file "
                                                "instead of stdout.")] = None,
) -> None:
    """Across nights, per lane: has the control itself moved? Each lane's control arm per decision cell (the primary metric, the spec-decode figures, TTFT p50/p99: the median over each night's valid passes), nights in registered order, change points by e-divisive means (Apache Otava); one bad night is an outlier, not a change. Nights that fail `spec-ab verify` are named and left out. Exit 0: no change for the worse among the newest --since nights; 1: there is one; 2: bad input."""
    from campaign.watch import figures, text, watching  # numpy, scipy: not for --help

    if output is not None:
        check_output_path(output, "--output")
    result = watching.watch(run_dirs, since)
    page = {"table": text.render_table, "json": text.render_json,
            "markdown": text.render_markdown, "html": figures.render_html}[fmt.value](result)
    if output is not None:
        write_output(output, page, "--output")
        err.print(f"wrote {output}", markup=False)
    else:
        sys.stdout.write(page)
        sys.stdout.flush()
    if not result.findings:
        err.print("error: no night to watch: every run folder given fails `spec-ab verify` "
                  "or measured nothing (see above)", markup=False)
        raise typer.Exit(EXIT_USAGE)
    if result.failing:
        raise typer.Exit(EXIT_WORSE)
