"""scripts/test itself (the README's test command, and so CI's): its exit code is the
steps' and its summary of wall times always prints. Played with every step stubbed (no
pytest, no set-up runs), in a copy of the script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.runs import ROOT

STEP = """#!/usr/bin/env bash
echo "{name} $*" >> "$STUB_LOG"
{body}
"""


def _stub(path: Path, body: str = "exit 0") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STEP.format(name=path.name, body=body))
    path.chmod(0o755)


def _play(tmp_path: Path, *, ci: bool, main_rc: int = 0, vllm_rc: int = 0,
          vllm_setup: str = "exit 0") -> subprocess.CompletedProcess[str]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "test", tmp_path / "scripts" / "test")
    _stub(tmp_path / "scripts" / "setup")
    _stub(tmp_path / "scripts" / "install-test-deps")
    _stub(tmp_path / "scripts" / "setup-vllm-cpu", vllm_setup)
    for tool in ("ruff", "mypy"):
        _stub(tmp_path / ".venv" / "bin" / tool)
    _stub(tmp_path / ".venv" / "bin" / "pytest",
          f'case "$*" in *"-m vllm"*) exit {vllm_rc};; *) exit {main_rc};; esac')
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "SPECAB_FULL")}
    env["STUB_LOG"] = str(tmp_path / "steps.log")
    if ci:
        env["CI"] = "true"
    return subprocess.run(["bash", str(tmp_path / "scripts" / "test")], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("ci", [True, False], ids=["CI", "local"])
def test_every_step_passing_exits_0_with_the_summary(tmp_path: Path, ci: bool) -> None:
    done = _play(tmp_path, ci=ci)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== wall time by step" in done.stdout
    assert "(exit 0)" in done.stdout
    steps = (tmp_path / "steps.log").read_text()
    assert "-m not vllm" in steps and "-m vllm" in steps
    assert ("setup-vllm-cpu" in steps) is ci


def test_a_failed_test_step_is_the_exit_code_and_the_background_set_up_is_stopped(
        tmp_path: Path) -> None:
    done = _play(tmp_path, ci=True, main_rc=1, vllm_setup="exec sleep 30")
    assert done.returncode == 1
    assert "(exit 1)" in done.stdout
    assert "-m vllm" not in (tmp_path / "steps.log").read_text()


def test_no_vllm_test_selected_is_not_a_failure(tmp_path: Path) -> None:
    done = _play(tmp_path, ci=False, vllm_rc=5)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_failed_vllm_set_up_fails_with_its_log(tmp_path: Path) -> None:
    done = _play(tmp_path, ci=True, vllm_setup="echo no wheel for vllm; exit 3")
    assert done.returncode == 3
    assert "no wheel for vllm" in done.stdout
