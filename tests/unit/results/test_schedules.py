"""The schedules a run replays (issue 41: rate levels, traces), registered and verified:
their sha256 in preregistration.json beside the journal's `registered` line, and `spec-ab
verify` checking each `schedules/*.jsonl` and each pass's journaled `schedule_sha256`
against them, so both arms of every pair are shown to have replayed the same bytes."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from campaign.campaignfile import Preregistration
from campaign.cli import app
from campaign.errors import EXIT_USAGE, ResultsError
from campaign.results.registration import Registration, values_hash
from campaign.results.replayed import registered_schedules
from campaign.results.store import RunStore

RULE = Preregistration().model_dump(mode="json", by_alias=True)
ARMS = ["control", "cand"]
SCHEDULES = {"rate-r2": "a" * 64, "trace-mini": "b" * 64}


def _register(tmp_path: Path, name: str, **kw: Any) -> Path:
    store = RunStore.create(tmp_path, name, b"name: demo\n", short_id="abcdef",
                            clock=lambda: dt.datetime(2026, 12, 5, tzinfo=dt.UTC))
    store.register(RULE, campaign="demo", arms=ARMS, drift_band=0.02, **kw)
    return store.run_dir / "preregistration.json"


def test_the_schedules_sha256_are_registered_and_under_the_values_hash(tmp_path: Path) -> None:
    path = _register(tmp_path, "rate", schedules=SCHEDULES)
    doc = json.loads(path.read_text())
    assert doc["schedules"] == SCHEDULES
    reg = Registration.load(path)
    assert reg.schedules == SCHEDULES
    assert reg.values_sha256 == values_hash(reg.rule, 0.02, ARMS, schedules=SCHEDULES)
    assert reg.values_sha256 != values_hash(reg.rule, 0.02, ARMS)
    assert reg.verify(path, ARMS).intact


@pytest.mark.parametrize("none", [None, {}])
def test_a_run_without_schedules_registers_the_bytes_it_did_before(
        tmp_path: Path, none: dict[str, str] | None) -> None:
    before = _register(tmp_path / "a", "knee").read_bytes()  # as every run registered it
    path = _register(tmp_path / "b", "knee", schedules=none)
    assert path.read_bytes() == before
    assert "schedules" not in json.loads(before)
    assert Registration.load(path).schedules is None


def test_an_edited_schedule_hash_in_the_registration_is_refused(tmp_path: Path) -> None:
    path = _register(tmp_path, "rate", schedules=SCHEDULES)
    doc = json.loads(path.read_text())
    doc["schedules"]["rate-r2"] = "c" * 64
    path.write_text(json.dumps(doc, indent=2) + "\n")
    with pytest.raises(ResultsError, match=r"schedules do not match values_sha256"):
        Registration.load(path).verify(path, ARMS)


# ------------------------------------------------------------- spec-ab verify, a real run

OPEN_LOOP = Path(__file__).parent / "data" / "open-loop" / "2026-12-05-open-loop-51b3da"
"""A real run of tests/e2e/test_open_loop_e2e.py (2026-12-05: the simulated lane, AIPerf
0.13, one pair of control and depth7; a rate sweep r2, r6, a trace `mini`, a sessions
class), without its pairs/ folder (server logs, AIPerf exports: verify reads none)."""
R2 = "3c72eb02ace5"
R6 = "2d6c7495f79e"
MEANS = "the arms' requests can no longer be shown identical"


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    out = tmp_path / OPEN_LOOP.name
    shutil.copytree(OPEN_LOOP, out)
    return out


def _verify(run: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["verify", str(run)], env={"COLUMNS": "400"})
    return res.exit_code, " ".join(res.output.split())


def test_verify_shows_both_arms_of_the_pair_replayed_the_registered_schedules(
        run: Path) -> None:
    code, out = _verify(run)
    assert code == 0, out
    assert ("ok schedules 3 schedule(s) as registered (rate-r2, rate-r6, trace-mini); 6 "
            "passes replayed them byte for byte, both arms of each pair (pair 1: control "
            "and depth7)") in out


def test_a_changed_schedule_file_is_damage(run: Path) -> None:
    path = run / "schedules" / "rate-r2.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"timestamp": 0,', b'"timestamp": 1,', 1))
    found = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    code, out = _verify(run)
    assert code == EXIT_USAGE == 2
    assert (f"FAIL schedules schedules/rate-r2.jsonl changed after registration: registered "
            f"sha256 {R2}, found {found}: {MEANS}") in out
    assert "ok chain" in out and "ok rows" in out and "not verified (schedules)" in out


def test_a_missing_and_an_extra_schedule_file_are_damage(run: Path) -> None:
    (run / "schedules" / "rate-r6.jsonl").rename(run / "schedules" / "rate-r9.jsonl")
    code, out = _verify(run)
    assert code == 2
    assert f"schedules/rate-r6.jsonl is missing (registered sha256 {R6}): {MEANS}" in out
    assert (f"schedules/rate-r9.jsonl was not registered (sha256 {R6}): a schedule added "
            "after registration") in out


def _edit_pass(run: Path, arm: str, name: str, *edits: tuple[bytes, bytes]) -> None:
    """Edit `arm`'s pass `name` in the journal and re-chain every later line, as a careful
    editor would (the chain holds)."""
    path = run / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines)
             if f'"arm": "{arm}"'.encode() in ln and f'"name": "{name}"'.encode() in ln)
    for old, new in edits:
        assert old in lines[i]
        lines[i] = lines[i].replace(old, new, 1)
    for k in range(i, len(lines)):
        ev = json.loads(lines[k])
        ev["prev"] = hashlib.sha256(lines[k - 1]).hexdigest()
        lines[k] = (json.dumps(ev) + "\n").encode()
    path.write_bytes(b"".join(lines))


def test_a_pass_that_replayed_another_file_is_named_by_pair_arm_and_pass(run: Path) -> None:
    _edit_pass(run, "depth7", "rate-r6", (b'"schedule_sha256": "2d6c', b'"schedule_sha256": "ffff'))
    code, out = _verify(run)
    assert code == 2 and "ok chain" in out and "ok rows" in out
    assert (f"FAIL schedules pair 1 depth7 pass rate-r6 replayed sha256 ffff7495f79e, not "
            f"the registered schedule {R6}: {MEANS}") in out


def test_a_retried_pass_replays_its_levels_schedule(run: Path) -> None:
    """A pass retried after a lane fault is journaled as `rate-r6.retry1`: it replays the
    schedule of its level, `rate-r6`, and is named with its attempt when it did not."""
    _edit_pass(run, "depth7", "rate-r6", (b'"name": "rate-r6"', b'"name": "rate-r6.retry1"'),
               (b'"attempt": 1', b'"attempt": 2'))
    code, out = _verify(run)
    assert code == 0 and "6 passes replayed them byte for byte" in out, out
    _edit_pass(run, "depth7", "rate-r6.retry1",
               (b'"schedule_sha256": "2d6c', b'"schedule_sha256": "3c72'))
    code, out = _verify(run)
    assert code == 2
    assert ("pair 1 depth7 pass rate-r6.retry1 (attempt 2) replayed sha256 3c727495f79e, not "
            f"the registered schedule {R6}") in out


def test_the_registration_and_the_journal_must_register_the_same_schedules() -> None:
    first = {"event": "registered", "schedules": {"rate-r2": "a" * 64}}
    assert registered_schedules({"rate-r2": "a" * 64}, first) == ({"rate-r2": "a" * 64}, [])
    assert registered_schedules(None, first) == ({"rate-r2": "a" * 64}, [])
    _, said = registered_schedules({"rate-r2": "b" * 64}, first)
    assert said == ["preregistration.json and journal.jsonl's registered line register "
                    f"different schedules (rate-r2): {MEANS}"]


def _register_schedules(run: Path, schedules: dict[str, str]) -> None:
    """The run registered as a spec-ab that writes the schedules into preregistration.json
    registers it: the file rewritten with them, line 1's digest of it and the chain redone."""
    path = run / "preregistration.json"
    reg = Registration.load(path)
    path.unlink()
    Registration.new(reg.rule, campaign=reg.campaign, arms=list(reg.arms),
                     drift_band=reg.drift_band, registered_at=reg.registered_at,
                     levels=reg.levels, guardrail_bands=reg.guardrail_bands,
                     schedules=schedules).save(path)
    journal = run / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["registration_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    lines[0] = (json.dumps(first) + "\n").encode()
    for k in range(1, len(lines)):
        ev = json.loads(lines[k])
        ev["prev"] = hashlib.sha256(lines[k - 1]).hexdigest()
        lines[k] = (json.dumps(ev) + "\n").encode()
    journal.write_bytes(b"".join(lines))


def test_schedules_registered_in_preregistration_json_are_the_ones_checked(run: Path) -> None:
    journaled = json.loads((run / "journal.jsonl").read_text().splitlines()[0])["schedules"]
    _register_schedules(run, journaled)
    code, out = _verify(run)
    assert code == 0 and "ok registration" in out and "ok copies" in out, out
    assert "ok schedules 3 schedule(s) as registered" in out


def test_a_registration_and_a_journal_that_register_other_schedules_fail(run: Path) -> None:
    journaled = json.loads((run / "journal.jsonl").read_text().splitlines()[0])["schedules"]
    _register_schedules(run, {**journaled, "rate-r2": "0" * 64})
    code, out = _verify(run)
    assert code == 2 and "ok copies" in out
    assert ("FAIL schedules preregistration.json and journal.jsonl's registered line "
            f"register different schedules (rate-r2): {MEANS}") in out
    assert (f"schedules/rate-r2.jsonl changed after registration: registered sha256 "
            f"000000000000, found {R2}") in out
