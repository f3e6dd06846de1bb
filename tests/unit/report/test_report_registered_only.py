"""A report judges only what the registration allows, and `verify` names the rest: a pair
beyond the registered pairs, a redo journaled after the run finished, another run's rows,
journaled looks the rows do not give, decision cells that cannot be known (issue 37)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from campaign.report.build import build_report
from campaign.report.formats import render
from campaign.results.journal import PassRow
from campaign.results.registration import values_hash
from campaign.results.store import RunStore
from tests import runs
from tests.cli import invoke
from tests.runs import TPUT, frame, make_run, unchain

CELL = ("knee", "c1", TPUT)
WIN = [(1000.0, 1250.0), (1000.0, 1262.0)]
LOSS = (1000.0, 500.0)


def _append(run: Path, rows: pd.DataFrame, *, finish: bool = False) -> None:
    """Journal `rows` as one more pass event and rebuild passes.csv, as a writer would."""
    store = RunStore.open(run)
    store.journal("pass", rows=[dataclasses.asdict(PassRow(**r))  # type: ignore[arg-type]
                                for r in rows.to_dict("records")])
    store.rebuild_passes_csv()
    if finish:
        store.finish(complete=True)


def _pair(where: Path, pair: int, values: tuple[float, float], **kw: Any) -> pd.DataFrame:
    spec = {CELL: [values] * pair}
    df = frame(spec, run=kw.pop("run", where.name))
    df = df[df["pair"] == pair]
    for k, v in kw.items():
        df = df.assign(**{k: v})
    return df


def _verify(run: Path) -> tuple[int, str]:
    result = invoke("verify", str(run))
    return result.code, result.output


def _structure_line(out: str) -> str:
    return next(line for line in out.splitlines() if "structure" in line)


def test_a_pair_beyond_the_registered_pairs_is_named_and_not_judged(tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: [*WIN, LOSS]}, pairs=2, guardrails=[])
    latest = build_report([run]).latest
    v = latest.verdict
    assert v.pairs_measured == 2 and latest.decision == "adopt"
    assert "pair 3 beyond the 2 pairs registered" in v.reasons[0]
    assert "pair 3 beyond the 2 pairs registered" in render(build_report([run]), "table")
    assert (run / "passes.csv").read_text().count(",3,1,") > 0  # the rows stay
    code, out = _verify(run)
    assert code == 2 and "FAIL" in _structure_line(out)
    assert "pair 3 beyond the 2 pairs registered" in out


def test_a_sequential_pair_beyond_max_pairs_is_not_judged(tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: [*WIN, *WIN, LOSS]}, guardrails=[],
                   sequential={"max_pairs": 4}, complete=False)
    v = build_report([run]).latest.verdict
    assert v.pairs_measured <= 4 and any("pair 5 beyond the 4 pairs" in r for r in v.reasons)


def test_a_redo_journaled_after_finished_is_not_judged(tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: WIN}, guardrails=[])
    RunStore.open(run).journal("pair_redo", pair=2, pair_attempt=2, cause="lane",
                               budget_left=0)
    _append(run, _pair(run, 2, LOSS, pair_attempt=2))
    latest = build_report([run]).latest
    assert latest.decision == "adopt"  # attempt 1 of pair 2, as the run finished it
    assert "journaled after the run finished" in latest.verdict.reasons[0]
    code, out = _verify(run)
    assert code == 2 and "journaled after the run finished" in _structure_line(out)


def test_another_runs_rows_in_the_folder_are_named_and_not_judged(tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: WIN}, guardrails=[], complete=False)
    _append(run, _pair(run, 2, LOSS, run="2026-11-29-demo-bbbbbb"), finish=True)
    latest = build_report([run]).latest
    assert latest.verdict.pairs_measured == 2 and latest.decision == "adopt"
    reason = latest.verdict.reasons[0]
    assert "another run's id (2026-11-29-demo-bbbbbb)" in reason and run.name in reason
    code, out = _verify(run)
    assert code == 2 and "another run's id" in _structure_line(out)


def test_a_renamed_run_folder_is_still_its_own_run(tmp_path: Path) -> None:
    run = make_run(tmp_path, {CELL: WIN}, guardrails=[])
    moved = run.rename(tmp_path / "renamed")
    latest = build_report([moved]).latest
    assert latest.decision == "adopt" and not any("another run" in r
                                                  for r in latest.verdict.reasons)
    code, out = _verify(moved)
    assert code == 0 and "ok" in _structure_line(out)


GAIN = [(1000.0, 1250.0), (1000.0, 1262.0), (1000.0, 1255.0)]


def _sequential(tmp_path: Path) -> Path:
    return make_run(tmp_path, {CELL: GAIN}, guardrails=[], sequential={"max_pairs": 6},
                    complete=False)


def test_a_flipped_look_is_named(tmp_path: Path) -> None:
    run = _sequential(tmp_path)  # the rows: continue after pair 2, adopt after pair 3
    store = RunStore.open(run)
    store.journal("look", pair=2, look=1, stop=True, candidates={"cand": {"state": "adopt"}})
    latest = build_report([run]).latest
    assert latest.decision == "adopt"
    reason = latest.verdict.reasons[0]
    assert "look after pair 2 (cand): journal.jsonl says adopt, the rows give continue" \
        in reason
    code, out = _verify(run)
    assert code == 2 and "journal.jsonl says adopt" in _structure_line(out)


def test_a_flipped_look_of_a_finished_run_is_named(tmp_path: Path) -> None:
    run = _sequential(tmp_path)
    store = RunStore.open(run)
    store.journal("look", pair=3, look=2, stop=True, candidates={"cand": {"state": "keep-default"}})
    store.finish(complete=True)  # journal and passes.csv as the run left them
    reasons = build_report([run]).latest.verdict.reasons
    assert "journal.jsonl says keep-default, the rows give adopt" in reasons[0]


def test_a_duplicated_look_with_another_outcome_is_named(tmp_path: Path) -> None:
    run = _sequential(tmp_path)
    store = RunStore.open(run)
    for state in ("continue", "keep-default"):
        store.journal("look", pair=2, look=1, stop=False, candidates={"cand": {"state": state}})
    store.journal("look", pair=3, look=2, stop=True, candidates={"cand": {"state": "adopt"}})
    reasons = build_report([run]).latest.verdict.reasons
    assert "journal.jsonl says keep-default, the rows give continue" in reasons[0]
    assert "says continue" not in reasons[0] and "pair 3" not in reasons[0]


def test_looks_that_agree_with_the_rows_pass(tmp_path: Path) -> None:
    run = _sequential(tmp_path)
    store = RunStore.open(run)
    store.journal("look", pair=2, look=1, stop=False, candidates={"cand": {"state": "continue"}})
    store.journal("look", pair=3, look=2, stop=True, candidates={"cand": {"state": "adopt"}})
    store.finish(complete=True)
    assert not any("look after" in r for r in build_report([run]).latest.verdict.reasons)
    code, out = _verify(run)
    assert code == 0, out


def _older_run_with_star(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run of an older spec-ab: the rule registered `level: "*"` unresolved (schema 2),
    no file digests in the journal, and its frozen campaign.yaml unreadable."""
    monkeypatch.setattr(runs, "_resolved", lambda frozen, band: (None, None))
    spec = {CELL: WIN, ("knee", "c4", TPUT): WIN}  # the measured levels alone: adopt
    run = make_run(tmp_path, spec, guardrails=[],
                   decision_cells=[{"workload": "knee", "level": "*"}])
    unchain(run)
    path = run / "preregistration.json"
    doc = json.loads(path.read_text())
    doc.pop("levels", None), doc.pop("guardrail_bands", None)
    doc["schema_version"] = 2
    doc["values_sha256"] = values_hash(doc["rule"], doc["drift_band"], doc["arms"])
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    (run / "campaign.yaml").chmod(0o644)
    (run / "campaign.yaml").write_text("name: [unclosed\n")
    return run


def test_unknown_registered_cells_keep_the_default_and_say_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _older_run_with_star(tmp_path, monkeypatch)
    latest = build_report([run]).latest
    assert latest.decision == "keep-default"
    assert latest.verdict.adopt_arm is None
    assert "nothing registered to judge" in latest.verdict.reasons[0]
    assert "nothing registered to judge" in render(build_report([run]), "table")
    code, out = _verify(run)
    assert code == 2 and "nothing registered to judge" in _structure_line(out)
