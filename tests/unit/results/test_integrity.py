"""The record nobody can rewrite unseen: the journal's hash chain, the registration and the
frozen campaign checked against the journal's first line, the run's digest, and
`spec-ab verify` / `spec-ab report` naming every copy that disagrees."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
from pathlib import Path

from typer.testing import CliRunner

from campaign import report as rp
from campaign.cli import app
from campaign.results import chain, damage
from campaign.results import journal as jr
from campaign.results.registration import rule_hash, values_hash
from tests.cli import invoke
from tests.runs import T0, TPUT, make_run

ADOPTS = {("knee", "c1", TPUT): [(100.0, 125.0), (100.0, 124.0), (100.0, 126.0)]}
KEEPS = {("knee", "c1", TPUT): [(100.0, 104.0), (100.0, 105.0), (100.0, 103.0)]}


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def _lines(run: Path) -> list[bytes]:
    return (run / "journal.jsonl").read_bytes().splitlines(keepends=True)


# ------------------------------------------------------------------------ the chain


def test_every_line_after_the_first_names_the_digest_of_the_one_before(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    lines = _lines(run)
    first = json.loads(lines[0])
    assert first["event"] == "registered" and first["chain"] == chain.CHAIN_VERSION
    assert first["registration_sha256"] == hashlib.sha256(
        (run / "preregistration.json").read_bytes()).hexdigest()
    assert first["campaign_sha256"] == hashlib.sha256(
        (run / "campaign.yaml").read_bytes()).hexdigest()
    assert len(lines) >= 3
    for before, line in itertools.pairwise(lines):
        assert json.loads(line)["prev"] == hashlib.sha256(before).hexdigest()
    walk = chain.walk(b"".join(lines))
    assert walk.chained and not walk.breaks
    assert walk.head == chain.head(run / "journal.jsonl") == hashlib.sha256(lines[-1]).hexdigest()


def test_an_append_from_another_process_is_chained_too(tmp_path: Path) -> None:
    """The digest of the last line is cached per path with the file's size; another
    writer changes the size, so the tail is read again."""
    path = tmp_path / "journal.jsonl"
    jr.append(path, "registered", "t0", chain=1)
    with open(path, "ab") as f:  # another process's line
        f.write(json.dumps({"t": "t1", "event": "run_start",
                            "prev": hashlib.sha256(path.read_bytes()).hexdigest()}).encode()
                + b"\n")
    jr.append(path, "pair_start", "t2", pair=1)
    assert not chain.walk(path.read_bytes()).breaks


def test_a_torn_last_line_is_ended_before_the_next_append(tmp_path: Path) -> None:
    """A crash mid-line left a fragment; the next line used to glue onto it and be lost to
    every reader. Now the fragment is ended, kept as a damaged line, and chained to."""
    path = tmp_path / "journal.jsonl"
    jr.append(path, "registered", "t0", chain=1)
    jr.append(path, "pair_start", "t1", pair=1)
    with open(path, "ab") as f:
        f.write(b'{"t": "t2", "event": "pass", "rows": [1, 2')  # torn by a crash
    jr.append(path, "run_start", "t3", resumed=True)
    events, _problems = damage.journal_problems(tmp_path)
    assert [e["event"] for e in events] == ["registered", "pair_start", "run_start"]
    assert events[-1]["resumed"] is True
    walk = chain.walk(path.read_bytes())
    assert walk.breaks == () and walk.damaged == (3,)


def test_an_edited_line_breaks_the_chain_at_the_next_line(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    lines = _lines(run)
    i = next(k for k, ln in enumerate(lines) if b'"pass"' in ln)
    lines[i] = lines[i].replace(b"125.0", b"225.0")
    walk = chain.walk(b"".join(lines))
    assert len(walk.breaks) == 1 and walk.breaks[0].startswith(f"line {i + 2} does not follow")


# ------------------------------------------------------------- spec-ab verify


def test_verify_an_intact_run_and_its_digest(tmp_path: Path) -> None:
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    head = chain.head(run / "journal.jsonl")
    assert head is not None
    code, text = _cli("verify", str(run), "--digest", head[:16])
    assert code == 0, text
    assert f"digest=sha256:{head}" in text
    assert "FAIL " not in text and text.count("ok ") == 7
    code, text = _cli("verify", str(run), "--digest", "0" * 64)
    assert code == 2 and "FAIL digest" in text and "not verified (digest)" in text


def _rehash_registration(run: Path, **rule: object) -> None:
    """Edit the registered rule and recompute every hash inside preregistration.json: the
    file is consistent with itself (what the old check accepted as pre-registered)."""
    path = run / "preregistration.json"
    doc = json.loads(path.read_text())
    doc["rule"].update(rule)
    doc["sha256"] = rule_hash(doc["rule"])
    levels = doc.get("levels")
    from campaign.results.registration import RegisteredLevels

    doc["values_sha256"] = values_hash(
        doc["rule"], doc["drift_band"], doc["arms"],
        None if levels is None else RegisteredLevels.model_validate(levels),
        doc.get("guardrail_bands"))
    path.chmod(0o644)
    path.write_text(json.dumps(doc, indent=2))


def test_a_rehashed_registration_is_named_and_not_pre_registered(tmp_path: Path) -> None:
    """Before the first line recorded the file's digest, a registration edited and
    re-hashed consistently (a lower margin turns keep-default into adopt) was reported as
    pre-registered."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    assert rp.build_report([run]).latest.decision == "keep-default"
    _rehash_registration(run, margin=0.02)
    rep = rp.build_report([run])
    assert rep.latest.exploratory and rep.latest.disagreements
    doc = json.loads(rp.render(rep, "json"))
    assert doc["rule"]["pre_registered"] is False
    assert doc["integrity"]["copies_agree"] is False
    assert any("preregistration.json and journal.jsonl disagree" in n for n in doc["notes"])
    table = rp.render(rep, "table")
    assert "NOT pre-registered" in table and "EXPLORATORY" in table
    assert "copies of its registration disagree" in rp.render(rep, "markdown")
    code, text = _cli("report", str(run), "--fail-on", "not-preregistered")
    assert code == 4 and "fail-on: not-preregistered" in text
    code, text = _cli("verify", str(run))
    assert code == 2 and "FAIL copies" in text and "preregistration.json" in text


