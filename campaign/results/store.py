"""The results directory: a versioned layout, atomic writes, nothing ever overwritten.

`RunStore` writes one run directory; `load_run` / `load_runs` read directories back as
typed `RunDir`s (what `report` and `noise` consume).

    <out>/<YYYY-MM-DD>-<campaign>-<shortid>/
      campaign.yaml          frozen copy of the campaign file, byte for byte; read back
                             through `campaign.campaignfile.load_campaign` (named files unchecked)
      preregistration.json   the rule + its sha256, the resolved drift band, the arms, the
                             rule's cells with `*` resolved (`levels`), the replayed
                             schedules' sha256 (`schedules`, when there are any) and
                             `values_sha256` over them all: written before the first slot
                             (`registration.Registration`); `load_run` checks them
      manifest.json          versions, host, GPU facts, image digests, file hashes, env
      journal.jsonl          append-only event log (the source of truth for resume); its
                             first event, `registered`, names the campaign's base folder
      passes.csv             one tidy row per pass × level × metric (`PASS_COLUMNS`,
                             rebuilt from the journal after every pass, atomically);
                             `load_run` checks it against the journal (`pc.reconcile`)
      schedules/<name>.jsonl each schedule a rate level or a trace replays on both arms
                             (`run.measure.arrivals`), its sha256 registered; `spec-ab
                             verify` checks them (`replayed`)
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
import difflib
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from campaign import RESULTS_SCHEMA_VERSION
from campaign.campaignfile import Campaign, load_campaign
from campaign.campaignfile.yamlread import MAX_FILE_BYTES
from campaign.errors import ResultsError, SpecError
from campaign.results import chain, damage, integrity
from campaign.results import journal as jr
from campaign.results import passescsv as pc
from campaign.results.journal import (
    CSV_COLUMNS,
    dumps,
    iso,
    passes_from_journal,
    read_journal,
    rows_to_csv,
    utcnow,
)
from campaign.results.passescsv import PASS_KEY, csv_digest
from campaign.results.registration import RegisteredLevels, Registration
from campaign.results.registration import rule_hash as rule_hash  # where report and tests get it
from campaign.textfiles import DOC_CAP, PASSES_CAP, atomic_write, open_regular, read_capped


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
            path = run_dir / required
            if not path.exists():
                if required == jr.FILE_NAME:  # a run folder, damaged
                    damage.require_registered(run_dir, {})
                raise ResultsError(
                    f"{run_dir} is not a spec-ab run directory: {required} is missing",
                    hint="give the folder `spec-ab run` printed (results/<date>-<name>-<id>)",
                )
            open_regular(path, required).close()  # a FIFO, a device, a folder: refused
        Registration.load(run_dir / "preregistration.json")
        damage.require_registered(run_dir, jr.first_event(run_dir))
        return cls(run_dir, clock)

    def register(self, rule: dict[str, Any], *, campaign: str, arms: list[str],
                 drift_band: float, levels: RegisteredLevels | None = None,
                 guardrail_bands: Sequence[float] | None = None,
                 schedules: Mapping[str, str] | None = None) -> str:
        """Write preregistration.json (never replaced). Returns the rule's hash. `levels`:
        the rule's cells resolved (`registration.registered_levels`); `guardrail_bands`:
        each guardrail's band resolved (`verdict.aa.checked_guardrail_bands`);
        `schedules`: the sha256 of each schedule the run replays (`arrivals.
        write_schedules`, name → sha256; none: the file as a run without them wrote it)."""
        reg = Registration.new(rule, campaign=campaign, arms=arms, drift_band=drift_band,
                               registered_at=iso(self.clock()), levels=levels,
                               guardrail_bands=guardrail_bands, schedules=schedules)
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

    def journal_registered(self, **data: Any) -> dict[str, Any]:
        """The journal's first line, `registered`: it starts the hash chain (`chain`) and
        holds the SHA-256 of preregistration.json and of the frozen campaign.yaml as
        written before the first boot, so the registration, its time, the campaign, its
        launches and its hypothesis are all under the run's digest (`results.chain`)."""
        return self.journal(
            "registered", **data, chain=chain.CHAIN_VERSION,
            registration_sha256=chain.file_digest(self.run_dir / "preregistration.json"),
            campaign_sha256=chain.file_digest(self.run_dir / "campaign.yaml"))

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


