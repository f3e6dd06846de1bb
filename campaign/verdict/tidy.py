"""Which rows of a results table count, arranged for pairing: the one place that decides.

Every consumer of measured rows (the verdict, the report, the A/A noise estimate, the
planner's cross-check) reads them through here, so they cannot disagree:

- a pair redone whole (after a server death or `--resume`) counts only in its latest
  `pair_attempt`, even when that attempt's passes were invalid — an invalid redo leaves
  the pair out, it never brings the first attempt back;
- of a pass retried, the latest *valid* attempt counts; a pass with no valid attempt
  leaves its pair out of that cell, with the reason of its last attempt;
- `valid` is read as a boolean whatever its spelling in a CSV ("True", "false", 1, 0).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from campaign.verdict import capacity

TOKEN_METRICS = ("output_tokens", "requests_completed")
"""Pass-size metrics read for the `small-sample` flag."""

_KEY = ["run", "workload", "level", "metric", "pair", "arm"]


def valid_mask(df: pd.DataFrame) -> pd.Series:
    """The `valid` column as booleans: text such as "false" must not count as True."""
    col = df["valid"]
    if col.dtype == bool:
        return col
    return col.astype(str).str.strip().str.lower().isin(["true", "1", "1.0"])


def latest_pair_attempts(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of each pair's latest `pair_attempt` (per run when a `run` column exists)."""
    if "pair_attempt" not in df.columns or not len(df):
        return df
    by = ["run", "pair"] if "run" in df.columns else ["pair"]
    latest = df.groupby(by, sort=False)["pair_attempt"].transform("max")
    return df[df["pair_attempt"] == latest]


def _numbers(values: pd.Series) -> pd.Series:
    """Values as floats; text, ±inf and empty cells become NaN (a damaged value)."""
    out = pd.to_numeric(values, errors="coerce").astype(float)
    return out.where(np.isfinite(out))


def counting_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The valid rows that count: latest pair attempt, then each pass's latest valid
    attempt; `value` as numbers (NaN where it does not parse)."""
    df = latest_pair_attempts(df)
    df = df[valid_mask(df)].copy()
    df["value"] = _numbers(df["value"])
    if "attempt" in df.columns and len(df) and df["attempt"].nunique() > 1:
        key = [k for k in _KEY if k in df.columns]
        last = df.groupby(key, sort=False)["attempt"].transform("max")
        df = df[df["attempt"] == last]
    return df


@dataclass(frozen=True)
class ArmValue:
    """One arm's value in one pair of a cell (the mean of its repeats, if any)."""

    value: float
    lo: float
    hi: float
    repeats: int
    log_se: float | None = None
    """Sampling error of ln(value) from the pass's own requests (of the mean of repeats:
    √(mean se² / repeats)); None when a row did not carry one."""


@dataclass
class CellData:
    """The measured values of one cell of one run, by pair and arm."""

    workload: str
    level: str
    metric: str
    values: dict[int, dict[str, ArmValue]] = field(default_factory=dict)
    invalid: dict[int, dict[str, str]] = field(default_factory=dict)
    """pair → arm → why no valid pass counts (the reason of its last attempt)."""
    missing: list[tuple[int, str]] = field(default_factory=list)
    """(pair, arm) of valid rows whose value is empty, infinite or not a number (damaged)."""
    failed: dict[int, dict[str, float]] = field(default_factory=dict)
    """pair → arm → the value its last invalid attempt measured (when it measured one):
    a failure of the candidate still counts against it on failure metrics (error rate)."""
    bounds: dict[int, dict[str, str]] = field(default_factory=dict)
    """pair → arm → `≥` or `<` of a censored value (capacity at SLO beyond the rates
    measured: `verdict.capacity`)."""


