"""passes.csv read back and checked against the journal, the source of truth.

`read_passes` parses the file (typed columns, the lines of rows that do not parse, its
digest); `reconcile` compares it with the journal's `pass` events — columns, rows that do
not parse, duplicates, row count, and value by value (`value_edits`) — and returns the
rows to judge and the notes that say what was wrong. `store.load_run` skips the
comparison only while the `finished` event's digest vouches for the file.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from campaign.errors import ResultsError
from campaign.results import journal as jr
from campaign.results.journal import (
    CSV_COLUMNS,
    PASS_COLUMNS,
    passes_from_journal,
    rows_to_csv,
)
from campaign.textfiles import PASSES_CAP, read_capped


def csv_digest(data: bytes) -> str:
    """passes.csv's digest, as the `finished` event records it."""
    return hashlib.sha256(data).hexdigest()


_TEXT_COLUMNS = ("run", "arm", "workload", "level", "metric", "reason", "started_at")
_INT_COLUMNS = ("pair", "pair_attempt", "slot", "attempt")
CSV_READ: dict[str, Any] = {"keep_default_na": False,
                             "na_values": {"value": [""], "log_se": [""]},
                             "float_precision": "round_trip", "low_memory": False}
"""How pandas' C reader parses a passes.csv that the strict reader (`parse`) refuses: text
stays text (an arm named "NA" is an arm), only an empty `value` or `log_se` is missing,
and floats parse exactly as written (`repr`), as the strict reader parses them. A cell
that is not a number leaves its column as text, and `check_passes` finds the row."""
_STRICT_TYPES = {**{c: pa.string() for c in _TEXT_COLUMNS},
                 **{c: pa.int64() for c in _INT_COLUMNS},
                 "value": pa.float64(), "log_se": pa.float64(), "valid": pa.bool_()}
_STRICT = pacsv.ConvertOptions(column_types=_STRICT_TYPES, null_values=[""],
                               strings_can_be_null=False, quoted_strings_can_be_null=False,
                               true_values=["true"], false_values=["false"])
_HEADERS = (",".join(CSV_COLUMNS).encode(), ",".join(PASS_COLUMNS).encode())


def parse(data: bytes) -> pd.DataFrame:
    """passes.csv's bytes as a table. A file as spec-ab writes it (its header, every cell
    of its column's type) is read by Arrow's typed CSV reader: ~6× faster than pandas' C
    reader over a 1,000-run history and no Python work per row. Anything else (an edited
    cell, an older or foreign header, bytes that are not UTF-8) goes to the C reader,
    whose loose result `check_passes` sorts into typed rows and the lines that do not
    parse. Both read a float exactly as written."""
    if data.partition(b"\n")[0].strip() in _HEADERS:
        try:
            table: pd.DataFrame = pacsv.read_csv(pa.py_buffer(data),
                                                 convert_options=_STRICT).to_pandas()
            return table
        except pa.ArrowException:  # a cell of another type, or not UTF-8
            pass
    loose: pd.DataFrame = pd.read_csv(io.BytesIO(data), **CSV_READ)
    return loose


PASS_KEY = ["pair", "pair_attempt", "arm", "workload", "level", "metric", "attempt"]
"""What names one measured number: two rows with the same key are a duplicate."""


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _floats(column: pd.Series) -> pd.Series:
    """A text column as floats, each exactly as written (Python's `float`: pandas'
    `to_numeric` can be one ulp off), NaN where a cell is not a number."""
    return column.astype(str).str.strip().map(_float).astype("float64")


def check_passes(passes: pd.DataFrame, csv_path: Path) -> tuple[pd.DataFrame, list[int]]:
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
        num = _floats(text)
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
        passes["value"] = _floats(passes["value"])
    if passes["valid"].dtype != bool:
        passes["valid"] = passes["valid"].astype(str).str.strip().str.lower() == "true"
    if "log_se" in passes.columns and passes["log_se"].dtype.kind != "f":
        passes["log_se"] = _floats(passes["log_se"])
    return passes, bad_lines


@dataclass
class Csv:
    """passes.csv as read: its rows, the file lines of rows that do not parse, and why
    the whole file cannot be used (then `rows` is empty)."""

    rows: pd.DataFrame
    bad_lines: list[int] = field(default_factory=list)
    unusable: str | None = None
    digest: str | None = None
    """`csv_digest` of the file's bytes (None: no file)."""


def read_passes(csv_path: Path) -> Csv:
    try:
        data = read_capped(csv_path, PASSES_CAP, "passes.csv")  # no FIFO, no device
    except FileNotFoundError:
        data = b""
    if not data:
        return Csv(pd.DataFrame(columns=PASS_COLUMNS))
    digest = csv_digest(data)
    try:
        passes = parse(data)
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        return Csv(pd.DataFrame(columns=PASS_COLUMNS), unusable=f"cannot be read ({exc})",
                    digest=digest)
    missing = sorted(set(PASS_COLUMNS) - set(passes.columns))
    if missing:
        return Csv(pd.DataFrame(columns=PASS_COLUMNS), unusable=f"missing columns {missing}",
                    digest=digest)
    return Csv(*check_passes(passes, csv_path), digest=digest)


def _journal_passes(events: list[dict[str, Any]]) -> pd.DataFrame | None:
    """The journal's pass rows as a typed table (None when it has none, or they do not
    parse: then it cannot arbitrate)."""
    if not any(ev.get("event") == "pass" for ev in events):
        return None
    try:
        rows = passes_from_journal(events)
    except TypeError:
        return None
    table = parse(rows_to_csv(rows).encode("utf-8"))
    try:
        return check_passes(table, Path("journal.jsonl"))[0]
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


def csv_problems(passes: pd.DataFrame, csv: Csv) -> list[str]:
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


def reconcile(run_dir: Path, csv: Csv,
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
    wrong = csv_problems(passes, csv)
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
        edits = value_edits(passes, journal)
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


def value_edits(passes: pd.DataFrame, journal: pd.DataFrame) -> list[str]:
    """Each row of passes.csv whose values are not the journal's, named by its key; rows
    present on one side only are named too. Both tables hold unique keys (checked before)."""
    if passes.duplicated(PASS_KEY).any() or journal.duplicated(PASS_KEY).any():
        return []  # named by `csv_problems` / `pairs_twice`
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


