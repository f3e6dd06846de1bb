"""The lossless check against a real engine: vLLM on the CPU (the tiny random-weight Llama,
greedy), n-gram drafts (k = 4) against spec decoding off, one pair. Reports the match the
engine really gives (printed, and in docs/real-vllm.md); asserts only what must hold: the
answers are kept, the figures are shares, and the control's own reference is measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.results.store import load_run
from tests.e2e.vllm.test_vllm import campaign_text, ngram, spec_ab
from tests.runs import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def test_ngram_against_spec_off_fidelity(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    text = campaign_text("vllm-fidelity", port, {"control": [], "ngram4": ngram(4)},
                         agentfix=False,
                         knee="{concurrency: [1], input_tokens: 64, output_tokens: 16, "
                              "requests_per_level: 4}")
    text = text.replace("  guardrails: []", "  guardrails:\n    - {metric: fidelity_token_match, "
                        "workload: fidelity, level: c1, absolute: true, max_worsening: 0.01}")
    text = text.replace("\nlog_captures:", "\n  fidelity: {prompts_per_class: 1, "
                        "output_tokens: 64}\nlog_captures:")
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    out = tmp_path / "results"
    ran = spec_ab("run", str(path), "--out", str(out), "--skip-preflight", "--skip-boot-check",
                  timeout=850)  # the boot check would boot the candidate's vLLM once more
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run_dir = next(out.iterdir())
    for arm, n in (("control", 10), ("ngram4", 5)):
        kept = (run_dir / "pairs" / "01" / arm / "fidelity.jsonl").read_text().splitlines()
        assert len(kept) == n and all("text" in json.loads(k) for k in kept), kept
    p = load_run(run_dir).passes
    fid = p[p.workload == "fidelity"]
    figures = {(r.arm, r.metric): r.value for r in fid.itertuples()}
    for arm in ("control", "ngram4"):
        assert 0.0 <= figures[(arm, "fidelity_token_match")] <= 1.0
        assert 0.0 <= figures[(arm, "fidelity_identical_share")] <= 1.0
    rep = spec_ab("report", str(run_dir), "--format", "json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    report = json.loads(rep.stdout)
    line = next(g["reason"] for g in report["guardrails"]
                if g["metric"] == "fidelity_token_match")
    with capsys.disabled():
        print(f"\nvLLM CPU, n-gram k=4 against spec decoding off: {line}")
        print("figures:", {f"{a} {m}": round(v, 4) for (a, m), v in figures.items()})
