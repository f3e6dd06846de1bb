"""The lossless check against a real engine: vLLM on the CPU (the tiny random-weight Llama,
greedy), n-gram drafts (k = 4, and k = 2) against spec decoding off, one pair. Reports the
match the engine really gives (printed, and in docs/real-vllm.md); asserts only what must
hold: the answers are kept, the figures are shares, and the control's own reference is
measured.

The check rides on the 3-arm run of test_vllm.py (`three_arms`, conftest.py: its
`workloads.fidelity` and fidelity guardrail are this test's) instead of booting a control
and a candidate of its own (a vLLM boot is 30-90 s of a two-core CI machine): each arm
answers after its measured passes on the same boot, as in any campaign with the check. Its
prompts are the campaign's agent-fixture class's (prose): the first 5 of that file, where
a campaign without agent fixtures asks the first of each of the 5 shipped classes."""

from __future__ import annotations

import json

import pytest

from campaign.results.store import load_run
from tests.e2e.vllm.test_vllm import THREE_ARMS, Run, spec_ab

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900), THREE_ARMS]


def test_ngram_against_spec_off_fidelity(three_arms: Run,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    ran = three_arms.run
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run_dir = three_arms.dir
    for arm, n in (("control", 10), ("k2", 5), ("k4", 5)):
        kept = (run_dir / "pairs" / "01" / arm / "fidelity.jsonl").read_text().splitlines()
        assert len(kept) == n and all("text" in json.loads(k) for k in kept), kept
    p = load_run(run_dir).passes
    fid = p[p.workload == "fidelity"]
    figures = {(r.arm, r.metric): r.value for r in fid.itertuples()}
    for arm in ("control", "k2", "k4"):
        assert 0.0 <= figures[(arm, "fidelity_token_match")] <= 1.0
        assert 0.0 <= figures[(arm, "fidelity_identical_share")] <= 1.0
    rep = spec_ab("report", str(run_dir), "--format", "json")
    assert rep.returncode == 0, rep.stderr[-3000:]
    report = json.loads(rep.stdout)
    line = next(g["reason"] for g in report["guardrails"]
                if g["metric"] == "fidelity_token_match" and g["arm"] == "k4")
    with capsys.disabled():
        print(f"\nvLLM CPU, n-gram k=4 against spec decoding off: {line}")
        print("figures:", {f"{a} {m}": round(v, 4) for (a, m), v in figures.items()})
