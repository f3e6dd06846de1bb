"""Expected failures of spec-ab, each mapped to a documented exit code.

    CampaignError                 base; never raised itself
    ├── UsageError        (2)     bad command-line usage, unfinished command
    ├── SpecError         (2)     invalid campaign file: one line per problem, YAML path + line
    ├── PreflightError    (3)     environment not ready: docker, image, port, files, GPU busy
    ├── ServerError       (3)     a server did not start, never became ready, or died booting
    │   └── BootExited            it exited while booting (its status and log lines)
    ├── PassError         (3)     a load-generator pass could not run at all (AIPerf missing)
    ├── StorageError      (3)     results cannot be written: disk full, read-only, not a folder
    ├── ResultsError      (2)     a results directory is missing, damaged or of another version
    ├── IncompleteError   (4)     the campaign finished but some pairs are invalid
    └── Interrupted       (130)   Ctrl-C / SIGTERM; everything already measured is kept

Anything else escaping the CLI is a bug: exit 1 with a traceback.
"""

from __future__ import annotations

import errno
from pathlib import Path

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INCOMPLETE = 4
EXIT_INTERRUPTED = 130


class CampaignError(Exception):
    """An expected failure with a message for the user and an exit code."""

    exit_code = EXIT_BUG

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  → {self.hint}"


class UsageError(CampaignError):
    exit_code = EXIT_USAGE


class SpecError(CampaignError):
    """An invalid campaign file. `problems` holds one line per problem."""

    exit_code = EXIT_USAGE

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"{path}: {len(problems)} {noun}\n{lines}")


class PreflightError(CampaignError):
    exit_code = EXIT_INFRA


class ServerError(CampaignError):
    exit_code = EXIT_INFRA


class BootExited(ServerError):
    """A server exited while booting: `status` ("exited with code 2") and the last log
    `lines`, so the runner can tell the same launch error twice from a flake."""

    def __init__(self, message: str, *, hint: str | None = None, arm: str = "",
                 status: str = "", lines: tuple[str, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.arm = arm
        self.status = status
        self.lines = lines


class PassError(CampaignError):
    exit_code = EXIT_INFRA


class StorageError(CampaignError):
    """A results file or folder cannot be written. What was measured before is in the
    journal (each line is written whole or not at all), so `--resume` continues."""

    exit_code = EXIT_INFRA


STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                            errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EIO, errno.EFBIG,
                            errno.EEXIST, errno.ENOENT, errno.ELOOP, errno.ENAMETOOLONG})


def storage_error(exc: OSError, what: str, where: Path | str | None = None, *,
                  run_dir: Path | None = None) -> StorageError:
    """`exc` (an OSError while writing `what` at `where`) as the user's message."""
    place = exc.filename if exc.filename is not None else where
    reason = exc.strerror or str(exc)
    if run_dir is not None and (run_dir / "journal.jsonl").is_file():
        hint = (f"everything measured so far is in {run_dir / 'journal.jsonl'}; fix the "
                f"cause, then continue with: spec-ab run --resume {run_dir}")
    else:
        hint = "free space or fix the permissions (or pick another --out), then run again"
    return StorageError(f"cannot write {what}" + (f" at {place}" if place else "")
                        + f": {reason}", hint=hint)


class ResultsError(CampaignError):
    exit_code = EXIT_USAGE


class IncompleteError(CampaignError):
    exit_code = EXIT_INCOMPLETE


class Interrupted(CampaignError):
    exit_code = EXIT_INTERRUPTED
    pair: int | None = None
    """The pair the stop cut (the runner sets it): `--resume` measures it again whole."""
