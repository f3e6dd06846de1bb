"""`workloads.trace`: the lab's own request trace, replayed at its timestamps on both arms
(one pass per file, each a cell `("trace", <name>)`), and the checks its file gets when the
campaign is read (`spec-ab check`, `run`): one message with file:line and what to do.

A trace file is AIPerf's `mooncake_trace` JSONL: one JSON object per line, `timestamp`
(ms from the trace's start, non-decreasing), `input_length` (tokens; AIPerf synthesises
the prompt) or `text_input` (the prompt itself), and `output_length` (tokens). At most
`MAX_BYTES` and `MAX_SPAN_S` (a night replays it on every arm of every pair). The run
replays its own copy (`run.measure.arrivals`: the timestamps × `time_scale`), whose sha256
the registration records; its span drives the estimate (`duration`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from campaign.campaignfile.base import Model, Streams, level_names

MAX_BYTES = 50 * 1024 * 1024
MAX_SPAN_S = 2 * 3600.0
FORMAT = ('mooncake JSONL: one {"timestamp": <ms>, "input_length": <tokens> or '
          '"text_input": "...", "output_length": <tokens>} object per line')


class TraceWorkload(Model):
    """Replay of the lab's request traces (mooncake JSONL), one pass per file."""

    files: dict[str, Path] = Field(
        description="Trace name → its mooncake JSONL file (`timestamp` in ms, "
        "`input_length` or `text_input`, `output_length`); each name a cell of workload "
        "`trace`.")
    time_scale: float = Field(
        1.0, gt=0, description="Each timestamp is multiplied by it: 0.5 replays the trace "
        "at twice its rate, 2 at half.")
    max_concurrency: Streams | None = Field(
        None, ge=1, description="The most requests AIPerf keeps in flight (None: 1000, no "
        "cap in practice).")

    @field_validator("files")
    @classmethod
    def _names(cls, v: dict[str, Path]) -> dict[str, Path]:
        return level_names(v, empty="give at least one trace file (name: path)", what="trace")

    @property
    def levels(self) -> list[str]:
        return list(self.files)

    @property
    def cap(self) -> int:
        return self.max_concurrency or 1000


@dataclass(frozen=True)
class TraceInfo:
    """What a valid trace file holds."""

    requests: int
    span_s: float
    """From its first timestamp to its last (s)."""

    @property
    def mean_rate(self) -> float:
        """(requests − 1) over the span (req/s); 0 for one request."""
        return (self.requests - 1) / self.span_s if self.span_s > 0 else 0.0

    def said(self, name: str, time_scale: float = 1.0) -> str:
        span = self.span_s * time_scale
        rate = self.mean_rate / time_scale
        scaled = f" (time_scale {time_scale:g})" if time_scale != 1.0 else ""
        return (f"trace {name}: {self.requests} requests over {span:.3g} s ({rate:.3g} "
                f"req/s){scaled}")


class TraceProblem(ValueError):
    """A trace file that cannot be replayed: the message names the file and line."""


def _number(doc: dict[str, object], key: str) -> float | None:
    v = doc.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def read(path: Path) -> tuple[list[float], TraceInfo]:
    """The timestamps (ms) and summary of a trace file; `TraceProblem` when it is not one
    (its first problem, with file:line and what to do)."""
    where = path.name
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceProblem(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if size > MAX_BYTES:
        raise TraceProblem(f"{where}: {size / 1e6:.0f} MB, over the 50 MB a trace may hold: "
                           "cut it to a window of the traffic (at most 2 h)")
    stamps: list[float] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceProblem(f"{where}: not UTF-8 text ({exc}); write it as {FORMAT}") from None
    prev: tuple[float, int] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        stamps.append(_line_stamp(f"{where}:{n}", line, prev))
        prev = (stamps[-1], n)
    if not stamps:
        raise TraceProblem(f"{where}: empty: no request to replay; write it as {FORMAT}")
    info = TraceInfo(len(stamps), (stamps[-1] - stamps[0]) / 1000.0)
    if info.span_s > MAX_SPAN_S:
        hours = int(info.span_s // 3600)
        minutes = int(info.span_s % 3600 // 60)
        raise TraceProblem(f"{where}: spans {hours}h{minutes:02d}m, and a trace may span at "
                           "most 2 h (it is replayed on every arm of every pair): cut it to "
                           "a window of the traffic")
    return stamps, info


def _line_stamp(at: str, line: str, prev: tuple[float, int] | None) -> float:
    """One line's timestamp, after checking the line (`TraceProblem` naming `at`; `prev`:
    the timestamp and line number of the line before)."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise TraceProblem(f"{at}: not a JSON object; write the file as {FORMAT}")
    ts = _number(doc, "timestamp")
    if ts is None or ts < 0:
        raise TraceProblem(f"{at}: no timestamp (ms from the trace's start, ≥ 0); give "
                           "every line one")
    if prev is not None and ts < prev[0]:
        raise TraceProblem(f"{at}: timestamp {ts:g} is before {prev[0]:g} (line {prev[1]}): "
                           "sort the file by timestamp")
    out = _number(doc, "output_length")
    if out is None or out < 1 or out != int(out):
        raise TraceProblem(f"{at}: no output_length (the tokens to generate, ≥ 1): give "
                           "every line one, so both arms generate the same tokens")
    isl = _number(doc, "input_length")
    text = doc.get("text_input")
    if (isl is None or isl < 1) and not (isinstance(text, str) and text):
        raise TraceProblem(f"{at}: neither input_length or text_input: give every line its "
                           "prompt's length in tokens (input_length) or its text (text_input)")
    return ts


def file_problem(path: Path) -> str | None:
    """What makes an existing file unusable as a trace, or None."""
    try:
        read(path)
    except TraceProblem as exc:
        return str(exc)
    return None


def summary(path: Path) -> TraceInfo:
    """A valid trace's summary (`TraceProblem` when it is not one)."""
    return read(path)[1]
