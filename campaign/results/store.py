"""The results directory: a versioned layout, atomic writes, nothing ever overwritten.

`RunStore` writes one run directory; `load_run` / `load_runs` read directories back as
typed `RunDir`s (what `report` and `noise` consume).

    <out>/<YYYY-MM-DD>-<campaign>-<shortid>/
      campaign.yaml          frozen copy of the campaign file, byte for byte; read back
                             through `campaign.campaignfile.load_campaign` (named files unchecked)
      preregistration.json   the rule + its sha256, the resolved drift band, the arms, the
                             rule's cells with `*` resolved (`levels`) and `values_sha256`
                             over them all: written before the first slot
                             (`registration.Registration`); `load_run` checks them
      manifest.json          versions, host, GPU facts, image digests, file hashes, env
      journal.jsonl          append-only event log (the source of truth for resume); its
                             first event, `registered`, names the campaign's base folder
      passes.csv             one tidy row per pass × level × metric (`PASS_COLUMNS`,
                             rebuilt from the journal after every pass, atomically);
                             `load_run` checks it against the journal (`_reconcile`)
      pairs/<NN>/<arm>/      server.log, metrics-*.prom, captures/, passes/<pass>/ (AIPerf)

A pair redone after a crash keeps its earlier, half-finished folders and writes the new
attempt to `pairs/<NN>/<arm>.redo<k>/`; its rows carry `pair_attempt` so readers use
the latest attempt only.

preregistration.json and manifest.json carry the results schema version
(`campaign.RESULTS_SCHEMA_VERSION`); its history and the in-memory migration of older
directories are described in `campaign.results.registration`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from campaign import RESULTS_SCHEMA_VERSION
from campaign.campaignfile import Campaign, load_campaign
from campaign.errors import ResultsError, SpecError
from campaign.results import journal as jr
from campaign.results.journal import (
    CSV_COLUMNS,
    PASS_COLUMNS,
    dumps,
    iso,
    passes_from_journal,
    read_journal,
    rows_to_csv,
    utcnow,
)
from campaign.results.registration import RegisteredLevels, Registration
from campaign.results.registration import rule_hash as rule_hash  # where report and tests get it
from campaign.textfiles import atomic_write


@dataclass
class RunStore:
    """Writes one run directory. Create with `RunStore.create`, reopen with `open`."""

    run_dir: Path
    clock: Callable[[], dt.datetime] = field(default=utcnow, repr=False)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def journal_path(self) -> Path:
        return self.run_dir / jr.FILE_NAME

    # ---------------------------------------------------------------- creation

    @classmethod
    def create(
        cls,
        out_root: Path,
        name: str,
        campaign_text: bytes,
        *,
        clock: Callable[[], dt.datetime] = utcnow,
        short_id: str | None = None,
    ) -> RunStore:
        """Make a new run directory and freeze the campaign file into it."""
        now = clock()
        sid = short_id or uuid.uuid4().hex[:6]
        run_dir = out_root / f"{now:%Y-%m-%d}-{name}-{sid}"
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise ResultsError(f"{run_dir} already exists; results are never overwritten") from None
        store = cls(run_dir, clock)
        atomic_write(run_dir / "campaign.yaml", campaign_text, overwrite=False)
        (run_dir / "pairs").mkdir()
        return store

    @classmethod
    def open(cls, run_dir: Path, *, clock: Callable[[], dt.datetime] = utcnow) -> RunStore:
        """Reopen an existing run (for `--resume`)."""
        if not run_dir.is_dir():
            what = "is a file, not" if run_dir.exists() else "does not exist; give"
            raise ResultsError(f"{run_dir} {what} a run directory",
                               hint="give the folder `spec-ab run` printed "
                               "(results/<date>-<name>-<id>)")
        for required in ("campaign.yaml", "preregistration.json", "journal.jsonl"):
            if not (run_dir / required).is_file():
                raise ResultsError(
                    f"{run_dir} is not a spec-ab run directory: {required} is missing",
                    hint="give the folder `spec-ab run` printed (results/<date>-<name>-<id>)",
                )
        Registration.load(run_dir / "preregistration.json")
        return cls(run_dir, clock)

    def register(self, rule: dict[str, Any], *, campaign: str, arms: list[str],
                 drift_band: float, levels: RegisteredLevels | None = None,
                 guardrail_bands: Sequence[float] | None = None) -> str:
        """Write preregistration.json (never replaced). Returns the rule's hash. `levels`:
        the rule's cells resolved (`registration.registered_levels`); `guardrail_bands`:
        each guardrail's band resolved (`verdict.aa.checked_guardrail_bands`)."""
        reg = Registration.new(rule, campaign=campaign, arms=arms, drift_band=drift_band,
                               registered_at=iso(self.clock()), levels=levels,
                               guardrail_bands=guardrail_bands)
        reg.save(self.run_dir / "preregistration.json")
        return reg.sha256

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        doc = {"schema_version": RESULTS_SCHEMA_VERSION, **manifest}
        atomic_write(self.run_dir / "manifest.json", dumps(doc), overwrite=False)

    def update_manifest(self, key: str, value: Any) -> None:
        """Add facts learnt while running (image digests...) under a new key."""
        path = self.run_dir / "manifest.json"
        doc = json.loads(path.read_text())
        doc.setdefault(key, {})
        if isinstance(doc[key], dict) and isinstance(value, dict):
            doc[key].update(value)
        else:
            doc[key] = value
        atomic_write(path, dumps(doc))

    # ---------------------------------------------------------------- journal

    def journal(self, event: jr.Event, **data: Any) -> dict[str, Any]:
        """Append one event to the journal (`journal.append`: fsynced, a crash loses at
        most this line)."""
        return jr.append(self.journal_path, event, iso(self.clock()), **data)

    def read_journal(self) -> list[dict[str, Any]]:
        return read_journal(self.run_dir)

    # ---------------------------------------------------------------- artifacts

    def arm_dir(self, pair: int, arm: str, pair_attempt: int = 1) -> Path:
        name = arm if pair_attempt == 1 else f"{arm}.redo{pair_attempt - 1}"
        path = self.run_dir / "pairs" / f"{pair:02d}" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def finish(self, **data: Any) -> dict[str, Any]:
        """Journal the run's `finished` event (`data`: complete, pairs…) with the number
        of tidy rows and the SHA-256 of passes.csv (rebuilt once more), and the journal's
        size before it: a report trusts passes.csv unread against the journal only while
        both still match (`_run_data`)."""
        rows, digest = self._write_passes_csv()
        size = self.journal_path.stat().st_size if self.journal_path.exists() else 0
        return self.journal("finished", **data, rows=rows, passes_sha256=digest,
                            journal_bytes=size)

    def rebuild_passes_csv(self) -> int:
        """Rewrite passes.csv from the journal's `pass` events; returns the row count."""
        return self._write_passes_csv()[0]

    def _write_passes_csv(self) -> tuple[int, str]:
        rows = passes_from_journal(self.read_journal())
        data = rows_to_csv(rows).encode("utf-8")
        atomic_write(self.run_dir / "passes.csv", data)
        return len(rows), csv_digest(data)


