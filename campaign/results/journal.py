"""The journal, `journal.jsonl`: its events spelled once, the append (fsynced line by line),
every reader, and a pass's tidy rows (how `passes.csv` is written from it).

A line is read as UTF-8 and one JSON object, or it is damaged (`read`: where and why); a
pass event's row is read only when every field is what `PassRow` says (`row_problem`).
What a report says about damage and what a resume refuses is `results.damage`.

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
from dataclasses import MISSING, asdict, dataclass, field, fields
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
- `run_start`: one per session (`pid`, `resumed`, `lane`, `redo_invalid`; `torn_set_aside`:
  the file beside the journal a torn last line was moved to, `results.damage`);
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
  prompts, one event per round of one attempt (`name`, `attempt`, `round`, `outputs`,
  `wall_s`, `valid`, `problems`, `fault`; `campaign.run.measure.fidelity`), whose figures
  (valid answers only) follow as `pass` events of workload `fidelity` (`against` names what
  they compare with);
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


FREE_TEXT_FIELDS = frozenset({
    "reason", "error", "headline", "problems", "problem", "why", "cause", "launch",
    "command", "docker_run", "server_version"})
"""The fields of an event or a results file that are free text (messages, log lines,
command lines): the only ones scrubbed of secret values (`secrets.scrub_fields`). Every
other field (arms, metrics, numbers, `base_dir` and other paths, a model's answers) is
written as it is: a secret value that equals one is refused at start
(`campaignfile.checks.secret_collisions`), never replaced in the record."""


def dumps(obj: Any) -> str:
    """JSON for a results file (its free-text fields scrubbed: `FREE_TEXT_FIELDS`)."""
    clean = secrets.scrub_fields(obj, FREE_TEXT_FIELDS)
    return json.dumps(clean, indent=2, sort_keys=False, default=str) + "\n"


def append(path: Path, event: Event, t: str, **data: Any) -> dict[str, Any]:
    """Append one event at time `t` (flushed and fsynced: a crash loses at most this
    line), chained to the line before it (`prev`: `results.chain`), its free-text fields
    scrubbed (`FREE_TEXT_FIELDS`); the record written. A line torn by a crash is first
    ended with a newline, so the new line does not glue onto it (the torn line stays,
    damaged and chained to)."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        prev, torn = chain.prev_for_append(fd, path)
        record: dict[str, Any] = secrets.scrub_fields(
            {"t": t, "event": event, **({"prev": prev} if prev else {}), **data},
            FREE_TEXT_FIELDS)
        line = json.dumps(record, default=str) + "\n"
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
    """The journal's events (`read`: lines that are no event left out, a pass event's rows
    that cannot be read left out of it)."""
    return read(run_dir).events


@dataclass(frozen=True)
class Reading:
    """The journal read back: its events, and where lines could not be read
    (`results.damage` says what that means for a report and for a resume)."""

    events: list[dict[str, Any]]
    damaged: Mapping[int, str] = field(default_factory=dict)
    """Line (1-based) → why it is no event: "not UTF-8", "not JSON", or the JSON it holds
    (`42`); the torn last line included."""
    torn: int | None = None
    """The last line when it is torn: no newline after it, and no event (a crash while
    writing it)."""
    crashed: frozenset[int] = frozenset()
    """Damaged lines a crash left: not JSON, and the next line chains to them as they are
    (a torn line a later append ended: `append`), so they were not edited in."""
    rows: tuple[tuple[int, str], ...] = ()
    """(line, what is lost) for each pass event whose rows cannot all be read; the rows
    that can are in its event in `events`."""


def read(run_dir: Path) -> Reading:
    """Every line of the journal, each decoded as UTF-8 on its own (bytes that are not are
    never replaced into an event it was not) and parsed as one event."""
    path = run_dir / FILE_NAME
    try:
        raw = read_capped(path, JOURNAL_CAP, "journal")
    except FileNotFoundError:
        return Reading([])
    parts = raw.split(b"\n")
    events: list[dict[str, Any]] = []
    damaged: dict[int, str] = {}
    rows: list[tuple[int, str]] = []
    for n, part in enumerate(parts, start=1):
        if not part.strip():
            continue
        ev = parse_line(part)
        if isinstance(ev, str):
            damaged[n] = ev
            continue
        if ev.get("event") == "pass":
            ev, lost = _readable(ev)
            if lost:
                rows.append((n, lost))
        events.append(ev)
    last = len(parts)  # the unterminated tail's line, when the file does not end a line
    crashed = frozenset(n for n, why in damaged.items()
                        if why in _UNPARSED and n < last and _chained_to(parts, n))
    return Reading(events, damaged, last if last in damaged else None, crashed, tuple(rows))


_UNPARSED = ("not UTF-8", "not JSON")


def parse_line(line: bytes) -> dict[str, Any] | str:
    """One journal line as an event, or why it is none ("not UTF-8", "not JSON", or the
    JSON it holds when that is no object)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    try:
        ev = json.loads(text)
    except ValueError:
        return "not JSON"
    if isinstance(ev, dict):
        return ev
    shown = text.strip()
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _chained_to(parts: list[bytes], n: int) -> bool:
    """Does line n+1 chain to line n as it is (`prev` its digest, newline included)?"""
    nxt = parse_line(parts[n])
    return isinstance(nxt, dict) and nxt.get("prev") == chain.line_digest(parts[n - 1] + b"\n")


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


def _first(line: bytes) -> dict[str, Any]:
    """A journal's first line as an event ({} when it does not parse as one)."""
    ev = parse_line(line)
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


_KINDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "str": ("text", (str,)), "int": ("an integer", (int,)),
    "float": ("a number", (float, int)), "bool": ("true or false", (bool,)),
    "float | None": ("a number or null", (float, int, type(None)))}
