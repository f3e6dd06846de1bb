"""What would fail at boot, found without booting: the simulator's knobs (every launch,
every lane) and vLLM's flags and variables (with a fake engine: tests/unit/run/
test_vllm_flags.py has the parser itself)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.run.checks.launchcheck import check_launches, engine_findings, knob_problems
from campaign.run.checks.vllmengine import Engines
from campaign.sim.config import KNOWN_VARIABLES, SOURCE_VARIABLES, ConfigError, env_knobs
from tests.unit.run.test_vllm_flags import FakePython


def write(tmp_path: Path, server: str, arms: str, lanes: str = "lane: sim") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent("""\
        name: t
        hypothesis: h
        {lanes}
        preregistration:
          pairs: 1
          decision_cells: [{{workload: knee, level: c1}}]
        server:
        {server}
        arms:
        {arms}
        workloads:
          model: m
          tokenizer: builtin:tokenizer
          knee: {{concurrency: [1], input_tokens: 16, output_tokens: 8}}
        """).format(lanes=lanes, server=textwrap.indent(textwrap.dedent(server), "  "),
                    arms=textwrap.indent(textwrap.dedent(arms), "  ")))
    return path


SIM = """\
backend: process
command: [spec-ab, sim, serve, --port, "18000"]
port: 18000
env: {SPECAB_SIM_SEED: "1", SPECAB_SIM_TIME_SCALE: "8"}
"""


def test_every_known_variable_is_one_the_simulator_reads() -> None:
    """The public list and the simulator's own reading agree, both ways."""
    for name in KNOWN_VARIABLES:
        if name not in SOURCE_VARIABLES:
            assert env_knobs({name: "1"}), name
    assert "SPECAB_SIM_DEPTH" in KNOWN_VARIABLES
    assert "SPECAB_SIM_COST_BASE_MS" in KNOWN_VARIABLES
    assert "SPECAB_SIM_ACCEPTANCE_PROSE" in KNOWN_VARIABLES
    with pytest.raises(ConfigError, match="unknown knob 'depht'"):
        env_knobs({"SPECAB_SIM_DEPHT": "7"})


def test_a_misspelled_knob_names_the_arm_its_line_and_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, SIM, """\
        control: {}
        depth7:
          env: {SPECAB_SIM_DEPHT: "7"}
        """)
    problems = knob_problems(load_campaign(path))
    assert len(problems) == 1
    line = problems[0]
    assert line.startswith("arms.depth7.env.SPECAB_SIM_DEPHT: not a knob of the simulated lane")
    written = next(i for i, text in enumerate(path.read_text().splitlines(), start=1)
                   if "SPECAB_SIM_DEPHT" in text)
    assert "(did you mean SPECAB_SIM_DEPTH?)" in line and line.endswith(f"(line {written})")


def test_a_knob_of_the_server_is_named_once_and_one_of_a_lane_under_the_lane(
        tmp_path: Path) -> None:
    server = SIM.replace('SPECAB_SIM_SEED: "1"', 'SPECAB_SIM_SEDD: "1"')
    lanes = """lanes:
  a: {server: {port: 18001, args: [--port, "18001"]}}
  b: {server: {port: 18002, args: [--port, "18002"], env: {SPECAB_SIM_VERIFI: adaptive}}}"""
    server = server.replace(', --port, "18000"]', "]")
    path = write(tmp_path, server, "control: {}\ncand: {env: {SPECAB_SIM_DEPTH: '7'}}\n",
                 lanes=lanes)
    problems = knob_problems(load_campaign(path))  # every lane, none chosen
    assert [p.split(":")[0] for p in problems] == [
        "server.env.SPECAB_SIM_SEDD", "lanes.b.server.env.SPECAB_SIM_VERIFI"], problems
    assert "did you mean SPECAB_SIM_SEED?" in problems[0]
    assert "did you mean SPECAB_SIM_VERIFY?" in problems[1]
    assert knob_problems(load_campaign(path, lane="a")) == problems[:1]


