"""The typer app every command module registers on: consoles, the error guard (expected
failures → one message and their exit code), logging, and the options' shared parsing."""

from __future__ import annotations

import enum
import functools
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from campaign import __version__, secrets
from campaign.errors import (
    EXIT_INTERRUPTED,
    CampaignError,
    UsageError,
)
from campaign.report.formats import FAIL_ON, FORMATS

# Choices from the registries, so help, completion and validation list the same values.
FormatChoice = enum.Enum("FormatChoice", {k: k for k in FORMATS}, type=str)  # type: ignore[misc]
FailOnChoice = enum.Enum("FailOnChoice", {k: k for k in FAIL_ON}, type=str)  # type: ignore[misc]


def _plain_flags() -> None:
    """On/off options show no `<bool>` type in help: `--force` is a flag, not a value."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_plain_flags()

COMMAND_ORDER = ("try", "init", "check", "plan", "run", "report", "verify", "watch", "clean")
"""`spec-ab --help` lists the commands in workflow order (then `sim`)."""

app = typer.Typer(
    name="spec-ab",
    help="Same-window A/B benchmark campaigns for speculative decoding on vLLM, judged by "
    "a rule fixed before the runs.",
    epilog="Workflow: try (an afternoon look) → init → check → plan → run → report (clean "
    "after a crash). Words "
    "(lane, shard, cell, knee, agentfix, `all`, implied_a): docs/glossary.md. Nightly CI: "
    "docs/nightly-ci.md.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion: choices (--template, --format, ...) complete
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Not a terminal (CI logs, pipes): lines are not wrapped (paths stay copyable) and tables
# get room; on a terminal rich measures it.
def _tty(stream: Any) -> bool:
    """Is `stream` a terminal (False when it is closed: `spec-ab ... >&-`)?"""
    try:
        return stream is not None and bool(stream.isatty())
    except (OSError, ValueError):
        return False


_WIDTH = None if _tty(sys.stdout) or os.environ.get("COLUMNS") else 180
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Expected failures → one message on stderr and their exit code (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CampaignError as exc:
            # `[after merging arm 'x']`, `[a-z0-9]` are text; a secret never is
            text = escape(secrets.scrub(str(exc)))
            err.print(f"[bold red]error:[/] {text}" if exc.exit_code != EXIT_INTERRUPTED
                      else f"[yellow]{text}[/]", markup=True, highlight=False)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"spec-ab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, show_default=False,
                                         help="Log to stderr: -v the steps of a run (boot, "
                                         "ready, passes, stop), -vv debug.")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Log errors only.")] = False,
) -> None:
    """Same-window A/B campaigns for speculative decoding on vLLM."""
    setup_logging(verbose, quiet)


def setup_logging(verbose: int, quiet: bool) -> None:
    """Python logging to stderr: WARNING by default, -v INFO, -vv DEBUG, -q ERROR."""
    level = (logging.ERROR if quiet else logging.DEBUG if verbose >= 2
             else logging.INFO if verbose == 1 else logging.WARNING)
    root = logging.getLogger("campaign")
    for h in list(root.handlers):
        if getattr(h, "_spec_ab", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._spec_ab = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                           "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False



def pct(text: str, flag: str, lo: float | None = None, hi: float | None = None, *,
        hi_open: bool = False) -> float:
    """A percentage option (`15%` or `0.15`) as a fraction; UsageError naming `flag`: not
    a number, not finite (nan, inf, 1e308%), or outside [lo, hi] (hi excluded with
    `hi_open`) when bounds are given, with the valid range."""
    try:
        t = text.strip()
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"{flag} {text}: write a percentage like 15% or a fraction 0.15") from None
    above = hi is not None and (value >= hi if hi_open else value > hi)
    if not math.isfinite(value) or (lo is not None and value < lo) or above:
        span = (f"from {_pc(lo)} to {_pc(hi)}{' (excluded)' if hi_open else ''}"
                if lo is not None and hi is not None else "a finite number")
        raise UsageError(f"{flag} {text}: out of range; give a percentage {span}",
                         hint=f"e.g. {flag} 15%")
    return value


def _pc(x: float | None) -> str:
    return f"{(x or 0) * 100:g}%"
