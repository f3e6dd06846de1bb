"""Verdicts that can say yes, against a server spec-ab did not write.

xpyd-sim (a third-party OpenAI-compatible LLM simulator, a test-only dependency) serves
every arm: the first token after a fixed delay, then one token per fixed interval, no
spec-decode counters. Its delays are set per arm by its own environment variables, so a
campaign's candidate is the control launch plus env, as on a lab lane. Two campaigns, real
AIPerf, the real CLI:

- the candidate streams 30% faster (a token every 7 ms instead of 10) with the first token
  configured identical: the throughput gain clears the default rule and the p99 TTFT
  guardrail (judged on the passes' own requests) does not stop it — ADOPT;
- the same faster candidate, whose first token comes 50 ms later (20 → 70 ms): the rule is
  met, but KEEP-DEFAULT, reason `guardrail`, the guardrail broken with its CI wholly beyond
  the limit. (At 25 ms later, +20% to +45% per pair, a CI host loaded by the rest of the
  suite stalled one candidate pass enough that the pairs disagreed beyond the model; judged
  on their own spread, 3 pairs could not tell — `unclear`, honestly, which the default does
  not stop on. 50 ms stays clear of a shared host's stalls.)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from campaign.sim.testing import free_port
from tests.integration.e2e.test_run_e2e import lock_env, run_cli, run_dir_of
from tests.runs import ROOT, require

pytestmark = pytest.mark.integration

XPYD = shutil.which("xpyd-sim", path=str(Path(sys.executable).parent))


def campaign_text(port: int, name: str, candidate_env: dict[str, str]) -> str:
    env = ", ".join(f"{k}: \"{v}\"" for k, v in candidate_env.items())
    return f"""
name: {name}
hypothesis: the candidate's streaming (or first token) differs from the control's
lane: foreign-{port}
preregistration:
  margin: 0.10
  drift_band: 0.03
  pairs: 3
  decision_cells: [{{workload: knee, level: c4}}]
  gates: {{retries: 1, pair_retries: 0, min_completed_requests: 8, pass_timeout_s: 120,
          min_output_tokens: 500}}
server:
  backend: process
  command: [{XPYD}, serve, --host, 127.0.0.1, --port, "{port}", --model, foreign-model,
            --eos-min-ratio, "1.0"]
  host: 127.0.0.1
  port: {port}
  env:
    XPYD_SIM_PREFILL_DELAY_MS: "10"          # the first token at 10 + 10 = 20 ms
    XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS: "10"
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  candidate:
    env: {{{env}}}
workloads:
  model: foreign-model
  tokenizer: {ROOT / "fixtures" / "tokenizer"}
  warmup: [{{concurrency: 2, requests: 4, input_tokens: 32, output_tokens: 8}}]
  knee:
    concurrency: [4]
    input_tokens: 64
    output_tokens: 48
    requests_per_level: 32
"""


def run_campaign(tmp_path: Path, name: str, candidate_env: dict[str, str]) -> dict[str, object]:
    require(XPYD is not None, "xpyd-sim (a third-party OpenAI-compatible simulator)",
            "scripts/setup (it is a dev dependency in pyproject.toml)")
    path = tmp_path / f"{name}.yaml"
    path.write_text(campaign_text(free_port(), name, candidate_env))
    out = tmp_path / "results"
    done = run_cli("run", str(path), "--out", str(out), "--skip-preflight", timeout=900,
                   env=lock_env(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rep = run_cli("report", str(run_dir_of(out)), "--format", "json")
    assert rep.returncode == 0, rep.stderr[-2000:]
    doc: dict[str, object] = json.loads(rep.stdout)
    shutil.rmtree(out)
    return doc


def test_a_candidate_that_streams_faster_adopts(tmp_path: Path) -> None:
    doc = run_campaign(tmp_path, "foreign-faster", {
        "XPYD_SIM_PREFILL_DELAY_MS": "13", "XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS": "7"})
    assert doc["decision"] == "adopt", doc["reasons"]
    guards = [g for g in doc["guardrails"] if g["metric"] == "ttft_p99"]  # type: ignore[union-attr,index]
    assert guards and all(not g["stops"] for g in guards), guards


def test_a_candidate_whose_first_token_is_50_ms_later_keeps_the_default(tmp_path: Path) -> None:
    doc = run_campaign(tmp_path, "foreign-late", {
        "XPYD_SIM_PREFILL_DELAY_MS": "63", "XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS": "7"})
    assert doc["decision"] == "keep-default" and doc["reason"] == "guardrail", doc["reasons"]
    (ttft,) = [g for g in doc["guardrails"] if g["metric"] == "ttft_p99"]  # type: ignore[union-attr,index]
    assert ttft["state"] == "broken" and ttft["stops"], ttft
    assert ttft["ci"][0] > 0.05, ttft  # the whole CI beyond the +5% limit
