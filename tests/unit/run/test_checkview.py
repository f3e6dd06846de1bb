"""What `spec-ab check` and `spec-ab run --dry-run` print (`campaign.run.checks.checkview`),
rendered to a recording console: every section, the differences between arms in words,
the preflight's three kinds of line, the launch checks and the boot check."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from campaign.campaignfile import load_campaign
from campaign.run.checks import checkview
from campaign.run.checks.bootcheck import Boot
from campaign.run.checks.launchcheck import Findings
from campaign.run.checks.preflight import Caution
from campaign.verdict.showable import assess_campaign
from tests.runs import ROOT
from tests.unit.run.test_launchcheck import write


def render(draw: object, *args: object) -> str:
    console = Console(record=True, width=300, color_system=None)
    draw(console, *args)  # type: ignore[operator]
    return console.export_text()


def test_the_campaign_block_of_the_demo() -> None:
    c = load_campaign(ROOT / "examples" / "sim-pair.yaml")
    pairs = c.preregistration.pairs
    text = render(checkview.print_campaign, c, assess_campaign(c))
    lines = text.splitlines()
    assert lines[0] == "sim-adaptive on lane sim: valid"
    assert lines[1].startswith("  hypothesis: On the simulated DeepSeek-V4.1-Flash lane")
    assert lines[2] == ("  rule: bound, output_token_throughput (higher is better) ≥ +10%, "
                        "drift band 0.03, cells agentfix/prose")
    # the one relative guardrail under the registered design, right under the rule
    assert lines[3].startswith(f"  guardrail ttft_p99 (limit +25%): the registered design "
                               f"({pairs} pairs, 128 requests per pass) shows it within its "
                               "limit ")
    assert "of the time at no true change" in lines[3] and "below 80%" not in lines[3]
    assert "arm control — k = 5, every draft verified (the default)" in lines
    assert "arm adaptive — k = 5, adaptive verification (cost table measured at boot)" in lines
    launch = next(x for x in lines if x.startswith("  cd ") and "SPECAB_SIM_VERIFY" in x)
    assert launch.endswith("spec-ab sim serve --host 127.0.0.1 --port 18767")
    assert "differences (each candidate against control)" in lines
    assert "    env +SPECAB_SIM_VERIFY=adaptive" in lines
    assert f"schedule (AB, {pairs} pairs, {2 * pairs} arms):" in lines
    assert lines.index("  pair 1: control → adaptive") < lines.index("  pair 2: control → adaptive")
    assert f"  pair {pairs}: control → adaptive" in lines
    assert any(x.startswith("estimated duration ") for x in lines)


def test_a_sharded_campaign_shows_each_lane() -> None:
    c = load_campaign(ROOT / "examples" / "sim-lanes.yaml")
    pairs = c.preregistration.pairs
    text = render(checkview.print_campaign, c, assess_campaign(c))
    assert text.startswith(f"sim-lanes sharded over 2 lanes (sim-a, sim-b), {pairs} pairs "
                           "each, pooled into one verdict: valid")
    # the guardrail is judged on the lanes' pairs pooled
    assert (f"  guardrail ttft_p99 (limit +25%): the registered design ({2 * pairs} pairs, "
            "128 requests per pass) shows it within its limit ") in text
    assert "lane sim-a — simulated lane on port 18811 (spec-ab run FILE --lane sim-a)" in text
    assert "arm adaptive — k = 5, adaptive verification (cost table measured at boot) on lane "\
        "sim-b" in text
    assert "--port 18812" in text
    assert f"(AB, {pairs} pairs, {2 * pairs} arms on each lane)" in text


def arms_campaign(tmp_path: Path, arms: str) -> Path:
    server = textwrap.dedent("""\
        backend: docker
        image: vllm/vllm-openai:v1
        command: [--model, /m, --max-model-len, "2048", --port, "8000"]
        env: {A: "1", B: "2"}
        volumes: [/srv/a:/a:ro]
        port: 8000
        """)
    return write(tmp_path, server, arms)


def test_differences_say_in_words_what_each_candidate_changes(tmp_path: Path) -> None:
    c = load_campaign(arms_campaign(tmp_path, """\
        control: {}
        same: {}
        env: {env: {A: "9", C: "3"}}
        flags: {args: [--enforce-eager]}
        mounts: {volumes: [/srv/p.py:/x/p.py:ro, /srv/q.py:/x/q.py:ro]}
        image: {image: "vllm/vllm-openai:v2"}
        warm: {warmup: [{concurrency: 2, requests: 4, input_tokens: 8, output_tokens: 16}]}
        """))
    assert checkview.arm_differences(c, "same") == []
    assert checkview.arm_differences(c, "env") == ["env +C=3", "env A: 1 → 9"]
    assert checkview.arm_differences(c, "flags") == ["flags + --enforce-eager"]
    assert checkview.arm_differences(c, "mounts") == ["mounts + /srv/p.py:/x/p.py:ro",
                                                       "mounts + /srv/q.py:/x/q.py:ro"]
    assert checkview.arm_differences(c, "image") == [
        "image: vllm/vllm-openai:v1 → vllm/vllm-openai:v2"]
    warm = checkview.arm_differences(c, "warm")
    assert warm[0].startswith("warm-up: 16×64 tok at c4 → 4×16 tok at c2 (an unmeasured "
                              "difference: warm both arms alike")
    text = render(checkview.print_differences, c)
    assert "  same: none — the same launch and warm-up (an A/A campaign)" in text


@pytest.mark.parametrize(("base", "other", "expected"), [
    (["--a", "1", "--b", "2"], ["--a", "1", "--b", "3"], ["flags: --b 2 → --b 3"]),
    (["--a", "1", "--b", "2"], ["--a", "1"], ["flags: 1 --b 2 → 1 (nothing)"]),  # one word
    (["--a", "1", "--b", "2"], ["--a", "1", "-x", "--b", "2"], ["flags: 1 (nothing) → 1 -x"]),
    ([1, 2], [1, 2, 3], ["flags: 2 → 3 entries"]),
    ("x", "y", ["flags: x → y"]),
    ({"k": 1}, {"k": 1}, []),
])
def test_field_changes(base: object, other: object, expected: list[str]) -> None:
    assert checkview._field_changes("flags", base, other) == expected


def test_the_preflight_marks_facts_cautions_and_problems() -> None:
    ok = render(checkview.print_preflight, ["AIPerf 0.13.0 runs", Caution("GPU not checked")],
                [])
    assert ok.splitlines()[1:] == ["preflight", "  ✓ AIPerf 0.13.0 runs",
                                   "  ! GPU not checked", "  ready to run"]
    bad = render(checkview.print_preflight, ["AIPerf 0.13.0 runs"],
                 ["port 8000 on 127.0.0.1 is already in use: stop it"])
    assert "  ✗ port 8000 on 127.0.0.1 is already in use: stop it" in bad
    assert "ready to run" not in bad


def test_the_launch_checks_section() -> None:
    assert render(checkview.print_launch_checks, Findings()) == ""
    text = render(checkview.print_launch_checks, Findings(
        facts=["vLLM 0.32.0 of /v/python: flags of control, cand checked by its own parser"],
        warnings=["server.env.VLLM_X: vLLM 0.32.0 does not read VLLM_X (line 9)"]))
    assert text.splitlines()[1:] == [
        "engines (flags and variables, checked without booting)",
        "  ✓ vLLM 0.32.0 of /v/python: flags of control, cand checked by its own parser",
        "  ! server.env.VLLM_X: vLLM 0.32.0 does not read VLLM_X (line 9)"]


def test_a_boot_prints_its_time_or_its_first_error() -> None:
    assert render(checkview.print_boot, Boot(arms=["control", "aa"], seconds=3.21)) == (
        "  ✓ control, aa: ready in 3.2 s, then stopped\n")
    failed = render(checkview.print_boot, Boot(
        arms=["depth7"], seconds=1.04, error="server exited with code 2 while booting "
        "(stage: port)\n  last log lines:\n    | error: No such option: --bogus"))
    assert failed.startswith("  ✗ depth7: failed after 1.0 s: server exited with code 2")
    assert "    | error: No such option: --bogus" in failed
    assert render(checkview.print_booting, ["cand"]) == "  booting cand …\n"


def test_launch_lines_never_show_a_secret(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefgh12345")
    c = load_campaign(arms_campaign(tmp_path, """\
        control: {env: {HF_TOKEN: "${HF_TOKEN}"}}
        cand: {args: [--api-key, "${HF_TOKEN}"]}
        """))
    text = "\n".join(checkview.launch_lines(c, "control") + checkview.launch_lines(c, "cand"))
    assert "hf_abcdefgh12345" not in text and "-e HF_TOKEN" in text
    assert '--api-key "${HF_TOKEN}"' in text  # a literal is refused (test_secrets_everywhere)


def test_the_dry_run_lists_every_arms_passes_and_starts_nothing() -> None:
    c = load_campaign(ROOT / "examples" / "sim-pair.yaml")
    text = render(checkview.print_dry_run, c)
    assert "passes of every arm (AIPerf command lines)" in text
    assert "(warm-up, not measured)" in text and "aiperf profile" in text
    assert "<run>/pairs/NN/adaptive/passes/" in text
    assert text.rstrip().endswith("dry run: nothing was started")


def test_a_sequential_campaign_is_called_sequential_in_its_schedule_and_estimate() -> None:
    """Issue "The first night, for a newcomer", 4: `check` said "12 pairs, 24 arms" and one
    duration for a design that may stop at its first look."""
    c = load_campaign(ROOT / "examples" / "sim-sequential.yaml")
    design = c.preregistration.sequential
    assert design is not None
    first, most = design.schedule()[0], design.max_pairs
    lines = render(checkview.print_campaign, c).splitlines()
    assert (f"schedule (AB, up to {most} pairs, looks from pair {first}, may stop early; "
            f"at most {2 * most} arms):") in lines
    assert not any(f"{most} pairs, {2 * most} arms" in x for x in lines)
    est = next(x for x in lines if x.startswith("estimated duration "))
    assert " to " in est and f"(at least {first} pairs, at most {most}: " in est
