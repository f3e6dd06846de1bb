"""The `spec-ab` command line in this process (typer's CliRunner), as `campaign.cli.main`
runs it: global options hoisted, stdout and stderr kept apart, a deadline against hangs,
and anything but a clean exit (an uncaught exception) raised as a failure of the test.

A subprocess costs an interpreter start and the imports (a second or two each); only what
needs real streams (a closed or full stdout, a pipe whose reader goes away, an encoding)
is worth one: see tests/unit/cli/test_robust_io.py."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from typer.testing import CliRunner

from campaign.cli import app, hoist_global_options

DEADLINE_S = 60


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout, then stderr."""
        return self.stdout + self.stderr


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """A hang is a failure (SIGALRM), not a test that never ends."""
    def hang(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer in {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def invoke(*args: str, env: Mapping[str, str] | None = None,
           seconds: int = DEADLINE_S) -> Result:
    """`spec-ab ARGS` in process; `env` is set for the call only."""
    runner = CliRunner()
    with deadline(seconds):
        result = runner.invoke(app, hoist_global_options(list(args)), env=dict(env or {}),
                               catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {type(result.exception).__name__}: "
                             f"{result.exception}") from result.exception
    return Result(result.exit_code, result.stdout, result.stderr)
