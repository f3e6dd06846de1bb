"""The command line: help texts, exit codes, check/init/dry-run output, the README's
generated reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign.campaignfile import load_campaign, reference
from campaign.cli import app
from tests.runs import ROOT

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
    """The demo checks clean, and says how often its design shows its p99 guardrail within
    its limit at no true change (at least the 80% `check` requires)."""
    example = repo_root / "examples" / "sim-pair.yaml"
    found = re.search(r"^  pairs: (\d+)$", example.read_text(), re.M)
    assert found is not None
    pairs = int(found.group(1))
    code, out = invoke("check", str(example), "--skip-preflight")
    assert code == 0, out
    assert f"schedule (AB, {pairs} pairs, {2 * pairs} arms)" in out
    assert "pair 1: control → adaptive" in out and f"pair {pairs}: control → adaptive" in out
    assert "SPECAB_SIM_VERIFY=adaptive" in out and "estimated duration" in out
    shown = re.search(r"^  guardrail ttft_p99 \(limit \+25%\): the registered design "
                      rf"\({pairs} pairs, 128 requests per pass\) shows it within its limit "
                      r"(\d+)% of the time at no true change \(pass-to-pass sd ±10%, the "
                      r"measured default for a p99\)", out, re.M)
    assert shown is not None, out
    assert int(shown.group(1)) >= 80


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


# Preflight problems a GPU template may have on a machine that is not its lane: the
# lane's own files (absolute paths under /srv), images, docker engines and GPUs.
LANE_ONLY = ("/srv/", "image ", "cannot reach docker", "docker: cannot reach",
             "NVIDIA runtime", "nvidia-smi")


@pytest.mark.parametrize("template", ["sim", "gb300", "gb10-pair", "aa", "load"])
def test_init_template_checks_clean_in_an_empty_folder(tmp_path: Path, template: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Written into an empty folder (not the repository), every template is valid as it
    stands; the preflight finds only what belongs to the lane (GPU templates)."""
    from campaign.run.checks.preflight import preflight

    monkeypatch.chdir(tmp_path)
    code, out = invoke("init", "--template", template, "-o", "campaign.yaml")
    assert code == 0, out
    code, out = invoke("check", "campaign.yaml", "--skip-preflight")
    assert code == 0, out
    assert "differences (each candidate against control)" in out
    # no warning about the template's own design: a newcomer learns on day one to ignore
    # `!` lines otherwise (issue 39); only what this machine lacks (a GPU lane's image)
    own = [x for x in out.splitlines() if x.lstrip().startswith("!")
           and not any(k in x for k in LANE_ONLY)]
    assert own == [], own
    campaign = load_campaign(tmp_path / "campaign.yaml")
    _, problems = preflight(campaign, in_use=lambda host, port: False)
    problems = [p for p in problems if "AIPerf" not in p]
    if template in ("sim", "aa", "load"):
        assert problems == []
    else:
        assert all(any(k in p for k in LANE_ONLY) for p in problems), problems


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_every_example_checks_without_a_warning_about_itself(example: str) -> None:
    """The demo's first output was a 3-line `!` about its own p99 guardrail (issue 39):
    a shipped example warns only about what this machine lacks (a GPU lane's image)."""
    code, out = invoke("check", str(ROOT / "examples" / example), "--skip-preflight")
    assert code == 0, out
    own = [x for x in out.splitlines() if x.lstrip().startswith("!")
           and not any(k in x for k in LANE_ONLY)]
    assert own == [], own


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    code, out = invoke("init", "--template", "sim", "-o", str(tmp_path / "sim.yaml"))
    assert code == 0, out
    code, out = invoke("init", "--template", "sim", "-o", str(tmp_path / "sim.yaml"))
    assert code == 2 and "exists" in out
    code, out = invoke("init", "--template", "nope", "-o", str(tmp_path / "n.yaml"))
    assert code == 2 and "gb300" in out  # the choices are listed
    code, out = invoke("init", "--template", "gb300", "-o", str(tmp_path / "g.yaml"))
    assert code == 0 and (tmp_path / "patches" / "onlinevc" / "verify_controller.py").is_file()
    code, out = invoke("init", "--template", "gb300", "-o", str(tmp_path / "g2.yaml"))
    assert code == 0, out  # the same companions already there: fine
    patch = tmp_path / "patches" / "onlinevc" / "verify_controller.py"
    patch.write_text("# my own patch\n")
    code, out = invoke("init", "--template", "gb300", "-o", str(tmp_path / "g3.yaml"))
    assert code == 2 and "verify_controller.py exists" in out  # your patch is not clobbered
    assert patch.read_text() == "# my own patch\n"
    code, out = invoke("init", "--template", "gb300", "-o", str(tmp_path / "g3.yaml"), "--force")
    assert code == 0, out and patch.read_text() != "# my own patch\n"


