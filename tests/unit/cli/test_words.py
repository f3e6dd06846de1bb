"""The CLI's words (issue 25): `--fail-on` says which condition held and where; `-q` and
`-v` work after the subcommand too."""

from __future__ import annotations

import re

from campaign.cli import hoist_global_options
from tests.cli import Result, invoke
from tests.runs import ROOT, SIM_RUN

GOLDEN_RUN = SIM_RUN


def spec_ab(*args: str) -> Result:
    return invoke(*args)


def test_quiet_and_verbose_after_the_subcommand_move_before_it() -> None:
    assert hoist_global_options(["report", "RUN", "-q"]) == ["-q", "report", "RUN"]
    assert hoist_global_options(["run", "-vv", "F", "--fail-on", "loss"]) == [
        "-vv", "run", "F", "--fail-on", "loss"]
    assert hoist_global_options(["-v", "check", "F"]) == ["-v", "check", "F"]
    assert hoist_global_options(["sim", "serve", "--", "-q"]) == ["sim", "serve", "--", "-q"]
    assert hoist_global_options(["report", "-f", "json", "--verbose"]) == [
        "--verbose", "report", "-f", "json"]


def test_fail_on_names_the_condition_that_held_on_stderr() -> None:
    # an exploratory margin no change clears: the decision is keep-default (below the bar)
    proc = spec_ab("report", str(GOLDEN_RUN), "--rule", "margin=0.9", "-f", "json",
                   "--fail-on", "loss", "--fail-on", "keep-default", "-q")
    assert proc.code == 4, proc.stderr
    assert proc.stderr.splitlines() == ["fail-on: keep-default (below-bar)"]
    assert proc.stdout.startswith("{")
    clean = spec_ab("report", str(GOLDEN_RUN), "-f", "json", "--fail-on", "loss")
    assert clean.code == 0 and "fail-on" not in clean.stderr
    # this run has a change that rounds to a negative zero: JSON writes it 0.0
    assert not re.search(r"-0\.0+[,\n]", clean.stdout) and '"change": 0.0' in clean.stdout


def test_metrics_with_an_unknown_name_is_an_error_with_a_did_you_mean() -> None:
    proc = spec_ab("report", str(GOLDEN_RUN), "--metrics", "acceptance_rate,tokens_per_stp")
    assert proc.code == 2
    assert "--metrics tokens_per_stp: not a metric spec-ab measures; did you mean " \
        "tokens_per_step?" in proc.stderr
    # a known name no run given measured would show nothing: refused, the closest named
    proc = spec_ab("report", str(GOLDEN_RUN), "--metrics", "tokens_per_drafted_step")
    assert proc.code == 2
    assert "no run given measured it; did you mean tokens_per_step?" in proc.stderr


def test_check_metrics_lists_every_metric_name_the_files_cite() -> None:
    from campaign.catalog import METRICS

    proc = spec_ab("check", "--metrics")
    assert proc.code == 0, proc.stderr
    names = {line.split()[0] for line in proc.stdout.splitlines()}
    assert {m for m in METRICS if not m.startswith("acceptance_pos")} <= names
    assert "ttft_p99" in names and "acceptance_pos0" in names
    assert spec_ab("check").code == 2


def plan_at(columns: int) -> list[str]:
    proc = invoke("plan", str(ROOT / "examples" / "sim-pair.yaml"), "--sims", "100",
                  env={"COLUMNS": str(columns)})
    assert proc.code == 0, proc.stderr
    return proc.stdout.splitlines()


def test_plan_wraps_its_prose_at_the_terminal_width() -> None:
    narrow, wide = plan_at(60), plan_at(1000)
    assert max(len(line) for line in narrow) <= 60
    assert any(line.startswith("rule: ") and len(line) > 60 for line in wide)

    def prose(lines: list[str]) -> list[str]:
        """The words of the lines before the first table (seeded: the same figures)."""
        head = lines[:next(i for i, ln in enumerate(lines)
                           if ln.startswith("the registered design"))]
        return " ".join(head).split()

    assert prose(narrow) == prose(wide)  # wrapped at spaces only: no word split