# -------------------------------------------------------------------- reading


def csv_digest(data: bytes) -> str:
    """passes.csv's digest, as the `finished` event records it."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Batch:
    """Where a run's rows sit in the one table `load_runs` parsed for a whole history, so
    a report stacks the history back with one slice instead of 1,000 frames' columns."""

    table: pd.DataFrame
    start: int
    stop: int
    rows: pd.DataFrame
    """The run's rows as cut from `table`: the slice stands for the run only while its
    `passes` is this very frame (identity; a run whose rows were replaced, e.g. by the
    journal's, is stacked from its own)."""


def stacked_batch(runs: Sequence[RunDir]) -> pd.DataFrame | None:
    """The runs' rows as one frame when they are consecutive cuts of one `load_runs`
    table, in order and untouched; None otherwise."""
    batches = [r.batch for r in runs]
    if not batches or any(b is None or b.rows is not r.passes
                          for b, r in zip(batches, runs, strict=True)):
        return None
    first = batches[0]
    assert first is not None
    pos = first.start
    for b in batches:
        assert b is not None
        if b.table is not first.table or b.start != pos:
            return None
        pos = b.stop
    return first.table.iloc[first.start:pos].reset_index(drop=True)


@dataclass
class RunDir:
    """One run directory read back: its typed documents, its tidy table, its journal on
    demand. Directories of an older results schema come back migrated (in memory)."""

    run_dir: Path
    run_id: str
    passes: pd.DataFrame
    registration: Registration
    campaign: Campaign | None
    """The frozen campaign.yaml as this spec-ab's model (files it names are not checked:
    they may be gone), shared between runs with the same bytes; None when it does not
    validate (`campaign_problems` say why)."""
    campaign_problems: tuple[str, ...]
    manifest: dict[str, Any]
    complete: bool
    notes: tuple[str, ...] = ()
    """What the reader must be told about damaged files (journal lines, passes.csv rows,
    values edited in preregistration.json): the report shows them first."""
    registration_edits: tuple[str, ...] = ()
    """Values of preregistration.json edited after registration (the registered ones,
    recovered through `values_sha256`, are in `registration`)."""
    _journal: list[dict[str, Any]] | None = field(default=None, repr=False)
    batch: Batch | None = field(default=None, repr=False)
    """Where `passes` was cut from, when `load_runs` read a history in one parse."""

    @property
    def schema_version(self) -> int:
        """The results schema the directory was written with."""
        return self.registration.written_version

    @property
    def journal(self) -> list[dict[str, Any]]:
        """The journal's events, read on first use (reports rarely need them)."""
        if self._journal is None:
            self._journal = read_journal(self.run_dir)
        return self._journal