def test_gb300_arms_warm_up_alike_and_check_shows_the_differences(tmp_path: Path) -> None:
    target = tmp_path / "g.yaml"
    invoke("init", "--template", "gb300", "-o", str(target))
    code, out = invoke("check", str(target), "--skip-preflight")
    assert code == 0, out
    diff = out[out.index("differences"):out.index("schedule")]
    assert "env +VLLM_DSPARK_ONLINE_VC=1" in diff
    assert diff.count("mounts + patches/onlinevc/") == 2
    assert "warm-up" not in diff
    # a warm-up of its own on the candidate is shown, not silent
    text = target.read_text().replace(
        "      VLLM_DSPARK_ONLINE_VC: \"1\"\n",
        "      VLLM_DSPARK_ONLINE_VC: \"1\"\n    warmup:\n"
        "      - {concurrency: 4, requests: 32, input_tokens: 1024, output_tokens: 256}\n")
    target.write_text(text)
    code, out = invoke("check", str(target), "--skip-preflight")
    assert code == 0, out
    assert "warm-up: 16×128 tok at c4 → 32×256 tok at c4" in out


def test_run_without_file_is_usage_error() -> None:
    code, out = invoke("run")
    assert code == 2 and "--resume" in out


def test_resume_of_non_run_dir(tmp_path: Path) -> None:
    code, out = invoke("run", "--resume", str(tmp_path))
    assert code == 2 and "not a spec-ab run directory" in out


def test_campaign_file_reference_is_current(repo_root: Path) -> None:
    doc = (repo_root / "docs" / "campaign-file.md").read_text()
    assert reference.splice(doc) == doc, (
        "docs/campaign-file.md reference is stale: "
        "run `python -m campaign.campaignfile.reference --write`")

def test_clean_prints_the_pid_of_a_process_leftover(monkeypatch: pytest.MonkeyPatch) -> None:
    # The leftover's "[pid 4242]" used to be read as a rich style tag and vanish.
    from campaign.run.guards import cleanup

    item = cleanup.Leftover(kind="process", ident="4242", name="VLLM::EngineCore",
                            run_id="r1", why="runner pid 1 is not running")
    monkeypatch.setattr(cleanup, "find_leftovers", lambda **kw: cleanup.Scan([item]))
    code, out = invoke("clean", "--dry-run")
    assert code == 0, out
    assert "would remove process VLLM::EngineCore [pid 4242] of run r1" in out


def test_help_in_workflow_order_with_plain_flags_and_the_glossary() -> None:
    code, out = invoke("--help")
    assert code == 0
    order = [out.index(f"│ {c} ") for c in ("init", "check", "plan", "run", "report", "clean",
                                               "sim")]
    assert order == sorted(order)
    assert "docs/glossary.md" in out
    for cmd in ("init", "check", "run", "clean", "report"):
        code, out = invoke(cmd, "--help")
        assert "<bool>" not in out, cmd
    code, out = invoke("init", "--help")
    assert "<sim|gb300|gb10-pair|aa|lo" in out  # the metavar wraps at 80 columns
    assert "load: offered-rate sweeps" in " ".join(
        w for w in out.replace("│", " ").split())
    code, out = invoke("run", "--help")
    assert "--run-dir-file" in out and "unstable" in out


def test_glossary_names_every_word(repo_root: Path) -> None:
    text = (repo_root / "docs" / "glossary.md").read_text()
    for word in ("lane", "shard", "cell", "knee", "agentfix", "`all`", "implied_a"):
        assert f"**{word}**" in text, word


