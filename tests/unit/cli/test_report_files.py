"""`spec-ab report` and the paths it is given (issue 39): a saved report is not
hard-wrapped, its long lines are split into labelled parts (item 10); a run folder named
one character wrong is answered with the folder meant (item 12)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli import invoke
from tests.runs import SIM_RUN

GUARD = "  ✗ guardrail ttft_p99 at knee c1 unclear: -18.4% (better), -98.3% … +19.6%"


def test_a_saved_table_is_not_hard_wrapped_and_splits_long_lines(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = invoke("report", str(SIM_RUN), "-o", str(out))
    assert result.code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(GUARD))
    # the ~330-character guardrail sentence: its parts, each whole on a line of its own
    assert lines[at].endswith("includes the +5.0% limit"), lines[at]
    assert lines[at + 1] == ("      noise: the pairs' own spread (no sampling error from the "
                             "passes' requests)")
    assert lines[at + 2].startswith("      would resolve with about 4 pairs (now 2), or")
    assert lines[at + 3] == "      stops adoption: not shown within its limit"
    # no sentence is cut mid-word into the next line (what a 160-column wrap did)
    assert not any(line.startswith("pairs' own spread") for line in lines)


def test_a_folder_one_character_short_names_the_run_meant(tmp_path: Path) -> None:
    run = tmp_path / "results" / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    for typo in (tmp_path / "results" / SIM_RUN.name[:-1],  # the run's own folder
                 tmp_path / "result" / SIM_RUN.name,  # the folder it is in
                 tmp_path / "resultss" / (SIM_RUN.name[:-1] + "c")):  # one edit in each
        result = invoke("report", str(typo))
        assert result.code == 2, result.output
        assert f"{typo}: no such results directory" in result.stderr, result.stderr
        assert f"did you mean {run}?" in result.stderr, result.stderr
    # nothing one edit away: no guess
    far = invoke("report", str(tmp_path / "elsewhere" / SIM_RUN.name))
    assert far.code == 2 and "did you mean" not in far.stderr, far.stderr
