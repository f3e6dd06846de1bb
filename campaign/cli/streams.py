"""Standard output that fails: handled once, in the command's entry (`campaign.cli.main`).

- stdout closed (`spec-ab report RUN >&-`): one line on stderr, exit 3, before anything runs;
- stdout that cannot be written (`>/dev/full`: ENOSPC, EIO...): one line on stderr naming
  the cause, exit 3 (`StdoutError`, a StorageError);
- the reader went away (`spec-ab report RUN | head -1`): the reader has what it wanted;
  the rest of the output is discarded quietly and the command finishes with its own exit
  code (a report 0, as docs/reading-a-report.md says; not 141, so a `set -o pipefail`
  script that keeps the first line does not fail on it). Not stopping matters for `run`:
  `spec-ab run | head` must not end a night of measurements (it did, exit 1);
- an encoding that cannot spell the output (`PYTHONIOENCODING=ascii`, a C locale): the
  output is still printed, each unencodable character written as `\\u2026`.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any, NoReturn

from campaign.errors import EXIT_INFRA, StorageError

HINT = ("check where the output goes (a full disk, a closed terminal or file), or send it "
        "to a file (`> FILE`, or `spec-ab report -o FILE`)")


class StdoutError(StorageError):
    """Standard output cannot be written (exit 3)."""


def _translated(exc: OSError) -> StdoutError | None:
    """The failure as the user's (None: a closed pipe, not an error); fd 1 is silenced at
    once, so the rest of the command's output (and the interpreter's last flush) goes to
    /dev/null instead of failing again."""
    _silence()
    if exc.errno == errno.EPIPE:
        return None
    return StdoutError(f"cannot write to standard output: {exc.strerror or exc}", hint=HINT)


class GuardedStdout:
    """sys.stdout with its write errors translated (`StdoutError`, `PipeClosed`); every
    other attribute (encoding, isatty, fileno, buffer) is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError as exc:
            failure = _translated(exc)
            if failure is not None:
                raise failure from None
            return len(text)  # the reader is gone: discarded

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            failure = _translated(exc)
            if failure is not None:
                raise failure from None
            try:
                self._stream.flush()  # what was buffered, to /dev/null now
            except OSError:
                pass


def _say(text: str) -> None:
    if sys.stderr is not None:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def prepare() -> None:
    """Before the command runs: refuse a closed stdout (exit 3), let both streams write
    what their encoding cannot spell as escapes, and guard stdout's writes."""
    if sys.stdout is None:
        _say(f"error: standard output is closed (spec-ab was started with >&-)\n  → {HINT}")
        sys.exit(EXIT_INFRA)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    if not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)  # type: ignore[assignment]


def _silence() -> None:
    """Point fd 1 at /dev/null, so the interpreter's last flush of what is still buffered
    cannot fail again (a traceback at exit, exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
        os.close(devnull)
    except (OSError, ValueError):
        pass


def finish(code: int | str | None, failure: BaseException | None = None) -> NoReturn:
    """Exit with `code` once stdout is flushed; a stdout that failed (`failure`, or the last
    flush) exits as the module docstring says."""
    if failure is None:
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
        except StdoutError as exc:
            failure = exc
    if isinstance(failure, StdoutError):
        _say(f"error: {failure}")
        sys.exit(EXIT_INFRA)
    sys.exit(code)
