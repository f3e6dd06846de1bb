"""`spec-ab check` catches what would fail at boot, through the real CLI: a misspelled
simulator knob (issue 25's `SPECAB_SIM_DEPHT`), a flag vLLM's own parser refuses (a fake
engine that answers like vLLM 0.32.0), and `--boot` of a sharded campaign without a lane.
`spec-ab run` refuses the knob before anything is registered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign.cli import app
from campaign.run.checks import vllmdump
from tests.runs import ROOT, TESTS

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def demo_with(tmp_path: Path, arm: str) -> Path:
    """The demo campaign with one more candidate arm (`arm` is its YAML line)."""
    text = (ROOT / "examples" / "sim-pair.yaml").read_text()
    text = text.replace("\nworkloads:", f"\n{arm}\n\nworkloads:")
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    return path


def test_a_misspelled_knob_fails_check_naming_it_and_its_closest(tmp_path: Path) -> None:
    path = demo_with(tmp_path, '  depth7: {env: {SPECAB_SIM_DEPHT: "7"}}')
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "DEPHT" in t)
    code, out = invoke("check", str(path))
    assert code == 2, out
    assert ("arms.depth7.env.SPECAB_SIM_DEPHT: not a knob of the simulated lane (did you "
            "mean SPECAB_SIM_DEPTH?)") in out and f"(line {line})" in out
    assert "valid" not in out and "preflight" not in out


def test_run_refuses_the_knob_before_registering_anything(tmp_path: Path) -> None:
    path = demo_with(tmp_path, '  depth7: {env: {SPECAB_SIM_DEPHT: "7"}}')
    code, out = invoke("run", str(path), "--out", str(tmp_path / "results"))
    assert code == 2, out
    assert "SPECAB_SIM_DEPHT" in out and "did you mean SPECAB_SIM_DEPTH?" in out
    assert not (tmp_path / "results").exists()


def test_a_knob_value_the_simulator_refuses_fails_check_with_its_line(tmp_path: Path) -> None:
    """ "seven" passed check and failed only at boot (issue 39, item 12)."""
    path = demo_with(tmp_path, '  depth7: {env: {SPECAB_SIM_DEPTH: "seven"}}')
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "seven" in t)
    code, out = invoke("check", str(path), "--skip-preflight")
    assert code == 2, out
    assert "arms.depth7.env.SPECAB_SIM_DEPTH: SPECAB_SIM_DEPTH='seven': not a whole number" \
        in " ".join(out.split()), out
    assert f"(line {line})" in out


def test_a_known_knob_checks_clean(tmp_path: Path) -> None:
    path = demo_with(tmp_path, '  depth7: {env: {SPECAB_SIM_DEPTH: "7"}}')
    code, out = invoke("check", str(path), "--skip-preflight")
    assert code == 0, out
    assert "engines" not in out  # no vLLM launch, nothing to say


@pytest.fixture()
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An interpreter named `python` that answers like one with vLLM 0.32.0 installed
    (and counts its dumps in `dumps.txt`); the engine cache under tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    dump = (TESTS / "data" / "vllm" / "dump-0.32.0-cpu.json").read_text()
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"""#!{sys.executable}
import json, sys
src = sys.stdin.read()
if "packages_distributions" in src:
    print(json.dumps({{"version": "vllm 0.32.0", "folder": "/fake/vllm"}}))
else:
    with open({str(tmp_path / "dumps.txt")!r}, "a") as f:
        f.write("dump\\n")
    print("INFO noise")
    print({vllmdump.MARKER!r} + json.dumps(json.load(open({str(TESTS / "data" / "vllm" /
          "dump-0.32.0-cpu.json")!r}))))
""")
    python.chmod(0o755)
    assert json.loads(dump)["vllm_version"] == "0.32.0"
    return python


def vllm_campaign(tmp_path: Path, python: Path, candidate_args: str) -> Path:
    """One pair of 8 requests per pass: a design no relative guardrail can be shown within
    its limit at (`check` refuses one), so only the absolute error-rate guardrail."""
    path = tmp_path / "vllm.yaml"
    path.write_text(f"""\
name: cpu-vllm
hypothesis: n-gram drafts help
lane: cpu
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
  guardrails: [{{metric: error_rate, max_worsening: 0.0, absolute: true}}]
server:
  backend: process
  command: [{python}, -m, vllm.entrypoints.openai.api_server, --model, /m, --port, "8000"]
  port: 8000
  env: {{VLLM_CPU_KVCACHE_SPAC: "1"}}
arms:
  control: {{}}
  ngram: {{args: {candidate_args}}}
workloads:
  model: m
  tokenizer: builtin:tokenizer
  knee: {{concurrency: [1], input_tokens: 16, output_tokens: 8}}
""")
    return path


def test_an_unknown_vllm_flag_fails_check_in_the_parsers_words(tmp_path: Path,
                                                              fake_vllm: Path) -> None:
    path = vllm_campaign(tmp_path, fake_vllm, '[--speculative-config.method, ngram, '
                                              '--num-speculative-tokns, "4"]')
    code, out = invoke("check", str(path), "--skip-preflight")
    assert code == 2, out
    assert ("arms.ngram.args[2]: vLLM 0.32.0 refuses the flags: unrecognized arguments: "
            "--num-speculative-tokns (line 15)") in out
    assert "VLLM_CPU_KVCACHE_SPAC (closest: VLLM_CPU_KVCACHE_SPACE)" in out  # a warning
    assert "reading vLLM's flags from" in out
    cached = list((tmp_path / "cache" / "spec-ab" / "engines").glob("vllm-*.json"))
    assert len(cached) == 1
    code, out = invoke("check", str(path), "--skip-preflight")  # the next check: cached
    assert code == 2 and "reading vLLM's flags" not in out
    assert (tmp_path / "dumps.txt").read_text() == "dump\n"
    code, out = invoke("check", str(path), "--skip-preflight", "--no-engine")
    assert code == 0, out


def test_flags_vllm_accepts_check_clean_and_say_so(tmp_path: Path, fake_vllm: Path) -> None:
    args = "['--speculative_config={\"method\": \"ngram\"}', -O3]"
    path = vllm_campaign(tmp_path, fake_vllm, args)
    code, out = invoke("check", str(path), "--skip-preflight")
    assert code == 0, out
    assert f"✓ vLLM 0.32.0 of {fake_vllm}: flags of control, ngram checked by its own parser" \
        in out
    assert "! server.env.VLLM_CPU_KVCACHE_SPAC: vLLM 0.32.0 does not read" in out


def test_boot_of_a_sharded_campaign_without_a_lane_boots_nothing_and_says_so() -> None:
    code, out = invoke("check", str(ROOT / "examples" / "sim-lanes.yaml"), "--boot")
    assert code == 0, out
    assert "`spec-ab check" in out and "--lane NAME --boot`; nothing was booted" in out
    assert "boot check" not in out
