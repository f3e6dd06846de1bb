"""The lossless check's figures (`run.fidelity.compare`), which figures a pair's answers
give (`journal_figures`), and the fidelity guardrail through the real verdict
(`judge_run`): judged against the control's own agreement, measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from campaign.results import journal as jr
from campaign.results.store import RunStore
from campaign.run.measure import fidelity as fd
from tests.runs import TPUT, frame
from tests.unit.verdict.test_verdict import judge, rule

A = [{"id": "p-0", "text": " a b c d"}, {"id": "p-1", "text": " e f g h i j"}]


def test_identical_answers_match_fully() -> None:
    f = fd.compare(A, A)
    assert f == {"fidelity_token_match": 1.0, "fidelity_identical_share": 1.0,
                 "fidelity_first_divergence": 5.0, "fidelity_requests": 2.0}


def test_a_divergence_counts_tokens_over_the_longer_and_its_position() -> None:
    b = [{"id": "p-0", "text": " a b x y"},            # diverges at 2: 2 of 4 match
         {"id": "p-1", "text": " e f g h"}]            # 2 tokens short: 4 of 6 match
    f = fd.compare(A, b)
    assert f["fidelity_token_match"] == pytest.approx(6 / 10)
    assert f["fidelity_identical_share"] == 0.0
    assert f["fidelity_first_divergence"] == pytest.approx((2 + 4) / 2)


def test_missing_or_extra_tokens_are_mismatches() -> None:
    """A server that stops at 18 of 24 words (while its usage may claim all 24) is no
    perfect match: what is missing, or added, counts as tokens not matched."""
    ref = [{"id": "p", "text": " " + " ".join(f"w{i}" for i in range(24))}]
    short = [{"id": "p", "text": " " + " ".join(f"w{i}" for i in range(18))}]
    assert fd.compare(ref, short)["fidelity_token_match"] == pytest.approx(18 / 24)
    assert fd.compare(short, ref)["fidelity_token_match"] == pytest.approx(18 / 24)
    assert fd.compare(ref, short)["fidelity_first_divergence"] == 18.0


def test_a_reference_that_answered_nothing_is_no_perfect_match() -> None:
    """0 of 0 tokens compared is no agreement: nothing matched, not 100%."""
    failed = [{"id": "p-0", "error": "HTTPStatusError: 503"},
              {"id": "p-1", "error": "ReadTimeout: timed out"}]
    assert fd.compare(failed, failed)["fidelity_token_match"] == 0.0
    assert fd.compare(failed, A)["fidelity_token_match"] == 0.0


def test_failed_or_missing_answers_match_nothing() -> None:
    f = fd.compare(A, [{"id": "p-0", "error": "HTTPStatusError: 500"}])
    assert f["fidelity_token_match"] == 0.0 and f["fidelity_identical_share"] == 0.0
    assert f["fidelity_first_divergence"] == 0.0


def rows(store: RunStore) -> list[jr.PassRow]:
    return jr.passes_from_journal(store.read_journal())


def answers(store: RunStore, pair: int, arm: str, texts: list[str], rnd: int = 1) -> None:
    store.journal("fidelity", slot=pair * 2, pair=pair, pair_attempt=1, arm=arm, round=rnd,
                  started_at="2026-12-01T00:00:00.000Z",
                  outputs=[{"id": f"p-{i}", "text": t} for i, t in enumerate(texts)])
    fd.journal_figures(store, pair, 1)


def test_pair_figures_and_the_controls_reference(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "fid", b"name: fid\n", short_id="abcdef")
    # pair 1: the candidate answers first; nothing to compare until the control has
    answers(store, 1, "cand", [" a b c d", " e f"])
    assert not rows(store)
    answers(store, 1, "control", [" a b c d", " e f"])
    answers(store, 1, "control", [" a b c z", " e f"], rnd=2)  # its own boot's reference
    answers(store, 2, "control", [" a b c d", " e q"])  # against pair 1's control
    answers(store, 2, "cand", [" a b c d", " e f"])
    p = rows(store)
    tm = {(r.pair, r.arm): r.value for r in p if r.metric == "fidelity_token_match"}
    assert {(r.workload, r.level) for r in p} == {("fidelity", "c1")}
    assert tm[(1, "cand")] == 1.0
    assert tm[(1, "control")] == pytest.approx(5 / 6)  # round 2 against round 1
    assert tm[(2, "control")] == pytest.approx(5 / 6)  # pair 2's control against pair 1's
    assert tm[(2, "cand")] == pytest.approx(5 / 6)     # against its own pair's control
    # journaled once each, however often it is asked
    fd.journal_figures(store, 2, 1)
    assert len(rows(store)) == len(p)
    assert (store.run_dir / "passes.csv").read_text().count("fidelity_token_match") == 4


def guard(limit: float = 0.005) -> dict[str, Any]:
    return {"metric": "fidelity_token_match", "workload": "fidelity", "level": "c1",
            "absolute": True, "max_worsening": limit}


FID = ("fidelity", "c1", "fidelity_token_match")


def test_guardrail_against_the_controls_own_agreement_through_judge_run() -> None:
    r = rule(guardrails=[guard()])
    faster = {("knee", "c1", TPUT): [(100.0, 120.0)] * 2}
    same = judge(frame({**faster, FID: [(0.989, 0.983), (0.989, 0.985)]}), r)
    g = same.candidates[0].guardrails[0]
    assert g.state == "holds" and same.decision == "adopt"
    assert ("candidate matches control on 98.4% of tokens; control matches itself on 98.9%"
            in g.reason)
    lossy = judge(frame({**faster, FID: [(1.0, 0.97), (1.0, 0.98)]}), r)
    g = lossy.candidates[0].guardrails[0]
    assert g.state == "broken" and g.worsening == pytest.approx(0.025)
    assert lossy.decision == "keep-default" and lossy.reason == "guardrail"
    # the reference is measured: a lane that agrees with itself less tolerates as much less
    noisy = judge(frame({**faster, FID: [(0.96, 0.957), (0.95, 0.951)]}), r)
    assert noisy.candidates[0].guardrails[0].state == "holds"
    assert noisy.decision == "adopt"


def test_a_single_pair_is_judged_on_its_measured_reference() -> None:
    r = rule(guardrails=[guard()])
    one = judge(frame({("knee", "c1", TPUT): [(100.0, 120.0)] * 2, FID: [(1.0, 0.9)]}), r)
    assert one.candidates[0].guardrails[0].state == "broken"
    assert one.decision == "keep-default"
