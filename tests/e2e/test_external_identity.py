"""An external server's identity, for real (simulated lane started by the campaign's own
hooks, real AIPerf, the CLI in a subprocess): the model ids (and `/version` when served)
the first ready slot of each arm journals are compared at every later slot. Another
server behind the URL — here the sim restarted under another `--model` name between two
pairs — makes the slot a lane fault: the pair is invalid, redone within the night, never
measured; `--resume` compares with the identity the journal recorded. The same identity
throughout is a valid night."""

from __future__ import annotations

import sys
from pathlib import Path

from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import (
    journal_events,
    lock_env,
    out,
    procs_of,
    run_cli,
    run_dir_of,
    write_campaign,
)
from tests.runs import ROOT

__all__ = ["out"]  # the fixture, imported from test_run_e2e

START = """#!/bin/sh
# Boot N serves the model on line N of models.txt (its last line after that); FAIL fails.
n=$(cat boots 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > boots
model=$(sed -n "${n}p" models.txt); [ -n "$model" ] || model=$(tail -n 1 models.txt)
[ "$model" = FAIL ] && { echo "no server this time"; exit 1; }
SPECAB_SIM_MODEL="$model" SPECAB_SIM_TIME_SCALE=40 SPECAB_SIM_SEED=1 \\
  {python} -m campaign sim serve --port {port} </dev/null >>sim.log 2>&1 &
echo $! > sim.pid
"""
STOP = """#!/bin/sh
pid=$(cat sim.pid) && kill "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
rm -f sim.pid
"""


def external_campaign(tmp_path: Path, port: int, models: list[str], pairs: int) -> Path:
    (tmp_path / "start.sh").write_text(START.replace("{python}", sys.executable)
                                       .replace("{port}", str(port)))
    (tmp_path / "stop.sh").write_text(STOP)
    (tmp_path / "models.txt").write_text("\n".join(models) + "\n")
    fix = ROOT / "fixtures"
    return write_campaign(tmp_path, f"""
name: identity
hypothesis: test
lane: e2e-ext-{port}
preregistration:
  pairs: {pairs}
  decision_cells: [{{workload: knee, level: c1}}]
  gates: {{retries: 0, pair_retries: 0, redo_budget: 1, min_completed_requests: 2,
          pass_timeout_s: 120, min_output_tokens: 10}}
server:
  backend: external
  base_url: http://127.0.0.1:{port}
  start_hook: sh start.sh
  stop_hook: sh stop.sh
  readiness: {{timeout_s: 60}}
arms:
  control: {{}}
  cand: {{}}
workloads:
  model: e2e-model
  tokenizer: {fix}/tokenizer
  warmup: []
  knee:
    concurrency: [1]
    input_tokens: 64
    output_tokens: 32
    requests_per_level: 6
""")


def ready_identities(events: list[dict[str, object]]) -> list[object]:
    return [e.get("identity") for e in events if e["event"] == "server_ready"]


def test_the_same_external_server_throughout_is_valid_and_its_identity_recorded(
        tmp_path: Path, out: Path) -> None:
    port = free_port()
    path = external_campaign(tmp_path, port, ["e2e-model"], pairs=2)
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(out)
    events = journal_events(run_dir)
    # recorded once per arm (the first time it is ready), then compared, not re-recorded
    assert ready_identities(events) == [{"models": ["e2e-model"]}, {"models": ["e2e-model"]},
                                        None, None]
    assert not [e for e in events if e["event"] in ("pair_invalid", "pair_redo")]
    assert not procs_of(run_dir)


def test_another_model_behind_the_url_is_a_lane_fault_never_measured(
        tmp_path: Path, out: Path) -> None:
    """Pair 1 on e2e-model; from pair 2 on, the hook's sim serves other-model on the same
    URL: the slot is a lane fault naming both identities, redone once (redo_budget 1),
    never measured: exit 4. Before the check the night stopped (exit 3) at readiness."""
    port = free_port()
    path = external_campaign(tmp_path, port, ["e2e-model", "e2e-model", "other-model"],
                             pairs=2)
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    run_dir = run_dir_of(out)
    events = journal_events(run_dir)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert [(e["pair"], e["fault"]) for e in invalid] == [(2, "lane"), (2, "lane")], invalid
    for e in invalid:
        assert ("it was model e2e-model, it is now model other-model" in str(e["reason"])
                ), e["reason"]
    assert [e["pair"] for e in events if e["event"] == "pair_redo"] == [2]
    measured = {e["pair"] for e in events if e["event"] == "pass"}
    assert measured == {1}  # pair 2 never measured
    assert "campaign incomplete" in proc.stderr
    assert not procs_of(run_dir)


def test_resume_compares_with_the_identity_the_journal_recorded(
        tmp_path: Path, out: Path) -> None:
    """The first session stops at pair 2 (its start hook fails: exit 3) after recording
    e2e-model; the resumed session meets other-model behind the URL: a lane fault, as in
    one session."""
    port = free_port()
    path = external_campaign(tmp_path, port, ["e2e-model", "e2e-model", "FAIL"], pairs=2)
    first = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path))
    assert first.returncode == 3, first.stdout + first.stderr
    run_dir = run_dir_of(out)
    (tmp_path / "models.txt").write_text("other-model\n")
    resumed = run_cli("run", "--resume", str(run_dir), env=lock_env(tmp_path))
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr
    events = journal_events(run_dir)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert invalid and all(e["fault"] == "lane" and "it was model e2e-model, it is now "
                           "model other-model" in str(e["reason"]) for e in invalid), invalid
    assert {e["pair"] for e in events if e["event"] == "pass"} == {1}
    assert not procs_of(run_dir)
