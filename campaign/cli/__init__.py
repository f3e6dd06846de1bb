"""The `spec-ab` command: parse, call one core function, render, map errors to exit codes.

One module per command (`check` with `clean`, `run`, `report`, `verify`, `watch`, `init`,
`plan`, `try_`), each registering on the one typer app of `app`; `spec-ab sim` is the
simulator's own app; `tryout`: `spec-ab try`'s core (the campaign it generates, runs and
registers); `streams`: a standard output that is closed or fails, handled once.

Exit codes (every command): 0 done · 1 internal error (a bug: traceback shown) · 2 bad
usage or invalid campaign file · 3 preflight or infrastructure failure · 4 campaign
finished but incomplete (or a `--fail-on` condition met) · 130 interrupted. `watch` alone
gives 1 a meaning of its own: a change for the worse in a lane's control among its newest
nights (nightly CI fails on it). A stdout that
is closed or cannot be written is exit 3; a reader that goes away (`| head -1`) is not an
error: the rest of the output is discarded and the command finishes.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from campaign.cli import (  # noqa: F401  (they register)
    check,
    init,
    plan,
    report,
    run,
    streams,
    try_,
    verify,
    watch,
)
from campaign.cli.app import COMMAND_ORDER, app, setup_logging
from campaign.sim.cli import sim_app

__all__ = ["app", "hoist_global_options", "main", "setup_logging"]

app.add_typer(sim_app, name="sim",
              help="The simulated speculative-decoding lane (vLLM-compatible, no GPU).")


def _workflow_order() -> None:
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}

    def key(c: Any) -> int:
        return rank.get(str(c.name or getattr(c.callback, "__name__", "")), len(rank))

    app.registered_commands.sort(key=key)


_workflow_order()


_GLOBAL = re.compile(r"^(-q|--quiet|--verbose|-v+)$")


def hoist_global_options(argv: list[str]) -> list[str]:
    """`-q` / `-v` (`--quiet`, `--verbose`) are the root's options; written after the
    subcommand (`spec-ab report RUN -q`) they are moved before it, where they belong.
    Nothing after `--` moves."""
    end = argv.index("--") if "--" in argv else len(argv)
    moved = [a for a in argv[:end] if _GLOBAL.match(a)]
    rest = [a for a in argv[:end] if not _GLOBAL.match(a)]
    return [*moved, *rest, *argv[end:]]


def main() -> None:
    """The `spec-ab` command; a failing stdout is handled here, once (`cli.streams`)."""
    streams.prepare()
    sys.argv[1:] = hoist_global_options(sys.argv[1:])
    try:
        app()
    except SystemExit as exc:
        streams.finish(exc.code)
    except streams.StdoutError as exc:
        streams.finish(None, exc)
    streams.finish(0)
