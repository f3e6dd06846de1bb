"""What a command loads: `spec-ab --help`, `init` and `check` import neither the results
stack (pandas, pyarrow) nor the plotting one (matplotlib). Every user typing `--help` and
every CLI test would pay for them; the report, verify and plan commands load them when they
run. A fresh interpreter per case (a subprocess), since this process has imported all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import ROOT

HEAVY = ("pandas", "pyarrow", "matplotlib", "scipy")
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES=" + json.dumps(sorted(
    m for m in sys.modules if m.split(".")[0] in {heavy!r})), file=sys.stderr))
sys.argv = ["spec-ab", *{args!r}]
from campaign.cli import main
main()
"""


def loaded(*args: str, cwd: Path = ROOT) -> set[str]:
    """The heavy top-level packages `spec-ab ARGS` imported (its exit code is not judged)."""
    code = PROBE.format(heavy=set(HEAVY), args=list(args))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    line = next((x for x in proc.stderr.splitlines() if x.startswith("MODULES=")), None)
    assert line is not None, proc.stderr
    return {m.split(".")[0] for m in json.loads(line.removeprefix("MODULES="))}


@pytest.mark.parametrize("args", [
    ["--help"],
    ["check", "--help"],
    ["watch", "--help"],
    ["init", "--template", "sim", "-o", "{tmp}/c.yaml"],
    ["check", str(ROOT / "examples" / "sim-pair.yaml"), "--no-engine"],
    ["check", str(ROOT / "examples" / "gb300-dspark-onlinevc.yaml"), "--no-engine"],
], ids=["help", "check-help", "watch-help", "init", "check-sim", "check-gb300"])
def test_the_first_commands_load_no_results_or_plotting_stack(args: list[str],
                                                              tmp_path: Path) -> None:
    assert loaded(*[a.replace("{tmp}", str(tmp_path)) for a in args]) == set()


def test_the_probe_sees_what_a_command_loads(tmp_path: Path) -> None:
    """The probe is not blind: a report loads the results stack."""
    from tests.runs import TPUT, make_run

    run = make_run(tmp_path, {("knee", "c1", TPUT): [(100.0, 112.0), (100.0, 111.0)]})
    assert {"pandas", "pyarrow"} <= loaded("report", str(run), "-f", "json")