@dataclass
class RunTable:
    """A run's tidy rows arranged for pairing: cells, pairs, arm start times and slots."""

    run: str
    cells: dict[tuple[str, str, str], CellData] = field(default_factory=dict)
    pairs: list[int] = field(default_factory=list)
    started: dict[int, dict[str, dt.datetime | None]] = field(default_factory=dict)
    slots: dict[int, dict[str, int]] = field(default_factory=dict)
    lanes: dict[int, str] = field(default_factory=dict)
    """pair → lane, in a table pooled from the shards of a sharded campaign (else empty):
    the noise flags then test each lane's window on its own and whether the lanes agree."""

    def subset(self, keep: Iterable[int], renumber: Mapping[int, int] | None = None
               ) -> RunTable:
        """The same run restricted to the pairs `keep` (a look of a sequential design sees
        only the pairs measured by then), its pairs renumbered by `renumber` if given (one
        lane's pairs of a pooled table, numbered as in its shard)."""
        kept = set(keep)
        new = dict(renumber or {p: p for p in kept})

        def only(d: dict[int, Any]) -> dict[int, Any]:
            return {new[p]: v for p, v in d.items() if p in kept}

        cells = {k: CellData(c.workload, c.level, c.metric, only(c.values), only(c.invalid),
                             [(new[p], a) for p, a in c.missing if p in kept],
                             only(c.failed), only(c.bounds))
                 for k, c in self.cells.items()}
        return RunTable(self.run, cells, sorted(new[p] for p in self.pairs if p in kept),
                        only(self.started), only(self.slots),
                        {} if renumber else only(self.lanes))


def tidy_tables(passes: pd.DataFrame, metrics: Iterable[str] | None = None,
                slo_target: float | Mapping[str, float] = capacity.DEFAULT_TARGET,
                ) -> dict[str, RunTable]:
    """Arrange the tidy rows of one or more runs into `RunTable`s (one per `run`).

    Rows count as `counting_rows` says; of a pass with no valid attempt the reason of its
    last attempt is kept. Several valid rows of one key (repeats) are averaged and their
    spread kept. A run with an open-loop rate sweep gains the cell `("rate", "capacity")`
    of `capacity_at_slo` (`verdict.capacity`), read against `slo_target` (the run's
    registered `preregistration.slo.target`: one share, or run → share).

    Vectorised over all runs at once: a nightly history of 1,000 runs is one groupby.
    """
    df = passes
    if metrics is not None:
        wanted = set(metrics) | set(TOKEN_METRICS)
        if capacity.METRIC in wanted:
            wanted.add(capacity.SHARE)
        df = df[df["metric"].isin(wanted)]
    df = latest_pair_attempts(df).copy()
    df["value"] = _numbers(df["value"])
    if "attempt" not in df.columns:
        df["attempt"] = 1
    valid = counting_rows(df)
    bad = valid[valid["value"].isna()]
    valid = valid[valid["value"].notna()]

    tables = _Tables()
    if len(valid):
        for (run, w, lvl, m, pair, arm), value in _arm_values(valid):
            tables.cell(run, w, lvl, m).values.setdefault(int(pair), {})[arm] = value
    for row in bad[_KEY].itertuples(index=False):
        run, w, lvl, m, pair, arm = row
        c = tables.cell(run, w, lvl, m)
        if arm not in c.values.get(int(pair), {}):
            c.missing.append((int(pair), arm))
    _add_invalid(tables, df[~valid_mask(df)])
    _add_starts(tables, df)
    if metrics is None or capacity.METRIC in set(metrics):
        for run, t in tables.by_run.items():
            target = (slo_target if isinstance(slo_target, float | int)
                      else slo_target.get(run, capacity.DEFAULT_TARGET))
            add_capacity(t, float(target))
    return tables.by_run


