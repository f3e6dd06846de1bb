"""SLO attainment and goodput from a level's per-request records (`preregistration.slo`):
shares of the requests sent (a failed request misses the SLO), the goodput as AIPerf
defines it, and the same numbers whatever unit a record names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from campaign.run.measure import loadgen, records
from tests.runs import TESTS

DATA = TESTS / "data" / "aiperf"


def _level(tmp_path: Path, requests: list[dict[str, float] | None], *,
           throughput: float = 10.0, unit: str = "ms") -> loadgen.LevelResult:
    """A level whose records are `requests` (None: a failed request)."""
    lines = []
    for r in requests:
        if r is None:
            lines.append({"metadata": {"benchmark_phase": "profiling"}, "metrics": {},
                          "error": {"code": 500, "message": "boom"}})
            continue
        lines.append({"metadata": {"benchmark_phase": "profiling"},
                      "metrics": {k: {"value": v, "unit": unit} for k, v in r.items()}})
    lines.append({"metadata": {"benchmark_phase": "warmup"},
                  "metrics": {"time_to_first_token": {"value": 1.0, "unit": "ms"}}})
    (tmp_path / records.RECORDS_NAME).write_text("\n".join(json.dumps(x) for x in lines))
    ok = sum(r is not None for r in requests)
    return loadgen.LevelResult(
        concurrency=4, metrics={"request_throughput": throughput}, requests_completed=ok,
        requests_errored=len(requests) - ok, complete=True, cancelled=False,
        osl_mismatch=None, export_path=tmp_path / loadgen.EXPORT_NAME)


def test_shares_count_every_request_sent_and_goodput_is_aiperfs(tmp_path: Path) -> None:
    ttft = "time_to_first_token"
    itl = "inter_token_latency"
    level = _level(tmp_path, [
        {ttft: 100, itl: 10},   # meets both
        {ttft: 300, itl: 10},   # misses the TTFT bound
        {ttft: 100, itl: 30},   # misses the ITL bound
        {ttft: 200},            # one token: no ITL, meets it; TTFT exactly at the bound
        None,                   # failed: misses everything
    ], throughput=8.0)
    got = records.slo_metrics(level, {ttft: 200.0, itl: 20.0})
    assert got["ttft_slo_attainment"] == pytest.approx(3 / 5)
    assert got["itl_slo_attainment"] == pytest.approx(3 / 5)  # the failed one counts
    assert got["slo_attainment"] == pytest.approx(2 / 5)
    # goodput: good requests per second of the level = throughput × good ÷ completed
    assert got["goodput"] == pytest.approx(8.0 * 2 / 4)


def test_units_other_than_ms_are_converted(tmp_path: Path) -> None:
    level = _level(tmp_path, [{"time_to_first_token": 0.15}, {"time_to_first_token": 0.25}],
                   unit="s")
    got = records.slo_metrics(level, {"time_to_first_token": 200.0})
    assert got["ttft_slo_attainment"] == pytest.approx(0.5)
    assert "itl_slo_attainment" not in got  # no ITL bound registered


def test_no_bounds_or_no_records_give_nothing(tmp_path: Path) -> None:
    level = _level(tmp_path, [{"time_to_first_token": 1.0}])
    assert records.slo_metrics(level, {}) == {}
    (tmp_path / records.RECORDS_NAME).unlink()
    assert records.slo_metrics(level, {"time_to_first_token": 5.0}) == {}


def test_a_real_aiperf_level_gives_the_share_its_records_give() -> None:
    """AIPerf's own records of a level with failed requests: the share of all requests
    sent, checked against the TTFT values the records hold."""
    level = loadgen.parse_export(DATA / "records_errors" / loadgen.EXPORT_NAME)
    ttft = records.request_values(records.records_path(level), ["time_to_first_token"])
    values = ttft["time_to_first_token"]
    bound = float(np.median(values))
    got = records.slo_metrics(level, {"time_to_first_token": bound})
    sent = level.requests_completed + level.requests_errored
    assert got["ttft_slo_attainment"] == pytest.approx(np.sum(values <= bound) / sent)
    assert 0 < got["slo_attainment"] < level.requests_completed / sent
