"""`workloads.sessions` (issue 41, item 5): multi-turn agent sessions by class, one AIPerf
pass per class (its `multi_turn` dataset, whole sessions, `concurrency` in flight), each a
cell `("sessions", <class>)`; a file that is not multi-turn JSONL refused with its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.campaignfile import duration, load_campaign
from campaign.errors import SpecError
from campaign.run.measure import loadgen
from campaign.run.measure.passes import arm_passes
from tests.unit.campaignfile.test_campaignfile import BASE, write

SESSION = json.dumps({"type": "multi_turn", "session_id": "s1", "turns": [
    {"role": "system", "text": "You are an agent."}, {"text": "do it"}, {"text": "ok"}]})


def _sessions_only(tmp_path: Path, body: str = SESSION + "\n", extra: str = "") -> Path:
    head, _, _ = BASE.partition("  knee:\n")
    text = head.replace("{workload: knee, level: c1}", "{workload: sessions, level: shell}\n"
                        "  guardrails:\n    - {metric: error_rate, max_worsening: 0.0, "
                        "absolute: true}")
    path = write(tmp_path, text + "  sessions:\n    fixtures: {shell: s.jsonl}\n" + extra)
    (tmp_path / "s.jsonl").write_text(body)
    return path


def test_each_class_is_a_cell_and_a_pass_of_whole_sessions(tmp_path: Path) -> None:
    c = load_campaign(_sessions_only(tmp_path, extra="    concurrency: 3\n    sessions: 12\n"
                                     "    output_tokens: 40\n"))
    assert c.workloads.levels("sessions") == ["shell"]
    ap = [p for p in arm_passes(c, "control", "http://h:1") if p.measured]
    assert [(p.plan.name, p.workload, p.level_labels, p.spec_level) for p in ap] == [
        ("sessions-shell", "sessions", ("shell",), "shell")]
    cmd = loadgen.aiperf_command(ap[0].plan, tmp_path / "p")
    joined = " ".join(cmd)
    assert (f"--input-file {tmp_path / 's.jsonl'} --custom-dataset-type multi_turn "
            "--conversation-num 12") in joined
    assert "--concurrency 3 " in joined and "--request-count" not in cmd
    # a closed loop of sessions, paced (`pacing`): no core spun waiting for a slot
    assert "--request-rate 1000 --arrival-pattern constant" in joined
    assert "--osl 40 --osl-stddev 0 --extra-inputs ignore_eos:true --extra-inputs " \
           "min_tokens:40" in joined
    # 12 sessions of 2 turns, 40 tokens each, 3 at a time: 8 waves of 0.4 s at 100 tok/s
    assert duration.estimate(c).per_arm_s["control"] == pytest.approx(
        duration.estimate(load_campaign(_sessions_only(tmp_path / "b", extra=(
            "    concurrency: 3\n    sessions: 24\n    output_tokens: 40\n"))))
        .per_arm_s["control"] - 8 * 0.4)


@pytest.mark.parametrize("body, expected", [
    ("nope\n", ["s.jsonl:1", "not a JSON object", "multi_turn"]),
    (json.dumps({"type": "multi_turn", "turns": []}) + "\n", ["s.jsonl:1", "turns"]),
    (json.dumps({"turns": [{"role": "system", "text": "x"}]}) + "\n",
     ["s.jsonl:1", "no user turn"]),
    ("", ["s.jsonl", "no session"]),
])
def test_a_file_that_is_not_multi_turn_sessions_is_refused(tmp_path: Path, body: str,
                                                           expected: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        load_campaign(_sessions_only(tmp_path, body))
    assert info.value.exit_code == 2
    assert any("workloads.sessions.fixtures.shell" in p and all(s in p for s in expected)
               for p in info.value.problems), info.value.problems


def test_the_shipped_session_classes_load_as_builtin(tmp_path: Path) -> None:
    path = _sessions_only(tmp_path)
    path.write_text(path.read_text().replace(
        "fixtures: {shell: s.jsonl}", "fixtures: {shell: builtin:sessions/shell, "
        "coding: builtin:sessions/coding, tool_json: builtin:sessions/tool_json}"))
    c = load_campaign(path)
    assert c.workloads.levels("sessions") == ["shell", "coding", "tool_json"]
