"""The results directory: a versioned layout, atomic writes, nothing ever overwritten.

`RunStore` writes one run directory; `load_run` / `load_runs` read directories back as
typed `RunDir`s (what `report` and `noise` consume).

    <out>/<YYYY-MM-DD>-<campaign>-<shortid>/
      campaign.yaml          frozen copy of the campaign file, byte for byte; read back
                             through `campaign.spec.load_campaign` (named files unchecked)
      preregistration.json   the rule + its sha256, the resolved drift band, the arms:
                             written before the first slot (`registration.Registration`)
      manifest.json          versions, host, GPU facts, image digests, file hashes, env
      journal.jsonl          append-only event log (the source of truth for resume); its
                             first event, `registered`, names the campaign's base folder
      passes.csv             one tidy row per pass × level × metric (`PASS_COLUMNS`,
                             rebuilt from the journal after every pass, atomically)
      pairs/<NN>/<arm>/      server.log, metrics-*.prom, captures/, passes/<pass>/ (AIPerf)

A pair redone after a crash keeps its earlier, half-finished folders and writes the new
attempt to `pairs/<NN>/<arm>.redo<k>/`; its rows carry `pair_attempt` so readers use
the latest attempt only.

preregistration.json and manifest.json carry the results schema version
(`campaign.RESULTS_SCHEMA_VERSION`); its history and the in-memory migration of older
directories are described in `campaign.registration`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from campaign import RESULTS_SCHEMA_VERSION
from campaign.errors import ResultsError, SpecError
from campaign.registration import Registration
from campaign.registration import rule_hash as rule_hash  # where report and tests get it
from campaign.spec import Campaign, load_campaign
from campaign.textfiles import atomic_write

PASS_COLUMNS = [
    "run", "pair", "pair_attempt", "arm", "slot", "started_at", "workload", "level",
    "metric", "value", "valid", "attempt", "reason",
]


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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"


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
        return self.run_dir / "journal.jsonl"

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
        for required in ("campaign.yaml", "preregistration.json", "journal.jsonl"):
            if not (run_dir / required).is_file():
                raise ResultsError(
                    f"{run_dir} is not a spec-ab run directory: {required} is missing",
                    hint="give the folder `spec-ab run` printed (results/<date>-<name>-<id>)",
                )
        Registration.load(run_dir / "preregistration.json")
        return cls(run_dir, clock)

    def register(self, rule: dict[str, Any], *, campaign: str, arms: list[str],
                 drift_band: float) -> str:
        """Write preregistration.json (never replaced). Returns the rule's hash."""
        reg = Registration.new(rule, campaign=campaign, arms=arms, drift_band=drift_band,
                               registered_at=iso(self.clock()))
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

    def journal(self, event: str, **data: Any) -> dict[str, Any]:
        """Append one event (flushed and fsynced: a crash loses at most this line)."""
        record = {"t": iso(self.clock()), "event": event, **data}
        line = json.dumps(record, default=str) + "\n"
        with open(self.journal_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return record

    def read_journal(self) -> list[dict[str, Any]]:
        return read_journal(self.run_dir)

    # ---------------------------------------------------------------- artifacts

    def arm_dir(self, pair: int, arm: str, pair_attempt: int = 1) -> Path:
        name = arm if pair_attempt == 1 else f"{arm}.redo{pair_attempt - 1}"
        path = self.run_dir / "pairs" / f"{pair:02d}" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def rebuild_passes_csv(self) -> int:
        """Rewrite passes.csv from the journal's `pass` events; returns the row count."""
        rows = passes_from_journal(self.read_journal())
        atomic_write(self.run_dir / "passes.csv", rows_to_csv(rows))
        return len(rows)


def rows_to_csv(rows: Iterable[PassRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=PASS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        d = asdict(row)
        d["value"] = repr(float(d["value"]))
        d["valid"] = "true" if d["valid"] else "false"
        writer.writerow(d)
    return buf.getvalue()


def read_journal(run_dir: Path) -> list[dict[str, Any]]:
    """All complete journal lines (a torn last line from a crash is ignored)."""
    path = run_dir / "journal.jsonl"
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def passes_from_journal(events: list[dict[str, Any]]) -> list[PassRow]:
    rows: list[PassRow] = []
    for ev in events:
        if ev.get("event") == "pass":
            rows.extend(PassRow(**r) for r in ev.get("rows", []))
    return rows


# -------------------------------------------------------------------- reading


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
    _journal: list[dict[str, Any]] | None = field(default=None, repr=False)

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


JOURNAL_TAIL_BYTES = 16384


def _finished_complete(run_dir: Path) -> bool:
    """Did the run finish complete? A complete run's last event is `finished` (nothing runs
    after it and it cannot be resumed), so only the journal's tail is read: a report over
    a thousand nightly runs must not parse every journal line."""
    path = run_dir / "journal.jsonl"
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - JOURNAL_TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return False
    for line in reversed(tail.splitlines()):
        if '"finished"' not in line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("event") == "finished":
            return bool(ev.get("complete"))
    return False


_CAMPAIGN_CACHE: dict[tuple[bytes, str], tuple[Campaign | None, tuple[str, ...]]] = {}
"""Frozen campaign files read back, by content and base folder: the nights of a history
share one file, parsed and validated once."""


def _registered_base_dir(run_dir: Path) -> Path | None:
    """The campaign's own folder at registration: the journal's first event says it (the
    frozen copy's relative paths are relative to it)."""
    try:
        with open(run_dir / "journal.jsonl", "rb") as f:
            first = f.readline(JOURNAL_TAIL_BYTES)
        ev = json.loads(first)
    except (OSError, ValueError):
        return None
    if isinstance(ev, dict) and ev.get("event") == "registered" and ev.get("base_dir"):
        return Path(str(ev["base_dir"]))
    return None


def _frozen_campaign(run_dir: Path) -> tuple[Campaign | None, tuple[str, ...]]:
    """The frozen campaign.yaml as the campaign model, or None and why it is not one."""
    path = run_dir / "campaign.yaml"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, (f"{path.name} is missing",)
    base = _registered_base_dir(run_dir)
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


def _check_passes(passes: pd.DataFrame, csv_path: Path) -> pd.DataFrame:
    missing = set(PASS_COLUMNS) - set(passes.columns)
    if missing:
        raise ResultsError(f"{csv_path}: missing columns {sorted(missing)}")
    for col in _TEXT_COLUMNS:
        if passes[col].dtype != object:
            passes[col] = passes[col].astype(str)
    if passes["valid"].dtype != bool:
        passes["valid"] = passes["valid"].astype(str).str.lower() == "true"
    return passes


def _read_passes(csv_path: Path) -> pd.DataFrame:
    if not csv_path.is_file() or csv_path.stat().st_size == 0:
        return pd.DataFrame(columns=PASS_COLUMNS)
    try:
        passes = pd.read_csv(csv_path, keep_default_na=False)
    except (pd.errors.ParserError, ValueError) as exc:
        raise ResultsError(f"{csv_path}: cannot be read ({exc})") from None
    return _check_passes(passes, csv_path)


def _run_data(run_dir: Path, passes: pd.DataFrame | None) -> RunDir:
    if not run_dir.is_dir():
        raise ResultsError(f"{run_dir}: no such results directory")
    if not (run_dir / "preregistration.json").is_file():
        raise ResultsError(f"{run_dir}: preregistration.json is missing; not a spec-ab run",
                           hint="give a folder made by `spec-ab run`")
    registration = Registration.load(run_dir / "preregistration.json")
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if passes is None:
        passes = _read_passes(run_dir / "passes.csv")
    campaign, problems = _frozen_campaign(run_dir)
    return RunDir(run_dir=run_dir, run_id=run_dir.name, passes=passes,
                  registration=registration, campaign=campaign, campaign_problems=problems,
                  manifest=manifest, complete=_finished_complete(run_dir))


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
    header = ",".join(PASS_COLUMNS)
    bodies: list[str] = []
    counts: list[int | None] = []
    for d in run_dirs:
        path = Path(d) / "passes.csv"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            counts.append(None)
            continue
        head, _, body = text.partition("\n")
        if head.strip() != header or not body.strip():
            counts.append(None)
            continue
        body = body if body.endswith("\n") else body + "\n"
        counts.append(body.count("\n"))
        bodies.append(body)
    joined = None
    if bodies:
        try:
            joined = pd.read_csv(io.StringIO(header + "\n" + "".join(bodies)),
                                 keep_default_na=False)
            joined = _check_passes(joined, Path(run_dirs[0]).parent / "*" / "passes.csv")
        except (pd.errors.ParserError, ValueError, ResultsError):
            joined = None
    out: list[RunDir] = []
    start = 0
    for d, n in zip(run_dirs, counts, strict=True):
        if n is None or joined is None:
            out.append(load_run(d))
            continue
        part = joined.iloc[start:start + n].reset_index(drop=True)
        start += n
        out.append(_run_data(Path(d), part))
    return out
