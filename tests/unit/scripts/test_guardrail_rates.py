"""`scripts/guardrail-rates` judges whole simulated campaigns through `judge_run` at a
file's registered design: a real gain adopts, an A/A adopts nothing, and each row says
whether its bar is met by the rate it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.runs import ROOT


def rates(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "guardrail-rates"), *args,
                          "--json"], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def test_a_gain_adopts_and_an_aa_breaks_nothing_without_jitter() -> None:
    (row,) = rates("examples/sim-pair.yaml", "--sims", "12", "--jitter", "0")
    assert row["design"] == "11 pairs"
    assert row["+15"]["hits"] >= 11  # a +15% candidate with nothing worse adopts
    assert row["A/A"]["hits"] == 0  # no guardrail stops an unchanged latency
    assert row["2x"]["hits"] == 0  # nor lets one through at twice its limit
    for cell in (row[k] for k in ("2x", "6x", "+15", "A/A")):
        assert 0 <= cell["rate"] <= 1 and cell["of"] == 12
        lo, hi = cell["ci95"]
        assert lo <= cell["rate"] <= hi
        bound = float(cell["bar"].split()[1].rstrip("%")) / 100
        assert cell["met"] == (cell["rate"] <= bound if cell["bar"].startswith("≤")
                               else cell["rate"] >= bound)


def test_one_pair_never_adopts(tmp_path: Path) -> None:
    """A 1-pair design is gated: no scenario adopts."""
    one = tmp_path / "one.yaml"
    text = (ROOT / "examples" / "sim-pair.yaml").read_text()
    one.write_text(text.replace("\n  pairs: 11\n", "\n  pairs: 1\n"))
    (row,) = rates(str(one), "--sims", "4")
    assert row["design"] == "1 pairs" and row["+15"]["hits"] == 0 and row["2x"]["hits"] == 0
