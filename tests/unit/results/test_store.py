"""The results store: what `spec-ab run` writes and `spec-ab report` reads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from campaign import RESULTS_SCHEMA_VERSION
from campaign.errors import ResultsError
from campaign.results import damage
from campaign.results import journal as jr
from campaign.results.journal import PassRow
from campaign.results.store import (
    BATCH_MIN_RUNS,
    RunStore,
    csv_digest,
    load_run,
    load_runs,
    rule_hash,
    stacked_batch,
)
from tests.cli import invoke
from tests.runs import record_passes

CAMPAIGN = b"""\
name: nightly
hypothesis: h
lane: x
server: {backend: process, command: [serve], port: 8000}
arms: {control: {}, b: {env: {K: "1"}}}
workloads: {model: m, tokenizer: tok, knee: {concurrency: [1]}}
"""


def make_run(root: Path, i: int, *, finished: bool = True) -> Path:
    store = RunStore.create(root, "nightly", CAMPAIGN, short_id=f"{i:06d}")
    digest = store.register({"margin": 0.1}, campaign="nightly", arms=["control", "b"],
                            drift_band=0.03)
    store.journal_registered(sha256=digest, lane="x")  # the runner's first line
    rows = [PassRow(store.run_id, pair, 1, arm, slot, "t", "knee", "c1",
                    "output_token_throughput", 100.0 + i + pair, True, 1)
            for slot, (pair, arm) in enumerate([(1, "control"), (1, "b"), (2, "control")])]
    return record_passes(store, rows, complete=finished)


def test_round_trip_and_never_overwrite(tmp_path: Path) -> None:
    run = make_run(tmp_path, 1)
    data = load_run(run)
    assert data.complete and data.run_id == run.name
    assert data.campaign is not None
    assert (data.campaign.name, data.campaign.lane) == ("nightly", "x")
    prereg = json.loads((run / "preregistration.json").read_text())
    assert prereg["schema_version"] == RESULTS_SCHEMA_VERSION
    assert prereg["sha256"] == rule_hash({"margin": 0.1})
    assert list(data.passes.value) == [102.0, 102.0, 103.0]
    assert data.passes.valid.dtype == bool
    store = RunStore.open(run)
    with pytest.raises(FileExistsError):
        store.register({"margin": 0.2}, campaign="nightly", arms=["a", "b"], drift_band=0.0)
    with pytest.raises(FileExistsError):
        store.write_manifest({})  # written once... here for the first time
        store.write_manifest({})


def test_batched_load_equals_one_by_one(tmp_path: Path) -> None:
    runs = [make_run(tmp_path, i, finished=i % 3 != 0) for i in range(20)]
    (runs[5] / "passes.csv").write_text("other,header\n1,2\n")  # read on its own → error
    first = (runs[5] / "journal.jsonl").read_bytes().splitlines(keepends=True)[0]
    (runs[5] / "journal.jsonl").write_bytes(first)  # registered: nothing to rebuild from
    good = [r for r in runs if r != runs[5]]
    batched = load_runs(good)
    for a, b in zip(batched, (load_run(r) for r in good), strict=True):
        assert a.run_id == b.run_id and a.complete == b.complete
        assert a.passes.equals(b.passes)
    with pytest.raises(ResultsError, match=f"{runs[5].name}/passes.csv: missing columns"):
        load_runs(runs)


def test_a_batched_history_stacks_as_one_slice_only_while_untouched(tmp_path: Path) -> None:
    """`stacked_batch`: the runs' rows, in order, from the one parse; a run whose rows were
    replaced, a run read on its own, or runs out of order are never stood for by it."""
    runs = load_runs([make_run(tmp_path, i) for i in range(BATCH_MIN_RUNS)])

    def names(rs: list) -> np.ndarray:  # type: ignore[type-arg]
        return np.repeat(np.array([r.run_id for r in rs], dtype=object),
                         [len(r.passes) for r in rs])

    stacked = stacked_batch(runs, names(runs))
    assert stacked is not None
    expected = pd.concat([r.passes for r in runs], ignore_index=True)
    pd.testing.assert_frame_equal(stacked, expected)
    assert stacked is runs[0].batch.table  # the whole parse, not a copy of it
    part = stacked_batch(runs[3:7], names(runs[3:7]))
    assert part is not None and len(part) == 12
    assert part["run"].tolist() == [r.run_id for r in runs[3:7] for _ in range(3)]
    assert stacked_batch(runs[::-1], names(runs[::-1])) is None
    assert stacked_batch([runs[0], runs[2]], names([runs[0], runs[2]])) is None
    edited = dataclasses.replace(runs[4], passes=runs[4].passes.assign(value=0.0))
    assert stacked_batch([*runs[:4], edited, *runs[5:]], names(runs)) is None
    alone = [*runs[:2], load_run(runs[2].run_dir)]
    assert stacked_batch(alone, names(alone)) is None
    renamed = names(runs)
    renamed[:3] = "copied-run"  # the directory names the run, whatever its rows say
    copy = stacked_batch(runs, renamed)
    assert copy is not None and copy is not runs[0].batch.table
    assert copy["run"].tolist()[:4] == ["copied-run"] * 3 + [runs[1].run_id]
    assert runs[0].batch.table["run"].iloc[0] == runs[0].run_id  # the parse is untouched


def test_passes_csv_is_trusted_unread_against_the_journal_only_byte_for_byte(
        tmp_path: Path) -> None:
    """The finished run records passes.csv's SHA-256: while the file and the journal are
    as the run left them, the journal is not parsed; one edited value, even with the row
    count kept, makes the report compare row by row and use the journal's rows."""
    run = make_run(tmp_path, 1)
    end = jr.ending(run)
    assert end.rows == 3 and end.passes_sha256 == csv_digest((run / "passes.csv").read_bytes())
    data = load_run(run)
    assert data._journal is None and not data.notes  # fast path: the journal left unread
    text = (run / "passes.csv").read_text().replace(",102.0,true,", ",152.0,true,", 1)
    (run / "passes.csv").write_text(text)
    data = load_run(run)
    assert list(data.passes.value) == [102.0, 102.0, 103.0]
    (note,) = data.notes
    assert ("1 row(s) differ: pair 1 control knee c1 output_token_throughput: value 152.0 in "
            "passes.csv, 102.0 in journal.jsonl" in note), note
    with open(run / "journal.jsonl", "a") as f:  # the journal no longer as it ended
        f.write('{"event": "note"}\n')
    assert jr.ending(run).passes_sha256 is None and not jr.ending(run).undigested


