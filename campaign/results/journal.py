"""The journal's format and a pass's tidy rows: what a run directory's `journal.jsonl`
holds and how `passes.csv` is written from it (shared by the writer and the reader)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from campaign import secrets

PASS_COLUMNS = [
    "run", "pair", "pair_attempt", "arm", "slot", "started_at", "workload", "level",
    "metric", "value", "valid", "attempt", "reason",
]
"""The columns every passes.csv has (results schema 1 and later)."""
OPTIONAL_COLUMNS = ["log_se"]
"""Columns a newer passes.csv adds; an older file without them reads them as missing."""
CSV_COLUMNS = [*PASS_COLUMNS, *OPTIONAL_COLUMNS]


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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps(obj: Any) -> str:
    """JSON for a results file (secret values of the runner's environment scrubbed)."""
    return secrets.scrub(json.dumps(obj, indent=2, sort_keys=False, default=str)) + "\n"


def rows_to_csv(rows: Iterable[PassRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        d = asdict(row)
        d["value"] = repr(float(d["value"]))
        d["valid"] = "true" if d["valid"] else "false"
        d["log_se"] = "" if d["log_se"] is None else repr(float(d["log_se"]))
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
