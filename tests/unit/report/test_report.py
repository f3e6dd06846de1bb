"""The report over real results directories written through the store's own API: golden
table / Markdown / JSON, history, exploratory marking, damaged files, exit codes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from campaign import report as rp
from campaign.errors import EXIT_INCOMPLETE, ResultsError, UsageError
from campaign.results.store import load_run
from campaign.verdict import aa
from tests.cli import Result, invoke
from tests.runs import ROOT, SIM_RUN, T0, TESTS, TPUT, frame, golden_spec, make_run

GOLDEN = TESTS / "golden" / "report"
UPDATE = os.environ.get("SPECAB_UPDATE_GOLDEN") == "1"

def _invalid_prose_pair3(df: pd.DataFrame) -> pd.DataFrame:
    bad = (df["pair"] == 3) & (df["arm"] == "cand") & (df["level"] == "prose")
    df.loc[bad, ["valid", "reason", "attempt"]] = [False, "error rate 0.08 > 0", 2]
    return df


@pytest.fixture()
def golden_run(tmp_path: Path) -> Path:
    return make_run(tmp_path, golden_spec(), name="depth7", pairs=3,
                    edit=_invalid_prose_pair3)


def _normalise(text: str, root: Path) -> str:
    return text.replace(str(root), "<tmp>")


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"golden {path} was missing and has been written; re-run")
    assert text == path.read_text(encoding="utf-8"), (
        f"{name} differs from the golden file; if the change is intended, re-run with "
        "SPECAB_UPDATE_GOLDEN=1 and review the diff"
    )


def _report(run_dirs: list[Path], **kw: Any) -> rp.Report:
    rep = rp.build_report(run_dirs, **kw)
    return dataclasses.replace(rep, tool_version="0.0.0-test")


# ----------------------------------------------------------------- golden outputs


@pytest.mark.parametrize("fmt,suffix", [("table", "txt"), ("markdown", "md"), ("json", "json")])
def test_golden(golden_run: Path, fmt: rp.Format, suffix: str) -> None:
    rep = _report([golden_run])
    _check_golden(f"single.{suffix}", _normalise(rp.render(rep, fmt), golden_run.parent))


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_a_decision_of_several_runs_says_which_run_it_is_of(tmp_path: Path,
                                                            fmt: rp.Format) -> None:
    """`report RUN_A RUN_B` opened with a decision without saying which run it belongs to
    (issue "The first night, for a newcomer", 12): the line after it names the newest."""
    spec = {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)]}
    dirs = [make_run(tmp_path, spec, name="nightly", short_id=f"w{i:05d}",
                     when=T0 + dt.timedelta(days=i)) for i in range(2)]
    rep = _report(dirs)
    text = rp.render(rep, fmt)
    if fmt == "html":
        text = text[text.index("<body>"):].split(">", 2)[2]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = next(i for i, ln in enumerate(lines) if "Decision:" in ln)
    said = f"the decision of run {rep.latest.run_id}, the newest of 2 runs"
    assert said in lines[first + 1] or said in lines[first], lines[first:first + 2]
    one = rp.render(_report(dirs[:1]), fmt)
    assert "the newest of" not in one


@pytest.mark.parametrize("fmt,suffix", [("table", "txt"), ("markdown", "md"), ("json", "json")])
def test_golden_history(tmp_path: Path, fmt: rp.Format, suffix: str) -> None:
    """Three nights side by side: adopt, keep-default (mixed), keep-default (guardrail)."""
    nights = [
        {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)],
         ("knee", "c1", "ttft_p99"): [(20.0, 20.2), (20.1, 20.2)]},
        {("knee", "c1", TPUT): [(100.0, 112.0), (100.5, 101.5)],
         ("knee", "c1", "ttft_p99"): [(20.0, 20.2), (20.1, 20.2)]},
        {("knee", "c1", TPUT): [(100.0, 118.0), (100.5, 118.6)],
         ("knee", "c1", "ttft_p99"): [(20.0, 22.0), (20.1, 22.0)]},
    ]
    dirs = [make_run(tmp_path, spec, name="nightly", short_id=f"n{i:05d}",
                     when=T0 + dt.timedelta(days=i),
                     guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}])
            for i, spec in enumerate(nights)]
    rep = _report(dirs)
    assert [r.decision for r in rep.runs] == ["adopt", "keep-default", "keep-default"]
    _check_golden(f"history.{suffix}", _normalise(rp.render(rep, fmt), tmp_path))


def test_golden_narrow_terminal(golden_run: Path) -> None:
    """80 columns (a CI log, a small terminal): the compact layout, nothing cut off."""
    text = rp.render_table(_report([golden_run]), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert all(g in text for g in ("+16.3%", "+16.1%", "+14.7%"))  # every pair still shown
    _check_golden("single-80.txt", _normalise(text, golden_run.parent))


def test_golden_run_content(golden_run: Path) -> None:
    """What the golden pins, checked independently of its text."""
    doc = json.loads(rp.render(_report([golden_run]), "json"))
    assert doc["decision"] == "adopt"
    assert doc["schema_version"] == rp.REPORT_SCHEMA_VERSION
    assert doc["tool_version"] == "0.0.0-test"
    assert doc["run_ids"] == [golden_run.name]
    assert doc["exploratory"] is False
    rule = json.loads((golden_run / "preregistration.json").read_text())
    assert doc["rule"]["sha256"] == rule["sha256"]
    for c in doc["cells"]:
        assert {"workload", "level", "metric", "control", "candidate", "gain", "ci", "pairs",
                "verdict", "flags", "reasons"} <= set(c)
    c1 = next(c for c in doc["cells"] if c["level"] == "c1" and c["metric"] == TPUT)
    assert c1["decision_cell"] and c1["verdict"] == "adopt" and c1["n"] == 3
    prose = next(c for c in doc["cells"] if c["level"] == "prose" and c["metric"] == TPUT)
    assert prose["n"] == 2 and "invalid-pass" in prose["flags"]
    assert prose["left_out"] == [{"pair": 3, "arm": "cand",
                                  "reason": "error rate 0.08 > 0 (after 2 attempts) — a failure "
                                  "of the candidate: counts against it"}]
    assert {g["metric"] for g in doc["guardrails"]} == {"ttft_p99", "error_rate"}
    assert not any(g["broken"] for g in doc["guardrails"])


def test_deterioration_checks_are_counted_apart_and_never_bury_the_guardrails(
        tmp_path: Path) -> None:
    """p99 TTFT's limit holds where the decision is made (knee c1); at its other measured
    cell (knee c4) the deterioration check cannot tell, which does not stop adoption: one
    short `?` line after the guardrails, counted apart; its full line is in the JSON."""
    spec = golden_spec()
    spec[("knee", "c4", "ttft_p99")] = [(260.0, 262.0), (255.0, 300.0), (258.0, 259.0)]
    rep = _report([make_run(tmp_path, spec, name="depth7", pairs=3, guardrails=[
        {"metric": "ttft_p99", "max_worsening": 0.05},
        {"metric": "error_rate", "max_worsening": 0.0, "absolute": True}])])
    assert (rep.latest.decision, rep.latest.verdict.reason) == ("adopt", "rule-met")
    text = rp.render_table(rep, width=10_000)
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("Guardrails: "))
    assert lines[i] == ("Guardrails: all 2 hold (ttft_p99, error_rate); deterioration checks "
                        "at other cells: 1 unclear; none holds")
    assert lines[i + 1] == (
        "  ? deterioration check at another cell not shown within the limit, which does not "
        "stop adoption (only a worsening shown beyond it does there): ttft_p99 at knee c4 "
        "unclear: +6.0% (worse), -19.8% … +23.4%, limit +5.0%")
    assert lines[i + 2] == ""
    assert "deterioration check ttft_p99 at knee c4 unclear" not in text
    md = rp.render(rep, "markdown")
    assert ("**Guardrails:** all 2 hold (ttft_p99, error_rate); deterioration checks at other "
            "cells: 1 unclear; none holds") in md
    doc = json.loads(rp.render(rep, "json"))
    assert [(g["level"], g["metric"], g["role"], g["state"], g["stops"])
            for g in doc["guardrails"]] == [
        ("c1", "ttft_p99", "guardrail", "holds", False),
        ("c1", "error_rate", "guardrail", "holds", False),
        ("c4", "ttft_p99", "deterioration", "unclear", False)]
    assert doc["guardrails"][2]["reason"].startswith(
        "deterioration check ttft_p99 at knee c4 unclear: +6.0% (worse)")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert _validate(doc, schema, schema, "$") == []


# ----------------------------------------------------------------- history, honesty


def test_history_shows_each_run_side_by_side(tmp_path: Path) -> None:
    good = {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)]}
    flat = {("knee", "c1", TPUT): [(100.0, 101.0), (100.5, 101.2)]}
    r1 = make_run(tmp_path, good, short_id="night1", guardrails=[],
                  when=T0)
    r2 = make_run(tmp_path, flat, short_id="night2", guardrails=[],
                  when=T0 + dt.timedelta(days=1))
    rep = _report([r2, r1])  # given out of order: sorted by registration time
    assert [r.run_id for r in rep.runs] == [r1.name, r2.name]
    text = rp.render(rep, "table", width=160)
    assert "History: 2 runs" in text
    assert r1.name in text and r2.name in text
    history = text.split("History: 2 runs", 1)[1]
    assert history.index("adopt") < history.index("keep-default")
    doc = json.loads(rp.render(rep, "json"))
    assert [h["decision"] for h in doc["history"]] == ["adopt", "keep-default"]
    assert doc["decision"] == "keep-default"  # the newest run leads
    assert "runs" not in doc
    assert doc["history"][0]["decision_cells"][0]["verdict"] == "adopt"
    assert doc["history"][0]["decision_cells"][0]["gain"] == pytest.approx(0.15, abs=2e-3)
    # the newest run in full, the older one on its decision cells only
    assert len(rep.latest.verdict.candidates[0].cells) >= 1
    md = rp.render(rep, "markdown")
    assert "## History (2 runs)" in md
    page = rp.render(rep, "html")
    assert "<h2>History</h2>" in page
    headings = re.findall(r"<h([1-6])[ >]", page)
    assert headings[0] == "1" and headings.count("1") == 1  # the h1 first, and once
    # --fail-on looks at the newest run only
    assert rp.exit_code_for(rep, ["keep-default"]) == EXIT_INCOMPLETE
    assert rp.exit_code_for(_report([r1]), ["keep-default"]) == 0


def test_overrides_mark_every_output_exploratory(golden_run: Path) -> None:
    rep = _report([golden_run], rule_overrides={"margin": "0.2", "rule": "ci"})
    assert rep.exploratory
    for fmt in ("table", "markdown", "json", "html"):
        assert "not pre-registered" in rp.render(rep, fmt), fmt  # type: ignore[arg-type]
    doc = json.loads(rp.render(rep, "json"))
    assert doc["exploratory"] is True and doc["rule"]["pre_registered"] is False
    assert doc["rule"]["margin"] == 0.2 or doc["rule"]["margin"] == "0.2"
    assert doc["rule"]["sha256"] != doc["rule"]["registered_sha256"]
    assert doc["decision"] == "keep-default"  # +16% does not clear a 20% bar
    assert any("not pre-registered" in line for line in rp.summary_lines(rep))
    with pytest.raises(UsageError):
        rp.build_report([golden_run], rule_overrides={"seed": "3"})


def test_an_exploratory_headline_never_calls_its_rule_pre_registered(golden_run: Path) -> None:
    """The first line of every format says why; under --rule overrides the rule it was
    judged on is not the registered one, whichever way the decision goes."""
    registered = _report([golden_run])
    assert "the pre-registered rule is met" in rp.render(registered, "table").splitlines()[0]
    for overrides, decision in (({"margin": "0.05"}, "adopt"), ({"margin": "0.2"}, "keep-default")):
        rep = _report([golden_run], rule_overrides=overrides)
        assert rep.latest.decision == decision
        for fmt in ("table", "markdown", "html"):
            out = rp.render(rep, fmt)  # type: ignore[arg-type]
            head = next(line for line in out.splitlines() if "Decision:" in line)
            assert "pre-registered rule" not in head and "pre-registered bar" not in head, fmt
            assert "not pre-registered" in head, fmt
        assert "not pre-registered" in rp.summary_lines(rep)[0] + rp.summary_lines(rep)[1]


def test_rule_edited_after_registration_uses_the_registered_one(golden_run: Path) -> None:
    path = golden_run / "campaign.yaml"
    doc = json.loads(path.read_text())
    doc["preregistration"]["margin"] = 0.5
    path.write_text(json.dumps(doc))
    rep = _report([golden_run])
    assert rep.latest.edited_after_registration == ("margin",)
    assert rep.latest.decision == "adopt"  # judged at the registered +10%, not +50%
    assert "rule differs from preregistration.json" in rp.render(rep, "table")
    assert json.loads(rp.render(rep, "json"))["rule"]["edited_after_registration"] == ["margin"]


def test_preregistration_changed_after_the_fact_is_refused(golden_run: Path) -> None:
    path = golden_run / "preregistration.json"
    doc = json.loads(path.read_text())
    doc["rule"]["margin"] = 0.01
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"preregistration\.json.*sha256"):
        rp.build_report([golden_run])


def test_zero_value_is_an_error_naming_the_file(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0), (0.0, 110.0)]},
                   guardrails=[])
    with pytest.raises(ResultsError, match=r"passes\.csv.*pair 2, arm control is 0"):
        rp.build_report([run])


def test_missing_value_is_an_error_naming_the_file(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0), (100.0, 115.0)]},
                   guardrails=[])
    csv = run / "passes.csv"
    lines = csv.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ",cand," in ln and TPUT in ln)
    cells = lines[i].split(",")
    cells[9] = ""  # the value column
    lines[i] = ",".join(cells)
    csv.write_text("\n".join(lines) + "\n")
    # the journal arbitrates: its value is used, and the emptied one is named
    rep = rp.build_report([run])
    assert any("value nan in passes.csv, 115.0 in journal.jsonl" in n
               for n in rep.latest.notes), rep.latest.notes
    first = (run / "journal.jsonl").read_bytes().splitlines(keepends=True)[0]
    (run / "journal.jsonl").write_bytes(first)  # no passes to arbitrate: an error naming the file
    with pytest.raises(ResultsError, match=r"passes\.csv holds 12 rows and journal\.jsonl no "
                       "pass events"):
        rp.build_report([run])


def test_a_decision_cell_with_no_rows_keeps_the_default_as_inconclusive(tmp_path: Path) -> None:
    run = make_run(tmp_path, {("knee", "c4", TPUT): [(100.0, 115.0)]}, guardrails=[], pairs=1,
                   complete=False)
    rep = rp.build_report([run])
    (c1,) = rep.latest.decision_cells()
    assert c1.key == ("knee", "c1", TPUT) and c1.verdict == "no-data"
    assert rep.latest.verdict.decision == "keep-default"
    assert rep.latest.verdict.reason == "inconclusive"
    assert f"spec-ab run --resume {run}" in rep.latest.verdict.settle


def test_exit_codes_and_summary(tmp_path: Path) -> None:
    loss = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 90.0), (100.5, 91.0)]},
                    guardrails=[], short_id="loss01")
    rep = _report([loss])
    assert rp.exit_code_for(rep, []) == 0
    assert rp.exit_code_for(rep, ["loss"]) == EXIT_INCOMPLETE
    assert rp.exit_code_for(rep, ["incomplete"]) == 0
    with pytest.raises(UsageError):
        rp.exit_code_for(rep, ["bad"])
    # what held, and where: the line `--fail-on` prints on stderr
    assert rp.fail_on_held(rep, ["incomplete", "loss", "keep-default", "loss"]) == [
        "fail-on: loss (knee c1)", "fail-on: keep-default (loss)"]
    lines = rp.summary_lines(rep)
    assert lines[0].startswith("Decision: KEEP-DEFAULT")
    assert any("knee c1" in ln and "loss" in ln for ln in lines)
    partial = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0)]},
                       guardrails=[], short_id="part01", pairs=2, complete=False)
    rep2 = _report([partial])
    assert rep2.latest.incomplete
    assert rp.exit_code_for(rep2, ["incomplete"]) == EXIT_INCOMPLETE
    assert any("1 of 2 pre-registered pairs" in ln for ln in rp.summary_lines(rep2))


def test_multi_candidate_report_ranks(tmp_path: Path) -> None:
    spec = {("knee", "c1", TPUT): [(100.0, 112.0, 120.0), (100.5, 112.0, 119.0)]}
    run = make_run(tmp_path, spec, arms=("control", "depth6", "depth7"), guardrails=[])
    rep = _report([run])
    assert rep.latest.verdict.adopt_arm == "depth7"
    text = rp.render(rep, "table", width=160)
    assert "Ranking of candidates" in text and "depth6: knee c1" in text
    doc = json.loads(rp.render(rep, "json"))
    assert [r["arm"] for r in doc["ranking"]] == ["depth7", "depth6"]
    assert {c["arm"] for c in doc["cells"]} == {"depth6", "depth7"}


def test_aa_run_recommends_a_band(tmp_path: Path) -> None:
    spec = {("knee", "c1", TPUT): [(100.0, 101.0), (100.0, 98.8), (100.0, 100.4),
                                   (100.0, 99.5)]}
    run = make_run(tmp_path, spec, arms=("control", "control-b"), guardrails=[], pairs=4,
                   arm_specs={"control": {"description": "a"},
                              "control-b": {"description": "the same"}})
    rep = _report([run])
    assert rep.latest.aa is not None
    assert "recommended drift band" in rp.render(rep, "table", width=160)
    band = aa.measure_band(run).band
    assert band == rep.latest.aa.band
    assert 0.01 < band < 0.05
    assert aa.measure_band(run).text == rep.latest.aa.text


def test_store_round_trip_keeps_every_row(golden_run: Path) -> None:
    data = load_run(golden_run)
    assert data.complete
    assert len(data.passes) == len(frame(golden_spec(), run="x"))


def test_the_directory_names_the_run_whatever_the_rows_say(tmp_path: Path) -> None:
    """A run directory copied or renamed keeps its rows: they are read under its name."""
    a = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)]},
                 guardrails=[], short_id="copy01")
    b = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 101.0), (100.5, 101.0)]},
                 guardrails=[], short_id="copy02", when=T0 + dt.timedelta(days=1))

    def loader(path: Path) -> Any:
        data = load_run(path)
        data.passes["run"] = "same-name-in-both"
        return data

    rep = rp.build_report([a, b], loader=loader)
    assert [r.decision for r in rep.runs] == ["adopt", "keep-default"]


@pytest.mark.parametrize("fmt,suffix", [("table", "txt"), ("json", "json")])
def test_real_simulated_lane_run(tmp_path: Path, fmt: rp.Format, suffix: str) -> None:
    run = tmp_path / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    rep = _report([run])
    v = rep.latest.verdict
    assert rep.latest.complete and not rep.latest.incomplete
    c1 = next(c for c in rep.latest.decision_cells())
    assert c1.key == ("knee", "c1", TPUT) and c1.stats is not None and c1.stats.n == 2
    # recomputed by hand from passes.csv: g = exp(mean ln(y/x)) - 1
    df = pd.read_csv(run / "passes.csv")
    sel = df[(df.workload == "knee") & (df.level == "c1") & (df.metric == TPUT)]
    x = sel[sel.arm == "control"].sort_values("pair").value.to_numpy()
    y = sel[sel.arm == "depth7"].sort_values("pair").value.to_numpy()
    assert c1.gain == pytest.approx(float(np.exp(np.log(y / x).mean()) - 1), rel=1e-12)
    checks = v.candidates[0].guardrails
    stops = [g for g in checks if g.stops]
    assert v.decision == ("adopt" if c1.verdict == "adopt" and not stops else "keep-default")
    # registered before guardrails had `at`: checked at every measured cell, family-wise
    # over the 10 checks (p99 TTFT and error rate at 5 cells); every measured cell of
    # p99 TTFT is a guardrail cell, so there is no deterioration check
    assert len(checks) == 10 and {g.role for g in checks} == {"guardrail"}
    # p99 TTFT at prose, +7.8% and +101.7%: this run recorded no per-request sampling
    # error, and the pairs' own spread cannot tell: unclear — not shown within its +5%
    # limit, which stops adoption (whatever the registration's `unclear_stops` said)
    prose = next(g for g in checks if g.level == "prose" and g.metric == "ttft_p99")
    assert prose.state == "unclear" and prose.stops
    assert prose.evidence.startswith("the pairs' own spread")
    assert {(g.level, g.state) for g in stops} == {
        ("c1", "unclear"), ("c16", "unclear"), ("prose", "unclear"), ("shell", "unclear")}
    # the rule is met (knee c1 adopts), only unresolved guardrails stop it
    assert c1.verdict == "adopt"
    assert (v.decision, v.reason) == ("keep-default", "guardrail-unresolved")
    assert v.candidates[0].reasons[0].startswith(
        "keep-default: ttft_p99 at knee c1 not shown within +5.0%: -18.4%, "
        "upper bound +19.6%; would resolve with about 4 pairs (now 2)")
    _check_golden(f"sim-run.{suffix}", _normalise(rp.render(rep, fmt), tmp_path))


# ----------------------------------------------------------------- the command line


def _cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """`spec-ab report ARGS`, in this process."""
    return invoke("report", *args, env=env)


def test_cli_table_respects_columns(golden_run: Path) -> None:
    """Piped, the table is as wide as COLUMNS says: at 80 no line is wider."""
    proc = _cli(str(golden_run), env={"COLUMNS": "80"})
    assert proc.code == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Decision: ADOPT")
    assert max(len(line) for line in lines) <= 80
    wide = _cli(str(golden_run), env={"COLUMNS": "200"})
    assert max(len(line) for line in wide.stdout.splitlines()) > 100


def test_cli_closed_pipe_is_not_an_error(golden_run: Path) -> None:
    """`spec-ab report RUN | head -1`: the reader closes the pipe after the first line (a
    real process and pipe; Markdown and JSON: tests/unit/cli/test_robust_io.py)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "campaign", "report", str(golden_run), "--format", "table"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "120"})
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0, err
    assert err == b"", err
    assert first.strip()


