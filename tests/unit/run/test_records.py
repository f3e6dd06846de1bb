"""A level's per-request records (AIPerf's profile_export.jsonl) → its statistics' sampling
errors: the records give the export's own numbers back, and a pass's rows carry the error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign.run.measure import loadgen, records
from campaign.verdict import sampling
from tests.runs import TESTS

DATA = TESTS / "data" / "aiperf"
LATENCIES = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "request_latency_p50",
             "request_latency_p99")


@pytest.mark.parametrize("folder", ["records_errors", "records_sweep/concurrency_4"])
def test_the_records_give_the_exports_statistics(folder: str) -> None:
    """p99, p50 and the mean from the successful requests equal AIPerf's export (numpy's
    linear interpolation, as AIPerf computes them); failed requests are left out."""
    level = loadgen.parse_export(DATA / folder / loadgen.EXPORT_NAME)
    export = json.loads(level.export_path.read_text())
    tags = ("time_to_first_token", "inter_token_latency", "request_latency")
    values = records.request_values(records.records_path(level), tags)
    assert {len(v) for v in values.values()} == {level.requests_completed}
    for tag in tags:
        for stat in ("p50", "p99", "avg"):
            mine = records.statistic_from_records(values[tag], stat)
            assert mine == pytest.approx(export[tag][stat], rel=1e-12, abs=1e-12), (tag, stat)
    for name in LATENCIES:  # what passes.csv holds, through the catalog names
        tag, stat = loadgen.EXPORT_METRICS[name]
        assert records.statistic_from_records(values[tag], stat) == pytest.approx(
            level.metrics[name], rel=1e-12)


def test_a_level_gets_the_sampling_error_of_each_latency_statistic() -> None:
    level = loadgen.parse_export(DATA / "records_errors" / loadgen.EXPORT_NAME)
    assert level.requests_errored == 3 and level.requests_completed == 7
    errors = records.level_log_se(level)
    assert set(errors) == set(LATENCIES)  # throughput, error rate, counts: none
    ttft = records.request_values(records.records_path(level), ["time_to_first_token"])
    assert errors["ttft_p99"] == sampling.log_se("p99", ttft["time_to_first_token"])
    assert all(0 < e < 1 for e in errors.values()), errors


def test_no_records_no_error(tmp_path: Path) -> None:
    """A level without records (summary export level, a damaged file) carries no error."""
    shutil.copy(DATA / "records_errors" / loadgen.EXPORT_NAME, tmp_path)
    level = loadgen.parse_export(tmp_path / loadgen.EXPORT_NAME)
    assert records.level_log_se(level) == {}
    (tmp_path / records.RECORDS_NAME).write_bytes(b"\xff\xfe not json\n")
    assert records.level_log_se(level) == {}
    (tmp_path / records.RECORDS_NAME).write_text('{"metrics": {"time_to_first_token": '
                                                 '{"value": 5.0}}}\n{"metrics": {')
    assert records.level_log_se(level) == {}  # one request: no spread; a torn line skipped


def test_the_longest_wait_for_a_token_is_the_worst_first_token_or_chunk_gap(
        tmp_path: Path) -> None:
    """A frozen server shows in every request in flight: the first token's wait, or one gap
    in the stream; failed requests are not counted (the error-rate gate judges them)."""
    level = loadgen.parse_export(DATA / "records_errors" / loadgen.EXPORT_NAME)
    values = records.request_values(records.records_path(level), ["time_to_first_token"])
    longest = records.longest_wait_s(level)
    assert longest is not None and longest >= values["time_to_first_token"].max() / 1000
    shutil.copy(DATA / "records_errors" / loadgen.EXPORT_NAME, tmp_path)
    moved = loadgen.parse_export(tmp_path / loadgen.EXPORT_NAME)
    ok = {"time_to_first_token": {"value": 20.0}, "inter_chunk_latency": {"value": [10.0, 12.0]}}
    frozen = {"time_to_first_token": {"value": 25.0},
              "inter_chunk_latency": {"value": [10.0, 61000.0, 11.0]}}
    failed = {"time_to_first_token": {"value": 90000.0}}
    (tmp_path / records.RECORDS_NAME).write_text("\n".join(json.dumps(r) for r in (
        {"metrics": ok}, {"metrics": frozen}, {"metrics": failed, "error": {"code": 500}})))
    assert records.longest_wait_s(moved) == 61.0
    (tmp_path / records.RECORDS_NAME).unlink()
    assert records.longest_wait_s(moved) is None
