"""A level's per-request records → the sampling error of each of its statistics.

AIPerf 0.13 writes every request of a level to `profile_export.jsonl` beside the level's
`profile_export_aiperf.json` (a single level at the artifact folder's root, a sweep's
level under `concurrency_<N>/`): one JSON object per request with `metadata` (its
`benchmark_phase`) and `metrics` (`{tag: {"value": v, "unit": u}}`), and an `error` when
it failed. The export's statistics are computed over the successful profiling requests
(a percentile by numpy's linear interpolation), so the same requests give the same p99
here, and their bootstrap (`verdict.sampling.log_se`) gives its sampling error.

`level_log_se(level)` is called once per measured pass, when the pass is journaled: the
error lands in `passes.csv` (`log_se`) and no report ever reads the records again. A
level without records (an older AIPerf, `--export-level summary`, a damaged file) gets
no error: its rows carry none, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from campaign.run.measure.loadgen import EXPORT_METRICS, LevelResult
from campaign.verdict import sampling

RECORDS_NAME = "profile_export.jsonl"


def records_path(level: LevelResult) -> Path:
    """Where AIPerf wrote the level's per-request records: beside its export, or, for a
    level of a one-process run (`run.phases`, its export in `phases/<name>/`), in the run's
    one records file, whose records name their phase."""
    if level.phase is not None:
        return level.export_path.parents[2] / RECORDS_NAME
    return level.export_path.parent / RECORDS_NAME


def _other_phase(meta: Any, phase: str | None) -> bool:
    """A record of another phase than `phase` (None: every phase counts)."""
    return phase is not None and (not isinstance(meta, dict) or meta.get("phase_name") != phase)


def _successful(lines: Iterable[str], phase: str | None = None) -> Iterable[Mapping[str, Any]]:
    """The metrics of each successful request of the profiling phase (of `phase`, when
    the file holds several)."""
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a cut run: the export left it out too
        if not isinstance(record, dict) or record.get("error") is not None:
            continue
        meta = record.get("metadata")
        if isinstance(meta, dict) and meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        if _other_phase(meta, phase):
            continue
        metrics = record.get("metrics")
        if isinstance(metrics, dict):
            yield metrics


def request_values(path: Path, tags: Iterable[str],
                   phase: str | None = None) -> dict[str, np.ndarray]:
    """AIPerf tag → its values over the successful requests in a records file (of `phase`
    when it holds several; tags a request lacks are left out for that request); {} when the
    file cannot be read."""
    wanted = list(dict.fromkeys(tags))
    values: dict[str, list[float]] = {tag: [] for tag in wanted}
    try:
        with open(path, encoding="utf-8") as lines:
            for metrics in _successful(lines, phase):
                for tag in wanted:
                    entry = metrics.get(tag)
                    value = entry.get("value") if isinstance(entry, dict) else None
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        values[tag].append(float(value))
    except (OSError, UnicodeDecodeError):
        return {}
    return {tag: np.asarray(v, dtype=float) for tag, v in values.items() if v}


def statistic_from_records(values: np.ndarray, statistic: str) -> float:
    """A statistic as AIPerf's export computes it (`p99`: linear interpolation; `avg`)."""
    how, q = sampling.STATISTICS[statistic]
    if how == "mean":
        return float(np.mean(values))
    assert q is not None
    return float(np.percentile(values, q * 100))


