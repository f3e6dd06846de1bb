"""The real-vLLM tests' one shared run (tests/e2e/vllm/test_vllm.py's `three_arms`).

A vLLM boot costs 30-90 s of a two-core CI machine, so the tests that only read a finished
run share one: tests a and b (test_vllm.py) and the lossless check
(test_vllm_fidelity.py). It is session-scoped, here, so that both files get the same run;
the tests that read it carry `THREE_ARMS` (one xdist group), so one worker builds it once.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.vllm.test_vllm import (
    Run,
    campaign_text,
    installed,
    ngram,
    run_dir_of,
    spec_ab,
)
from tests.runs import free_port

FIDELITY_GUARDRAIL = ("  guardrails:\n    - {metric: fidelity_token_match, workload: fidelity, "
                      "level: c1, absolute: true, max_worsening: 0.01}")
FIDELITY_WORKLOAD = "\n  fidelity: {prompts_per_class: 5, output_tokens: 64}"
"""The lossless check's prompts come from the campaign's agent-fixture classes (here prose
only): its first 5, as many as the shipped 5 classes' first prompts a campaign without
agent fixtures would ask."""


@pytest.fixture(scope="session")
def three_arms(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """control: spec decoding off; k2, k4: n-gram drafts of 2 and 4 tokens. One pair: a knee
    pass and an agent-fixture pass per arm, and the lossless check (each arm's answers to 5
    prose prompts, against the control's own; a guardrail on the match)."""
    installed()  # before the session-scoped run, which the module's check would follow
    tmp = tmp_path_factory.mktemp("vllm-ab")
    port = free_port()
    text = campaign_text(
        "vllm-cpu-ab", port, {"control": [], "k2": ngram(2), "k4": ngram(4)},
        knee="{concurrency: [4], input_tokens: 128, output_tokens: 48, "
        "requests_per_level: 8}", agentfix=True, decision_level="c4")
    assert "  guardrails: []" in text and "\nlog_captures:" in text
    text = (text.replace("  guardrails: []", FIDELITY_GUARDRAIL)
            .replace("\nlog_captures:", FIDELITY_WORKLOAD + "\nlog_captures:"))
    path = tmp / "campaign.yaml"
    path.write_text(text)
    check = spec_ab("check", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    t0 = time.monotonic()
    run = spec_ab("run", str(path), "--out", str(tmp / "results"), "--skip-boot-check",
                  timeout=720)
    took = time.monotonic() - t0
    print(f"\n3-arm vLLM campaign: {took:.0f} s")
    return Run(run_dir_of(tmp / "results", deadline_s=1), check, run, took)
