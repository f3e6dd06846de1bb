"""Acceptance model and the prompt classifier."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from campaign.sim.acceptance import (
    CLASSES,
    DEFAULT_DECAY,
    accepted_at,
    classify,
    keyed_uniform,
    per_position_a,
    reported_rate,
    survival,
)
from tests.runs import ROOT

AGENTFIX = ROOT / "fixtures" / "agentfix"


@pytest.mark.parametrize("rate", [0.30, 0.62, 0.80, 0.91])
def test_per_position_a_solves_the_reported_rate(rate: float) -> None:
    a = per_position_a(rate)
    assert reported_rate(a, DEFAULT_DECAY, 5) == pytest.approx(rate, abs=1e-6)


def test_survival_is_near_geometric() -> None:
    # docs/simulator.md: 78, 60, 44, 34, 26 % with each position keeping 0.73-0.78 of the last.
    a = per_position_a(0.484)
    s = survival(a, DEFAULT_DECAY, 5)
    ratios = [s[i + 1] / s[i] for i in range(4)]
    assert all(0.70 <= r <= 0.80 for r in ratios), ratios
    assert s[0] == pytest.approx(0.78, abs=0.03)


def test_sampling_matches_the_model_rate() -> None:
    a = per_position_a(0.91)
    n = 20_000
    accepted = sum(accepted_at(key, 0, a, DEFAULT_DECAY, 5) for key in range(n))
    assert accepted / (5 * n) == pytest.approx(0.91, abs=0.01)
    assert accepted_at(7, 0, a, DEFAULT_DECAY, 0) == 0


@pytest.mark.parametrize("rate", [0.30, 0.91])
def test_keyed_draws_match_the_model_rate_and_survival(rate: float) -> None:
    """The draws fixed by (request key, position, draft) have the model's statistics: the
    reported rate, and the survival to each position."""
    a = per_position_a(rate)
    n = 20_000
    counts = [accepted_at(key, 7 * key % 997, a, DEFAULT_DECAY, 5) for key in range(n)]
    assert sum(counts) / (5 * n) == pytest.approx(rate, abs=0.01)
    for i, s in enumerate(survival(a, DEFAULT_DECAY, 5)):
        assert sum(c > i for c in counts) / n == pytest.approx(s, abs=0.015)
    u = [keyed_uniform(3, p, 0) for p in range(n)]
    assert all(0.0 <= x < 1.0 for x in u)
    assert sum(u) / n == pytest.approx(0.5, abs=0.01)


def test_keyed_draws_are_fixed_and_a_shorter_verify_sees_their_prefix() -> None:
    a = per_position_a(0.62)
    for key in range(200):
        for position in (0, 1, 50):
            full = accepted_at(key, position, a, DEFAULT_DECAY, 5)
            assert full == accepted_at(key, position, a, DEFAULT_DECAY, 5)
            for v in range(6):
                assert accepted_at(key, position, a, DEFAULT_DECAY, v) == min(full, v)
    # another key or another position draws afresh
    outcomes = {accepted_at(key, 0, a, DEFAULT_DECAY, 5) for key in range(50)}
    assert len(outcomes) > 2
    assert len({accepted_at(1, p, a, DEFAULT_DECAY, 5) for p in range(50)}) > 2


EXAMPLES = {
    "shell": "How do I find large files? Give me the command.\n"
             "$ find . -size +100M | xargs ls -lh && du -sh /var/log 2>&1",
    "code": "Refactor this function:\n```python\ndef load(path):\n    import json\n"
            "    with open(path) as f:\n        return json.load(f)\n```",
    "tool_json": 'You can call tools. Available tools: [{"name": "get_weather", '
                 '"parameters": {"city": "string"}}]. Respond with a tool_call and JSON '
                 'arguments for the weather in Paris.',
    "structured": "Extract the fields name, age and city from the text below and output a "
                  "YAML document with one key: value per line, then a markdown table.",
    "prose": "Write a short story about a lighthouse keeper who finds an old letter "
             "washed up on the beach one winter morning.",
    "synthetic": "From fairest creatures we desire increase That thereby beautys rose might "
                 "never die But as the riper should by time decease His tender heir might "
                 "bear his memory But thou contracted to thine own bright eyes Feedst thy "
                 "lights flame with selfsubstantial fuel",
}


@pytest.mark.parametrize("klass", sorted(EXAMPLES))
def test_classifier_on_examples(klass: str) -> None:
    assert klass in CLASSES
    assert classify(EXAMPLES[klass]) == klass


def test_empty_prompt_is_prose() -> None:
    assert classify("") == "prose"


@pytest.mark.parametrize("klass", ["prose", "shell", "code", "tool_json", "structured"])
def test_classifier_on_agent_fixtures(klass: str) -> None:
    path = AGENTFIX / f"{klass}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not written yet (agent fixtures come from another issue)")
    texts = [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    assert texts
    wrong = [(classify(t), t[:80]) for t in texts if classify(t) != klass]
    assert not wrong, f"{len(wrong)}/{len(texts)} misclassified: {wrong[:3]}"


def test_aiperf_synthetic_corpus_is_its_own_class() -> None:
    # AIPerf builds --isl prompts from windows of its punctuation-free Shakespeare corpus.
    import aiperf

    corpus = Path(aiperf.__file__).parent / "dataset" / "generator" / "assets" / "shakespeare.txt"
    words = corpus.read_text(encoding="utf-8").split()
    rng = random.Random(1)
    hits = 0
    for _ in range(200):
        i = rng.randrange(len(words) - 30)
        hits += classify(" ".join(words[i:i + 30])) == "synthetic"
    assert hits >= 198
