"""What is wrong with a run's journal, said once for every command that reads it.

`journal.jsonl` is the run's source of truth (`results.journal`). A folder without it, or
whose first line is not the `registered` event, is damaged: `require_registered` refuses
it (exit 2) for `report`, `run --resume` and `verify` alike. Within it, `journal.read`
finds the lines that are no event and the pass events whose rows cannot be read:

- `report` reads around them and says where (`journal_problems`: the notes it shows first);
- a resume, which writes (passes.csv is rebuilt from the journal, pairs are measured from
  the states it reads), refuses them, naming file and line (`refuse_damage`), with one
  exception each way a crash tears a line: a torn last line is set aside in
  `journal.jsonl.torn-<n>` beside the journal, its bytes kept (`set_aside_torn`), and a
  torn line a later append ended is vouched for by the chain (`Reading.crashed`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.errors import ResultsError
from campaign.results import chain
from campaign.results import journal as jr
from campaign.textfiles import JOURNAL_CAP, atomic_write, open_regular, read_capped

DAMAGED_HINT = ("restore journal.jsonl from a backup of the run folder, or measure the "
                "campaign again (spec-ab run FILE)")
NAMED = 5
"""How many damaged places a note or a refusal names (then "and N more")."""


def require_registered(run_dir: Path, first: Mapping[str, Any]) -> None:
    """ResultsError (exit 2) unless the journal's first line, `first` (`jr.first_event`), is
    its `registered` event. A run folder without its journal, or whose journal lost that
    line, is damaged: passes.csv is only a copy of the journal's rows, and nothing else
    vouches for what was measured, so no report, resume or verify goes on from it."""
    if first.get("event") == "registered":
        return
    path = run_dir / jr.FILE_NAME
    if not path.exists():
        raise ResultsError(f"{path} is missing: the journal is the run's record of what was "
                           "measured, and passes.csv cannot be trusted without it",
                           hint=DAMAGED_HINT)
    with open_regular(path, "journal") as f:  # a FIFO, a device, a folder: named as such
        size = os.fstat(f.fileno()).st_size
    if size > JOURNAL_CAP:
        read_capped(path, JOURNAL_CAP, "journal")  # not the file spec-ab wrote: said so
    event = first.get("event")
    what = ("the file is empty" if size == 0
            else f"it is a '{event}' event" if isinstance(event, str)
            else "it is not an event")
    raise ResultsError(f"{path}: line 1 is not the run's registered event ({what}): the "
                       "journal is damaged, and what was measured cannot be trusted "
                       "without it", hint=DAMAGED_HINT)


def journal_problems(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The journal's events and what a report must say about it: a torn last line (a
    crash while writing it), lines that are no event (damage, left out), pass events whose
    rows cannot be read (those rows are lost: named by line and field)."""
    reading = jr.read(run_dir)
    return reading.events, notes(run_dir / jr.FILE_NAME, reading)


def notes(path: Path, reading: jr.Reading) -> list[str]:
    """What `reading` leaves out, one note per kind (pass events: one each, `NAMED` at most)."""
    out = []
    if reading.torn is not None:
        out.append(f"{path}: the last line (line {reading.torn}) is torn — the run stopped "
                   "while writing it; the events before it are used")
    middle = [n for n in reading.damaged if n != reading.torn]
    if middle:
        out.append(f"{path}: {len(middle)} damaged line(s) left out (line "
                   f"{', '.join(map(str, middle[:NAMED]))}"
                   f"{', ...' if len(middle) > NAMED else ''})")
    out += [f"{path}: line {n}: {lost}" for n, lost in reading.rows[:NAMED]]
    if len(reading.rows) > NAMED:
        out.append(f"{path}: and {len(reading.rows) - NAMED} more pass event(s) with rows "
                   "that cannot be read")
    return out


def refuse_damage(run_dir: Path, reading: jr.Reading) -> None:
    """ResultsError (exit 2) for what a resume must not write past: a line that is no event
    (a torn last line aside, and a torn line the chain shows a crash left), or a pass event
    whose rows cannot be read. A resume goes on from what the journal says was measured
    and rebuilds passes.csv from it; what such a line held (a pair's end, its rows) would
    be lost from both."""
    where = [f"line {n} is not an event ({why})" for n, why in reading.damaged.items()
             if n != reading.torn and n not in reading.crashed]
    where += [f"line {n}: {lost}" for n, lost in reading.rows]
    if not where:
        return
    more = f"; and {len(where) - NAMED} more" if len(where) > NAMED else ""
    raise ResultsError(
        f"{run_dir / jr.FILE_NAME}: " + "; ".join(where[:NAMED]) + more + " — a resume "
        "cannot tell what was measured there, and would rebuild passes.csv without it",
        hint=f"spec-ab report {run_dir} reads what was measured around it (and names it); "
        "to measure the rest, " + DAMAGED_HINT)


@dataclass(frozen=True)
class SetAside:
    """A torn last line moved out of the journal, its bytes kept beside it."""

    line: int
    kept: Path

    def note(self, journal: Path) -> str:
        return (f"{journal}: the last line (line {self.line}) is torn — the run stopped "
                f"while writing it; its bytes are set aside in {self.kept}, kept as they "
                f"were, and the run resumes from line {self.line - 1}")


def set_aside_torn(run_dir: Path) -> SetAside | None:
    """Move a torn last line (no newline after it, no event: a crash while writing it) out
    of the journal into `journal.jsonl.torn-<n>` beside it, so the resumed session appends
    to whole lines. The copy is written and fsynced before the journal is cut back: a
    crash between the two keeps both. No line chains to a torn one, so the chain holds.
    Call it under the lane lock (no session of the run is writing)."""
    path = run_dir / jr.FILE_NAME
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        tail = chain.last_line(fd, size)
        if not _is_torn(tail):
            return None
        line = _newlines(fd, size - len(tail)) + 1
        n = 1
        while (run_dir / f"{jr.FILE_NAME}.torn-{n}").exists():
            n += 1
        kept = run_dir / f"{jr.FILE_NAME}.torn-{n}"
        atomic_write(kept, tail, overwrite=False)
        os.ftruncate(fd, size - len(tail))
        os.fsync(fd)
    finally:
        os.close(fd)
    return SetAside(line, kept)


def torn_line(run_dir: Path) -> int | None:
    """The line a resume would set aside (`set_aside_torn`), read only: a `--dry-run` of
    the resume says so and changes nothing. None: no torn last line (or no journal)."""
    try:
        fd = os.open(run_dir / jr.FILE_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        tail = chain.last_line(fd, size)
        return _newlines(fd, size - len(tail)) + 1 if _is_torn(tail) else None
    finally:
        os.close(fd)


def _is_torn(tail: bytes) -> bool:
    """A last line cut by a crash: no newline after it, and no event in it."""
    return bool(tail.strip()) and not tail.endswith(b"\n") and isinstance(
        jr.parse_line(tail), str)


def _newlines(fd: int, end: int) -> int:
    """How many newlines the open file holds before byte `end`."""
    count = pos = 0
    while pos < end:
        chunk = os.pread(fd, min(1 << 20, end - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count
