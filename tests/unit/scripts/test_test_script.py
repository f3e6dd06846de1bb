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
          vllm_setup: str = "exit 0", main_script: str | None = None,
          vllm_script: str | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "test", tmp_path / "scripts" / "test")
    _stub(tmp_path / "scripts" / "setup")
    _stub(tmp_path / "scripts" / "install-test-deps")
    _stub(tmp_path / "scripts" / "setup-vllm-cpu", vllm_setup)
    for tool in ("ruff", "mypy"):
        _stub(tmp_path / ".venv" / "bin" / tool)
    vllm = vllm_script or f"exit {vllm_rc}"
    main = main_script or f"exit {main_rc}"
    _stub(tmp_path / ".venv" / "bin" / "pytest",
          f'case "$*" in *"-m vllm"*) {vllm};; *) {main};; esac')
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


def test_a_failed_test_step_is_the_exit_code_and_the_vllm_session_still_reports(
        tmp_path: Path) -> None:
    done = _play(tmp_path, ci=True, main_rc=1, vllm_rc=0)
    assert done.returncode == 1
    assert "(exit 1)" in done.stdout
    assert "-m vllm" in (tmp_path / "steps.log").read_text()
    assert "(beside: real vLLM tests)" in done.stdout


def test_a_failed_vllm_session_fails_the_run_when_the_tiers_pass(tmp_path: Path) -> None:
    done = _play(tmp_path, ci=True, vllm_rc=1)
    assert done.returncode == 1
    assert "(exit 1)" in done.stdout


def test_in_ci_the_vllm_session_runs_beside_the_tiers(tmp_path: Path) -> None:
    """The tiers' pytest waits (up to 20 s) for the vLLM session to have started: run one
    after the other, it never would, and the tiers' step would fail."""
    flag = tmp_path / "vllm-started"
    done = _play(tmp_path, ci=True,
                 main_script=(f'for i in $(seq 200); do [ -f {flag} ] && exit 0; sleep 0.1; '
                              "done; exit 9"),
                 vllm_script=f"touch {flag}; exit 0")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = (tmp_path / "steps.log").read_text().splitlines()
    assert [x for x in steps if x.startswith("pytest")][-1].endswith("-m not vllm "
                                                                      "--durations=25")


def test_no_vllm_test_selected_is_not_a_failure(tmp_path: Path) -> None:
    done = _play(tmp_path, ci=False, vllm_rc=5)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_failed_vllm_set_up_fails_with_its_log(tmp_path: Path) -> None:
    done = _play(tmp_path, ci=True, vllm_setup="echo no wheel for vllm; exit 3")
    assert done.returncode == 3
    assert "no wheel for vllm" in done.stdout