def test_known_knobs_and_other_variables_pass(tmp_path: Path) -> None:
    path = write(tmp_path, SIM, """\
        control: {}
        cand: {env: {SPECAB_SIM_depth: "7", SPECAB_SIM_COST_BASE_MS: "3", HF_HOME: /x,
                     SPECAB_SIM_CONFIG: k.yaml}}
        """)
    found = check_launches(load_campaign(path), None)
    assert found.problems == [] and found.warnings == []


VLLM = """\
backend: process
command: [{python}, -m, vllm.entrypoints.openai.api_server, --model, /m, --port, "8000",
          --max_model_len=2048]
port: 8000
env: {{VLLM_CPU_KVCACHE_SPACE: "1", VLLM_CPU_KVCACHE_SPAC: "1"}}
"""


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1)
                if text in line)


def vllm_campaign(tmp_path: Path, arms: str) -> Path:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    return write(tmp_path, VLLM.format(python=python), arms)


def test_vllm_flags_refused_by_its_parser_are_problems_with_their_place(
        tmp_path: Path) -> None:
    path = vllm_campaign(tmp_path, """\
        control: {}
        typo: {args: [--max-modle-len, "4096"]}
        stray: {args: [--enforce-eager, "true"]}
        """)
    fake = FakePython()
    found = engine_findings(load_campaign(path), Engines(run=fake, cache_dir=tmp_path / "c"))
    assert fake.dumps == 1 and len(fake.calls) == 2  # three arms, one engine: asked once
    assert found.problems == [
        "arms.typo.args[0]: vLLM 0.32.0 refuses the flags: unrecognized arguments: "
        f"--max-modle-len (line {line_of(path, '--max-modle-len')})"]
    warnings = "\n".join(found.warnings)
    assert ("server.env.VLLM_CPU_KVCACHE_SPAC: vLLM 0.32.0 does not read "
            "VLLM_CPU_KVCACHE_SPAC (closest: VLLM_CPU_KVCACHE_SPACE)") in warnings
    assert "arms.stray.args[1]: the value 'true' (after --enforce-eager" in warnings
    assert len(found.facts) == 1, found.facts
    assert "flags of control, typo, stray checked by its own parser" in found.facts[0]


def test_a_flag_of_the_server_refused_in_every_arm_is_one_line(tmp_path: Path) -> None:
    path = vllm_campaign(tmp_path, "control: {}\ncand: {env: {VLLM_CPU_OMP_THREADS_BIND: all}}\n")
    text = path.read_text().replace("--max_model_len=2048", "--max-num, '4'")
    path.write_text(text)
    found = engine_findings(load_campaign(path),
                            Engines(run=FakePython(), cache_dir=tmp_path / "c"))
    assert len(found.problems) == 1, found.problems
    assert found.problems[0].startswith("server.command[7]: vLLM 0.32.0 refuses the flags: "
                                        "ambiguous option: --max-num could match")
    assert "[arm" not in found.problems[0]


def test_a_failed_introspection_is_a_warning_never_a_crash(tmp_path: Path) -> None:
    path = vllm_campaign(tmp_path, "control: {}\ncand: {args: [--bogus]}\n")
    engines = Engines(run=FakePython(fail="ImportError: libtorch.so"), cache_dir=tmp_path / "c")
    found = check_launches(load_campaign(path), engines)
    assert found.problems == []
    assert len(found.warnings) == 1  # one engine, one reason: said once for both arms
    assert found.warnings[0].startswith("arms control, cand: vLLM's flags not checked: ")
    assert "exited with code 1: ImportError: libtorch.so" in found.warnings[0]


def test_a_sharded_campaign_without_a_lane_checks_no_engine(tmp_path: Path) -> None:
    path = vllm_campaign(tmp_path, "control: {}\ncand: {args: [--bogus]}\n")
    text = path.read_text().replace("lane: sim", "lanes: {a: {}, b: {}}")
    path.write_text(text)
    fake = FakePython()
    found = check_launches(load_campaign(path), Engines(run=fake, cache_dir=tmp_path / "c"))
    assert found.problems == [] and fake.calls == []
    found = check_launches(load_campaign(path, lane="b"),
                           Engines(run=fake, cache_dir=tmp_path / "c"))
    assert found.problems and found.problems[0].startswith("arms.cand.args[0]")
    assert json.loads(next((tmp_path / "c").iterdir()).read_text())["identity"]["python"]