def add_capacity(table: RunTable, target: float) -> None:
    """Add the cell `("rate", "capacity")` of `capacity_at_slo` (`verdict.capacity`) and
    its size figures to a table that has rate levels with `slo_attainment` (in place; a
    table without them is left as it is)."""
    caps = capacity.capacities(table, target)
    if not caps:
        return
    cell = CellData(capacity.WORKLOAD, capacity.LEVEL, capacity.METRIC)
    for pair, arms in caps.items():
        for arm, cap in arms.items():
            if cap.value is None:
                cell.invalid.setdefault(pair, {})[arm] = f"no capacity at SLO: {cap.reason}"
                continue
            cell.values.setdefault(pair, {})[arm] = ArmValue(cap.value, cap.value,
                                                             cap.value, 1)
            if cap.bound:
                cell.bounds.setdefault(pair, {})[arm] = cap.bound
    table.cells[(capacity.WORKLOAD, capacity.LEVEL, capacity.METRIC)] = cell
    for size in ("output_tokens", "requests_completed"):
        total: dict[int, dict[str, float]] = {}
        for lvl in capacity.rate_levels(table.cells):
            data = table.cells.get((capacity.WORKLOAD, lvl, size))
            for pair, sizes in (data.values.items() if data is not None else ()):
                for arm, v in sizes.items():
                    if arm in cell.values.get(pair, {}):
                        row = total.setdefault(pair, {})
                        row[arm] = row.get(arm, 0.0) + v.value
        if total:
            table.cells[(capacity.WORKLOAD, capacity.LEVEL, size)] = CellData(
                capacity.WORKLOAD, capacity.LEVEL, size,
                {p: {a: ArmValue(v, v, v, 1) for a, v in arms.items()}
                 for p, arms in total.items()})


def capacity_rows(passes: pd.DataFrame,
                  slo_target: float | Mapping[str, float] = capacity.DEFAULT_TARGET
                  ) -> pd.DataFrame:
    """The capacity at SLO of every run, pair and arm of a passes frame as tidy rows of
    the cell `("rate", "capacity")`, for readers of rows rather than tables (`watch`,
    `plan`): concatenated to the frame, they count as its other rows do. A censored value
    carries its mark (`≥`, `<`) in `reason`; a missing one is an invalid row with why."""
    out: list[dict[str, Any]] = []
    attempts = (latest_pair_attempts(passes).groupby(["run", "pair"])["pair_attempt"].max()
                if "pair_attempt" in passes.columns and len(passes) else None)
    for run, t in tidy_tables(passes, [capacity.METRIC], slo_target).items():
        cell = t.cells.get((capacity.WORKLOAD, capacity.LEVEL, capacity.METRIC))
        if cell is None:
            continue
        rows = [(p, a, v.value, True, cell.bounds.get(p, {}).get(a, ""))
                for p, arms in cell.values.items() for a, v in arms.items()]
        rows += [(p, a, math.nan, False, why)
                 for p, arms in cell.invalid.items() for a, why in arms.items()]
        for pair, arm, value, ok, reason in sorted(rows, key=lambda r: (r[0], r[1])):
            out.append({"run": run, "pair": pair, "arm": arm,
                        "workload": capacity.WORKLOAD, "level": capacity.LEVEL,
                        "metric": capacity.METRIC, "value": value, "valid": ok,
                        "reason": reason, "attempt": 1,
                        "pair_attempt": (int(attempts.get((run, pair), 1))
                                         if attempts is not None else 1),
                        "slot": t.slots.get(pair, {}).get(arm, 0)})
    return pd.DataFrame(out)


def _arm_values(valid: pd.DataFrame) -> list[tuple[Any, ArmValue]]:
    """Each key's value: the mean of its repeats, their spread and their sampling error
    (one groupby over every run)."""
    if "log_se" in valid.columns:
        valid = valid.assign(_var=pd.to_numeric(valid["log_se"], errors="coerce") ** 2)
        cols = {"value": ["mean", "min", "max", "count"], "_var": ["mean", "count"]}
        agg = valid.groupby(_KEY, sort=False).agg(cols)
        var, known = agg[("_var", "mean")], agg[("_var", "count")]
    else:
        agg = valid.groupby(_KEY, sort=False).agg({"value": ["mean", "min", "max", "count"]})
        var = known = pd.Series(np.nan, index=agg.index)
    out = []
    for key, mean, lo, hi, cnt, v, k in zip(
        agg.index, agg[("value", "mean")], agg[("value", "min")], agg[("value", "max")],
        agg[("value", "count")], var, known, strict=True
    ):
        se = math.sqrt(float(v) / int(cnt)) if k == cnt and v == v else None
        out.append((key, ArmValue(float(mean), float(lo), float(hi), int(cnt), se)))
    return out


