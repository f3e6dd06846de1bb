"""The journal, `journal.jsonl`: its events spelled once, the append (fsynced line by line),
every reader, and a pass's tidy rows (how `passes.csv` is written from it).

The journal is the run directory's source of truth: the runner appends one event before
it takes the next step, `--resume` reads where it stopped, and `passes.csv` is rebuilt
from its `pass` events. Every writer and reader goes through this module, so an event's
name and fields are spelled in one place (`Event`).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from campaign import secrets
from campaign.errors import ResultsError
from campaign.results import chain
from campaign.textfiles import JOURNAL_CAP, open_regular, read_capped

FILE_NAME = "journal.jsonl"

Event = Literal[
    "registered",
    "run_start",
    "pair_start",
    "slot_start",
    "server_ready",
    "pass",
    "pass_interrupted",
    "fidelity",
    "slot_done",
    "slot_failed",
    "boot_retry",
    "launch_error",
    "pair_done",
    "pair_invalid",
    "pair_redo",
    "look",
    "interrupted",
    "aborted",
    "finished",
]
"""Every event a journal holds, in the order a run writes them:

- `registered` (first line): `sha256` of the rule, `campaign_path`, `base_dir` (the
  campaign's own folder: relative paths of the frozen copy resolve against it), `lane`,
  `lanes` (a shard: every lane of the campaign);
- `run_start`: one per session (`pid`, `resumed`, `lane`, `redo_invalid`);
- `pair_start` / `pair_done` (`invalid_passes`) / `pair_invalid` (`reason`, `fault`): one pair
  attempt (`pair`, `pair_attempt`; `redo` when it redoes a cut or invalid attempt);
- `slot_start` (`launch`, `started_at`), `server_ready` (`boot_s`; `identity`: an external
  server's model ids and `/version`, the first time its arm is ready), `slot_done` (`wall_s`,
  `boot_s`, `aiperf_s`, `fidelity_s` (the lossless check's requests), `overhead_s` (the
  rest: the runner's own time, the server's stop)) / `slot_failed` (`reason`): one arm of
  a pair;
- `boot_retry` (`pair`, `arm`, `reason`): an arm never ready in this run exited while
  booting and is booted once more; `launch_error` (`pair`, `arm`, `status`, `error`: the
  first boot's first error line, `headline`, `reason`): it exited the same way again and
  the run stops (`run.launcherror`);
- `pass`: one AIPerf pass with its `rows` (the tidy rows of `passes.csv`), `valid`,
  `problems`, whose failure an invalid pass is (`fault`: `lane` or `own`) and what AIPerf
  did; `pass_interrupted` when a stop cut it; `fidelity`: an arm's answers to the fidelity
  prompts (`round`, `outputs`; `campaign.run.measure.fidelity`), whose figures follow as `pass`
  events of workload `fidelity` (`against` names what they compare with);
- `pair_redo`: a pair left invalid by the lane alone, measured again within the night
  (`pair`, the `pair_attempt` the redo will be, its `cause`, `budget_left` of
  `gates.redo_budget`);
- `look`: a sequential design's look after `pair` (`look`, `stop`, and per candidate its
  `state`, `why` and each decision cell's statistic and bounds), so a reader can audit that
  no look was skipped or added; `stop` true ends the night there;
- `interrupted` (Ctrl-C), `aborted` (infrastructure, `reason`), `finished` (`complete`,
  `pairs_valid`, `pairs_invalid`, the journal's tidy `rows`, `passes_sha256` of the
  passes.csv written with it, and its size before this line, `journal_bytes`: the last
  line of a run that ran to its end, which lets a reader trust `passes.csv` from the
  journal's tail alone while both are as the run left them).
"""
EVENTS: frozenset[str] = frozenset(get_args(Event))

PASS_COLUMNS = [
    "run", "pair", "pair_attempt", "arm", "slot", "started_at", "workload", "level",
    "metric", "value", "valid", "attempt", "reason",
]
"""The columns every passes.csv has (results schema 1 and later)."""
OPTIONAL_COLUMNS = ["log_se"]
"""Columns a newer passes.csv adds; an older file without them reads them as missing."""
CSV_COLUMNS = [*PASS_COLUMNS, *OPTIONAL_COLUMNS]

TAIL_BYTES = 16384
"""How much of a journal's end (or first line) the quick readers look at."""

Events = Sequence[Mapping[str, Any]]


# --------------------------------------------------------------------------- writing


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps(obj: Any) -> str:
    """JSON for a results file (secret values of the runner's environment scrubbed)."""
    return secrets.scrub(json.dumps(obj, indent=2, sort_keys=False, default=str)) + "\n"


def append(path: Path, event: Event, t: str, **data: Any) -> dict[str, Any]:
    """Append one event at time `t` (flushed and fsynced: a crash loses at most this
    line), chained to the line before it (`prev`: `results.chain`); the record written.
    A line torn by a crash is first ended with a newline, so the new line does not glue
    onto it (the torn line stays, damaged and chained to)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        prev, torn = chain.prev_for_append(fd, path)
        record = {"t": t, "event": event, **({"prev": prev} if prev else {}), **data}
        line = secrets.scrub(json.dumps(record, default=str)) + "\n"
        raw = line.encode("utf-8")
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, b"\n" + raw if torn else raw)
            os.fsync(fd)
        except OSError as exc:
            # A full disk: cut the half line off, so the next line (after the cause is
            # fixed and the run resumed) does not glue onto it and damage both.
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            if exc.filename is None:
                exc.filename = str(path)
            raise
        chain.appended(fd, path, raw)
    finally:
        os.close(fd)
    return record


def _write_all(fd: int, raw: bytes) -> None:
    written = 0
    while written < len(raw):
        written += os.write(fd, raw[written:])


# --------------------------------------------------------------------------- reading


def read_journal(run_dir: Path) -> list[dict[str, Any]]:
    """All complete journal lines (a torn last line from a crash is ignored)."""
    return journal_problems(run_dir)[0]


def journal_problems(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The journal's events and what is wrong with it: lines that do not parse (a torn
    last line is a crash while writing it; one in the middle is damage)."""
    path = run_dir / FILE_NAME
    try:
        raw = read_capped(path, JOURNAL_CAP, "journal")
    except FileNotFoundError:
        return [], []
    text = raw.decode("utf-8", errors="replace")
    events: list[dict[str, Any]] = []
    bad: list[int] = []
    lines = text.splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            bad.append(i)
            continue
        if isinstance(ev, dict):
            events.append(ev)
        else:
            bad.append(i)
    problems = []
    if last in bad:
        problems.append(f"{path}: the last line (line {last + 1}) is torn — the run stopped "
                        "while writing it; the events before it are used")
    middle = [i + 1 for i in bad if i != last]
    if middle:
        problems.append(f"{path}: {len(middle)} damaged line(s) left out (line "
                        f"{', '.join(map(str, middle[:5]))}{', ...' if len(middle) > 5 else ''})")
    return events, problems


def of_kind(events: Events, event: Event) -> list[Mapping[str, Any]]:
    """The events of one kind, in journal order."""
    return [ev for ev in events if ev.get("event") == event]


@dataclass(frozen=True)
class Ending:
    """The journal's last `finished` event, read from its tail."""

    complete: bool
    rows: int | None
    """The tidy rows the journal held when the run finished, when the journal is still
    exactly as it was then (`finished` its last line, its size the one it recorded); None
    otherwise (read the journal to know)."""
    passes_sha256: str | None = None
    """The SHA-256 of passes.csv as the run wrote it last, under the same condition."""
    undigested: bool = False
    """The journal is intact but its `finished` event predates `passes_sha256` (a run of an
    older spec-ab): only the row count can vouch for passes.csv unread."""
    head: str | None = None
    """The run's digest (`results.chain.head`: SHA-256 of the last complete line), from
    the same tail when the last line fits in it."""
    first: Mapping[str, Any] = field(default_factory=dict)
    """The journal's first event (`first_event`), read through the same open file."""


def ending(run_dir: Path) -> Ending:
    """How the run ended, from the journal's tail only: a report over a thousand nightly
    runs must not parse every journal line. A complete run's last event is `finished`
    (nothing runs after it and it cannot be resumed)."""
    path = run_dir / FILE_NAME
    try:
        with open_regular(path, "journal") as f:
            first = _first(f.readline(TAIL_BYTES))
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            raw = f.read()
    except FileNotFoundError:
        return Ending(False, None)
    head = _tail_head(raw, whole=size <= TAIL_BYTES)
    tail = raw.decode("utf-8", errors="replace")
    last = len(tail.splitlines()) - 1
    for i, line in reversed(list(enumerate(tail.splitlines()))):
        if '"finished"' not in line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(ev, dict) or ev.get("event") != "finished":
            continue  # a line `"finished"` is valid JSON, not an event
        before = ev.get("journal_bytes")
        intact = (i == last and raw.endswith(b"\n") and isinstance(before, int)
                  and size == before + len(line.encode("utf-8")) + 1)
        rows, digest = ev.get("rows"), ev.get("passes_sha256")
        return Ending(bool(ev.get("complete")),
                      rows if intact and isinstance(rows, int) else None,
                      digest if intact and isinstance(digest, str) else None,
                      undigested=intact and "passes_sha256" not in ev, head=head,
                      first=first)
    return Ending(False, None, head=head, first=first)


def _tail_head(raw: bytes, *, whole: bool) -> str | None:
    """SHA-256 of the last complete line in a journal's tail (None when the file ends
    torn, or the last line is longer than the tail)."""
    if not raw.endswith(b"\n"):
        return None
    cut = raw.rfind(b"\n", 0, len(raw) - 1)
    if cut < 0 and not whole:
        return None
    return chain.line_digest(raw[cut + 1:])


def finished(events: Events) -> bool:
    """Did the run finish complete (a `finished` event with `complete`)?"""
    return any(ev.get("event") == "finished" and ev.get("complete") for ev in events)


def registered(events: Events) -> Mapping[str, Any]:
    """The `registered` event ({} when the journal has none)."""
    return next((ev for ev in events if ev.get("event") == "registered"), {})


def first_event(run_dir: Path) -> dict[str, Any]:
    """The journal's first event, `registered` ({} when there is none or it does not
    parse). Reads the first line only: it says the campaign's own folder at registration
    (the frozen copy's relative paths are relative to it) and the digests the run's copies
    are checked against (`results.integrity`)."""
    try:
        with open_regular(run_dir / FILE_NAME, "journal") as f:
            return _first(f.readline(TAIL_BYTES))
    except (OSError, ResultsError):
        return {}


DAMAGED_HINT = ("restore journal.jsonl from a backup of the run folder, or measure the "
                "campaign again (spec-ab run FILE)")


def require_registered(run_dir: Path, first: Mapping[str, Any]) -> None:
    """ResultsError (exit 2) unless the journal's first line, `first` (`first_event`), is
    its `registered` event. A run folder without its journal, or whose journal lost that
    line, is damaged: passes.csv is only a copy of the journal's rows, and nothing else
    vouches for what was measured, so no report, resume or verify goes on from it."""
    if first.get("event") == "registered":
        return
    path = run_dir / FILE_NAME
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


def _first(line: bytes) -> dict[str, Any]:
    """A journal's first line as an event ({} when it does not parse as one)."""
    try:
        ev = json.loads(line)
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


def base_dir_of(events: Events) -> Path | None:
    """The registered campaign's own folder (None when the journal does not say)."""
    base = registered(events).get("base_dir")
    return Path(str(base)) if base else None


def campaign_path(events: Events) -> str | None:
    """The campaign file the run was registered from, as the journal names it."""
    path = registered(events).get("campaign_path")
    return str(path) if path else None


def recorded_lane(events: Events, manifest: Mapping[str, Any]) -> str | None:
    """The lane a run was registered on: its journal's `registered` event says it, else
    its manifest's `campaign.lane` (runs registered before the journal named it); None
    when neither does."""
    lane = registered(events).get("lane")
    if not lane:
        facts = manifest.get("campaign")
        lane = facts.get("lane") if isinstance(facts, Mapping) else None
    return lane if isinstance(lane, str) and lane else None


PairState = Literal["started", "done", "invalid"]


def looks_of(events: Events) -> dict[int, Mapping[str, Any]]:
    """pair → the `look` journaled after it (the last, if a resumed session took it again)."""
    return {int(ev["pair"]): ev for ev in of_kind(events, "look")}


def pair_status(events: Events) -> dict[int, tuple[int, PairState]]:
    """pair → (latest attempt, state: started | done | invalid) from the journal."""
    states: dict[str, PairState] = {"pair_start": "started", "pair_done": "done",
                                    "pair_invalid": "invalid"}
    status: dict[int, tuple[int, PairState]] = {}
    for ev in events:
        state = states.get(str(ev.get("event")))
        if state is not None:
            status[ev["pair"]] = (ev["pair_attempt"], state)
    return status


def invalid_passes_of(events: Events, pair: int, attempt: int) -> list[str]:
    """The passes a finished pair attempt left invalid (`arm/pass`), from its `pair_done`."""
    for ev in events:
        if (ev.get("event") == "pair_done" and ev.get("pair") == pair
                and ev.get("pair_attempt") == attempt):
            return list(ev.get("invalid_passes", []))
    return []


# --------------------------------------------------------------------------- tidy rows


@dataclass(frozen=True)
class PassRow:
    """One tidy row of `passes.csv`."""

    run: str
    pair: int
    pair_attempt: int
    arm: str
    slot: int
    started_at: str
    workload: str
    level: str
    metric: str
    value: float
    valid: bool
    attempt: int
    reason: str = ""
    log_se: float | None = None
    """Sampling error of the value from the pass's own requests: the sd of ln(value) over
    resamples of the level's requests (None when not computed, e.g. a throughput)."""


@dataclass(frozen=True)
class PassPlace:
    """What every row of one pass attempt shares: where and when it was measured."""

    run: str
    pair: int
    pair_attempt: int
    arm: str
    slot: int
    started_at: str
    workload: str
    attempt: int


@dataclass(frozen=True)
class LevelRows:
    """One level of a pass as rows: its label, its metrics and why it is invalid."""

    level: str
    metrics: Mapping[str, float]
    reasons: Sequence[str] = ()
    log_se: Mapping[str, float] = field(default_factory=dict)
    """metric → its sampling error (metrics without one carry none)."""


def pass_rows(place: PassPlace, levels: Iterable[LevelRows],
              figures: Mapping[str, float] | None = None, *, figures_level: str = "all",
              figures_reasons: Sequence[str] = (), valid: bool = True) -> list[PassRow]:
    """The tidy rows of one measured pass: each level's metrics (valid when the level has
    no reason against it), then the server's figures of the whole pass under
    `figures_level` (valid when the pass is)."""
    rows: list[PassRow] = []
    where = asdict(place)
    for lv in levels:
        reason = "; ".join(lv.reasons)
        rows.extend(PassRow(**where, level=lv.level, metric=name, value=float(value),
                            valid=not lv.reasons, reason=reason, log_se=lv.log_se.get(name))
                    for name, value in lv.metrics.items())
    for name, value in (figures or {}).items():
        rows.append(PassRow(**where, level=figures_level, metric=name,
                            value=float(value), valid=valid,
                            reason="; ".join(figures_reasons)))
    return rows


def rows_to_csv(rows: Iterable[PassRow]) -> str:
    """passes.csv's text: the header, then one line per row in CSV_COLUMNS' order (fields
    read directly: `asdict`'s deep copy per row was most of a run's write and load)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(
        (r.run, r.pair, r.pair_attempt, r.arm, r.slot, r.started_at, r.workload, r.level,
         r.metric, repr(float(r.value)), "true" if r.valid else "false", r.attempt, r.reason,
         "" if r.log_se is None else repr(float(r.log_se)))
        for r in rows)
    return buf.getvalue()


def passes_from_journal(events: Events) -> list[PassRow]:
    rows: list[PassRow] = []
    for ev in events:
        if ev.get("event") == "pass":
            rows.extend(PassRow(**r) for r in ev.get("rows", []))
    return rows
