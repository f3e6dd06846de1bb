"""The AIPerf exports captured under tests/ read through AIPerf's own export models, and
every field spec-ab reads is one those models declare: an AIPerf upgrade that renames or
retypes a field fails here, not in a night's parsing (`run/measure/loadgen.py`,
`run/measure/records.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiperf.common.models.export_models import JsonExportData
from aiperf.common.models.record_models import MetricRecordInfo, MetricRecordMetadata

from campaign.run.measure.loadgen import EXPORT_METRICS, parse_export
from campaign.run.measure.records import WAIT_TAGS

TESTS = Path(__file__).resolve().parents[2]
EXPORTS = sorted(TESTS.rglob("profile_export_aiperf.json"))
RECORDS = sorted(TESTS.rglob("profile_export.jsonl"))

READ_FROM_EXPORT = {tag for tag, _ in EXPORT_METRICS.values()} | {
    "request_count", "error_request_count", "input_config", "run_info", "is_complete",
    "was_cancelled", "error_summary"}
"""What `loadgen.parse_export` reads of a summary (`osl_mismatch_count` is a metric AIPerf
adds only with a tokenizer: an extra of the model, read when present)."""
READ_FROM_METADATA = {"benchmark_phase", "phase_name", "request_start_ns", "request_end_ns",
                      "credit_issued_ns"}


def test_captured_exports_exist() -> None:
    assert len(EXPORTS) >= 10 and len(RECORDS) >= 3


def test_every_field_spec_ab_reads_is_declared_by_aiperf() -> None:
    assert set(JsonExportData.model_fields) >= READ_FROM_EXPORT
    assert set(MetricRecordMetadata.model_fields) >= READ_FROM_METADATA
    assert {"metadata", "metrics", "error"} <= set(MetricRecordInfo.model_fields)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: str(p.relative_to(TESTS)))
def test_a_captured_summary_is_aiperfs_export(path: Path) -> None:
    raw = json.loads(path.read_text())
    model = JsonExportData.model_validate(raw)
    for tag in READ_FROM_EXPORT & set(raw):
        assert getattr(model, tag) is not None or raw[tag] is None, tag
    try:
        level = parse_export(path)
    except ValueError:
        return  # a combined export of several phases: read phase by phase instead
    assert level.requests_completed == int(model.request_count.avg if model.request_count
                                           else 0)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: str(p.relative_to(TESTS)))
def test_captured_records_are_aiperfs_records(path: Path) -> None:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    assert lines
    for line in lines:
        record = MetricRecordInfo.model_validate_json(line)
        assert record.metadata.request_start_ns > 0
        if record.error is None:
            assert {"time_to_first_token", "request_latency"} <= set(record.metrics)
            for tag in set(WAIT_TAGS) & set(record.metrics):
                assert record.metrics[tag].value is not None
