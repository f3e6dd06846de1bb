"""The output formats of `spec-ab report`: one registry the CLI validates, lists and
completes from, and `render` dispatches on.

A leaf: renderers are named by module and loaded on first use, so `spec-ab --help` and
shell completion read the registry without importing pandas or matplotlib.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from campaign.errors import UsageError

if TYPE_CHECKING:
    from campaign.report.model import Report


@dataclass(frozen=True)
class OutputFormat:
    name: str
    help: str
    suffix: str
    """File suffix a saved report of this format gets."""
    module: str
    """The module under campaign.report that lays this format out (its `render`)."""

    def renderer(self) -> Callable[[Report], str]:
        mod = importlib.import_module(f"campaign.report.{self.module}")
        return cast("Callable[[Report], str]", mod.render)


FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        OutputFormat("table", "terminal tables (plain text when piped or saved)", ".txt",
                     "as_table"),
        OutputFormat("markdown", "Markdown for a PR comment or a CI summary", ".md",
                     "as_markdown"),
        OutputFormat("json", "the machine contract, versioned by schema_version", ".json",
                     "as_json"),
        OutputFormat("html", "one self-contained page with embedded plots", ".html",
                     "as_html"),
    )
}

FAIL_ON: dict[str, str] = {
    "loss": "a decision cell of a candidate is labelled loss",
    "keep-default": "the decision is keep-default",
    "incomplete": "pairs are missing or left out, or the run did not finish",
    "unstable": "a decision cell is flagged window-drift, high-variance or lanes-disagree "
                "(the lane moved, is too noisy to size the change, or pooled lanes measured "
                "different changes)",
    "undecided": "a sequential design has not decided: still going on, or inconclusive at "
                 "max_pairs",
    "not-preregistered": "the verdict is not pre-registered: the run's copies of its "
                         "registration disagree (an edit after the first boot), or --rule "
                         "overrides are in use",
}
"""`--fail-on` conditions (each exits 4 when it holds for the newest run)."""


def output_format(name: str) -> OutputFormat:
    chosen = FORMATS.get(name)
    if chosen is None:
        raise UsageError(f"--format {name}: choose {', '.join(FORMATS)}")
    return chosen


def check_fail_on(conditions: list[str] | tuple[str, ...]) -> None:
    for cond in conditions:
        if cond not in FAIL_ON:
            raise UsageError(f"--fail-on {cond}: choose {', '.join(FAIL_ON)}")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a report is built or rendered. A history's
    report allocates millions of objects that live until it is done, so each full
    collection walks all of them: a third of a 1,000-run report's time, and a share that
    grows with the history (scripts/bench-report). What a report drops is freed by
    reference counting as always; only cycles wait until the collector is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def render(report: Report, fmt: str, *, width: int = 160, to_file: bool = False) -> str:
    """The report as text in one of the formats (`table` is plain text, no colours);
    `to_file`: for a file (`report -o FILE`), no line of text hard-wrapped."""
    with collector_paused():
        if fmt == "table":
            from campaign.report.as_table import render_table, render_table_file

            return (render_table_file if to_file else render_table)(report, width=width)
        return output_format(fmt).renderer()(report)