class _Tables:
    """The `RunTable`s being built, one per run, with their cells made on first use."""

    def __init__(self) -> None:
        self.by_run: dict[str, RunTable] = {}

    def table(self, run: str) -> RunTable:
        t = self.by_run.get(run)
        if t is None:
            t = self.by_run[run] = RunTable(run=run)
        return t

    def cell(self, run: str, w: str, lvl: str, m: str) -> CellData:
        t = self.table(run)
        c = t.cells.get((w, lvl, m))
        if c is None:
            c = t.cells[(w, lvl, m)] = CellData(w, lvl, m)
        return c


def _add_invalid(tables: _Tables, invalid: pd.DataFrame) -> None:
    """Of a pass with no valid attempt: the reason of its last attempt, and the value it
    measured (a failure of the candidate still counts on failure metrics)."""
    if not len(invalid):
        return
    invalid = invalid.sort_values("attempt").groupby(_KEY, sort=False).tail(1)
    for row in invalid[[*_KEY, "reason", "attempt", "value"]].itertuples(index=False):
        run, w, lvl, m, pair, arm, reason, attempt, value = row
        c = tables.cell(run, w, lvl, m)
        if arm in c.values.get(int(pair), {}):
            continue  # a later (or earlier) attempt is valid: that one counts
        if value == value:  # not NaN
            c.failed.setdefault(int(pair), {})[arm] = float(value)
        why = str(reason) if isinstance(reason, str) and reason else "invalid pass"
        tries = int(attempt) if attempt == attempt else 1  # attempts count from 1
        if tries > 1:
            why += f" (after {tries} attempts)"
        c.invalid.setdefault(int(pair), {})[arm] = why


def _add_starts(tables: _Tables, df: pd.DataFrame) -> None:
    """Each run's pairs, each arm's start time and slot, and (pooled shards) each pair's
    lane."""
    if not len(df):
        return
    has_start = "started_at" in df.columns
    has_slot = "slot" in df.columns
    has_lane = "lane" in df.columns  # a run pooled from shards (`campaign.results.pool`)
    for rec in df.drop_duplicates(["run", "pair", "arm"]).to_dict("records"):
        t = tables.table(str(rec["run"]))
        pair = int(rec["pair"])
        if pair not in t.started:
            t.pairs.append(pair)
        t.started.setdefault(pair, {})[rec["arm"]] = (
            _parse_time(rec.get("started_at")) if has_start else None
        )
        if has_slot:
            t.slots.setdefault(pair, {})[rec["arm"]] = int(rec["slot"])
        if has_lane:
            t.lanes[pair] = str(rec["lane"])
    for t in tables.by_run.values():
        t.pairs.sort()


def _parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


# --------------------------------------------------------------------------- order


WORKLOAD_ORDER = {"knee": 0, "agentfix": 1, "rate": 2, "sessions": 3, "trace": 4}


def cell_sort_key(key: tuple[str, str, str], order: Sequence[str] = ()) -> tuple[Any, ...]:
    """Knee before agent fixtures, rate sweeps, sessions and traces, then levels, then
    metrics by name."""
    w, lvl, m = key
    return (WORKLOAD_ORDER.get(w, 5), w, level_sort_key(lvl, order), m)


def level_sort_key(level: str, order: Sequence[str] = ()) -> tuple[int, float, str]:
    """Knee levels by concurrency, rate levels by offered rate (their capacity after
    them), then classes in the campaign's order, `all` last."""
    if level == "all":
        return (3, 0, level)
    if level in order:
        return (0, list(order).index(level), level)
    if level[:1] == "c" and level[1:].isdigit():
        return (1, int(level[1:]), level)
    rate = capacity.rate_of(level)
    if rate is not None:
        return (1, rate, level)
    if level == capacity.LEVEL:
        return (1, math.inf, level)
    return (2, 0, level)