def _copy_registration(source: Path, run: Path) -> None:
    """Replace `run`'s preregistration.json with `source`'s (consistent in itself)."""
    path = run / "preregistration.json"
    path.chmod(0o644)
    path.write_bytes((source / "preregistration.json").read_bytes())


def test_another_campaigns_registration_is_refused(tmp_path: Path) -> None:
    """A registration copied from another campaign's run folder, its hashes consistent
    in itself, read as this run's registration edited ("a rule not pre-registered",
    EXPLORATORY, exit 0): it is not this run's at all, and is refused."""
    run = make_run(tmp_path / "a", KEEPS, guardrails=[])
    other = make_run(tmp_path / "b", KEEPS, guardrails=[], name="other",
                     when=T0 + dt.timedelta(days=1), margin=0.02)
    _copy_registration(other, run)
    res = invoke("report", str(run))
    assert res.code == 2, res.output
    flat = " ".join(res.stderr.split())
    assert (f"{run}: preregistration.json is another run's registration, not this run's: "
            "it registers campaign 'other', this run is 'demo' (its campaign.yaml, as "
            "journal.jsonl registered it); it was registered at 2026-11-29T22:00:00.000Z, "
            "this run at 2026-11-28T22:00:00.000Z (journal.jsonl's first line); its "
            "sha256 is ") in flat, flat
    assert "put this run's own preregistration.json back" in flat
    assert "EXPLORATORY" not in res.output
    code, out = _cli("verify", str(run))
    assert code == 2, out
    assert "FAIL copies" in out and "another run's registration" in out
    assert "ok   registration" in out  # consistent in itself


