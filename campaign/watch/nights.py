"""Run folders → the nights `watch` reads: verified, then summarised from passes.csv.

A folder given may be a run (it holds `journal.jsonl` or `preregistration.json`) or a
parent holding runs (one level down, as `spec-ab run --out` leaves them). Each run is
checked as `spec-ab verify` checks it (`results.integrity.verify_run`, in process); one
that fails is named with its failing checks and left out, never read. A verified night is
summarised once (`cache`): its lane, its registered start, its drift band, and per metric
and cell the median of its control arm's valid passes (`verdict.tidy.counting_rows`: the
rows a report counts). A metric a night did not measure is absent, not zero.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as dt
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.errors import ResultsError, UsageError
from campaign.watch import cache

THROUGHPUT = "output_token_throughput"
SPEC = ("acceptance_rate", "accepted_per_draft", "tokens_per_decode_step",
        "tokens_per_drafted_step", "tokens_per_step")
"""The speculative-decoding figures tracked where present: acceptance rate and length
(accepted tokens per draft), tokens per step (three names across results schemas)."""
LATENCY = ("ttft_p50", "ttft_p99")


@dataclass(frozen=True)
class Night:
    """One verified night, as `watch` needs it."""

    run_dir: str
    lane: str
    started: str
    """The registered start (preregistration.json's `registered_at`, ISO 8601 UTC)."""
    primary: str
    """The rule's primary metric."""
    band: float
    """The registered drift band (the lane's boot-to-boot noise)."""
    cells: tuple[str, ...] = ()
    """The rule's decision cells, `workload/level` (`*` resolved at registration)."""
    values: dict[str, float] = field(default_factory=dict)
    """`metric@workload/level` → the control's median over the night's valid passes."""

    @property
    def name(self) -> str:
        return Path(self.run_dir).name

    def doc(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "lane": self.lane, "started": self.started,
                "primary": self.primary, "band": self.band, "cells": list(self.cells),
                "values": self.values}


@dataclass(frozen=True)
class Refused:
    run_dir: str
    why: str


def run_folders(given: Sequence[Path]) -> list[Path]:
    """The run folders in `given` (a run, or a parent of runs one level down), each once."""
    out: dict[Path, Path] = {}
    for path in given:
        if not path.exists():
            raise UsageError(f"{path}: no such folder", hint="give run folders made by "
                             "`spec-ab run`, or the folder (`--out`) that holds them")
        if not path.is_dir():
            raise UsageError(f"{path}: a file, not a run folder or a folder of runs",
                             hint="give run folders made by `spec-ab run`, or their parent")
        runs = [path] if _is_run(path) else sorted(p for p in path.iterdir()
                                                    if p.is_dir() and _is_run(p))
        if not runs:
            raise UsageError(f"{path}: neither a run folder nor a folder holding runs "
                             "(no journal.jsonl in it or one level down)",
                             hint="give the results folder `spec-ab run --out` wrote to")
        for r in runs:
            out.setdefault(r.resolve(), r)
    return list(out.values())


def _is_run(path: Path) -> bool:
    return (path / "journal.jsonl").exists() or (path / "preregistration.json").exists()


POOL_FROM = 32
"""Nights to verify from which the work is spread over the machine's cores."""


def read_nights(folders: Iterable[Path]) -> tuple[list[Night], list[Refused]]:
    """Every run verified (or found verified in the cache) and summarised; the refused,
    in the order given."""
    where = cache.folder()
    done: dict[Path, Night | Refused] = {}
    todo: list[tuple[Path, str | None]] = []
    folders = list(folders)
    for run_dir in folders:
        k = cache.key(run_dir)
        doc = cache.load(where, k)
        if doc is not None:
            try:
                done[run_dir] = _night(doc, run_dir)
                continue
            except (KeyError, TypeError, ValueError):
                pass  # an older or damaged entry: verified again
        todo.append((run_dir, k))
    cores = os.cpu_count() or 1
    if len(todo) >= POOL_FROM and cores > 1:
        with cf.ProcessPoolExecutor(min(cores, 8)) as pool:
            checked = list(pool.map(check, [d for d, _ in todo], chunksize=8))
    else:
        checked = [check(d) for d, _ in todo]
    for (run_dir, k), got in zip(todo, checked, strict=True):
        if isinstance(got, Night):
            cache.save(where, k, got.doc())
        done[run_dir] = got
    nights = [n for d in folders if isinstance(n := done[d], Night)]
    refused = [r for d in folders if isinstance(r := done[d], Refused)]
    return nights, refused


def check(run_dir: Path) -> Night | Refused:
    """One run verified as `spec-ab verify` verifies it, then summarised; or refused."""
    why = _fails_verify(run_dir)
    if why is not None:
        return Refused(str(run_dir), why)
    try:
        return summarise(run_dir)
    except ResultsError as exc:
        return Refused(str(run_dir), exc.message)


def _night(doc: dict[str, Any], run_dir: Path) -> Night:
    values = {str(k): float(v) for k, v in doc["values"].items()}
    return Night(str(run_dir), str(doc["lane"]), str(doc["started"]), str(doc["primary"]),
                 float(doc["band"]), tuple(str(c) for c in doc["cells"]), values)


def _fails_verify(run_dir: Path) -> str | None:
    """Why `spec-ab verify RUN` fails (its failing checks), or None when it passes."""
    from campaign.results.integrity import verify_run

    try:
        result = verify_run(run_dir)
    except ResultsError as exc:
        return exc.message
    if result.ok:
        return None
    return "; ".join(f"{c.name}: {c.text}" for c in result.checks if not c.ok)


def summarise(run_dir: Path) -> Night:
    """A verified night's summary (what the cache keeps)."""
    import pandas as pd

    from campaign.results import journal as jr
    from campaign.results import passescsv as pc
    from campaign.results.registration import Registration
    from campaign.results.store import read_manifest
    from campaign.verdict import capacity, tidy
    from campaign.verdict.tidy import counting_rows

    reg = Registration.load(run_dir / "preregistration.json")
    # the journal's first line names the lane; older runs, their manifest
    lane = jr.recorded_lane([jr.first_event(run_dir)],
                            read_manifest(run_dir / "manifest.json")) or "(no lane)"
    primary = str(reg.rule.get("primary_metric") or THROUGHPUT)
    control = reg.arm_order[0]
    wanted = {primary, *SPEC, *LATENCY}
    csv = pc.read_passes(run_dir / "passes.csv")
    rows = csv.rows
    if primary == capacity.METRIC:  # an arm's capacity: from its rate levels' SLO shares
        rows = pd.concat([rows, tidy.capacity_rows(rows, capacity.slo_target(reg.rule))],
                         ignore_index=True)
    rows = rows[(rows["arm"] == control) & rows["metric"].isin(wanted)]
    rows = counting_rows(rows)
    rows = rows[rows["value"].notna()]
    values: dict[str, float] = {}
    if len(rows):
        med = rows.groupby(["metric", "workload", "level"], sort=True)["value"].median()
        for key, v in med.items():
            m, w, lvl = (str(k) for k in key)  # type: ignore[attr-defined]  # 3 levels
            if math.isfinite(float(v)):
                values[f"{m}@{w}/{lvl}"] = float(v)
    return Night(str(run_dir), str(lane), _utc(reg.registered_at), primary,
                 float(reg.drift_band), _cells(reg), values)


def _cells(reg: Any) -> tuple[str, ...]:
    """The registered decision cells (`workload/level`); before schema 3 the rule's own,
    a `*` level left as it is."""
    if reg.levels is not None:
        return tuple(f"{c.workload}/{c.level}" for c in reg.levels.decision_cells)
    cells = reg.rule.get("decision_cells") or []
    return tuple(f"{c.get('workload')}/{c.get('level')}" for c in cells
                 if isinstance(c, dict))


def _utc(text: str) -> str:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    t = t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
