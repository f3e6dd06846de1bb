"""The chain cannot be switched off from inside the folder: whether a journal is chained is
decided by what the registration records (and what the journal's other lines carry), not
by its first line; a journal that lost its pass events does not vouch for passes.csv."""

from __future__ import annotations

import json
from pathlib import Path

from campaign import report as rp
from campaign.results import chain
from campaign.results.store import RunStore
from tests.cli import invoke
from tests.runs import SIM_RUN, TPUT, make_run, unchain

KEEPS = {("knee", "c1", TPUT): [(100.0, 104.0), (100.0, 105.0), (100.0, 103.0)]}


def _journal(run: Path) -> Path:
    path = run / "journal.jsonl"
    path.chmod(0o644)
    return path


def _first_line(run: Path, new: bytes) -> None:
    path = _journal(run)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(new + b"".join(lines[1:]))


def _without_marker(run: Path, **replace: object) -> None:
    """The audit's edit: the first line loses its `chain` key (or gets another value)."""
    path = _journal(run)
    first = json.loads(path.read_bytes().splitlines()[0])
    first.pop("chain")
    first.update(replace)
    _first_line(run, (json.dumps(first) + "\n").encode())


def _boost_candidate(run: Path) -> None:
    """Each candidate throughput in the journal's pass events raised by 1.6, without
    re-chaining, passes.csv rebuilt from it, the last line kept."""
    path = _journal(run)
    text = path.read_text()
    for v in ("104.0", "105.0", "103.0"):
        text = text.replace(f": {v}", f": {float(v) * 1.6:.1f}")
    path.write_text(text)
    RunStore.open(run).rebuild_passes_csv()


def test_a_deleted_chain_marker_is_a_break_and_fails_the_digest(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    assert rp.build_report([run]).latest.decision == "keep-default"
    _without_marker(run)
    _boost_candidate(run)
    head = chain.head(run / "journal.jsonl")
    assert head is not None
    res = invoke("verify", str(run), "--digest", head)
    assert res.code == 2, res.output
    assert "FAIL chain" in res.stdout and "line 1" in res.stdout
    assert "no chain marker" in res.stdout
    assert "FAIL digest" in res.stdout
    rep = rp.build_report([run])  # the edited passes read as adopt: not pre-registered
    assert rep.latest.exploratory and any("chain marker" in n
                                          for n in rep.latest.disagreements)
    assert json.loads(rp.render(rep, "json"))["rule"]["pre_registered"] is False
    assert "NOT pre-registered" in rp.render(rep, "table")


def test_a_garbled_chain_marker_is_a_break(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    _without_marker(run, chain="1")
    res = invoke("verify", str(run))
    assert res.code == 2 and "FAIL chain" in res.stdout and "line 1" in res.stdout


def test_a_journal_stripped_of_its_whole_chain_is_a_break(tmp_path: Path) -> None:
    """Every `prev` and the marker removed: the registration still says the run was
    written by a spec-ab that chains."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    reg = (run / "preregistration.json").read_bytes()
    unchain(run)
    (run / "preregistration.json").write_bytes(reg)
    res = invoke("verify", str(run))
    assert res.code == 2 and "FAIL chain" in res.stdout
    assert "preregistration.json" in res.stdout


def test_lines_that_carry_prev_make_the_journal_chained(tmp_path: Path) -> None:
    """A run registered before the registration recorded `journal_chain`: its other lines
    still name the line before them, so a first line without its marker is a break."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    path = run / "preregistration.json"
    path.chmod(0o644)
    doc = json.loads(path.read_text())
    assert doc.pop("journal_chain") == chain.CHAIN_VERSION
    path.write_text(json.dumps(doc, indent=2))
    first = json.loads((run / "journal.jsonl").read_bytes().splitlines()[0])
    first.pop("chain")
    first.pop("registration_sha256")
    _first_line(run, (json.dumps(first) + "\n").encode())
    res = invoke("verify", str(run))
    assert res.code == 2 and "FAIL chain" in res.stdout and "line 1" in res.stdout


def test_a_run_before_the_chain_reads_as_unprotected(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    unchain(run)
    res = invoke("verify", str(run))
    assert res.code == 0, res.output
    assert "unprotected (written before the chain)" in res.stdout
    head = chain.head(run / "journal.jsonl")
    assert head is not None
    res = invoke("verify", str(run), "--digest", head)
    assert res.code == 2 and "FAIL digest" in res.stdout and "not walked" in res.stdout
    rep = rp.build_report([run])
    assert any("unprotected (written before the chain)" in n for n in rep.latest.notes)


def test_the_schema_1_golden_run_reads_as_before_the_chain() -> None:
    res = invoke("verify", str(SIM_RUN))
    assert res.code == 0, res.output
    assert "unprotected (written before the chain)" in res.stdout


def test_new_registrations_record_the_chain(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    doc = json.loads((run / "preregistration.json").read_text())
    assert doc["journal_chain"] == chain.CHAIN_VERSION


# --------------------------------------------------------------- rows without passes


def test_an_emptied_journal_is_damaged(tmp_path: Path) -> None:
    run = make_run(tmp_path, KEEPS, guardrails=[])
    _journal(run).write_bytes(b"")
    csv = run / "passes.csv"
    csv.chmod(0o644)
    csv.write_text(csv.read_text().replace(",104.0,", ",166.4,"))
    for cmd in ("verify", "report"):
        res = invoke(cmd, str(run))
        assert res.code == 2, res.output
        assert "line 1 is not the run's registered event (the file is empty)" in res.stderr


def test_rows_in_passes_csv_without_pass_events_fail(tmp_path: Path) -> None:
    """The journal cut back to its registered line: passes.csv's rows are vouched for by
    nothing."""
    run = make_run(tmp_path, KEEPS, guardrails=[])
    path = _journal(run)
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])
    res = invoke("verify", str(run))
    assert res.code == 2 and "FAIL rows" in res.stdout
    assert "no pass events" in res.stdout
    res = invoke("report", str(run))
    assert res.code == 2 and "no pass events" in res.stderr


def test_a_whole_line_added_after_the_last_event_is_a_break(tmp_path: Path) -> None:
    """`42` appended as a whole line after the run's last line: no line after it is
    chained to it, so it is no crash's damage (a crash tears the last line, or the next
    append chains to it) but an addition, and verify fails the chain. A torn last line (no
    newline) stays a crash's damage."""
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 112.0), (100.0, 111.0)]},
                   guardrails=[])
    journal = run / "journal.jsonl"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b"42\n")
    lines = whole.count(b"\n")
    walk = chain.walk(journal.read_bytes())
    assert walk.damaged == () and len(walk.breaks) == 1
    assert walk.breaks[0].startswith(f"line {lines + 1} is no event and no line after it")
    result = invoke("verify", str(run))
    assert result.code == 2 and "FAIL chain" in result.output, result.output
    journal.write_bytes(whole + b'{"t": "2026-')  # a crash's torn last line
    walk = chain.walk(journal.read_bytes())
    assert walk.breaks == () and walk.damaged == (lines + 1,)