def test_another_nights_registration_of_the_same_campaign_is_refused(tmp_path: Path) -> None:
    """The same campaign registered another night (its own time, a lower margin that
    would adopt): another run's registration, told by its time of registration."""
    run = make_run(tmp_path / "a", KEEPS, guardrails=[])
    night = make_run(tmp_path / "b", KEEPS, guardrails=[], short_id="bbbbbb",
                     when=T0 + dt.timedelta(hours=2), margin=0.02)
    _copy_registration(night, run)
    res = invoke("report", str(run), "-f", "json")
    assert res.code == 2 and res.stdout == ""
    assert "another run's registration" in res.stderr
    assert "registered at 2026-11-29T00:00:00.000Z" in res.stderr
    assert "campaign 'demo'" not in res.stderr  # the name is the same: not a reason


def test_another_runs_registration_in_a_journal_before_the_chain(tmp_path: Path) -> None:
    """A journal before the chain records the rule's hash and the line's time only: the
    registration of another run (the golden schema-1 sim run, an hour's night) is told
    by its time."""
    import shutil

    from tests.runs import SIM_RUN

    run = tmp_path / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    other = make_run(tmp_path / "b", KEEPS, guardrails=[])
    _copy_registration(other, run)
    res = invoke("report", str(run))
    assert res.code == 2, res.output
    flat = " ".join(res.stderr.split())
    assert ("it was registered at 2026-11-28T22:00:00.000Z, this run at "
            "2026-11-29T16:09:54.925Z (journal.jsonl's first line); its rule's sha256 is "
            in flat), flat
    assert "it registers campaign" not in flat  # the frozen campaign is not vouched for


