"""A replayed schedule as a pass: the AIPerf command line that replays a mooncake JSONL
file at its timestamps (a rate level's seeded schedule, `arrivals`; a lab's trace). How
the load generator kept it is `sending`'s.

AIPerf 0.13, measured here (tests/data/aiperf/replay/): `--input-file F
--custom-dataset-type mooncake_trace --fixed-schedule` sends each line at its `timestamp`
(ms; `--fixed-schedule-auto-offset`: the first line at once) with its `text_input` and
`output_length` (→ `max_completion_tokens`), one record per request in
`profile_export.jsonl` with `credit_issued_ns` and `request_start_ns`. A sessions class
replays its `multi_turn` file turn by turn, a closed loop (paced, `pacing`):
`--conversation-num N` sends N whole sessions (each record names its `conversation_id`
and `turn_index`). `--concurrency N`
caps the requests in flight and names the level's phase (`input_config.phases`), which is
how the export's level is read (`loadgen.parse_export`). `--prompt-corpus random` is
refused for a trace format (its loader synthesises prompt text from a corpus), and the
records' `conversation_id` is `session_<line>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from campaign.run.measure import pacing

TIMED = ("rate", "trace")
"""The pass kinds that replay a file at its timestamps (open loop)."""
KINDS = (*TIMED, "sessions")
"""The pass kinds whose command line is this module's."""


class ReplayPlan(Protocol):
    """What a replay's command line reads of `loadgen.PassPlan`."""

    @property
    def kind(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    @property
    def endpoint_type(self) -> str: ...
    @property
    def streaming(self) -> bool: ...
    @property
    def tokenizer(self) -> Path: ...
    @property
    def concurrency(self) -> tuple[int, ...]: ...
    @property
    def input_file(self) -> Path | None: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def requests_per_level(self) -> int | None: ...
    @property
    def extra_args(self) -> tuple[str, ...]: ...


def command(plan: ReplayPlan, aiperf_dir: Path, executable: str) -> list[str]:
    """The AIPerf command line replaying `plan.input_file`, writing into `aiperf_dir`."""
    assert plan.input_file is not None
    cmd = [executable, "profile", "--model", plan.model, "--url", plan.base_url,
           "--endpoint-type", plan.endpoint_type]
    if plan.streaming:
        cmd.append("--streaming")
    if plan.kind == "sessions":
        return cmd + _sessions_args(plan, aiperf_dir)
    cmd += ["--tokenizer", str(Path(plan.tokenizer).absolute()),
            "--concurrency", str(plan.concurrency[0]),
            "--input-file", str(Path(plan.input_file).absolute()),
            "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
            "--fixed-schedule-auto-offset",
            # each line's output_length is its cap; no early stop: exactly that many tokens
            "--extra-inputs", "ignore_eos:true"]
    if plan.kind == "rate":  # one output length for every request: its floor too
        cmd += ["--extra-inputs", f"min_tokens:{plan.output_tokens}"]
    return cmd + _tail(plan, aiperf_dir)


def _tail(plan: ReplayPlan, aiperf_dir: Path) -> list[str]:
    return ["--random-seed", str(plan.seed), "--ui", "none", "--no-server-metrics",
            "--no-gpu-telemetry", "--artifact-dir", str(aiperf_dir.absolute()),
            *plan.extra_args]


def _sessions_args(plan: ReplayPlan, aiperf_dir: Path) -> list[str]:
    """A sessions class: `requests_per_level` whole sessions of its multi_turn file (AIPerf
    resends each session's history every turn), `concurrency` sessions in flight, every
    turn's output exactly `output_tokens`."""
    assert plan.input_file is not None
    return ["--tokenizer", str(Path(plan.tokenizer).absolute()),
            "--concurrency", str(plan.concurrency[0]),
            "--input-file", str(Path(plan.input_file).absolute()),
            "--custom-dataset-type", "multi_turn",
            "--conversation-num", str(plan.requests_per_level), *pacing.flags(plan.concurrency),
            "--osl", str(plan.output_tokens), "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true",
            "--extra-inputs", f"min_tokens:{plan.output_tokens}", *_tail(plan, aiperf_dir)]
