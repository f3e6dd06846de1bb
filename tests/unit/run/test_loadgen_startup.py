"""campaign.run.measure.loadgen: the lean AIPerf command line (issue 24 part 2).

AIPerf 0.13 tokenizes its default prompt corpus at every start of every level; the lean
command line turns that off where the corpus shapes no measured request (a pass whose
prompts come from a file, a warm-up) and keeps it for the knee's synthetic prompts. What
the change saves is measured by `scripts/bench-runner --compare`, never here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from campaign.run.measure import loadgen
from tests.runs import ROOT
from tests.unit.run.test_loadgen import flag, make_plan

FIXTURE = ROOT / "campaign" / "fixtures" / "agentfix" / "prose.jsonl"


def file_plan(**changes: Any) -> loadgen.PassPlan:
    return make_plan(name="agentfix-prose", kind="agentfix", concurrency=(4,),
                     input_tokens=None, input_file=FIXTURE, **changes)


def warmup_plan() -> loadgen.PassPlan:
    return make_plan(name="warmup-1", kind="warmup", concurrency=(2,), requests_per_level=4)


def without_corpus(cmd: list[str]) -> list[str]:
    """`cmd` without the corpus and the closed loop's pacing (`pacing`, tested there)."""
    for name in ("--prompt-corpus", "--request-rate", "--arrival-pattern"):
        if name in cmd:
            i = cmd.index(name)
            cmd = cmd[:i] + cmd[i + 2:]
    return cmd


@pytest.mark.parametrize("make", [file_plan, warmup_plan])
def test_lean_skips_the_corpus_where_it_shapes_no_measured_request(
        make: Any, tmp_path: Path) -> None:
    plan = make()
    lean = loadgen.aiperf_command(plan, tmp_path, lean=True)
    old = loadgen.aiperf_command(plan, tmp_path, lean=False)
    assert flag(lean, "--prompt-corpus") == ["random"]
    assert "--prompt-corpus" not in old
    # nothing else moves: same requests, same concurrency, same seed, same order
    assert without_corpus(lean) == old


def test_knee_keeps_the_default_corpus(tmp_path: Path) -> None:
    """The knee's synthetic prompts are cut from the corpus: changing it changes them."""
    plan = make_plan()
    assert plan.input_file is None and plan.kind == "knee"
    assert not loadgen.corpus_unused_or_unmeasured(plan)
    assert without_corpus(loadgen.aiperf_command(plan, tmp_path, lean=True)) == \
        loadgen.aiperf_command(plan, tmp_path, lean=False)
    assert "--prompt-corpus" not in loadgen.aiperf_command(plan, tmp_path)


def test_a_file_pass_of_any_kind_skips_the_corpus() -> None:
    assert loadgen.corpus_unused_or_unmeasured(file_plan())
    assert loadgen.corpus_unused_or_unmeasured(warmup_plan())
    assert not loadgen.corpus_unused_or_unmeasured(make_plan(kind="agentfix"))


def test_the_earlier_command_lines_are_a_parameter(tmp_path: Path) -> None:
    """`scripts/bench-runner --compare` asks for the earlier command lines through the
    parameters (no module state a benchmark could leave changed): a file pass without
    `--prompt-corpus`, a one-process knee as a sweep."""
    plan = file_plan()
    assert "--prompt-corpus" in loadgen.aiperf_command(plan, tmp_path)
    assert "--prompt-corpus" not in loadgen.aiperf_command(plan, tmp_path, lean=False)
    knee = make_plan(one_process=True)
    assert "--config" in loadgen.aiperf_command(knee, tmp_path)
    sweep = loadgen.aiperf_command(knee, tmp_path, one_process=False)
    assert "--config" not in sweep and "--concurrency" in sweep


def aiperf_resolved(cmd: list[str]) -> list[dict[str, Any]]:
    """What AIPerf's own parser makes of a command line: one config per run it starts."""
    from aiperf.cli_commands.profile import app
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan

    _, bound, _ = app.parse_args(cmd[2:])
    cli_config = bound.arguments["cli_config"]
    plan = build_benchmark_plan(resolve_config(cli_config, cli_config.config_file))
    return [config.model_dump(mode="json") for config in plan.configs]


def test_aiperf_reads_the_lean_file_pass_as_the_same_run(tmp_path: Path) -> None:
    """AIPerf's own parser: the lean and the old command line of a file pass resolve to
    the same run (same file, format, seed, requests, concurrency, output length) except
    the corpus, which a single-turn file does not use, and the pacing of its closed loop
    (`pacing`: the same cap of 4 in flight behind a 1,000 req/s ticker)."""
    pytest.importorskip("aiperf")
    plan = file_plan()
    lean = aiperf_resolved(loadgen.aiperf_command(plan, tmp_path, lean=True))
    old = aiperf_resolved(loadgen.aiperf_command(plan, tmp_path, lean=False))
    assert len(lean) == len(old) == 1
    assert lean[0]["datasets"][0]["prompts"]["corpus"] == "random"
    assert old[0]["datasets"][0]["prompts"] is None  # AIPerf's default corpus
    lean[0]["datasets"][0]["prompts"] = None
    [paced], [spun] = lean[0].pop("phases"), old[0].pop("phases")
    assert (paced["type"], paced["rate"], spun["type"]) == ("constant", 1000.0, "concurrency")
    assert {k: paced[k] for k in ("concurrency", "requests", "kind")} == \
        {k: spun[k] for k in ("concurrency", "requests", "kind")}
    assert lean == old
    assert lean[0]["datasets"][0]["path"] == str(FIXTURE)
    assert paced["concurrency"] == 4
