"""Terminals and logs (issue 25): at 60 columns no word of the report is split (tables
that cannot fit drop to a stacked layout), a history keeps its run ids whole, and piped
output keeps each bullet on one line."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from campaign import report as rp
from tests.runs import ROOT, T0, make_run

TPUT = "output_token_throughput"
GOLDEN_RUN = ROOT / "tests" / "golden" / "sim-run" / "2026-11-29-sim-depth7-f06adb"


def words(text: str) -> list[str]:
    """The words of a report (punctuation around them and box-drawing aside)."""
    return [w for w in re.split(r"[\s,;:()\[\]│┃]+", text) if re.search(r"\w", w)]


def split_words(narrow: str, wide: str) -> list[str]:
    """Words of the narrow layout that the wide one does not have: pieces of split words."""
    whole = set(words(wide))
    return [w for w in words(narrow) if w not in whole]


def history(tmp_path: Path) -> list[Path]:
    nights = [{("knee", "c1", TPUT): [(100.0, 115.0), (100.5, 115.6)],
               ("knee", "c1", "ttft_p99"): [(20.0, 20.2), (20.1, 20.2)]},
              {("knee", "c1", TPUT): [(100.0, 118.0), (100.5, 118.6)],
               ("knee", "c1", "ttft_p99"): [(20.0, 22.0), (20.1, 22.0)]}]
    return [make_run(tmp_path, spec, name="nightly-depth7-adaptive", short_id=f"n{i:05d}",
                     when=T0 + dt.timedelta(days=i),
                     guardrails=[{"metric": "ttft_p99", "max_worsening": 0.05}])
            for i, spec in enumerate(nights)]


@pytest.mark.parametrize("width", [60, 72, 80])
def test_no_word_is_split_at_narrow_widths(width: int) -> None:
    rep = rp.build_report([GOLDEN_RUN])
    narrow = rp.render_table(rep, width=width)
    assert max(len(line) for line in narrow.splitlines()) <= width
    assert split_words(narrow, rp.render_table(rep, width=1000)) == []


def test_the_cells_stack_when_their_table_cannot_fit() -> None:
    text = rp.render_table(rp.build_report([GOLDEN_RUN]), width=60)
    assert "  c1 request_latency_p99 (ms): -2.7% better, no clear change" in text
    assert "request_lat\n" not in text and "cell · CI · pairs" in text  # decision table fits


def test_a_history_keeps_its_run_ids_whole_at_60_columns(tmp_path: Path) -> None:
    rep = rp.build_report(history(tmp_path))
    narrow = rp.render_table(rep, width=60)
    for run in rep.runs:
        assert run.run_id in narrow
    assert split_words(narrow, rp.render_table(rep, width=1000)) == []


def test_piped_output_keeps_every_bullet_on_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "campaign", "report", str(GOLDEN_RUN)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [ln.rstrip() for ln in proc.stdout.splitlines()]
    unwrapped = rp.render_table(rp.build_report([GOLDEN_RUN]), width=10_000)
    bullets = [ln.rstrip() for ln in unwrapped.splitlines()
               if ln.startswith(("  - ", "  ? ", "  ✗ "))]
    assert len(bullets) >= 5
    missing = [b for b in bullets if b not in lines]
    assert missing == []
    # the headline names each unresolved guardrail first, on its one line too
    assert lines[1].startswith("  - keep-default: ttft_p99 at knee c1 not shown")
    assert "ttft_p99 at knee c16 not shown within +5.0%" in lines[1]
    assert lines[1].endswith("and 2 more (each under Guardrails)")  # the rest counted
    guard = next(ln for ln in lines if ln.startswith("  ✗ guardrail ttft_p99 at agentfix prose"))
    assert guard.endswith("stops adoption: not shown within its limit")