def test_a_run_finished_before_the_digest_is_vouched_for_by_its_row_count(
        tmp_path: Path) -> None:
    """A `finished` event without `passes_sha256` (an older spec-ab) keeps the row-count
    check it had, so an old history is not re-read journal by journal."""
    run = make_run(tmp_path, 1)
    lines = (run / "journal.jsonl").read_text().splitlines()
    ev = json.loads(lines[-1])
    del ev["passes_sha256"]
    lines[-1] = json.dumps(ev)
    (run / "journal.jsonl").write_text("\n".join(lines) + "\n")
    end = jr.ending(run)
    assert end.undigested and end.rows == 3 and end.passes_sha256 is None
    assert load_run(run)._journal is None


def test_torn_journal_line_is_ignored_and_version_checked(tmp_path: Path) -> None:
    run = make_run(tmp_path, 1, finished=False)
    with open(run / "journal.jsonl", "a") as f:
        f.write('{"event": "pass", "rows": [')  # a crash mid-write
    store = RunStore.open(run)
    assert [e["event"] for e in store.read_journal()] == ["registered", "pass"]
    assert not load_run(run).complete
    prereg = json.loads((run / "preregistration.json").read_text())
    prereg["schema_version"] = RESULTS_SCHEMA_VERSION + 1
    (run / "preregistration.json").write_text(json.dumps(prereg))
    with pytest.raises(ResultsError, match="upgrade spec-ab"):
        load_run(run)


