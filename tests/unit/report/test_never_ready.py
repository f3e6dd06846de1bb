"""The report of a run whose candidate never became ready (issue 25): one line first in
every format, its guardrails and cells collapsed, `settle` never `--resume` — from the
runner's `launch_error` event, and from an older journal's `slot_failed` alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from campaign import report as rp
from campaign.results.bootfail import never_ready
from campaign.results.store import RunStore
from tests.runs import make_run
from tests.unit.report.test_report import SCHEMA, _validate

TPUT = "output_token_throughput"
ERROR = "error: environment variable SPECAB_SIM_DEPHT: unknown knob 'depht'"
LEAD = f"depth7 never became ready (pair 1): server exited with code 2 while booting: {ERROR}"
REASON = ("depth7: server exited with code 2 while booting (stage: port)\n  last log lines:\n"
          f"    | {ERROR}")


def _control_only(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.arm != "depth7"]


def never_run(tmp_path: Path, *, launch_error: bool, **rule_kw: Any) -> Path:
    spec = {(w, lvl, m): [(100.0, 110.0), (100.5, 110.0)]
            for w, lvl in (("knee", "c1"), ("knee", "c4"), ("agentfix", "prose"))
            for m in (TPUT, "ttft_p99", "itl_p99", "error_rate")}
    run = make_run(tmp_path, spec, arms=("control", "depth7"), complete=False,
                   edit=_control_only, guardrails=[
                       {"metric": "ttft_p99", "max_worsening": 0.05},
                       {"metric": "error_rate", "max_worsening": 0.0, "absolute": True}],
                   **rule_kw)
    store = RunStore.open(run)
    store.journal("slot_start", slot=0, pair=1, arm="control", pair_attempt=1)
    store.journal("server_ready", slot=0, boot_s=1.0)
    for _ in range(2 if launch_error else 1):
        store.journal("slot_start", slot=1, pair=1, arm="depth7", pair_attempt=1)
        store.journal("slot_failed", slot=1, pair=1, arm="depth7", reason=REASON)
    if launch_error:
        store.journal("launch_error", pair=1, arm="depth7", status="exited with code 2",
                      error=ERROR, headline=LEAD, reason=REASON)
    store.journal("aborted", pair=1, pair_attempt=1, reason=REASON)
    return run


@pytest.mark.parametrize("launch_error", [True, False])
def test_the_report_leads_with_the_boot_error_in_every_format(
        tmp_path: Path, launch_error: bool) -> None:
    rep = rp.build_report([never_run(tmp_path, launch_error=launch_error)])
    assert [n.line for n in rep.latest.never_ready] == [LEAD]
    for fmt in ("table", "markdown", "json", "html"):
        text = rp.render(rep, fmt, width=400) if fmt == "table" else rp.render(rep, fmt)
        head = "\n".join(text.splitlines()[:3])
        assert (LEAD.replace("'", "&#x27;") if fmt == "html" else LEAD) in head, fmt
        assert "--resume" not in text, fmt
    assert "start a new run: spec-ab run" in rep.latest.verdict.settle


def test_a_sequential_design_is_not_told_to_resume_either(tmp_path: Path) -> None:
    """Issue 39 item 1: `run` says to fix the file and start a new run; the report's
    headline said "the design continues: up to 4 more pair(s): spec-ab run --resume"."""
    rep = rp.build_report([never_run(tmp_path, launch_error=True,
                                     sequential={"max_pairs": 6})])
    settle = rep.latest.verdict.settle
    assert settle.startswith("fix the launch of depth7 (it never became ready) in the "
                             "campaign file and start a new run: spec-ab run"), settle
    for fmt in ("table", "markdown", "json", "html"):
        text = rp.render(rep, fmt, width=400) if fmt == "table" else rp.render(rep, fmt)
        assert "--resume" not in text, fmt
        assert "the design continues" not in text, fmt
    head = rp.render(rep, "table", width=400).splitlines()[1]
    assert head.startswith("Decision: KEEP-DEFAULT") and "start a new run" in head


def test_its_guardrails_and_cells_collapse_to_one_line_each(tmp_path: Path) -> None:
    rep = rp.build_report([never_run(tmp_path, launch_error=True)])
    text = rp.render_table(rep, width=400)
    guard = [ln for ln in text.splitlines() if "guardrail" in ln and "depth7" in ln]
    # p99 TTFT and the error rate at the decision cell (knee c1), and p99 TTFT's
    # deterioration checks at its other measured cells (knee c4, agentfix prose)
    checks = rep.latest.verdict.candidates[0].guardrails
    assert sorted((g.metric, g.level) for g in checks) == [
        ("error_rate", "c1"), ("ttft_p99", "c1"), ("ttft_p99", "c4"), ("ttft_p99", "prose")]
    assert guard == ["  ✗ depth7: none of its 4 guardrail check(s) can be made: it never "
                     "became ready"]
    assert "cannot be checked" not in text
    assert "no-data" not in text.split("spec-ab report —")[1]
    assert "cells, none measured (it never became ready); not listed" in text
    assert len(text.splitlines()) < 40
    # the settle text once: in the headline, not again in the reasons below it
    assert text.count(rep.latest.verdict.settle) == 1


def test_its_json_says_it_first_and_matches_the_schema(tmp_path: Path) -> None:
    rep = rp.build_report([never_run(tmp_path, launch_error=True)])
    doc: dict[str, Any] = json.loads(rp.render(rep, "json"))
    assert next(iter(doc)) == "never_ready" and doc["never_ready"] == LEAD
    assert doc["never_ready_arms"] == [{"arm": "depth7", "pair": 1,
                                        "status": "exited with code 2", "error": ERROR}]
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert _validate(doc, schema, schema, "$") == []
    assert set(doc) <= set(schema["properties"])


def test_an_arm_ready_once_is_not_never_ready() -> None:
    events = [{"event": "slot_start", "slot": 1, "arm": "depth7", "pair": 1},
              {"event": "server_ready", "slot": 1},
              {"event": "slot_start", "slot": 3, "arm": "depth7", "pair": 2},
              {"event": "slot_failed", "slot": 3, "arm": "depth7", "pair": 2,
               "reason": REASON}]
    assert never_ready(events) == ()
    assert [n.pair for n in never_ready(events[2:])] == [2]