def test_a_consistent_edit_of_registration_and_frozen_campaign_is_named(tmp_path: Path) -> None:
    """Both copies of the rule edited alike: they agree with each other, not with the
    journal's first line."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    _rehash_registration(run, margin=0.05)
    path = run / "campaign.yaml"
    doc = json.loads(path.read_text())
    doc["preregistration"]["margin"] = 0.05
    path.chmod(0o644)
    path.write_text(json.dumps(doc, indent=1))
    rep = rp.build_report([run])
    assert rep.latest.edited_after_registration == ()  # the two files agree
    text = " ".join(rep.latest.disagreements)
    assert "preregistration.json and journal.jsonl" in text
    assert "campaign.yaml and journal.jsonl" in text
    code, out = _cli("verify", str(run))
    assert code == 2 and "campaign.yaml and journal.jsonl disagree" in out


def test_an_edited_launch_is_named(tmp_path: Path) -> None:
    """A launch (an arm's env) is outside every hash of the registration: only the
    frozen campaign holds it, and the journal's first line holds the campaign's digest."""
    run = make_run(tmp_path, ADOPTS, guardrails=[])
    path = run / "campaign.yaml"
    doc = json.loads(path.read_text())
    doc["arms"]["cand"]["env"]["K"] = "7"
    path.chmod(0o644)
    path.write_text(json.dumps(doc, indent=1))
    rep = rp.build_report([run])
    assert rep.latest.exploratory
    assert any("campaign.yaml and journal.jsonl disagree" in n for n in rep.latest.notes)
    code, out = _cli("verify", str(run))
    assert code == 2 and "FAIL copies" in out


def test_verify_names_an_edited_value_in_passes_csv(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    path = run / "passes.csv"
    path.chmod(0o644)
    path.write_text(path.read_text().replace(",104.0,", ",140.0,", 1))
    code, out = _cli("verify", str(run))
    assert code == 2 and "FAIL rows" in out and "140.0" in out


def _edit_journal(run: Path, old: bytes, new: bytes, *, rechain: bool) -> None:
    """Edit a value in the journal (and, `rechain`, re-chain every line after it as a
    careful editor would), then rebuild passes.csv from it."""
    path = run / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if old in ln)
    lines[i] = lines[i].replace(old, new, 1)
    if rechain:
        for k in range(max(i, 1), len(lines)):
            ev = json.loads(lines[k])
            ev["prev"] = hashlib.sha256(lines[k - 1]).hexdigest()
            lines[k] = (json.dumps(ev) + "\n").encode()
    path.chmod(0o644)
    path.write_bytes(b"".join(lines))
    from campaign.results.store import RunStore

    RunStore.open(run).rebuild_passes_csv()


def test_verify_catches_a_journal_edited_with_its_passes(tmp_path: Path) -> None:
    """A value edited in the journal and passes.csv rebuilt from it: the rows agree, the
    chain does not."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    _edit_journal(run, b"104.0", b"140.0", rechain=False)
    code, out = _cli("verify", str(run))
    assert code == 2 and "FAIL chain" in out and "ok   rows" in out


def test_only_the_digest_kept_outside_catches_a_rechained_rewrite(tmp_path: Path) -> None:
    """An editor who re-chains every line after the edit leaves a folder consistent with
    itself: the digest kept outside (the CI log) is what differs."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    head = chain.head(run / "journal.jsonl")
    assert head is not None
    _edit_journal(run, b"104.0", b"140.0", rechain=True)
    code, out = _cli("verify", str(run))
    assert code == 0 and "ok   chain" in out
    code, out = _cli("verify", str(run), "--digest", head)
    assert code == 2 and "FAIL digest" in out and "ok   chain" in out


def test_an_older_unchained_run_verifies_what_it_can(tmp_path: Path) -> None:
    from tests.runs import unchain

    run = make_run(tmp_path, ADOPTS, guardrails=[])
    unchain(run)
    code, out = _cli("verify", str(run))
    assert code == 0, out
    assert "not hash-chained" in out
    rep = rp.build_report([run])
    assert not rep.latest.exploratory
    assert json.loads(rp.render(rep, "json"))["integrity"]["chained"] is False


def test_verify_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    code, out = _cli("verify", str(tmp_path))
    assert code == 2 and "not a run directory" in out


def test_verify_refuses_a_journal_that_is_a_fifo(tmp_path: Path) -> None:
    """A FIFO would block the reader forever: refused by name (exit 2), not read."""
    import os

    run = make_run(tmp_path, ADOPTS, guardrails=[])
    (run / "journal.jsonl").unlink()
    os.mkfifo(run / "journal.jsonl")
    code, out = _cli("verify", str(run))
    assert code == 2 and "journal.jsonl" in out


def test_the_digest_from_the_tail_is_the_chain_head(tmp_path: Path) -> None:
    """The report reads the run's digest from the tail `ending` already reads; a run whose
    last line is longer than that tail falls back to reading the last line."""
    from campaign.results.store import RunStore, load_run

    run = make_run(tmp_path, ADOPTS, guardrails=[])
    assert jr.ending(run).head == chain.head(run / "journal.jsonl") is not None
    assert load_run(run).journal_sha256 == chain.head(run / "journal.jsonl")
    RunStore.open(run).journal("look", pair=1, note="x" * (jr.TAIL_BYTES + 10))
    assert jr.ending(run).head is None
    assert load_run(run).journal_sha256 == chain.head(run / "journal.jsonl") is not None


def test_a_journal_replaced_with_one_of_the_same_size_is_read_again(tmp_path: Path) -> None:
    """The cached digest of the last line is keyed by size and modification time: a file
    replaced behind the writer's back (same size, other bytes) is chained to as it is."""
    import os

    path = tmp_path / "journal.jsonl"
    jr.append(path, "registered", "t0", chain=1)
    jr.append(path, "pair_start", "t1", pair=1)
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"pair": 1', b'"pair": 2'))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    jr.append(path, "pair_done", "t2", pair=2)
    lines = path.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["prev"] == hashlib.sha256(lines[-2]).hexdigest()
