"""A knee's levels in one AIPerf process (`run.phases`): the config spec-ab writes (checked
by AIPerf's own validator), when a pass runs that way, and the exports and records of a
real one-process run (tests/data/aiperf/phases, captured from `loadgen.run_pass`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from campaign.campaignfile import duration, load_campaign
from campaign.run.measure import levelcut, loadgen, phases, records
from campaign.run.measure.loadgen import PassPlan
from tests.runs import TESTS
from tests.unit.run.test_loadgen_startup import aiperf_resolved

DATA = TESTS / "data" / "aiperf" / "phases"


def knee(**changes: object) -> PassPlan:
    plan = PassPlan(name="knee", kind="knee", base_url="http://127.0.0.1:18999", model="sim",
                    tokenizer=Path("campaign/fixtures/tokenizer"), endpoint_type="chat",
                    streaming=True, concurrency=(1, 4, 16), requests_per_level=16,
                    duration_s=None, input_tokens=128, output_tokens=64, input_file=None,
                    seed=7, timeout_s=600, one_process=True)
    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]


def test_the_config_has_a_phase_per_level_and_a_pause_between_two(tmp_path: Path) -> None:
    doc = phases.config(knee(), tmp_path / "aiperf")
    bench = doc["benchmark"]
    assert [(p["name"], p["kind"]) for p in bench["phases"]] == [
        ("c1", "profiling"), ("pause1", "warmup"), ("c4", "profiling"), ("pause2", "warmup"),
        ("c16", "profiling")]
    assert [p.get("concurrency") for p in bench["phases"][::2]] == [1, 4, 16]
    assert all(p["requests"] == 16 for p in bench["phases"][::2])
    pause = bench["phases"][1]
    assert pause["duration"] == phases.PAUSE_S and 1 / pause["rate"] > 10 * phases.PAUSE_S
    # every level draws its own prompts: one entry per request, one per pause, no wrap
    assert bench["dataset"] | {"prompts": None} == {
        "type": "synthetic", "sampling": "sequential", "entries": 3 * 16 + 2, "prompts": None,
        "randomSeed": 7}
    assert bench["dataset"]["prompts"] == {"isl": {"mean": 128, "stddev": 0},
                                           "osl": {"mean": 64, "stddev": 0}}
    assert bench["endpoint"]["extra"] == {"ignore_eos": True, "min_tokens": 64}
    assert Path(bench["tokenizer"]["name"]).is_absolute()
    assert doc["randomSeed"] == 7
    assert bench["serverMetrics"] == bench["gpuTelemetry"] == {"enabled": False}
    assert bench["artifacts"]["dir"] == str((tmp_path / "aiperf").absolute())


def test_aiperf_itself_accepts_the_config(tmp_path: Path) -> None:
    path = tmp_path / phases.CONFIG_NAME
    path.write_text(phases.config_text(knee(), tmp_path / "aiperf"))
    proc = subprocess.run([loadgen.default_executable(), "config", "validate", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_aiperf_reads_the_config_as_the_sweeps_runs_in_one(tmp_path: Path) -> None:
    """AIPerf's own parser: the one-process config and the sweep's command line resolve
    to the same server, model, tokenizer, prompts (lengths, seed) and exact output, and the
    config's profiling phases are the sweep's runs, level by level; what differs is the
    number of prompt entries (one per request of every level, and per pause)."""
    (tmp_path / phases.CONFIG_NAME).write_text(phases.config_text(knee(), tmp_path / "a"))
    [one] = aiperf_resolved(loadgen.aiperf_command(knee(), tmp_path))
    sweep = aiperf_resolved(loadgen.aiperf_command(knee(one_process=False), tmp_path))
    assert len(sweep) == 3
    levels = [p for p in one["phases"] if p["kind"] == "profiling"]
    assert [(p["concurrency"], p["requests"]) for p in levels] == [
        (p["concurrency"], p["requests"]) for run in sweep for p in run["phases"]]
    for run in sweep:
        for key in ("endpoint", "models", "tokenizer", "server_metrics", "gpu_telemetry"):
            assert one[key] == run[key], key
        [ours], [theirs] = one["datasets"], run["datasets"]
        assert {**ours, "entries": 0, "name": ""} == {**theirs, "entries": 0, "name": ""}
        assert ours["random_seed"] == 7 and ours["entries"] == 3 * 16 + 2


@pytest.mark.parametrize("changes, one", [
    ({}, True),
    ({"one_process": False}, False),
    ({"concurrency": (4,)}, False),  # one level: nothing to save
    ({"requests_per_level": None, "duration_s": 30.0}, False),  # cannot size its prompts
    ({"extra_args": ("--workers-max", "2")}, False),  # a config takes no flag beside it
    ({"base_url": "http://u:hunter2@127.0.0.1:18999"}, False),  # the file would keep it
    ({"base_url": "http://u:${PASS}@127.0.0.1:18999"}, True),  # a reference is no secret
])
def test_which_passes_run_as_one_process(tmp_path: Path, changes: dict[str, object],
                                         one: bool) -> None:
    plan = knee(**changes)
    assert phases.applies(plan) is one
    command = loadgen.aiperf_command(plan, tmp_path)
    assert (command[1:3] == ["profile", "--config"]) is one
    assert ("--concurrency" in command) is not one
    if not one:
        with pytest.raises(ValueError):
            phases.config(plan, tmp_path)


def test_the_pass_folder_keeps_the_config_beside_the_command(tmp_path: Path) -> None:
    command = loadgen._prepare(knee(), tmp_path)
    config = tmp_path / phases.CONFIG_NAME
    assert command[-1] == str(config.absolute())
    assert json.loads(config.read_text())["benchmark"]["artifacts"]["dir"] == str(
        (tmp_path / loadgen.AIPERF_SUBDIR).absolute())
    assert (tmp_path / loadgen.COMMAND_NAME).read_text().split()[-1] == str(config.absolute())


def test_a_one_process_run_reads_as_its_levels() -> None:
    problems: list[str] = []
    levels = loadgen.parse_exports(DATA, problems)
    assert problems == []
    # the pauses and the combined top-level export (12 requests) are not levels
    assert [(lv.concurrency, lv.phase, lv.requests_completed) for lv in levels] == [
        (1, "c1", 4), (2, "c2", 4), (4, "c4", 4)]
    assert all(lv.complete and not lv.cancelled for lv in levels)
    assert [lv.metrics["output_tokens"] for lv in levels] == [32.0, 32.0, 32.0]



def test_a_pass_folder_is_read_through_its_aiperf_folders_manifest(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / loadgen.AIPERF_SUBDIR)
    assert [lv.phase for lv in loadgen.parse_exports(tmp_path)] == ["c1", "c2", "c4"]
    (tmp_path / loadgen.AIPERF_SUBDIR / phases.MANIFEST_NAME).write_text("{not json")
    problems: list[str] = []
    assert loadgen.parse_exports(tmp_path, problems) == []
    assert problems and "unreadable phase manifest" in problems[0]


def test_each_level_reads_its_own_records() -> None:
    levels = loadgen.parse_exports(DATA)
    windows: list[tuple[float, float]] = []
    for lv in levels:
        assert records.records_path(lv) == DATA / records.RECORDS_NAME  # one file for all
        values = records.request_values(records.records_path(lv), ["output_token_count"],
                                        lv.phase)
        assert list(values["output_token_count"]) == [8.0] * 4  # its 4 requests, not 12
        assert set(records.level_log_se(lv)) >= {"ttft_p50", "request_latency_p99"}
        assert records.longest_wait_s(lv) is not None
        window = records.request_window(records.records_path(lv), lv.phase)
        assert window is not None
        windows.append(window)
    whole = records.request_window(DATA / records.RECORDS_NAME)
    assert whole == (windows[0][0], windows[-1][1])
    for (_, ended), (starts, _) in itertools.pairwise(windows):
        # the pause between two levels: idle long enough for levelcut's ticks
        assert starts - ended > phases.PAUSE_S - 0.1 > 3 * levelcut.TICK_S


def test_every_level_drew_prompts_of_its_own() -> None:
    lines = (DATA / records.RECORDS_NAME).read_text().splitlines()
    by_phase: dict[str, set[str]] = {}
    for line in lines:
        meta = json.loads(line)["metadata"]
        by_phase.setdefault(meta["phase_name"], set()).add(meta["conversation_id"])
    assert sorted(by_phase) == ["c1", "c2", "c4"]
    assert sum(map(len, by_phase.values())) == len(set().union(*by_phase.values())) == 12


def test_the_estimate_counts_one_start_up_and_the_pauses(repo_root: Path) -> None:
    one = load_campaign(repo_root / "examples" / "sim-pair.yaml")
    knee = one.workloads.knee
    assert knee is not None and len(knee.concurrency) == 3 and knee.one_process
    campaign = one.model_copy(update={"workloads": one.workloads.model_copy(
        update={"knee": knee.model_copy(update={"one_process": False})})})
    saved = duration.estimate(campaign).total_s - duration.estimate(one).total_s
    per_arm = 2 * (duration.AIPERF_STARTUP_S - duration.PAUSE_S)  # 3 levels: 2 starts less
    assert saved == pytest.approx(per_arm * 2 * campaign.preregistration.pairs)
    assert duration.PAUSE_S == phases.PAUSE_S


def test_a_stopped_run_without_its_phases_gives_no_level(tmp_path: Path) -> None:
    """Stopped mid-run, AIPerf writes only the combined export (no manifest, no phases/):
    it mixes whatever levels ran, so it is not read as the first level."""
    stopped = TESTS / "data" / "aiperf" / "phases_cancelled"
    with pytest.raises(ValueError, match="combined export of a run of several phases"):
        loadgen.parse_export(stopped / loadgen.EXPORT_NAME)
    with pytest.raises(ValueError, match="combined export"):
        loadgen.parse_export(DATA / loadgen.EXPORT_NAME)  # finished: still not a level
    shutil.copytree(stopped, tmp_path / loadgen.AIPERF_SUBDIR)
    plan = knee(concurrency=(1, 2, 4), requests_per_level=30)
    problems: list[str] = []
    levels, missing = loadgen._read_levels(plan, tmp_path / loadgen.AIPERF_SUBDIR,
                                           tmp_path / loadgen.STDOUT_NAME, problems)
    assert levels == [] and missing == [1, 2, 4]
    assert any("combined export" in p for p in problems)


def test_a_run_stopped_in_a_later_level_reads_the_levels_it_began() -> None:
    late = TESTS / "data" / "aiperf" / "phases_cancelled_late"
    plan = knee(concurrency=(1, 2, 4), requests_per_level=30)
    problems: list[str] = []
    levels, missing = loadgen._read_levels(plan, late, late / loadgen.STDOUT_NAME, problems)
    assert [(lv.concurrency, lv.requests_completed) for lv in levels] == [(1, 30), (2, 24)]
    assert missing == [4]
    # each phase of a stopped run says cancelled, the finished c1 too: none is used
    assert all(lv.cancelled and not lv.complete for lv in levels)
