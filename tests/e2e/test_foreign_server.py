"""Verdicts that can say yes, against a server spec-ab did not write.

xpyd-sim (a third-party OpenAI-compatible LLM simulator, a test-only dependency) serves
every arm: the first token after a fixed delay, then one token per fixed interval, no
spec-decode counters. Its delays are set per arm by its own environment variables, so a
campaign's candidate is the control launch plus env, as on a lab lane. One campaign of two
candidates (run once, read by both tests), real AIPerf, the real CLI:

- `faster` streams 30% faster (a token every 21 ms instead of 30) with the first token
  configured identical: the throughput gain clears the default rule and the median-TTFT
  guardrail (judged on the passes' own requests) does not stop it — it adopts;
- `late`, as fast, whose first token comes 150 ms later (60 → 210 ms): the rule is met,
  but it keeps the default, reason `guardrail`, the guardrail broken with its CI wholly
  beyond the limit.

The guardrail is the median TTFT within +50%. On a CI host running the suite beside it,
client and servers share 2 cores, and a candidate that streams 30% faster takes CPU from
everyone's first token: its median TTFT measured +11% to +22% per pair (CI, 3 pairs), a
real worsening on that host that a +5% limit rightly calls broken. What is tested is the
verdict on a foreign server: a first token 150 ms later is +200% to +230%, beyond +50% by
far, and a faster stream is within it.

It is the median, not the p99 the examples register: a p99 of 32 requests
is its slowest request or two, and on a host running the suite beside it one stalled
request in a control pass moved one pair's p99 ratio enough for 3 pairs to say `unclear`
(CI-like run, 1 of 3). What a p99 guardrail can resolve with so few requests is the
verdict's own question (docs/verdict.md, "Guardrails"), tested without a loaded host in
tests/unit/verdict.

Loaded hosts shaped both figures. At a first token 25 ms later than 20 ms (+20% to +45%
per pair), a CI host stalled one candidate pass enough that 3 pairs could not tell
(`unclear`, honestly, which the default does not stop on). And a host running the suite in
parallel delays every token by a few milliseconds, which at 7 against 10 ms per token ate
most of the 30%: the tokens here are three times slower, and the test is `timing` (the
CPU goes to it first).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import lock_env, run_cli, run_dir_of
from tests.runs import ROOT, require

# one worker builds the run; its verdict rests on measured speed
pytestmark = [pytest.mark.xdist_group("foreign-e2e"), pytest.mark.timing]

XPYD = shutil.which("xpyd-sim", path=str(Path(sys.executable).parent))


def campaign_text(port: int) -> str:
    return f"""
name: foreign
hypothesis: the candidate's streaming (or first token) differs from the control's
lane: foreign-{port}
preregistration:
  margin: 0.10
  drift_band: 0.03
  pairs: 3
  decision_cells: [{{workload: knee, level: c4}}]
  guardrails:
    - {{metric: ttft_p50, max_worsening: 0.5}}
    - {{metric: error_rate, max_worsening: 0.0, absolute: true}}
  # what is tested is the verdict on a foreign server, not the window: a CI host running
  # the suite beside it moves the control by more than 3% between pairs of such short passes
  gates: {{retries: 1, pair_retries: 0, min_completed_requests: 8, pass_timeout_s: 120,
          min_output_tokens: 500, max_window_drift: 0.5}}
server:
  backend: process
  command: [{XPYD}, serve, --host, 127.0.0.1, --port, "{port}", --model, foreign-model,
            --eos-min-ratio, "1.0"]
  host: 127.0.0.1
  port: {port}
  env:
    XPYD_SIM_PREFILL_DELAY_MS: "30"          # the first token at 30 + 30 = 60 ms
    XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS: "30"
  readiness: {{timeout_s: 30}}
arms:
  control: {{}}
  faster:
    env: {{XPYD_SIM_PREFILL_DELAY_MS: "39", XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS: "21"}}
  late:
    env: {{XPYD_SIM_PREFILL_DELAY_MS: "189", XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS: "21"}}
workloads:
  model: foreign-model
  tokenizer: {ROOT / "fixtures" / "tokenizer"}
  warmup: []  # xpyd-sim has nothing to warm up
  knee:
    concurrency: [4]
    input_tokens: 64
    output_tokens: 48
    requests_per_level: 32
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The campaign run once; its report as JSON."""
    require(XPYD is not None, "xpyd-sim (a third-party OpenAI-compatible simulator)",
            "scripts/setup (it is a dev dependency in pyproject.toml)")
    tmp_path = tmp_path_factory.mktemp("foreign")
    path = tmp_path / "foreign.yaml"
    path.write_text(campaign_text(free_port()))
    out = tmp_path / "results"
    done = run_cli("run", str(path), "--out", str(out), "--skip-preflight", timeout=900,
                   env=lock_env(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rep = run_cli("report", str(run_dir_of(out)), "--format", "json")
    assert rep.returncode == 0, rep.stderr[-2000:]
    doc: dict[str, Any] = json.loads(rep.stdout)
    return doc


def verdict(doc: dict[str, Any], arm: str) -> dict[str, Any]:
    [found] = [c for c in doc["candidates"] if c["arm"] == arm]
    return found  # type: ignore[no-any-return]


def ttft_guardrails(doc: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    return [g for g in doc["guardrails"] if g["metric"] == "ttft_p50" and g["arm"] == arm]


def test_a_candidate_that_streams_faster_adopts(report: dict[str, Any]) -> None:
    assert verdict(report, "faster")["decision"] == "adopt", report["reasons"]
    assert (report["decision"], report["adopt_arm"]) == ("adopt", "faster"), report["reasons"]
    guards = ttft_guardrails(report, "faster")
    assert guards and all(not g["stops"] for g in guards), guards


def test_a_candidate_whose_first_token_is_150_ms_later_keeps_the_default(
        report: dict[str, Any]) -> None:
    late = verdict(report, "late")
    assert (late["decision"], late["reason"]) == ("keep-default", "guardrail"), late["reasons"]
    (ttft,) = ttft_guardrails(report, "late")
    assert ttft["state"] == "broken" and ttft["stops"], ttft
    assert ttft["ci"][0] > 0.5, ttft  # the whole CI beyond the +50% limit