def test_verbose_and_quiet_set_the_log_level() -> None:
    import logging

    from campaign.cli import setup_logging

    log = logging.getLogger("campaign")
    for args, level in (((0, False), logging.WARNING), ((1, False), logging.INFO),
                        ((2, False), logging.DEBUG), ((0, True), logging.ERROR)):
        setup_logging(*args)
        assert log.level == level
    assert len([h for h in log.handlers if getattr(h, "_spec_ab", False)]) == 1
    setup_logging(0, False)


def test_no_nvidia_smi_is_a_warning_when_gpus_are_asked(repo_root: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import campaign.run.checks.preflight as pf

    monkeypatch.setattr(pf.shutil, "which",
                        lambda name, path=None: None if name == "nvidia-smi" else "/bin/" + name)
    monkeypatch.setattr(pf, "_docker", lambda c: [])
    facts, _ = pf.preflight(load_campaign(repo_root / "examples" / "gb300-dspark-onlinevc.yaml"),
                            in_use=lambda h, p: False)
    (gpu,) = [f for f in facts if "nvidia-smi" in f]
    assert isinstance(gpu, pf.Caution) and "NOT checked" in gpu
    facts, _ = pf.preflight(load_campaign(repo_root / "examples" / "sim-pair.yaml"),
                            in_use=lambda h, p: False)
    assert not any(isinstance(f, pf.Caution) for f in facts)


@pytest.mark.parametrize("words, expected", [
    ("spec-ab init --template ", ["sim", "gb300", "gb10-pair", "aa", "load"]),
    ("spec-ab report x --format ", ["table", "markdown", "json", "html"]),
    ("spec-ab run x --fail-on ", ["loss", "keep-default", "incomplete", "unstable", "undecided",
                                  "not-preregistered"]),
])
def test_choices_complete(words: str, expected: list[str]) -> None:
    result = runner.invoke(app, [], prog_name="spec-ab", env={
        "_SPEC_AB_COMPLETE": "complete_bash", "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()))})
    assert result.output.split() == expected


def test_readme_and_docs_links_resolve(repo_root: Path) -> None:
    """Every relative link of the README and of docs/*.md names a file of the repository."""
    import re

    pages = [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(repo_root)} → {target}")
    assert not broken, broken


def test_readme_is_a_front_door_of_at_most_12_kb(repo_root: Path) -> None:
    """The README is a front door (what, the two commands, a first verdict, where next):
    the rest lives in docs/."""
    assert (repo_root / "README.md").stat().st_size <= 12 * 1024


def test_a_sharded_campaign_runs_one_lane_at_a_time(repo_root: Path) -> None:
    example = str(repo_root / "examples" / "sim-lanes.yaml")
    code, out = invoke("run", example)
    assert code == 2 and "sharded over lanes (sim-a, sim-b)" in out and "--lane sim-a" in out
    code, out = invoke("run", example, "--lane", "sim-c")
    assert code == 2 and "--lane sim-c: not a lane of this campaign" in out
    code, out = invoke("run", example, "--lane", "sim-a", "--fail-on", "keep-default")
    assert code == 2 and "a shard has none" in out
    code, out = invoke("check", example)
    assert code == 0 and "sharded over 2 lanes (sim-a, sim-b)" in out
    assert "--port 18811" in out and "--port 18812" in out
    assert "check it there with `spec-ab check" in out
    code, out = invoke("run", example, "--lane", "sim-b", "--dry-run")
    assert code == 0 and "--port 18812" in out and "--port 18811" not in out


def test_check_shows_each_lanes_own_schedule(repo_root: Path, tmp_path: Path) -> None:
    """ABBA starts every other lane with BA; `check` shows what each lane will run (one
    listing when every lane runs the same, as under AB)."""
    example = repo_root / "examples" / "sim-lanes.yaml"
    code, out = invoke("check", str(example))
    assert code == 0 and "lane sim-a:" not in out
    assert out.count("pair 1: control → adaptive") == 1
    abba = tmp_path / "abba-lanes.yaml"
    abba.write_text(example.read_text().replace("order: AB", "order: ABBA"))
    code, out = invoke("check", str(abba))
    assert code == 0
    lane_a, lane_b = out.split("lane sim-a:")[1].split("lane sim-b:")
    assert "pair 1: control → adaptive" in lane_a and "pair 2: adaptive → control" in lane_a
    assert "pair 1: adaptive → control" in lane_b.split("estimated")[0]
