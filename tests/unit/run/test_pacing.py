"""campaign.run.measure.pacing: a closed-loop pass is AIPerf's concurrency cap behind a
constant ticker, in every form spec-ab starts one (a sweep, a one-process knee, an agent
fixture, a session class), as AIPerf's own parser reads them. What it saves (AIPerf's CPU
per pass) is measured by `scripts/bench-pacing`, never here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from campaign.run.measure import loadgen, pacing, phases
from tests.unit.run.test_loadgen import make_plan
from tests.unit.run.test_loadgen_startup import aiperf_resolved, file_plan
from tests.unit.run.test_phases import knee


@pytest.mark.parametrize("levels, rate", [
    ((1,), 1000.0), ((4,), 1000.0), ((50,), 1000.0), ((64,), 1280.0), ((256,), 5120.0),
    ((1, 4, 256), 5120.0),  # a sweep's one ticker: its largest level's
])
def test_the_ticker_is_never_what_limits_the_loop(levels: tuple[int, ...],
                                                   rate: float) -> None:
    assert pacing.rate(levels) == rate
    # 20 ticks a second per stream at least: a loop of N streams whose requests take
    # 50 ms sends N / 0.05 = 20 N a second, the most the ticker lets through
    assert pacing.rate(levels) >= pacing.PER_STREAM * max(levels)


def _profiling(configs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [p for c in configs for p in c["phases"]  # type: ignore[attr-defined]
            if p["kind"] == "profiling"]


def test_a_sweep_is_paced_level_by_level(tmp_path: Path) -> None:
    plan = make_plan(concurrency=(1, 4, 16), executable=None)
    runs = _profiling(aiperf_resolved(loadgen.aiperf_command(plan, tmp_path)))
    assert [(p["type"], p["rate"], p["concurrency"], p["requests"]) for p in runs] == [
        ("constant", 1000.0, c, 40) for c in (1, 4, 16)]
    old = _profiling(aiperf_resolved(loadgen.aiperf_command(plan, tmp_path, lean=False)))
    assert [p["type"] for p in old] == ["concurrency"] * 3  # the earlier command lines


def test_a_file_pass_and_a_one_process_knee_are_paced(tmp_path: Path) -> None:
    [fixture] = _profiling(aiperf_resolved(loadgen.aiperf_command(
        dataclasses.replace(file_plan(), executable=None), tmp_path)))
    assert (fixture["type"], fixture["rate"], fixture["concurrency"]) == ("constant", 1000.0, 4)
    (tmp_path / phases.CONFIG_NAME).write_text(phases.config_text(knee(), tmp_path / "a"))
    [one] = aiperf_resolved(loadgen.aiperf_command(knee(), tmp_path))
    levels = [p for p in one["phases"] if p["kind"] == "profiling"]
    assert [(p["type"], p["rate"], p["concurrency"]) for p in levels] == [
        ("constant", 1000.0, c) for c in (1, 4, 16)]
    pauses = [p for p in one["phases"] if p["kind"] == "warmup"]
    assert all(p["rate"] == phases.PAUSE_RATE for p in pauses)  # a pause still sends nothing


def test_a_timed_replay_keeps_its_own_schedule(tmp_path: Path) -> None:
    """A rate level replays its schedule's timestamps (AIPerf's fixed-schedule loop sleeps
    to each): no ticker beside it."""
    plan = make_plan(name="rate-r4", kind="rate", concurrency=(64,), input_tokens=None,
                     input_file=tmp_path / "s.jsonl", requests_per_level=16)
    command = loadgen.aiperf_command(plan, tmp_path)
    assert "--fixed-schedule" in command and "--request-rate" not in command