_CAMPAIGN_CACHE: dict[tuple[bytes, str], tuple[Campaign | None, tuple[str, ...]]] = {}
"""Frozen campaign files read back, by content and base folder: the nights of a history
share one file, parsed and validated once."""


def _frozen_campaign(run_dir: Path) -> tuple[Campaign | None, tuple[str, ...]]:
    """The frozen campaign.yaml as the campaign model, or None and why it is not one."""
    path = run_dir / "campaign.yaml"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, (f"{path.name} is missing",)
    base = jr.registered_base_dir(run_dir)
    key = (raw, str(base))
    if key not in _CAMPAIGN_CACHE:
        try:
            parsed: tuple[Campaign | None, tuple[str, ...]] = (
                load_campaign(path, base_dir=base, check_files=False), ())
        except SpecError as exc:
            parsed = (None, tuple(exc.problems))
        if len(_CAMPAIGN_CACHE) > 256:
            _CAMPAIGN_CACHE.clear()
        _CAMPAIGN_CACHE[key] = parsed
    campaign, problems = _CAMPAIGN_CACHE[key]
    if campaign is None:
        return None, problems
    own = campaign.model_copy()  # a shallow copy that knows its own file
    own._source = path.resolve()
    return own, ()


_TEXT_COLUMNS = ("run", "arm", "workload", "level", "metric", "reason", "started_at")
_INT_COLUMNS = ("pair", "pair_attempt", "slot", "attempt")
_CSV_READ: dict[str, Any] = {"keep_default_na": False,
                             "na_values": {"value": [""], "log_se": [""]}}
"""How passes.csv is parsed: text stays text (an arm named "NA" is an arm), and only an empty
`value` or `log_se` is missing, so both columns parse as floats in pandas' C reader (a
column of text costs a Python strip per row: 0.3 s over 1,000 runs). A cell that is not a
number leaves its column as text, and `_check_passes` finds the row."""
PASS_KEY = ["pair", "pair_attempt", "arm", "workload", "level", "metric", "attempt"]
"""What names one measured number: two rows with the same key are a duplicate."""


def _check_passes(passes: pd.DataFrame, csv_path: Path) -> tuple[pd.DataFrame, list[int]]:
    """The table with its columns typed, and the file lines (1-based, header = 1) of rows
    that do not parse (a pair that is not a number, a value that is not one, a `valid`
    that is not true/false); those rows are left out of the table."""
    missing = set(PASS_COLUMNS) - set(passes.columns)
    if missing:
        raise ResultsError(f"{csv_path}: missing columns {sorted(missing)}")
    for col in _TEXT_COLUMNS:
        if passes[col].dtype != object:
            passes[col] = passes[col].astype(str)
    bad = pd.Series(False, index=passes.index)
    for col in _INT_COLUMNS:
        if passes[col].dtype.kind != "i":
            num = pd.to_numeric(passes[col], errors="coerce")
            bad |= num.isna() | (num != num.round())
    if passes["value"].dtype.kind != "f":
        text = passes["value"].astype(str).str.strip()
        num = pd.to_numeric(text, errors="coerce")
        bad |= num.isna() & (text != "") & (text.str.lower() != "nan")
    if passes["valid"].dtype != bool:
        flag = passes["valid"].astype(str).str.strip().str.lower()
        bad |= ~flag.isin(("true", "false"))
    bad_lines = [int(i) + 2 for i in passes.index[bad]]
    if bad_lines:
        passes = passes[~bad].reset_index(drop=True)
    for col in _INT_COLUMNS:
        if passes[col].dtype.kind != "i":
            passes[col] = pd.to_numeric(passes[col]).astype("int64")
    if passes["value"].dtype.kind != "f":
        passes["value"] = pd.to_numeric(passes["value"].astype(str).str.strip(),
                                        errors="coerce").astype("float64")
    if passes["valid"].dtype != bool:
        passes["valid"] = passes["valid"].astype(str).str.strip().str.lower() == "true"
    if "log_se" in passes.columns and passes["log_se"].dtype.kind != "f":
        passes["log_se"] = pd.to_numeric(passes["log_se"].astype(str).str.strip(),
                                         errors="coerce").astype("float64")
    return passes, bad_lines