def test_cli_metrics_picks_what_is_shown(golden_run: Path) -> None:
    proc = _cli(str(golden_run), "--format", "json", "--metrics", "acceptance_rate")
    assert proc.code == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["metrics_shown"] == ["acceptance_rate"]
    # decision and guardrail metrics always, and the one asked for
    assert {c["metric"] for c in doc["cells"]} == {TPUT, "ttft_p99", "error_rate",
                                                   "acceptance_rate"}
    table = _cli(str(golden_run), "--metrics", "acceptance_rate", env={"COLUMNS": "160"})
    assert "acceptance_rate" in table.stdout and "tokens_per_step" not in table.stdout
    bad = _cli(str(golden_run), "--metrics", "tput")
    assert bad.code == 2 and "--metrics tput" in bad.stderr


# ----------------------------------------------------------------- the JSON schema

SCHEMA = ROOT / "docs" / "report.schema.json"
_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool,
                          "null": type(None), "integer": int, "number": (int, float)}


def _validate(doc: Any, schema: dict[str, Any], root: dict[str, Any], where: str) -> list[str]:
    """The subset of JSON Schema 2020-12 docs/report.schema.json uses: $ref to $defs,
    type (one or a list), const, enum, anyOf, properties, required, additionalProperties
    (false, or a schema), items, minItems, maxItems. No dependency for it."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    errs: list[str] = []
    if "anyOf" in schema:
        if all(_validate(doc, s, root, where) for s in schema["anyOf"]):
            errs.append(f"{where}: matches none of anyOf")
        return errs
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]

        def ok(t: str) -> bool:
            if isinstance(doc, bool) and t in ("integer", "number"):
                return False
            return isinstance(doc, _TYPES[t])

        if not any(ok(t) for t in types):
            return [f"{where}: {doc!r} is not {types}"]
    if "const" in schema and doc != schema["const"]:
        errs.append(f"{where}: {doc!r} != {schema['const']!r}")
    if "enum" in schema and doc not in schema["enum"]:
        errs.append(f"{where}: {doc!r} not in {schema['enum']}")
    if isinstance(doc, dict):
        errs += [f"{where}: missing {k}" for k in schema.get("required", []) if k not in doc]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        if extra is False:
            errs += [f"{where}: unexpected {k}" for k in doc if k not in props]
        elif isinstance(extra, dict):
            for k in doc:
                if k not in props:
                    errs += _validate(doc[k], extra, root, f"{where}.{k}")
        for k, sub in props.items():
            if k in doc:
                errs += _validate(doc[k], sub, root, f"{where}.{k}")
    if isinstance(doc, list):
        if len(doc) < schema.get("minItems", 0) or len(doc) > schema.get("maxItems", 1 << 30):
            errs.append(f"{where}: {len(doc)} items")
        if "items" in schema:
            for i, item in enumerate(doc):
                errs += _validate(item, schema["items"], root, f"{where}[{i}]")
    return errs


def test_schema_is_versioned_with_the_report() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema_version"] == {"const": rp.REPORT_SCHEMA_VERSION}
    assert f"report-{rp.REPORT_SCHEMA_VERSION}.schema.json" in schema["$id"]


@pytest.mark.parametrize("name", ["single.json", "history.json", "sim-run.json"])
def test_golden_json_matches_the_schema(name: str) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    doc = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    assert _validate(doc, schema, schema, "$") == []
    assert list(doc)[:3] == ["decision", "reason", "settle"]
    # every key the report writes is described (a new key needs its line in the schema)
    assert set(doc) <= set(schema["properties"])
    for c in doc["cells"]:
        assert set(c) <= set(schema["$defs"]["cell"]["properties"])


def test_schema_catches_a_broken_report() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    doc = json.loads((GOLDEN / "single.json").read_text(encoding="utf-8"))
    doc["decision"] = "maybe"
    del doc["cells"][0]["change"]
    errs = _validate(doc, schema, schema, "$")
    assert any("decision" in e for e in errs) and any("missing change" in e for e in errs)


def test_the_reading_guide_example_is_what_the_report_prints() -> None:
    """docs/reading-a-report.md pastes a real report: it must still be what spec-ab prints."""
    doc = (ROOT / "docs" / "reading-a-report.md").read_text(
        encoding="utf-8")
    block = doc.split("--metrics acceptance_rate,tokens_per_step\n", 1)[1].split("```")[0]
    pasted = block.split("\n…")[0].splitlines()
    rep = rp.build_report([SIM_RUN], metrics=["acceptance_rate,tokens_per_step"])
    printed = [line.rstrip() for line in rp.render_table(rep, width=100).splitlines()]
    assert pasted == printed[:len(pasted)]
    assert len(pasted) > 30


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "html"])
def test_every_format_opens_with_the_decision(golden_run: Path, fmt: rp.Format) -> None:
    text = rp.render(_report([golden_run]), fmt)
    if fmt == "json":
        doc = json.loads(text)
        assert list(doc)[:3] == ["decision", "reason", "settle"]
        return
    if fmt == "html":
        text = text[text.index("<body>"):].split(">", 2)[2]
    first = next(line for line in text.splitlines() if line.strip())
    assert "Decision: ADOPT (the pre-registered rule is met" in first
    # then the decision cells, then the guardrails, before any other cell
    assert text.index("Decision cells") < text.index("Guardrails") < text.index("ttft_p99 (ms)")


def test_aa_run_recommends_a_band_per_guardrail_metric(tmp_path: Path) -> None:
    """From an A/A run's p99 TTFT pairs at the guardrail's cells: the boot-to-boot part
    beyond what the passes' own requests explain, b̂² = mean(w²)/2 − mean(c·v)/2, shown in
    every format and usable as a guardrail's `drift_band: {from: RUN_DIR}`."""
    ttft = [(20.0, 22.0), (21.0, 19.5), (20.5, 20.0), (19.8, 21.5)]
    spec = {("knee", "c1", TPUT): [(100.0, 101.0), (100.0, 98.8), (100.0, 100.4),
                                   (100.0, 99.5)],
            ("knee", "c1", "ttft_p99"): ttft}

    def with_log_se(df: pd.DataFrame) -> pd.DataFrame:
        df["log_se"] = np.where(df["metric"] == "ttft_p99", 0.02, np.nan)
        return df

    arm_specs = {"control": {"description": "a"}, "control-b": {"description": "the same"}}
    run = make_run(tmp_path, spec, arms=("control", "control-b"), pairs=4,
                   arm_specs=arm_specs, edit=with_log_se,
                   guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}])
    rep = _report([run])
    assert rep.latest.aa is not None
    (g,) = rep.latest.aa.guardrails
    w2 = [np.log(y / x) ** 2 for x, y in ttft]
    cv = 3.0 * 2 * 0.02**2  # 32 requests per pass: a p99 from < 100 requests, c = 3
    boot = np.sqrt(max(0.0, np.mean(w2) / 2 - cv / 2))
    assert g.boot == pytest.approx(boot) and g.explained == pytest.approx(np.sqrt(cv))
    assert g.band == pytest.approx(max(0.01, np.ceil(np.expm1(boot) * 100) / 100))
    assert f"drift_band: {g.band:g}" in g.text and "the passes' own requests explain" in g.text
    for fmt in ("table", "markdown", "html"):
        assert "ttft_p99: A/A pairs spread rms" in rp.render(rep, fmt, width=400), fmt
    doc = json.loads(rp.render(rep, "json"))
    assert doc["aa"]["guardrails"][0]["recommended_drift_band"] == g.band
    assert aa.measure_guardrail_band(run, "ttft_p99").band == g.band
    # `drift_band: {from: RUN_DIR}` on a guardrail resolves to it
    from campaign.campaignfile import Campaign
    frozen = json.loads((run / "campaign.yaml").read_text())
    frozen["preregistration"]["guardrails"] = [
        {"metric": "ttft_p99", "drift_band": {"from": str(run)}},
        {"metric": "error_rate", "max_worsening": 0.0, "absolute": True, "drift_band": 0.02}]
    campaign = Campaign.model_validate(frozen).with_source(tmp_path / "c.yaml")
    assert aa.resolve_guardrail_bands(campaign) == (g.band, 0.02)
