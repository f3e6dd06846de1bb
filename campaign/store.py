"""The results directory: a versioned layout, atomic writes, nothing ever overwritten.

    <out>/<YYYY-MM-DD>-<campaign>-<shortid>/
      campaign.yaml          frozen copy of the campaign file, byte for byte
      preregistration.json   the rule + its sha256, written before the first slot
      manifest.json          versions, host, GPU facts, image digests, file hashes, env
      journal.jsonl          append-only event log (the source of truth for resume)
      passes.csv             one tidy row per pass × level × metric (rebuilt from the
                             journal after every pass, atomically)
      pairs/<NN>/<arm>/      server.log, metrics-*.prom, captures/, passes/<pass>/ (AIPerf)

A pair redone after a crash keeps its earlier, half-finished folders and writes the new
attempt to `pairs/<NN>/<arm>.redo<k>/`; its rows carry `pair_attempt` so readers use
the latest attempt only.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from campaign import RESULTS_SCHEMA_VERSION
from campaign.errors import ResultsError
from campaign.textfiles import atomic_write

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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


def rule_hash(rule: dict[str, Any]) -> str:
    """sha256 of the rule's canonical JSON: what `report` checks the frozen rule with."""
    canonical = json.dumps(rule, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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
        _read_prereg(run_dir)
        return cls(run_dir, clock)

    def register(self, rule: dict[str, Any], *, campaign: str, arms: list[str],
                 drift_band: float) -> str:
        """Write preregistration.json (never replaced). Returns the rule's hash."""
        digest = rule_hash(rule)
        doc = {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "campaign": campaign,
            "registered_at": iso(self.clock()),
            "arms": arms,
            "rule": rule,
            "drift_band": drift_band,
            "sha256": digest,
        }
        atomic_write(self.run_dir / "preregistration.json", dumps(doc), overwrite=False)
        return digest

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
class RunData:
    """Everything a report needs from one run directory."""

    run_dir: Path
    run_id: str
    passes: pd.DataFrame
    preregistration: dict[str, Any]
    manifest: dict[str, Any]
    campaign: dict[str, Any]
    complete: bool
    _journal: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def journal(self) -> list[dict[str, Any]]:
        """The journal's events, read on first use (reports rarely need them)."""
        if self._journal is None:
            self._journal = read_journal(self.run_dir)
        return self._journal


def _read_prereg(run_dir: Path) -> dict[str, Any]:
    """preregistration.json, checked for a results schema this version can read."""
    path = run_dir / "preregistration.json"
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: unreadable ({exc})") from None
    version = doc.get("schema_version")
    if version is None or version > RESULTS_SCHEMA_VERSION:
        raise ResultsError(
            f"{run_dir} uses results schema {version}; this spec-ab reads up to "
            f"{RESULTS_SCHEMA_VERSION}",
            hint="upgrade spec-ab (pip install -U spec-ab) to read it",
        )
    return doc


def _finished_complete(run_dir: Path) -> bool:
    """Did the run finish complete? Parses only the `finished` lines (a report over a
    thousand nightly runs must not parse every journal line)."""
    try:
        text = (run_dir / "journal.jsonl").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    for line in text.splitlines():
        if '"finished"' not in line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("event") == "finished" and ev.get("complete"):
            return True
    return False


_TEXT_COLUMNS = ("run", "arm", "workload", "level", "metric", "reason", "started_at")


def load_run(run_dir: Path | str) -> RunData:
    """Read a run directory into a tidy table plus its frozen documents."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResultsError(f"{run_dir}: no such results directory")
    prereg_path = run_dir / "preregistration.json"
    if not prereg_path.is_file():
        raise ResultsError(f"{run_dir}: preregistration.json is missing; not a spec-ab run",
                           hint="give a folder made by `spec-ab run`")
    prereg = _read_prereg(run_dir)
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    campaign_path = run_dir / "campaign.yaml"
    campaign: Any = {}
    if campaign_path.is_file():
        try:
            # libyaml's C loader: ~5x faster than ruamel for a history of many runs
            campaign = yaml.load(campaign_path.read_text(), Loader=_YAML_LOADER)
        except yaml.YAMLError as exc:
            raise ResultsError(f"{campaign_path}: not valid YAML ({exc})") from None
    csv_path = run_dir / "passes.csv"
    if csv_path.is_file() and csv_path.stat().st_size > 0:
        try:
            passes = pd.read_csv(csv_path, keep_default_na=False)
        except (pd.errors.ParserError, ValueError) as exc:
            raise ResultsError(f"{csv_path}: cannot be read ({exc})") from None
        missing = set(PASS_COLUMNS) - set(passes.columns)
        if missing:
            raise ResultsError(f"{csv_path}: missing columns {sorted(missing)}")
        for col in _TEXT_COLUMNS:
            if passes[col].dtype != object:
                passes[col] = passes[col].astype(str)
        if passes["valid"].dtype != bool:
            passes["valid"] = passes["valid"].astype(str).str.lower() == "true"
    else:
        passes = pd.DataFrame(columns=PASS_COLUMNS)
    return RunData(run_dir=run_dir, run_id=run_dir.name, passes=passes,
                   preregistration=prereg, manifest=manifest,
                   campaign=campaign if isinstance(campaign, dict) else {},
                   complete=_finished_complete(run_dir))