@dataclass
class _Csv:
    """passes.csv as read: its rows, the file lines of rows that do not parse, and why
    the whole file cannot be used (then `rows` is empty)."""

    rows: pd.DataFrame
    bad_lines: list[int] = field(default_factory=list)
    unusable: str | None = None
    digest: str | None = None
    """`csv_digest` of the file's bytes (None: no file)."""


def _read_passes(csv_path: Path) -> _Csv:
    if not csv_path.is_file() or csv_path.stat().st_size == 0:
        return _Csv(pd.DataFrame(columns=PASS_COLUMNS))
    data = csv_path.read_bytes()
    digest = csv_digest(data)
    try:
        passes = pd.read_csv(io.BytesIO(data), **_CSV_READ)
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        return _Csv(pd.DataFrame(columns=PASS_COLUMNS), unusable=f"cannot be read ({exc})",
                    digest=digest)
    missing = sorted(set(PASS_COLUMNS) - set(passes.columns))
    if missing:
        return _Csv(pd.DataFrame(columns=PASS_COLUMNS), unusable=f"missing columns {missing}",
                    digest=digest)
    return _Csv(*_check_passes(passes, csv_path), digest=digest)


def read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable ({exc})",
                           hint="restore it from a backup, or delete it (it only "
                           "describes the machine)") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: not a JSON object but a {type(doc).__name__}")
    return doc


def _journal_passes(events: list[dict[str, Any]]) -> pd.DataFrame | None:
    """The journal's pass rows as a typed table (None when it has none, or they do not
    parse: then it cannot arbitrate)."""
    if not any(ev.get("event") == "pass" for ev in events):
        return None
    try:
        rows = passes_from_journal(events)
    except TypeError:
        return None
    table = pd.read_csv(io.StringIO(rows_to_csv(rows)), **_CSV_READ)
    try:
        return _check_passes(table, Path("journal.jsonl"))[0]
    except ResultsError:
        return None


def _lines(lines: list[int]) -> str:
    return ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")


def pairs_twice(passes: pd.DataFrame) -> list[str]:
    """Pair numbers that two different pairs carry (a renumbered or merged run directory):
    one arm of one pair attempt measured in more than one slot. A pass retried, or a
    pair redone (a new `pair_attempt`), is not one."""
    places = passes.drop_duplicates(["pair", "pair_attempt", "arm", "slot", "started_at"])
    counts = places.groupby(["pair", "pair_attempt", "arm"]).size().reset_index(name="n")
    most = counts[counts["n"] > 1].groupby("pair")["n"].max()
    out = []
    for pair, times in zip(most.index, most, strict=True):
        mine = places[places["pair"] == pair].sort_values(["slot", "started_at"])
        how = "twice" if times == 2 else f"{times} times"
        seen = ", ".join(f"{r.arm} in slot {r.slot} started {r.started_at}"
                         for r in mine.itertuples(index=False))
        out.append(f"pair {pair} appears {how}: {seen}")
    return out


def _csv_problems(passes: pd.DataFrame, csv: _Csv) -> list[str]:
    """What is wrong with passes.csv's rows on their own."""
    if csv.unusable:
        return [csv.unusable]
    wrong = []
    if csv.bad_lines:
        wrong.append(f"{len(csv.bad_lines)} row(s) that do not parse "
                     f"(line {_lines(csv.bad_lines)})")
    dup = passes.duplicated(PASS_KEY, keep="first")
    n_dup = int(dup.sum())
    twice = pairs_twice(passes) if n_dup else []
    if twice:
        wrong += twice
    elif n_dup:  # after rows were left out, line numbers of the file are no longer known
        where = ("" if csv.bad_lines
                 else f" (line {_lines([int(i) + 2 for i in passes.index[dup]])})")
        wrong.append(f"{n_dup} duplicated row(s){where}")
    return wrong


