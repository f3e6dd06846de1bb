"""What AIPerf is told when cells have requests of their own (`workloads.agentfix.requests`
per class, `workloads.knee.requests_per_level` per level): each class's command carries its
class's count; a one-process knee's config gives each level's phase its own count and
enough prompt entries for all of them, as AIPerf's own parser reads it. Commands are built,
never run."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.run.measure import loadgen, phases
from campaign.run.measure.passes import arm_passes
from tests.runs import ROOT
from tests.unit.run.test_loadgen import flag
from tests.unit.run.test_loadgen_startup import aiperf_resolved

DEMO = (ROOT / "examples" / "sim-pair.yaml").read_text()
URL = "http://127.0.0.1:18767"


def _passes(tmp_path: Path, *edits: tuple[str, str]) -> dict[str, loadgen.PassPlan]:
    text = DEMO
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    campaign = load_campaign(path)
    return {ap.plan.name: ap.plan for ap in arm_passes(campaign, "control", URL)}


PER_LEVEL = ("    requests_per_level: 16\n", '    requests_per_level: {"*": 16, c16: 400}\n')


def test_each_class_is_told_its_own_count(tmp_path: Path) -> None:
    plans = _passes(tmp_path, ("    requests: 128\n", '    requests: {"*": 32, shell: 400}\n'))
    counts = {name: flag(loadgen.aiperf_command(plan, tmp_path / name), "--request-count")
              for name, plan in plans.items() if plan.kind == "agentfix"}
    assert counts == {"agentfix-prose": ["32"], "agentfix-shell": ["400"]}


def test_a_one_process_knee_gives_each_level_its_phase_count(tmp_path: Path) -> None:
    """c1 and c4 16 requests, c16 400: each phase its own, and one prompt entry per
    request of every level plus one per pause (each level draws prompts of its own)."""
    knee = _passes(tmp_path, PER_LEVEL)["knee"]
    command = loadgen._prepare(knee, tmp_path / "knee")
    doc = json.loads((tmp_path / "knee" / phases.CONFIG_NAME).read_text())
    bench = doc["benchmark"]
    levels = [(p["name"], p["requests"]) for p in bench["phases"] if p["kind"] == "profiling"]
    assert levels == [("c1", 16), ("c4", 16), ("c16", 400)]
    assert bench["dataset"]["entries"] == 16 + 16 + 400 + 2
    pytest.importorskip("aiperf")
    [resolved] = aiperf_resolved(command)
    assert [(p["concurrency"], p["requests"]) for p in resolved["phases"]
            if p["kind"] == "profiling"] == [(1, 16), (4, 16), (16, 400)]
    assert resolved["datasets"][0]["entries"] == 434


def test_the_same_count_everywhere_keeps_the_plain_config(tmp_path: Path) -> None:
    knee = _passes(tmp_path, ("    requests_per_level: 16\n",
                              '    requests_per_level: {"*": 16}\n'))["knee"]
    assert knee.level_requests == ()
    assert phases.config(knee, tmp_path) == json.loads(
        loadgen.phase_config_text(knee, tmp_path))


def test_a_knee_that_cannot_run_as_one_process_sweeps_at_its_largest_count(
        tmp_path: Path) -> None:
    """A URL with a password keeps a knee out of one process (its config file would keep
    it): the sweep then sends every level the largest count, never fewer than asked."""
    knee = dataclasses.replace(_passes(tmp_path, PER_LEVEL)["knee"],
                               base_url="http://u:hunter2@127.0.0.1:18767")
    command = loadgen.aiperf_command(knee, tmp_path)
    assert flag(command, "--request-count") == ["400"]
    assert flag(command, "--concurrency") == ["1,4,16"]


@pytest.mark.parametrize("changes, said", [
    ({"level_requests": (16, 400)}, "one per level"),
    ({"level_requests": (16, 16, 0)}, "≥ 1"),
    ({"level_requests": (16, 16, 400), "requests_per_level": 16}, "the largest"),
])
def test_a_plan_with_counts_per_level_is_validated(tmp_path: Path,
                                                   changes: dict[str, object],
                                                   said: str) -> None:
    knee = _passes(tmp_path, PER_LEVEL)["knee"]
    with pytest.raises(ValueError, match=re.escape(said)):
        dataclasses.replace(knee, **changes)  # type: ignore[arg-type]
