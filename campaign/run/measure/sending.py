"""How the load generator kept a replayed schedule (`replay`: a rate level, a trace), from
the level's per-request records, and a level it did not keep made invalid.

Figures of a level (design §3): `offered_rate` — the schedule's own rate, (n − 1) over its
span; `achieved_rate` — (n − 1) over the span of the requests' `request_start_ns`;
`send_lag_p99_ms` — each request's start less its scheduled time, less the smallest such
difference of the level (AIPerf's start, which no record carries), the p99 (numpy's linear
interpolation) over the requests sent, failed ones included (they were sent too), each
matched to its line of the schedule by its record's `conversation_id` (`session_<line>`;
without one, in time order: a fixed schedule issues in timestamp order).

A level sent at under 95% of its schedule's own rate, or with a send lag p99 beyond
`gates.max_send_lag_ms`, is invalid: the load generator did not offer the load, the lane's
fault (`passes.check_pass`), never the server's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from campaign.run.measure.loadgen import LevelResult
from campaign.run.measure.records import record_metadata, records_path

MIN_ACHIEVED = 0.95
"""The share of its schedule's own rate a level must be sent at to be valid."""


def timestamps_ms(path: Path) -> list[float]:
    """The `timestamp` of each line of a mooncake JSONL file ([] when unreadable)."""
    out: list[float] = []
    try:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    ts = json.loads(line).get("timestamp")
                    if isinstance(ts, int | float) and not isinstance(ts, bool):
                        out.append(float(ts))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return []
    return out


def _line(meta: Mapping[str, object]) -> int | None:
    """The schedule line a record's request came from (`conversation_id` `session_<n>`)."""
    conv = meta.get("conversation_id")
    tail = conv.rpartition("_")[2] if isinstance(conv, str) else ""
    return int(tail) if conv and str(conv).startswith("session_") and tail.isdigit() else None


def _starts_ns(path: Path, phase: str | None) -> list[tuple[int | None, int]]:
    """Each profiling request's (schedule line or None, start: `request_start_ns`, else
    `credit_issued_ns`), in start order."""
    starts: list[tuple[int | None, int]] = []
    try:
        for meta in record_metadata(path, phase, profiling=True):
            start = meta.get("request_start_ns") or meta.get("credit_issued_ns")
            if isinstance(start, int) and not isinstance(start, bool):
                starts.append((_line(meta), start))
    except (OSError, UnicodeDecodeError):
        return []
    return sorted(starts, key=lambda x: x[1])


def send_figures(level: LevelResult, schedule_ms: Sequence[float]) -> dict[str, float]:
    """`offered_rate`, `achieved_rate` (req/s) and `send_lag_p99_ms` of a replayed level;
    {} without records or with fewer than two requests on either side."""
    planned = [float(t) for t in schedule_ms]
    sent = _starts_ns(records_path(level), level.phase)
    first, last = min(planned, default=0.0), max(planned, default=0.0)
    if len(planned) < 2 or len(sent) < 2 or last <= first:
        return {}
    out = {"offered_rate": (len(planned) - 1) / ((last - first) / 1000.0)}
    span_s = (sent[-1][1] - sent[0][1]) / 1e9
    out["achieved_rate"] = (len(sent) - 1) / span_s if span_s > 0 else float(len(sent))
    if all(line is not None and line < len(planned) for line, _ in sent):
        due = [planned[line] for line, _ in sent if line is not None]  # its own line
    else:  # no line named: matched in time order (a fixed schedule issues in order)
        due = sorted(planned)[:len(sent)]
        sent = sent[:len(due)]
    late = np.asarray([s for _, s in sent], dtype=float) / 1e6 - np.asarray(due)
    out["send_lag_p99_ms"] = float(np.percentile(late - late.min(), 99))
    return out


def send_problems(level: LevelResult, max_send_lag_ms: float) -> list[str]:
    """Why the load generator did not offer a replayed level's load (the lane's fault)."""
    offered = level.metrics.get("offered_rate")
    achieved = level.metrics.get("achieved_rate")
    lag = level.metrics.get("send_lag_p99_ms")
    out: list[str] = []
    if offered and achieved is not None and achieved < MIN_ACHIEVED * offered:
        out.append(
            f"the load generator sent {achieved:.3g} req/s, {achieved / offered:.0%} of "
            f"the {offered:.3g} req/s its schedule offers (the rate of the schedule's own "
            "arrivals, drawn around the level's): the level measured the "
            "client, not the server; lower the rate, raise workloads.rate.max_concurrency "
            "if the cap was reached, or give AIPerf more CPU (a quieter host)")
    if lag is not None and lag > max_send_lag_ms:
        out.append(
            f"send lag p99 {lag:.0f} ms > {max_send_lag_ms:g} ms (gates.max_send_lag_ms): "
            "AIPerf sent requests late, so the arrivals were not the schedule's; "
            "give AIPerf more CPU, lower the rate, or raise gates.max_send_lag_ms")
    return out
