"""The report says, among its first lines, whether both arms of each pair replayed the
registered schedules (issue 41: "each real pair's arms are shown to have received
byte-identical request schedules and inputs"), on the run folder of a real open-loop
campaign (tests/unit/results/data/open-loop: one pair, rate levels r2 and r6, a trace)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from campaign import report as rp
from tests.unit.results.test_schedules import OPEN_LOOP


def _run(tmp_path: Path) -> Path:
    out = tmp_path / OPEN_LOOP.name
    shutil.copytree(OPEN_LOOP, out)
    return out


def test_the_report_says_both_arms_replayed_the_registered_bytes(tmp_path: Path) -> None:
    run = _run(tmp_path)
    text = rp.render(rp.build_report([run]), "table")
    head = "\n".join(text.splitlines()[:12])
    assert ("schedules: both arms of each of the 1 pair(s) replayed the registered bytes "
            "(3 schedule(s), 6 passes") in " ".join(head.split())
    doc = json.loads(rp.render(rp.build_report([run]), "json"))
    assert any(n.startswith("schedules: both arms") for n in doc["notes"])


def test_a_schedule_changed_after_the_run_is_said_in_the_report(tmp_path: Path) -> None:
    run = _run(tmp_path)
    path = run / "schedules" / "rate-r2.jsonl"
    path.write_text(path.read_text().replace('"output_length": 16', '"output_length": 17', 1))
    text = " ".join(rp.render(rp.build_report([run]), "markdown").split())
    assert "schedules: " in text and "rate-r2" in text
    assert "the arms' requests can no longer be shown identical" in text