_ROW_FIELDS = {f.name: (*_KINDS[str(f.type)], f.default is MISSING) for f in fields(PassRow)}
"""A journaled row's fields: what each must be (`type(value)`: true is no integer), and
whether it must be there."""
_WHAT = {str: "text", int: "an integer", float: "a number", bool: "true or false",
         type(None): "null", list: "a list", dict: "an object"}


def _kind(value: object) -> str:
    """A JSON value's kind and the value, for a message: `text ("one")`."""
    shown = json.dumps(value, default=str)
    return (f"{_WHAT.get(type(value), type(value).__name__)} "
            f"({shown if len(shown) <= 30 else shown[:27] + '...'})")


def row_problem(row: object) -> str | None:
    """Why one row of a `pass` event cannot be a `PassRow` (None: it can)."""
    if not isinstance(row, dict):
        return f"it is {_kind(row)}, not an object"
    for name, (kind, types, required) in _ROW_FIELDS.items():
        if name not in row:
            if required:
                return f"{name} is missing"
        elif type(row[name]) not in types:
            return f"{name} is {_kind(row[name])}, not {kind}"
    unknown = sorted(row.keys() - _ROW_FIELDS.keys())
    return f"{unknown[0]} is no field of a row" if unknown else None


def _readable(ev: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A `pass` event with the rows that can be read, and what is lost (None: nothing)."""
    rows = ev.get("rows", [])
    if not isinstance(rows, list):
        return ({**ev, "rows": []}, f"the pass event's rows are {_kind(rows)}, not a list: "
                "all its rows are lost")
    bad = [(k, why) for k, row in enumerate(rows, start=1)
           if (why := row_problem(row)) is not None]
    if not bad:
        return ev, None
    lost = {k for k, _ in bad}
    kept = [row for k, row in enumerate(rows, start=1) if k not in lost]
    if len(bad) == 1:
        k, why = bad[0]
        return ({**ev, "rows": kept}, f"row {k} (of {len(rows)}) of the pass event cannot "
                f"be read ({why}): that row is lost")
    named = "; ".join(f"row {k}: {why}" for k, why in bad[:3]) + ("; ..." if len(bad) > 3
                                                                   else "")
    return ({**ev, "rows": kept}, f"{len(bad)} of the {len(rows)} rows of the pass event "
            f"cannot be read ({named}): those rows are lost")


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