def test_a_line_that_is_not_utf8_is_damaged_not_read_with_replacements(
        tmp_path: Path) -> None:
    """Bytes that are not UTF-8 were decoded with U+FFFD in their place, so a line that
    then parsed was used as an event it never was; now it is a damaged line, named."""
    run = make_run(tmp_path, 1, finished=False)
    with open(run / "journal.jsonl", "ab") as f:
        f.write(b'{"t": "t", "event": "pass", "rows": [], "host": "\xff"}\n')
        f.write(b'{"t": "t", "event": "run_start"}\n')
    events, notes = damage.journal_problems(run)
    assert [e["event"] for e in events] == ["registered", "pass", "run_start"]
    assert notes == [f"{run / 'journal.jsonl'}: 1 damaged line(s) left out (line 3)"]


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not a spec-ab run"):
        load_run(tmp_path)
    with pytest.raises(ResultsError, match="no such results directory") as exc:
        load_run(tmp_path / "missing")
    assert exc.value.hint is None  # nothing near it to offer


def test_a_run_folder_one_character_short_offers_the_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, 1)
    with pytest.raises(ResultsError, match="no such results directory") as exc:
        load_run(run.with_name(run.name[:-1]))
    assert exc.value.hint == f"did you mean {run}?"
    result = invoke("report", str(run.with_name(run.name[:-1])))
    assert result.code == 2 and f"did you mean {run}?" in " ".join(result.stderr.split())


def test_the_journals_ending_is_read_from_its_tail(tmp_path: Path) -> None:
    """A finished run's last event records its tidy rows and the journal's size before it:
    a report checks passes.csv against the journal from the tail alone, and reads the
    whole journal as soon as it changed after the run finished."""
    run = make_run(tmp_path, 1)
    end = jr.ending(run)
    assert end.complete and end.rows == 3
    data = load_run(run)
    assert data._journal is None and [e["event"] for e in data.journal] == [
        "registered", "pass", "finished"]
    with open(run / "journal.jsonl", "a") as f:
        f.write('{"t": "2026-11-29T10:00:00.000Z", "event": "run_start"}\n')
    end = jr.ending(run)
    assert end.first == jr.first_event(run)  # the first line, through the same open file
    assert dataclasses.replace(end, head=None, first={}) == jr.Ending(True, None)  # read it all
    unfinished = make_run(tmp_path, 2, finished=False)
    end = jr.ending(unfinished)
    assert dataclasses.replace(end, head=None, first={}) == jr.Ending(False, None)
    data = load_run(unfinished)  # counted from the whole journal
    assert not data.complete and list(data.passes.value) == [103.0, 103.0, 104.0]


def test_passes_csv_text_carries_every_field_of_every_row_under_its_column() -> None:
    """rows_to_csv writes fields by position; each must land under its own header."""
    import csv
    import io

    rows = [PassRow(run="r", pair=2, pair_attempt=3, arm="cand, \"b\"", slot=4,
                    started_at="t0", workload="knee", level="c4", metric="ttft_p99",
                    value=0.1, valid=False, attempt=5, reason="stalled: 12 s", log_se=0.25),
            PassRow(run="r", pair=1, pair_attempt=1, arm="control", slot=0, started_at="t1",
                    workload="agentfix", level="code", metric="x", value=3, valid=True,
                    attempt=1)]
    got = list(csv.DictReader(io.StringIO(jr.rows_to_csv(rows))))
    assert list(got[0]) == jr.CSV_COLUMNS
    want = [{k: ("" if v is None else str(v)) for k, v in dataclasses.asdict(r).items()}
            for r in rows]
    for w in want:
        w["valid"] = w["valid"].lower()
    want[1]["value"] = "3.0"
    assert got == want