def _statistic_metrics(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """metric → (AIPerf tag, statistic) for the metrics whose value is a statistic over
    the level's requests (`ttft_p99`, `itl_p50`, `request_latency_p99`, …)."""
    out = {}
    for name in names:
        statistic = sampling.statistic_of(name)
        if statistic is not None and name in EXPORT_METRICS:
            out[name] = (EXPORT_METRICS[name][0], statistic)
    return out


def level_log_se(level: LevelResult) -> dict[str, float]:
    """metric → the sampling error (sd of ln) of its value, over the level's successful
    requests, for each of its metrics that is a statistic of them; {} without records."""
    wanted = _statistic_metrics(level.metrics)
    if not wanted:
        return {}
    values = request_values(records_path(level), (tag for tag, _ in wanted.values()),
                            level.phase)
    out: dict[str, float] = {}
    for name, (tag, statistic) in wanted.items():
        x = values.get(tag)
        if x is None:
            continue
        se = sampling.log_se(statistic, x)
        if se is not None:
            out[name] = se
    return out


_TO_MS = {"ms": 1.0, "ns": 1e-6, "us": 1e-3, "s": 1e3}


def _ms(entry: Any) -> float | None:
    """A record's time figure in ms (AIPerf writes ms; other units it names are converted),
    None when absent or not a number."""
    value = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    unit = entry.get("unit", "ms")
    return float(value) * _TO_MS.get(unit if isinstance(unit, str) else "ms", 1.0)


def slo_metrics(level: LevelResult, bounds: Mapping[str, float]) -> dict[str, float]:
    """The level's SLO figures (`campaignfile.slo`) from its per-request records: each
    share of the requests sent (failed ones count as missing it) and the goodput; `bounds`
    AIPerf tag → its bound (ms). {} without bounds, records or requests."""
    sent = level.requests_completed + level.requests_errored
    if not bounds or sent <= 0:
        return {}
    met = {tag: 0 for tag in bounds}
    every = ok = 0
    try:
        with open(records_path(level), encoding="utf-8") as lines:
            for metrics in _successful(lines, level.phase):
                ok += 1
                good = True
                for tag, bound in bounds.items():
                    value = _ms(metrics.get(tag))
                    # a request without the figure (one token: no inter-token gap) meets it
                    within = value is None or value <= bound
                    met[tag] += within
                    good = good and within
                every += good
    except (OSError, UnicodeDecodeError):
        return {}
    if ok == 0:
        return {}
    out = {"slo_attainment": every / sent}
    for tag, name in (("time_to_first_token", "ttft_slo_attainment"),
                      ("inter_token_latency", "itl_slo_attainment")):
        if tag in met:
            out[name] = met[tag] / sent
    rate = level.metrics.get("request_throughput")
    if rate is not None and level.requests_completed > 0:
        out["goodput"] = rate * every / level.requests_completed
    return out


WAIT_TAGS = ("time_to_first_token", "inter_chunk_latency")
"""The waits for a token AIPerf records per request (ms): the first, and every gap
between two chunks of the stream (a list)."""


def longest_wait_s(level: LevelResult, *, first_token: bool = True) -> float | None:
    """The longest any successful request of the level waited for a token, in seconds
    (a frozen server shows here: every request in flight waits as long as the freeze);
    None without records. `first_token` False: only the gaps between chunks (an open-loop
    level past capacity queues its requests for their first token, and that wait is what
    it measures; a freeze still stops the streams in flight)."""
    longest: float | None = None
    tags = WAIT_TAGS if first_token else WAIT_TAGS[1:]
    try:
        with open(records_path(level), encoding="utf-8") as lines:
            for metrics in _successful(lines, level.phase):
                for tag in tags:
                    entry = metrics.get(tag)
                    value = entry.get("value") if isinstance(entry, dict) else None
                    waits = value if isinstance(value, list) else [value]
                    for w in waits:
                        if isinstance(w, int | float) and not isinstance(w, bool):
                            longest = w if longest is None else max(longest, w)
    except (OSError, UnicodeDecodeError):
        return None
    return None if longest is None else float(longest) / 1000.0


def record_metadata(path: Path, phase: str | None = None, *,
                    profiling: bool = False) -> Iterable[Mapping[str, Any]]:
    """Each record's `metadata` in a records file, failed requests included (all of them
    reached the server): of every phase, or of `phase` only; with `profiling`, of the
    profiling phase only. A torn or foreign line is skipped; an unreadable file gives
    nothing (OSError, UnicodeDecodeError: the callers say why it matters)."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                continue
            meta = record.get("metadata") if isinstance(record, dict) else None
            if not isinstance(meta, dict) or _other_phase(meta, phase):
                continue
            if profiling and meta.get("benchmark_phase", "profiling") != "profiling":
                continue
            yield meta


def request_window(path: Path, phase: str | None = None) -> tuple[float, float] | None:
    """(first request sent, last response ended) over every request in a records file,
    failed ones included (all of them reached the server): of every phase, or of `phase`
    only (a one-process run's file holds every level, each its phase: `run.phases`), in
    wall-clock
    seconds (AIPerf's `request_start_ns` / `request_end_ns`, `credit_issued_ns` when a
    request has no start); None when no request carries its times or the file cannot be
    read."""
    first = last = None
    try:
        for meta in record_metadata(path, phase):
            start = meta.get("request_start_ns") or meta.get("credit_issued_ns")
            end = meta.get("request_end_ns")
            if isinstance(start, int) and not isinstance(start, bool):
                first = start if first is None else min(first, start)
            if isinstance(end, int) and not isinstance(end, bool):
                last = end if last is None else max(last, end)
    except (OSError, UnicodeDecodeError):
        return None
    if first is None or last is None:
        return None
    return first / 1e9, last / 1e9