def stacked_batch(runs: Sequence[RunDir], run_col: np.ndarray) -> pd.DataFrame | None:
    """The runs' rows as one frame, `run` set to `run_col` (the directory names), when
    they are consecutive cuts of one `load_runs` table, in order and untouched; None
    otherwise. The whole table whose rows already name their directories is returned as
    it is, not copied (a 10,000-run history's table is gigabytes): read it, never write."""
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
    table = first.table
    if first.start == 0 and pos == len(table) and len(run_col) == len(table) and bool(
            (table["run"].to_numpy() == run_col).all()):
        return table
    out = table.iloc[first.start:pos].reset_index(drop=True)
    out["run"] = run_col
    return out


@dataclass
class RunDir:
    """One run directory read back: its typed documents, its tidy table, its journal on
    demand. Directories of an older results schema come back migrated (in memory)."""

    run_dir: Path
    run_id: str
    passes: pd.DataFrame
    """The tidy rows. In a history read by `load_runs` they are a view into its one parse
    (`batch`): derive new frames from them, never write into them in place."""
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
    disagreements: tuple[str, ...] = ()
    """Where preregistration.json or campaign.yaml differs from what the journal's first
    line registered before the first boot (`integrity.copies_disagree`): no verdict of
    the run is then pre-registered."""
    chained: bool = False
    """The journal is hash-chained (its first line says so: `results.chain`)."""
    campaign_path: str | None = None
    """The campaign file the run was registered from, as its first journal line names it
    (read with the line the run is loaded from, not from the whole journal)."""
    exploratory: str | None = None
    """Why the run was registered as not pre-registered (its first line's `exploratory`:
    a run of `spec-ab try`), else None."""
    journal_sha256: str | None = None
    """The run's digest: SHA-256 of the journal's last complete line (`results.chain`)."""
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


def _frozen_campaign(run_dir: Path, base: Path | None
                     ) -> tuple[Campaign | None, tuple[str, ...], str | None]:
    """The frozen campaign.yaml as the campaign model, or None and why it is not one, and
    the SHA-256 of its bytes (None: missing); `base`: the campaign's own folder at
    registration (its relative paths)."""
    path = run_dir / "campaign.yaml"
    try:
        raw = read_capped(path, MAX_FILE_BYTES, "frozen campaign.yaml")
    except FileNotFoundError:
        return None, (f"{path.name} is missing",), None
    digest = hashlib.sha256(raw).hexdigest()
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
        return None, problems, digest
    own = campaign.model_copy()  # a shallow copy that knows its own file
    own._source = path.resolve()
    return own, (), digest


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        raw = read_capped(path, DOC_CAP, "manifest")  # a FIFO or a device is refused
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable ({exc})",
                           hint="restore it from a backup, or delete it (it only "
                           "describes the machine)") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: not a JSON object but a {type(doc).__name__}")
    return doc


def _nearest_run_hint(run_dir: Path) -> str | None:
    """"did you mean …?" for a run folder named a character or two off (the closest run
    beside it: a folder holding preregistration.json), else None."""
    parent = run_dir.parent
    try:
        runs = [p.name for p in parent.iterdir()
                if p.is_dir() and (p / "preregistration.json").exists()]
    except OSError:
        return None
    close = difflib.get_close_matches(run_dir.name, runs, n=1, cutoff=0.8)
    return f"did you mean {parent / close[0]}?" if close else None


