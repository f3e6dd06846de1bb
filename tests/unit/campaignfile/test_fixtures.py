"""Checks on the agent-fixture prompt files (fixtures/agentfix/*.jsonl).

The agent-fixture pass measures acceptance by content class, so a broken or thin fixture file
silently changes what a campaign measures. These tests pin the contract: every file is AIPerf
`single_turn` JSONL that AIPerf's own loader accepts, holds enough distinct prompts, and each
prompt has a length the load generator and the simulated lane handle (by the shipped tokenizer).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tokenizers import Tokenizer

from tests.runs import ROOT, require

AGENTFIX = ROOT / "fixtures" / "agentfix"
CLASSES = ("prose", "shell", "code", "tool_json", "structured")
MIN_PROMPTS = 30
MIN_TOKENS, MAX_TOKENS = 20, 1500
# The exact keys each line carries: AIPerf's SingleTurn model allows extra keys silently, so a
# misspelt field ("txt") would be ignored rather than rejected; pin the set here instead.
LINE_KEYS = {"type", "text"}


def _records(cls: str) -> list[dict[str, Any]]:
    path = AGENTFIX / f"{cls}.jsonl"
    records = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        assert line.strip(), f"{path.name}:{lineno}: blank line"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            pytest.fail(f"{path.name}:{lineno}: not JSON: {exc}")
        assert isinstance(record, dict), f"{path.name}:{lineno}: not a JSON object"
        records.append(record)
    return records


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(ROOT / "fixtures" / "tokenizer" / "tokenizer.json"))


def test_every_class_has_a_file() -> None:
    present = {p.stem for p in AGENTFIX.glob("*.jsonl")}
    assert present == set(CLASSES)


@pytest.mark.parametrize("cls", CLASSES)
def test_lines_are_single_turn_records(cls: str) -> None:
    for i, record in enumerate(_records(cls), start=1):
        assert set(record) == LINE_KEYS, f"{cls}.jsonl:{i}: keys {sorted(record)}"
        assert record["type"] == "single_turn", f"{cls}.jsonl:{i}"
        assert isinstance(record["text"], str) and record["text"].strip(), f"{cls}.jsonl:{i}"


@pytest.mark.parametrize("cls", CLASSES)
def test_enough_distinct_prompts(cls: str) -> None:
    texts = [r["text"] for r in _records(cls)]
    assert len(texts) >= MIN_PROMPTS
    duplicates = {t[:60] for t in texts if texts.count(t) > 1}
    assert not duplicates, f"duplicate prompts in {cls}.jsonl: {duplicates}"


def test_no_prompt_is_shared_between_classes() -> None:
    owner: dict[str, str] = {}
    for cls in CLASSES:
        for record in _records(cls):
            text = record["text"]
            assert text not in owner, f"prompt in both {owner.get(text)} and {cls}: {text[:60]}"
            owner[text] = cls


@pytest.mark.parametrize("cls", CLASSES)
def test_prompt_token_lengths(cls: str, tokenizer: Tokenizer) -> None:
    for i, record in enumerate(_records(cls), start=1):
        n = len(tokenizer.encode(record["text"]).ids)
        assert MIN_TOKENS <= n <= MAX_TOKENS, f"{cls}.jsonl:{i}: {n} tokens"


# Content markers the classes are written to carry, so a content classifier (the simulated
# lane's acceptance model) can tell them apart. Loose on purpose: these catch a prompt filed
# under the wrong class, not style.
def _has_class_marker(cls: str, text: str) -> bool:
    if cls == "tool_json":
        return '"type": "function"' in text or '"type":"function"' in text
    if cls == "structured":
        return ("JSON" in text or "YAML" in text) and '"type": "function"' not in text
    if cls == "code":
        return "```" in text
    if cls == "shell":
        shellish = ("$ ", "| ", " -", "command", "bash", "shell", "one-liner", "cron", "docker")
        return any(marker in text for marker in shellish)
    # prose: none of the other classes' strong markers
    return "```" not in text and "$ " not in text and '"type": "function"' not in text


@pytest.mark.parametrize("cls", CLASSES)
def test_prompts_carry_their_class_markers(cls: str) -> None:
    missing = [r["text"][:60] for r in _records(cls) if not _has_class_marker(cls, r["text"])]
    assert not missing, f"{cls}.jsonl prompts without the class's markers: {missing}"


@pytest.mark.parametrize("cls", CLASSES)
def test_aiperf_single_turn_loader_accepts_file(cls: str) -> None:
    """Run AIPerf's own loader in-process (about a second to import, no server, no subprocess)."""
    try:
        from aiperf.dataset.loader.single_turn import SingleTurnDatasetLoader
    except ImportError:  # pragma: no cover - aiperf is a runtime dependency
        require(False, "aiperf", "pip install -e '.[dev]'")
        return
    path = AGENTFIX / f"{cls}.jsonl"
    texts = [r["text"] for r in _records(cls)]
    assert SingleTurnDatasetLoader.can_load(json.loads(path.read_text().splitlines()[0]), path)
    loader = SingleTurnDatasetLoader(filename=path)
    conversations = loader.convert_to_conversations(loader.load_dataset())
    # One conversation of one turn per line, text unchanged, no per-request max_tokens (the
    # campaign's output length applies to every class alike).
    assert len(conversations) == len(texts)
    loaded: list[str] = []
    for conversation in conversations:
        assert len(conversation.turns) == 1
        turn = conversation.turns[0]
        assert turn.max_tokens is None
        loaded.extend(content for t in turn.texts for content in t.contents)
    assert sorted(loaded) == sorted(texts)


def test_aiperf_autodetects_single_turn() -> None:
    """AIPerf picks the loader from the first line when no --custom-dataset-type is given."""
    try:
        from aiperf.plugin import plugins
        from aiperf.plugin.enums import PluginType
    except ImportError:  # pragma: no cover
        require(False, "aiperf", "pip install -e '.[dev]'")
        return
    for cls in CLASSES:
        path = AGENTFIX / f"{cls}.jsonl"
        first = json.loads(path.read_text().splitlines()[0])
        accepting = [
            entry.name
            for entry, loader_class in plugins.iter_all(PluginType.CUSTOM_DATASET_LOADER)
            if loader_class.can_load(first, path)
        ]
        assert accepting == ["single_turn"], f"{cls}: {accepting}"
