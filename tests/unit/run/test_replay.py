"""A rate level as a pass (issue 41, item 3): one AIPerf process replaying the level's
schedule file (`--custom-dataset-type mooncake_trace --fixed-schedule`), the figures of how
the load generator kept it (offered and achieved rate, send lag p99), and a level it could
not keep made invalid with its reason, the lane's fault (`gates.max_send_lag_ms`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.campaignfile import Gates, load_campaign
from campaign.run.measure import loadgen, records, sending
from campaign.run.measure.passes import arm_passes, check_pass
from tests.runs import TESTS
from tests.unit.run.test_arrivals import _campaign

RATE = "  rate:\n    rates: [4, 16]\n    requests_per_level: 10\n    output_tokens: 32\n"


def test_one_pass_per_rate_level_replays_its_schedule_file(tmp_path: Path) -> None:
    c = load_campaign(_campaign(tmp_path, RATE))
    run = tmp_path / "run"
    passes = [ap for ap in arm_passes(c, "control", "http://h:1", run) if ap.measured]
    assert [(ap.plan.name, ap.workload, ap.level_labels, ap.spec_level) for ap in passes] == [
        ("rate-r4", "rate", ("r4",), "r4"), ("rate-r16", "rate", ("r16",), "r16")]
    cmd = loadgen.aiperf_command(passes[1].plan, tmp_path / "p")
    joined = " ".join(cmd)
    assert (f"--input-file {run / 'schedules' / 'rate-r16.jsonl'} --custom-dataset-type "
            "mooncake_trace --fixed-schedule --fixed-schedule-auto-offset") in joined
    assert "--concurrency 1000 " in joined  # no max_concurrency: AIPerf's cap out of reach
    assert "--extra-inputs ignore_eos:true --extra-inputs min_tokens:32" in joined
    # a trace loader needs a text corpus: AIPerf refuses `--prompt-corpus random` here
    assert "--isl" not in cmd and "--prompt-corpus" not in cmd and "--request-count" not in cmd
    assert cmd[cmd.index("--artifact-dir") + 1] == str((tmp_path / "p" / "aiperf").absolute())
    # both arms replay the very same file
    other = [ap for ap in arm_passes(c, "depth7", "http://h:2", run) if ap.measured]
    assert [ap.plan.input_file for ap in other] == [ap.plan.input_file for ap in passes]


def _level(tmp_path: Path, starts_ms: list[float], *, failed: int = 0) -> loadgen.LevelResult:
    """A level whose records sent requests at `starts_ms` after an arbitrary epoch (the
    last `failed` of them failed)."""
    epoch = 1_796_000_000_000_000_000
    lines = []
    for i, s in enumerate(starts_ms):
        meta = {"benchmark_phase": "profiling", "request_start_ns": epoch + int(s * 1e6),
                "conversation_id": f"session_{i:06d}",
                "credit_issued_ns": epoch + int(s * 1e6) - 500_000}
        bad = i >= len(starts_ms) - failed
        lines.append({"metadata": meta, "metrics": {} if bad else {
            "time_to_first_token": {"value": 30.0, "unit": "ms"}},
            **({"error": {"code": 500}} if bad else {})})
    (tmp_path / records.RECORDS_NAME).write_text("\n".join(json.dumps(x) for x in lines))
    return loadgen.LevelResult(
        concurrency=1000, metrics={"ttft_p50": 30.0, "request_throughput": 4.0},
        requests_completed=len(starts_ms) - failed, requests_errored=failed, complete=True,
        cancelled=False, osl_mismatch=0, export_path=tmp_path / loadgen.EXPORT_NAME)


def test_send_figures_from_the_records_against_the_schedule(tmp_path: Path) -> None:
    schedule_ms = [0, 250, 500, 750, 1000]  # 4 req/s
    # sent 3 ms late throughout (AIPerf's start: no lag), one request 40 ms late
    level = _level(tmp_path, [s + 3 for s in schedule_ms[:3]] + [793, 1003])
    got = sending.send_figures(level, schedule_ms)
    assert got["offered_rate"] == pytest.approx(4.0)
    assert got["achieved_rate"] == pytest.approx(4 / 1.0)
    # lags 0, 0, 0, 40, 0 ms: numpy's linear p99 of them
    assert got["send_lag_p99_ms"] == pytest.approx(40 * 0.96, abs=0.01)
    assert sending.send_figures(level, [0]) == {}  # one request: no rate to keep


def _pass(tmp_path: Path, starts_ms: list[float], gates: Gates, arm: str = "depth7"
          ) -> tuple[bool, str | None, list[str]]:
    c = load_campaign(_campaign(tmp_path, RATE))
    ap = [p for p in arm_passes(c, arm, "http://h:1", tmp_path / "run") if p.measured][1]
    level = _level(tmp_path, starts_ms)
    schedule_ms = [i * 62.5 for i in range(len(starts_ms))]  # 16 req/s
    level.metrics.update(sending.send_figures(level, schedule_ms))
    outcome = loadgen.PassOutcome(command=[], returncode=0, timed_out=False,
                                  interrupted=False, wall_s=1.0, levels=[level],
                                  stdout_path=tmp_path / "o", stderr_path=tmp_path / "e",
                                  problems=[])
    check = check_pass(ap, outcome, gates)
    return check.valid, check.fault(arm), check.all_problems()


def test_a_rate_the_load_generator_could_not_offer_is_the_lanes_invalid_level(
        tmp_path: Path) -> None:
    gates = Gates(min_completed_requests=1)
    assert _pass(tmp_path, [i * 62.5 for i in range(10)], gates)[:2] == (True, None)
    # 10 requests over 1.5 s instead of 0.5625 s: 37% of the offered 16 req/s
    valid, fault, problems = _pass(tmp_path, [i * 166.7 for i in range(10)], gates)
    assert (valid, fault) == (False, "lane")
    assert any(p.startswith("r16: the load generator sent 6 req/s, 37% of the 16 req/s its "
                            "schedule offers") and "max_concurrency" in p
               for p in problems), problems
    # on time but for one request 400 ms late (its record names its line): the send lag
    # p99 beyond 250 ms, the rate kept
    late = [i * 62.5 for i in range(20)]
    late[5] += 400
    valid, fault, problems = _pass(tmp_path, late, gates)
    assert (valid, fault) == (False, "lane")
    assert any("send lag p99" in p and "> 250 ms" in p and "gates.max_send_lag_ms" in p
               for p in problems), problems
    assert _pass(tmp_path, late, Gates(min_completed_requests=1, max_send_lag_ms=500))[0]


def test_a_queued_first_token_past_saturation_is_no_stall_of_a_replayed_level(
        tmp_path: Path) -> None:
    """Open loop past capacity, a request waits in the queue for its first token: that wait
    is the measurement, not a frozen server (`gates.max_stall_s` reads the gaps between
    its tokens there); a gap between two chunks beyond it is still a stall."""
    lines = [{"metadata": {"benchmark_phase": "profiling"}, "metrics": {
        "time_to_first_token": {"value": 14_000.0, "unit": "ms"},
        "inter_chunk_latency": {"value": [20.0, 35.0], "unit": "ms"}}}]
    (tmp_path / "x").mkdir()
    level = _level(tmp_path / "x", [0.0])
    level.export_path = tmp_path / loadgen.EXPORT_NAME
    (tmp_path / records.RECORDS_NAME).write_text(json.dumps(lines[0]) + "\n")
    assert records.longest_wait_s(level) == pytest.approx(14.0)
    assert records.longest_wait_s(level, first_token=False) == pytest.approx(0.035)


def test_a_real_aiperf_replay_keeps_the_schedule() -> None:
    """Captured from AIPerf 0.13 replaying a 12-request schedule at 5.18 req/s on the
    simulated lane with `replay.command`'s arguments (tests/data/aiperf/replay/): the export
    reads as one level at the cap's concurrency, every request answered with exactly its
    output length, sent at the schedule's rate and within milliseconds of its time."""
    data = TESTS / "data" / "aiperf" / "replay"
    level = loadgen.parse_export(data / loadgen.EXPORT_NAME)
    assert (level.concurrency, level.requests_completed, level.osl_mismatch) == (1000, 12, 0)
    assert level.complete and not level.cancelled
    got = sending.send_figures(level, sending.timestamps_ms(data / "rate-r5.jsonl"))
    assert got["offered_rate"] == pytest.approx(5.1765, abs=1e-4)
    assert got["achieved_rate"] == pytest.approx(got["offered_rate"], rel=0.01)
    assert got["send_lag_p99_ms"] < 50
    level.metrics.update(got)
    assert sending.send_problems(level, 250.0) == []