def _reconcile(run_dir: Path, csv: _Csv,
               events: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[str]]:
    """passes.csv checked against the journal, the source of truth.

    passes.csv is rebuilt from the journal's `pass` events after every pass, so both
    must hold the same rows. When they do not (a file that cannot be used, rows that do
    not parse, duplicated rows, a different row count), the journal's rows are used and a
    note says what was wrong. Without pass events in the journal nothing can arbitrate:
    the damage is then an error (exit 2), since it could change a verdict silently. Two
    different pairs with one number are an error wherever they are: no row says which is
    which.
    """
    csv_path = run_dir / "passes.csv"
    passes = csv.rows
    wrong = _csv_problems(passes, csv)
    pass_events = [ev for ev in events if ev.get("event") == "pass"]
    journal = _journal_passes(pass_events)
    if journal is None:
        if wrong:
            raise ResultsError(
                f"{csv_path}: " + "; ".join(wrong) + " — and journal.jsonl has no pass "
                "events to rebuild it from, so the verdict cannot be trusted",
                hint="remove the damaged rows by hand, or restore the run directory")
        return passes, []
    expected = len(journal)
    if not wrong and len(passes) == expected:
        edits = _value_edits(passes, journal)
        if not edits:
            return passes, []
        wrong.append(f"{len(edits)} row(s) differ: " + "; ".join(edits[:EDITS_NAMED])
                     + (f"; and {len(edits) - EDITS_NAMED} more" if len(edits) > EDITS_NAMED
                        else ""))
    twice = pairs_twice(journal) if journal.duplicated(PASS_KEY).any() else []
    if twice:
        raise ResultsError(
            f"{run_dir / jr.FILE_NAME}: " + "; ".join(twice) + " — two different pairs "
            "carry one number, so no verdict can tell them apart",
            hint="restore the run directory from a backup (a copy merged into it, or its "
            "pairs renumbered?), or re-run the campaign")
    if not wrong:
        wrong.append(f"{len(passes)} rows where journal.jsonl has {expected}")
    return journal, [f"{csv_path.name} disagrees with journal.jsonl (" + "; ".join(wrong)
                     + "): the journal's rows are used"]


EDITS_NAMED = 5
"""How many differing rows a note names (then "and N more")."""


def _value_edits(passes: pd.DataFrame, journal: pd.DataFrame) -> list[str]:
    """Each row of passes.csv whose values are not the journal's, named by its key; rows
    present on one side only are named too. Both tables hold unique keys (checked before)."""
    if passes.duplicated(PASS_KEY).any() or journal.duplicated(PASS_KEY).any():
        return []  # named by `_csv_problems` / `pairs_twice`
    cols = [c for c in PASS_COLUMNS if c not in PASS_KEY and c in journal.columns]
    a = passes.set_index(PASS_KEY)[cols]
    b = journal.set_index(PASS_KEY)[cols]
    out = [f"{_key_text(k)} only in passes.csv" for k in a.index.difference(b.index)]
    out += [f"{_key_text(k)} missing from passes.csv" for k in b.index.difference(a.index)]
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    same = (a == b) | (a.isna() & b.isna())
    for key, row in same[~same.all(axis=1)].iterrows():
        changed = [c for c in cols if not row[c]]
        out.append(_key_text(key) + ": " + ", ".join(
            f"{c} {a.at[key, c]!s} in passes.csv, {b.at[key, c]!s} in journal.jsonl"
            for c in changed))
    return out


def _key_text(key: Any) -> str:
    pair, attempt_of_pair, arm, workload, level, metric, attempt = key
    redo = f" (pair attempt {attempt_of_pair})" if attempt_of_pair != 1 else ""
    again = f" (pass attempt {attempt})" if attempt != 1 else ""
    return f"pair {pair}{redo} {arm} {workload} {level} {metric}{again}"