def _run_data(run_dir: Path, passes: pd.DataFrame | None, *, sound: bool = False,
              digest: str | None = None) -> RunDir:
    """One run directory read back; `passes` its rows when already read (`load_runs`),
    `sound` when they are known to parse and hold no duplicated row."""
    reg_path = run_dir / "preregistration.json"
    if not reg_path.is_file():  # one stat for a run; what is wrong is looked at only then
        if run_dir.is_file():
            raise ResultsError(f"{run_dir}: is a file, not a results directory",
                               hint="give the folder `spec-ab run` printed "
                               "(results/<date>-<name>-<id>)")
        if not run_dir.is_dir():
            raise ResultsError(f"{run_dir}: no such results directory",
                               hint=_nearest_run_hint(run_dir))
        if not os.path.lexists(reg_path):
            raise ResultsError(f"{run_dir}: preregistration.json is missing; not a spec-ab "
                               "run", hint="give a folder made by `spec-ab run`")
        # there, but no regular file (a device, a FIFO, a folder): the guarded reader
        # below names what it is, as for the frozen campaign.yaml
    registration = Registration.load(reg_path)
    manifest = read_manifest(run_dir / "manifest.json")
    csv = (pc.read_passes(run_dir / "passes.csv") if passes is None
           else pc.Csv(passes, digest=digest))
    events: list[dict[str, Any]] | None = None
    notes: list[str] = []
    lost: str | None = None
    end = jr.ending(run_dir)
    damage.require_registered(run_dir, end.first)  # no journal, no registration: damaged
    vouched = (csv.digest == end.passes_sha256 if end.passes_sha256 is not None
               else end.undigested)
    if (vouched and end.rows == len(csv.rows)
            and (sound or not pc.csv_problems(csv.rows, csv))):
        # passes.csv is byte for byte what the finished run wrote from the journal, and the
        # journal is as it was then (a run of an older spec-ab: the same row count), so
        # its events are read only when asked for
        passes = csv.rows
    else:
        events, notes = damage.journal_problems(run_dir)
        passes, more = pc.reconcile(run_dir, csv, events)
        lost = (None if integrity.pre_chain(registration, end.first)
                else integrity.unjournaled_rows(len(csv.rows), events))
        notes += more
    first = end.first
    campaign, problems, campaign_sha = _frozen_campaign(run_dir, jr.base_dir_of([first]))
    vouched = campaign is not None and campaign_sha == first.get("campaign_sha256")
    foreign = integrity.foreign_registration(
        registration, first, campaign_name=campaign.name if vouched and campaign else None)
    if foreign is not None:  # not this run's registration edited: no verdict to give
        raise ResultsError(f"{run_dir}: {foreign}", hint=integrity.FOREIGN_HINT)
    if lost is not None:  # passes.csv's rows without the journal's: damaged
        raise ResultsError(f"{run_dir}: {lost}", hint=damage.DAMAGED_HINT)
    disagree = integrity.copies_disagree(run_dir, registration, first,
                                         campaign_sha256=campaign_sha)
    notes[:0] = [*disagree, integrity.NOT_PREREGISTERED] if disagree else []
    if integrity.pre_chain(registration, first):
        notes.append(integrity.PRE_CHAIN_NOTE)
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
                  notes=tuple(notes), registration_edits=edits, disagreements=disagree,
                  chained=first.get("chain") == chain.CHAIN_VERSION,
                  campaign_path=(str(first["campaign_path"]) if first.get("campaign_path")
                                 else None),
                  exploratory=str(first["exploratory"]) if first.get("exploratory") else None,
                  journal_sha256=end.head or chain.head(run_dir / jr.FILE_NAME),
                  _journal=events)


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
    header = ",".join(CSV_COLUMNS).encode()  # what this spec-ab writes; older files alone
    bodies: list[bytes] = []  # bytes throughout: decoded once, by the reader
    counts: list[int | None] = []
    digests: dict[int, str] = {}
    for d in run_dirs:
        path = Path(d) / "passes.csv"
        try:
            data = read_capped(path, PASSES_CAP, "passes.csv")
        except (OSError, ResultsError):  # read again alone, which says what is wrong
            counts.append(None)
            continue
        head, _, body = data.partition(b"\n")
        if head.strip() != header or not body.strip():
            counts.append(None)
            continue
        body = body if body.endswith(b"\n") else body + b"\n"
        counts.append(body.count(b"\n"))
        bodies.append(body)
        digests[len(counts) - 1] = csv_digest(data)
    joined = None
    batched = len(bodies)
    if bodies:
        data = b"".join([header + b"\n", *bodies])
        bodies.clear()  # the files' bytes are held once, joined
        try:
            joined = pc.parse(data)
            data = b""
            joined, bad = pc.check_passes(joined, Path(run_dirs[0]).parent / "*" / "passes.csv")
            if bad:  # read the damaged file(s) alone, so their notes name their lines
                joined = None
        except (pd.errors.ParserError, ValueError, ResultsError):  # UnicodeDecodeError too
            joined = None
    duplicated: set[int] = set()
    if joined is not None:  # duplicated rows of every file in one pass: which files have any
        chunk = np.repeat(np.arange(batched), [n for n in counts if n is not None])
        dup = joined[PASS_KEY].assign(_chunk=chunk).duplicated().to_numpy()
        duplicated = {int(c) for c in chunk[dup]}
    out: list[RunDir] = []
    start = i = 0
    for j, (d, n) in enumerate(zip(run_dirs, counts, strict=True)):
        if n is None or joined is None:
            out.append(load_run(d))
            continue
        # a view into the one parse, not a copy (a copy per run was 0.35 s per 1,000 runs
        # and a second table in memory); nothing writes into a run's rows in place
        # (set_axis: a frame of its own over the same data, so assigning a column to it
        # replaces the column there and does not warn; `copy` is pandas 2's keyword)
        part = joined.iloc[start:start + n].set_axis(
            pd.RangeIndex(n), copy=False)  # type: ignore[call-arg]
        run = _run_data(Path(d), part, sound=i not in duplicated, digest=digests[j])
        if run.passes is part:
            run.batch = Batch(joined, start, start + n, part)
        out.append(run)
        start += n
        i += 1
    return out
