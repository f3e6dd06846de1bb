"""`spec-ab report`: results directories → verdicts → a table, Markdown, JSON or HTML.

- `model`: the typed `Report` / `RunReport`;
- `build`: run directories → a `Report` (each run judged under its registered rule),
  and `exit_code_for` (`--fail-on`);
- `rows`: the cell, history and ranking rows and the shared lines, computed once;
- `as_table`, `as_markdown`, `as_json`, `as_html` (+ `plots`, also written as PNG and SVG
  files beside an HTML report): one module per format, each only lays the rows out, in
  one order: the decision, its reason and what would settle it; the decision cells; the
  guardrails; then the other cells by workload;
- `formats`: the `FORMATS` registry the CLI validates, lists and completes from, and
  `render`;
- `sequential`: a sequential design's looks as lines and JSON;
- `stacked`: a table that cannot fit a narrow terminal, stacked;
- `reads`: which rows a report reads (the newest run in full, older runs where their
  decision needs) and what the plots and load shapes take from them;
- `ratesweep`: a rate sweep's capacity at SLO per arm and each candidate's crossover;
  `turns`: acceptance per session turn, per arm;
- the figures, one module each, sharing `plot_common`: `plot_knee` (the knee's Pareto
  view), `plot_levels` (each knee level), `plot_guardrails` (the guardrails that decided),
  `plot_window` (the control across the window), `plot_sequential` (the design's path),
  `plot_rates` (latency against offered rate, each arm's capacity at SLO marked).

Renderers are pure functions of a `Report` (golden-tested), so the CLI only parses, calls
`build_report`, renders and maps `exit_code_for` to the process's exit code. Several run
directories (a nightly history) are shown side by side: the newest run's decision, one
line per run, then the newest run in full; `--fail-on` looks at the newest run only and
every trigger exits 4.

The names below are loaded on first use (PEP 562), so importing the registry
(`campaign.report.formats`) for `--help` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "cell_dict": "as_json", "history_dict": "as_json", "render_json": "as_json",
    "run_dict": "as_json", "to_dict": "as_json",
    "render_markdown": "as_markdown",
    "print_table": "as_table", "render_table": "as_table", "table_renderables": "as_table",
    "render_html": "as_html",
    "build_report": "build", "exit_code_for": "build", "fail_on_held": "build",
    "FAIL_ON": "formats", "FORMATS": "formats", "OutputFormat": "formats", "render": "formats",
    "EXPLORATORY": "model", "REPORT_SCHEMA_VERSION": "model", "Format": "model",
    "Loader": "model", "Report": "model", "RunReport": "model",
    "summary_lines": "rows",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'campaign.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"campaign.report.{module}"), name)
