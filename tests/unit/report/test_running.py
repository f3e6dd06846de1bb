"""`spec-ab report` on a run that is still being measured says so, instead of calling it
inconclusive and asking for `--resume` (which the lane lock would refuse)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign.cli import app
from campaign.results.store import RunStore
from tests.runs import TPUT, make_run

PAIRS = {("knee", "c1", TPUT): [(100.0, 125.0), (100.0, 124.0)]}


@pytest.fixture()
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line names spec-ab's package, as `spec-ab run` does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "campaign"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _unfinished(tmp_path: Path, pid: int, host: str | None = None) -> Path:
    run = make_run(tmp_path, PAIRS, guardrails=[], complete=False, pairs=3)
    import socket

    RunStore.open(run).journal("run_start", pid=pid, host=host or socket.gethostname(),
                               resumed=False, lane="sim")
    return run


def _report(run: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["report", str(run), "--format", "json"])
    return res.exit_code, res.output


def test_a_run_still_measuring_reads_as_running(
        tmp_path: Path, other_process: subprocess.Popen[bytes]) -> None:
    run = _unfinished(tmp_path, other_process.pid)
    code, text = _report(run)
    assert code == 0, text
    doc = json.loads(text)
    assert doc["running"].startswith(f"RUNNING: {run.name} is still being measured")
    assert doc["settle"].endswith(f": wait for the run to finish, then: spec-ab report {run}")
    assert "--resume" not in doc["settle"]
    table = CliRunner().invoke(app, ["report", str(run)]).output
    assert table.lstrip().startswith("RUNNING")


def test_once_its_process_is_gone_it_is_a_run_to_resume(
        tmp_path: Path, other_process: subprocess.Popen[bytes]) -> None:
    run = _unfinished(tmp_path, other_process.pid)
    other_process.kill()
    other_process.wait()
    _code, text = _report(run)
    doc = json.loads(text)
    assert "running" not in doc
    assert doc["settle"].endswith(f": spec-ab run --resume {run}")


def test_a_session_on_another_host_cannot_be_checked_and_says_so(tmp_path: Path) -> None:
    run = _unfinished(tmp_path, 1, host="gb10-a.lab")
    doc = json.loads(_report(run)[1])
    assert doc["running"].startswith("maybe RUNNING") and "gb10-a.lab" in doc["running"]
    assert ": if it is no longer running on gb10-a.lab: spec-ab run --resume" in doc["settle"]


def test_an_interrupted_session_is_not_running(
        tmp_path: Path, other_process: subprocess.Popen[bytes]) -> None:
    run = _unfinished(tmp_path, other_process.pid)
    RunStore.open(run).journal("interrupted")
    doc = json.loads(_report(run)[1])
    assert "running" not in doc and "--resume" in doc["settle"]
