"""The command line: help texts, exit codes, check/init/dry-run output, the README's
generated reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign import reference
from campaign.cli import app
from campaign.spec import load_campaign

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_help_lists_every_command() -> None:
    code, out = invoke("--help")
    assert code == 0
    for cmd in ("run", "report", "check", "init", "plan", "sim", "clean"):
        assert cmd in out


@pytest.mark.parametrize("cmd", ["run", "report", "check", "init", "plan", "clean"])
def test_every_command_has_complete_help(cmd: str) -> None:
    code, out = invoke(cmd, "--help")
    assert code == 0
    assert "Usage" in out and len(out.splitlines()) > 5


def test_check_sim_example_valid(repo_root: Path) -> None:
    code, out = invoke("check", str(repo_root / "examples" / "sim-pair.yaml"), "--no-preflight")
    assert code == 0, out
    assert "schedule (AB, 2 pairs, 4 arms)" in out
    assert "pair 1: control → adaptive" in out
    assert "SPECAB_SIM_VERIFY=adaptive" in out and "estimated duration" in out


def test_check_invalid_file_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhypothesis: h\nlane: l\nmargn: 1\n")
    code, out = invoke("check", str(bad))
    assert code == 2
    assert "margn" in out and "(line 4)" in out


@pytest.mark.parametrize("example", ["gb300-dspark-onlinevc.yaml", "gb10-pair-depth.yaml"])
def test_gpu_examples_validate_and_fail_preflight_here(repo_root: Path, example: str) -> None:
    code, out = invoke("check", str(repo_root / "examples" / example))
    assert code == 3, out
    assert "docker run" in out  # the launch a person could paste
    assert "preflight found" in out
    assert "/srv/models" in out  # the missing tokenizer / bind-mount sources are named


def test_dry_run_prints_launches_and_aiperf_lines(repo_root: Path) -> None:
    code, out = invoke("run", str(repo_root / "examples" / "gb300-dspark-onlinevc.yaml"),
                       "--dry-run")
    assert code == 0, out
    assert "docker run" in out and "--gpus all" in out
    assert "verify_controller.py:ro" in out
    assert "aiperf profile" in out and "--concurrency" in out
    assert "dry run: nothing was started" in out


def test_init_templates_validate(tmp_path: Path, repo_root: Path) -> None:
    for template in ("sim", "gb300", "gb10-pair", "aa"):
        target = tmp_path / f"{template}.yaml"
        code, out = invoke("init", "--template", template, "-o", str(target))
        assert code == 0, out
        # templates name paths relative to the repo root: validate them from there
        copy = repo_root / f".tmp-init-{template}.yaml"
        shutil.copy(target, copy)
        try:
            assert load_campaign(copy).candidates
        finally:
            copy.unlink()
    code, out = invoke("init", "--template", "sim", "-o", str(tmp_path / "sim.yaml"))
    assert code == 2 and "exists" in out
    code, out = invoke("init", "--template", "nope", "-o", str(tmp_path / "n.yaml"))
    assert code == 2


def test_run_without_file_is_usage_error() -> None:
    code, out = invoke("run")
    assert code == 2 and "--resume" in out


def test_resume_of_non_run_dir(tmp_path: Path) -> None:
    code, out = invoke("run", "--resume", str(tmp_path))
    assert code == 2 and "not a spec-ab run directory" in out


def test_campaign_file_reference_is_current(repo_root: Path) -> None:
    doc = (repo_root / "docs" / "campaign-file.md").read_text()
    assert reference.splice(doc) == doc, (
        "docs/campaign-file.md reference is stale: run `python -m campaign.reference --write`")

def test_clean_prints_the_pid_of_a_process_leftover(monkeypatch: pytest.MonkeyPatch) -> None:
    # The leftover's "[pid 4242]" used to be read as a rich style tag and vanish.
    from campaign import cleanup

    item = cleanup.Leftover(kind="process", ident="4242", name="VLLM::EngineCore",
                            run_id="r1", why="runner pid 1 is not running")
    monkeypatch.setattr(cleanup, "find_leftovers", lambda **kw: cleanup.Scan([item]))
    code, out = invoke("clean", "--dry-run")
    assert code == 0, out
    assert "would remove process VLLM::EngineCore [pid 4242] of run r1" in out
