"""The seeded schedule of a rate level (issue 41, design §1): arrival times drawn by spec-ab
(poisson, constant, gamma), prompts of exactly `input_tokens` tokens of the shipped
tokenizer, written once per run as AIPerf mooncake JSONL with its sha256, the same bytes for
every pair and arm, re-derived and checked on resume.

The arrival-process tests compare a sample statistic with its expectation at a tolerance of
about 5 standard errors of that statistic (false-failure rate below 1e-6 per check; the
seeds are fixed, so each test is deterministic)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from campaign.campaignfile import load_campaign
from campaign.errors import ResultsError
from campaign.run.measure import arrivals
from campaign.sim.vocab import Vocab
from tests.runs import ROOT
from tests.unit.campaignfile.test_campaignfile import BASE, write

TOKENIZER = ROOT / "campaign" / "fixtures" / "tokenizer"


def _campaign(tmp_path: Path, rate: str) -> Path:
    head, _, _ = BASE.partition("  knee:\n")
    text = head.replace("{workload: knee, level: c1}", "{workload: rate, level: \"*\"}\n"
                        "  guardrails:\n    - {metric: error_rate, max_worsening: 0.0, "
                        "absolute: true}")
    path = write(tmp_path, text + rate)
    (tmp_path / "tok").mkdir(exist_ok=True)
    for f in TOKENIZER.iterdir():
        (tmp_path / "tok" / f.name).write_bytes(f.read_bytes())
    return path


@pytest.mark.parametrize("arrival, shape, cv", [
    ("poisson", None, 1.0), ("constant", None, 0.0), ("gamma", 0.25, 2.0),
    ("gamma", 4.0, 0.5)])
def test_gaps_have_the_rate_and_the_spread_of_their_process(arrival: str, shape: float | None,
                                                            cv: float) -> None:
    n = 20000
    t = arrivals.arrivals(8.0, n, arrival, shape, seed=3)
    gaps = np.diff(t)  # the first request opens the level at 0
    assert t[0] == 0 and np.all(gaps >= 0)
    # mean gap 1/8 s: its standard error is cv/8/sqrt(n)
    assert abs(gaps.mean() - 0.125) <= 5 * max(cv, 0.01) * 0.125 / np.sqrt(n)
    # coefficient of variation: 1 (exponential), 0 (constant), 1/sqrt(shape) (gamma); the
    # sample cv's standard error ≈ cv·sqrt((2 + excess kurtosis) / 4n), the excess kurtosis
    # of a gamma gap 6/shape (exponential: shape 1)
    excess = 0.0 if arrival == "constant" else 6.0 / (shape or 1.0)
    se = cv * np.sqrt((2 + excess) / (4 * n))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=5 * se + 1e-9)
    assert np.array_equal(t, arrivals.arrivals(8.0, n, arrival, shape, seed=3))
    assert arrival == "constant" or not np.array_equal(
        t, arrivals.arrivals(8.0, n, arrival, shape, seed=4))


def test_a_level_schedule_is_mooncake_jsonl_of_exact_prompts(tmp_path: Path) -> None:
    c = load_campaign(_campaign(tmp_path, "  rate:\n    rates: [2, 8]\n    requests_per_level: "
                                          "12\n    input_tokens: 40\n    output_tokens: 7\n"))
    scheds = arrivals.rate_schedules(c)
    assert [s.name for s in scheds] == ["rate-r2", "rate-r8"]
    lines = [json.loads(line) for line in scheds[1].text.splitlines()]
    assert len(lines) == 12 and set(lines[0]) == {"timestamp", "text_input", "output_length"}
    stamps = [x["timestamp"] for x in lines]
    assert stamps == sorted(stamps) and all(isinstance(s, int) for s in stamps)
    vocab = Vocab.load(TOKENIZER)
    assert {vocab.count(x["text_input"]) for x in lines} == {40}
    assert {x["output_length"] for x in lines} == {7}
    assert len({x["text_input"] for x in lines}) == 12  # no two requests share a prompt
    # the two levels draw their own arrivals and prompts (seed + level index)
    assert scheds[0].text.splitlines()[0] != scheds[1].text.splitlines()[0]
    assert scheds[1].offered_rate == pytest.approx(11 / ((stamps[-1] - stamps[0]) / 1000))


def test_a_level_can_send_an_agent_fixtures_texts(tmp_path: Path) -> None:
    """`rate.prompts`: the levels send a fixture's texts in a seeded order, so the drafts
    meet the content a class of agents sends (the simulated lane classifies them as code,
    not as the word prompts' synthetic text), the same bytes every time it is derived."""
    from campaign.sim.acceptance import classify
    rate = ("  rate:\n    rates: [2, 8]\n    requests_per_level: 30\n"
            "    prompts: builtin:agentfix/code\n    output_tokens: 7\n")
    c = load_campaign(_campaign(tmp_path, rate))
    scheds = arrivals.rate_schedules(c)
    fixture = set(arrivals.fixture_texts(ROOT / "campaign" / "fixtures" / "agentfix" /
                                         "code.jsonl"))
    for s in scheds:
        texts = [json.loads(line)["text_input"] for line in s.text.splitlines()]
        assert len(texts) == 30 and set(texts) <= fixture and len(set(texts)) > 10
        assert {classify(t) for t in texts} == {"code"}
    assert [s.text for s in arrivals.rate_schedules(c)] == [s.text for s in scheds]
    assert scheds[0].text.splitlines()[0] != scheds[1].text.splitlines()[0]


@pytest.mark.parametrize("extra, said", [
    ("    input_tokens: 64\n", "give prompts (a fixture's texts) or input_tokens"),
])
def test_prompts_and_a_word_length_are_refused_together(tmp_path: Path, extra: str,
                                                        said: str) -> None:
    from campaign.errors import CampaignError
    rate = ("  rate:\n    rates: [2]\n    prompts: builtin:agentfix/code\n" + extra)
    with pytest.raises(CampaignError) as info:
        load_campaign(_campaign(tmp_path, rate))
    assert said in str(info.value) and "workloads.rate" in str(info.value)


def test_written_once_per_run_and_verified_on_resume(tmp_path: Path) -> None:
    c = load_campaign(_campaign(tmp_path, "  rate:\n    rates: [4]\n    requests_per_level: "
                                          "5\n"))
    run = tmp_path / "run"
    hashes = arrivals.write_schedules(run, c)
    path = run / "schedules" / "rate-r4.jsonl"
    import hashlib
    assert hashes == {"rate-r4": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert arrivals.write_schedules(run, c) == hashes  # a resume re-derives the same bytes
    path.write_text(path.read_text().replace('"output_length": 128', '"output_length": 129'))
    with pytest.raises(ResultsError) as info:
        arrivals.write_schedules(run, c)
    assert "rate-r4.jsonl" in str(info.value) and "changed" in str(info.value)


def test_a_trace_is_replayed_from_the_runs_own_copy_with_its_prompts_written(
        tmp_path: Path) -> None:
    from campaign.run.measure import loadgen
    from campaign.run.measure.passes import arm_passes
    path = _campaign(tmp_path, "  trace:\n    files: {burst: burst.jsonl}\n    time_scale: 0.5\n")
    path.write_text(path.read_text().replace("{workload: rate, level: \"*\"}",
                                             "{workload: trace, level: burst}"))
    (tmp_path / "burst.jsonl").write_text(
        '{"timestamp": 0, "input_length": 30, "output_length": 5}\n'
        '{"timestamp": 1000, "text_input": "hello there", "output_length": 9}\n'
        '{"timestamp": 3000, "input_length": 12, "output_length": 7, "hash_ids": [1]}\n')
    c = load_campaign(path)
    run = tmp_path / "run"
    hashes = arrivals.write_schedules(run, c)
    copy = run / "schedules" / "trace-burst.jsonl"
    assert list(hashes) == ["trace-burst"]
    lines = [json.loads(x) for x in copy.read_text().splitlines()]
    assert [x["timestamp"] for x in lines] == [0, 500, 1500]  # time_scale 0.5
    assert [x["output_length"] for x in lines] == [5, 9, 7]
    vocab = Vocab.load(TOKENIZER)
    assert [vocab.count(x["text_input"]) for x in lines] == [30, 2, 12]
    assert lines[1]["text_input"] == "hello there"  # the trace's own prompt kept
    assert "input_length" not in lines[0] and "hash_ids" not in lines[2]
    assert arrivals.write_schedules(run, c) == hashes
    ap = [p for p in arm_passes(c, "control", "http://h:1", run) if p.measured]
    assert [(p.plan.name, p.plan.kind, p.level_labels) for p in ap] == [
        ("trace-burst", "trace", ("burst",))]
    cmd = loadgen.aiperf_command(ap[0].plan, tmp_path / "p")
    assert str(copy) in cmd and not any(a.startswith("min_tokens") for a in cmd)