def _run_data(run_dir: Path, passes: pd.DataFrame | None, *, sound: bool = False,
              digest: str | None = None) -> RunDir:
    """One run directory read back; `passes` its rows when already read (`load_runs`),
    `sound` when they are known to parse and hold no duplicated row."""
    if run_dir.is_file():
        raise ResultsError(f"{run_dir}: is a file, not a results directory",
                           hint="give the folder `spec-ab run` printed "
                           "(results/<date>-<name>-<id>)")
    if not run_dir.is_dir():
        raise ResultsError(f"{run_dir}: no such results directory")
    if not (run_dir / "preregistration.json").is_file():
        raise ResultsError(f"{run_dir}: preregistration.json is missing; not a spec-ab run",
                           hint="give a folder made by `spec-ab run`")
    reg_path = run_dir / "preregistration.json"
    registration = Registration.load(reg_path)
    manifest = read_manifest(run_dir / "manifest.json")
    csv = (_read_passes(run_dir / "passes.csv") if passes is None
           else _Csv(passes, digest=digest))
    events: list[dict[str, Any]] | None = None
    notes: list[str] = []
    end = jr.ending(run_dir)
    if (end.passes_sha256 is not None and csv.digest == end.passes_sha256
            and end.rows == len(csv.rows) and (sound or not _csv_problems(csv.rows, csv))):
        # passes.csv is byte for byte what the finished run wrote from the journal, and the
        # journal is as it was then: its events are read only when asked for
        passes = csv.rows
    else:
        events, notes = jr.journal_problems(run_dir)
        passes, more = _reconcile(run_dir, csv, events)
        notes += more
    campaign, problems = _frozen_campaign(run_dir)
    edits: tuple[str, ...] = ()
    if registration.rule_intact:  # an edited rule is refused by whoever judges the run
        verified = registration.verify(
            reg_path, None if campaign is None else campaign.arm_names, campaign=campaign)
        if verified.edits:
            edits = verified.edits
            registration = registration.model_copy(
                update={"drift_band": verified.drift_band, "arms": list(verified.arms),
                        "levels": verified.levels})
            notes.insert(0, f"{reg_path.name} was edited after registration ("
                         + ", ".join(edits) + "): the registered values are used")
    return RunDir(run_dir=run_dir, run_id=run_dir.name, passes=passes,
                  registration=registration, campaign=campaign, campaign_problems=problems,
                  manifest=manifest, complete=end.complete,
                  notes=tuple(notes), registration_edits=edits, _journal=events)


def load_run(run_dir: Path | str) -> RunDir:
    """Read a run directory into a tidy table plus its typed, frozen documents."""
    return _run_data(Path(run_dir), None)


BATCH_MIN_RUNS = 16


def load_runs(run_dirs: list[Path]) -> list[RunDir]:
    """`load_run` over many directories (a nightly history), in order.

    pandas' CSV reader costs about a millisecond per call whatever the size, so a long
    history's `passes.csv` files are parsed in one call over their joined text, then cut
    back into one table per run. Any file that does not fit (another header, unreadable)
    is read on its own, so errors still name their file.
    """
    if len(run_dirs) < BATCH_MIN_RUNS:
        return [load_run(d) for d in run_dirs]
    header = ",".join(CSV_COLUMNS)  # what this spec-ab writes; older files one by one
    bodies: list[str] = []
    counts: list[int | None] = []
    digests: dict[int, str] = {}
    for d in run_dirs:
        path = Path(d) / "passes.csv"
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            counts.append(None)
            continue
        head, _, body = text.partition("\n")
        if head.strip() != header or not body.strip():
            counts.append(None)
            continue
        body = body if body.endswith("\n") else body + "\n"
        counts.append(body.count("\n"))
        bodies.append(body)
        digests[len(counts) - 1] = csv_digest(data)
    joined = None
    if bodies:
        try:
            joined = pd.read_csv(io.StringIO(header + "\n" + "".join(bodies)), **_CSV_READ)
            joined, bad = _check_passes(joined, Path(run_dirs[0]).parent / "*" / "passes.csv")
            if bad:  # read the damaged file(s) alone, so their notes name their lines
                joined = None
        except (pd.errors.ParserError, ValueError, ResultsError):
            joined = None
    duplicated: set[int] = set()
    if joined is not None:  # duplicated rows of every file in one pass: which files have any
        chunk = np.repeat(np.arange(len(bodies)), [n for n in counts if n is not None])
        dup = joined.assign(_chunk=chunk).duplicated([*PASS_KEY, "_chunk"]).to_numpy()
        duplicated = {int(c) for c in chunk[dup]}
    out: list[RunDir] = []
    start = i = 0
    for j, (d, n) in enumerate(zip(run_dirs, counts, strict=True)):
        if n is None or joined is None:
            out.append(load_run(d))
            continue
        part = joined.iloc[start:start + n].reset_index(drop=True)
        run = _run_data(Path(d), part, sound=i not in duplicated, digest=digests[j])
        if run.passes is part:
            run.batch = Batch(joined, start, start + n, part)
        out.append(run)
        start += n
        i += 1
    return out
