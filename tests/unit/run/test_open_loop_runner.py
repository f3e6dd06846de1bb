"""A night with rate levels and agent sessions through the real runner (fake edges, as
tests/unit/run/test_runner.py): every arm of every pair replays the very schedule file the
registration recorded (its sha256 journaled per pass), each rate level's rows carry the
send figures from its records, a level the load generator could not keep is the lane's
invalid pass, and a sessions pass journals its per-turn figures."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest

from campaign.campaignfile import Campaign, load_campaign
from campaign.errors import ResultsError
from campaign.results.store import load_run
from campaign.run import runner
from campaign.run.measure import records
from campaign.run.measure.loadgen import PassOutcome, PassPlan
from tests.runs import ROOT
from tests.unit.run.test_runner import Script, listener, make_rt, start

__all__ = ["listener"]

TOKENIZER = ROOT / "campaign" / "fixtures" / "tokenizer"

CAMPAIGN = """
name: open
hypothesis: h
lane: fake-lane
preregistration:
  pairs: 2
  decision_cells: [{workload: rate, level: r4}]
  guardrails: [{metric: error_rate, max_worsening: 0.0, absolute: true}]
  gates: {retries: 0, min_completed_requests: 2}
server:
  backend: process
  command: [never-run]
  port: 1
  readiness: {poll_interval_s: 0.001, timeout_s: 5}
arms:
  control: {}
  cand: {env: {X: "1"}}
workloads:
  model: m
  tokenizer: tok
  warmup: []
  rate: {rates: [4, 40], requests_per_level: 6, input_tokens: 8, output_tokens: 4}
  sessions: {fixtures: {shell: s.jsonl}, sessions: 2, concurrency: 2, output_tokens: 4}
"""


def _campaign(tmp_path: Path) -> Campaign:
    (tmp_path / "tok").mkdir(exist_ok=True)
    for f in TOKENIZER.iterdir():
        (tmp_path / "tok" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "s.jsonl").write_text(json.dumps(
        {"type": "multi_turn", "session_id": "a", "turns": [{"text": "x"}, {"text": "y"}]})
        + "\n")
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    return load_campaign(tmp_path / "c.yaml")


class Replaying(Script):
    """Writes each pass's records: a rate level's requests sent on time (r40's at a tenth
    of its rate: a load generator that could not keep up), a session's two turns."""

    def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> PassOutcome:
        outcome = super().__call__(plan, artifact_dir, cancel=cancel)
        lines = []
        if plan.kind == "rate":
            assert plan.input_file is not None
            slow = 10 if plan.name == "rate-r40" else 1
            for i, line in enumerate(plan.input_file.read_text().splitlines()):
                ns = 10**18 + int(json.loads(line)["timestamp"] * 1e6 * slow)
                lines.append({"metadata": {"benchmark_phase": "profiling",
                                           "conversation_id": f"session_{i:06d}",
                                           "request_start_ns": ns}, "metrics": {}})
        if plan.kind == "sessions":
            lines = [{"metadata": {"benchmark_phase": "profiling", "turn_index": t},
                      "metrics": {"time_to_first_token": {"value": 10.0 + t, "unit": "ms"}}}
                     for t in (0, 1, 0, 1)]
        (artifact_dir / records.RECORDS_NAME).write_text(
            "".join(json.dumps(x) + "\n" for x in lines))
        return outcome


def test_every_arm_replays_the_registered_schedule(tmp_path: Path, listener: int) -> None:
    c = _campaign(tmp_path)
    rt = make_rt(tmp_path, listener, Replaying(), [])
    store = start(c, tmp_path, rt)
    runner.execute(c, store, rt)
    events = [json.loads(x) for x in (store.run_dir / "journal.jsonl").read_text().splitlines()]
    registered = events[0]["schedules"]
    assert sorted(registered) == ["rate-r4", "rate-r40"]
    # registered with the rule, before the first boot, as the journal's first line says
    prereg = json.loads((store.run_dir / "preregistration.json").read_text())
    assert prereg["schedules"] == registered
    for name, sha in registered.items():
        data = (store.run_dir / "schedules" / f"{name}.jsonl").read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha
    passes = [e for e in events if e["event"] == "pass"]
    replayed = {(e["pair"], e["arm"], e["name"]): e.get("schedule_sha256") for e in passes
                if e["workload"] == "rate"}
    assert len(replayed) == 2 * 2 * 2  # pairs × arms × levels
    assert all(sha == registered[name] for (_, _, name), sha in replayed.items())
    rows = load_run(store.run_dir).passes
    r4 = rows[(rows.level == "r4") & (rows.metric == "achieved_rate")]
    assert len(r4) >= 4 and r4.valid.all()  # (the pairs are redone: r40 is the lane's)
    sent = rows[(rows.level == "r40") & (rows.metric == "achieved_rate")]
    assert not sent.valid.any()
    r40 = [e for e in passes if e["name"] == "rate-r40"]
    assert all(e["fault"] == "lane" and any("10% of the" in p and "its schedule offers" in p
                                              for p in e["problems"])
               for e in r40), r40[0]["problems"]
    # a session class's file too: the sha256 of the bytes replayed, the same on each arm
    shas = {e.get("schedule_sha256") for e in passes if e["workload"] == "sessions"}
    assert shas == {hashlib.sha256((tmp_path / "s.jsonl").read_bytes()).hexdigest()}
    turns = [e["turns"] for e in passes if e["workload"] == "sessions"]
    assert len(turns) >= 4
    assert [(t["turn"], t["requests"], t["ttft_p50"]) for t in turns[0]["shell"]] == [
        (0, 2, 10.0), (1, 2, 11.0)]


def test_a_resume_refuses_a_schedule_changed_since_registration(tmp_path: Path,
                                                                 listener: int) -> None:
    c = _campaign(tmp_path)
    rt = make_rt(tmp_path, listener, Replaying(), [])
    store = start(c, tmp_path, rt)
    path = store.run_dir / "schedules" / "rate-r4.jsonl"
    path.write_text(path.read_text().replace('"timestamp": 0,', '"timestamp": 1,', 1))
    with pytest.raises(ResultsError) as info:
        runner.execute(c, store, rt)
    assert info.value.exit_code == 2 and "rate-r4.jsonl" in str(info.value)
    assert "changed after registration" in str(info.value)
