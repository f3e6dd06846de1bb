"""The simulated lane's vocabulary (`sim.vocab`), in process: the shipped tokenizer loads,
a missing one says where to point, counts agree with the tokenizer, and any text spelled
from the word pool re-tokenizes to exactly as many tokens as words (what AIPerf counts as
the output length: a mismatch would be an OSL mismatch and skew throughput)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from campaign.sim.config import DEFAULT_TOKENIZER
from campaign.sim.vocab import Vocab
from tests.runs import ROOT

SHIPPED = ROOT / "fixtures" / "tokenizer"
TEXTS = ["Hello, world! ls -la /tmp", "def f(x):\n    return {'a': [1, 2]}", "  ",
         "Ünïcode — “quotes” and emoji 🚀", '{"tool": "grep", "args": ["-rn"]}']


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return Vocab.load(SHIPPED)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))


def test_the_shipped_tokenizer_loads_from_its_folder_or_its_file(vocab: Vocab) -> None:
    assert DEFAULT_TOKENIZER.resolve() == SHIPPED.resolve()  # what the sim uses by default
    from_file = Vocab.load(SHIPPED / "tokenizer.json")
    assert from_file.words == vocab.words
    assert len(vocab.words) >= 1000
    assert len(set(vocab.words)) == len(vocab.words)
    # only word tokens: a space, then 2..14 lowercase letters
    assert all(w[0] == " " and w[1:].isalpha() and w[1:].islower() and 2 <= len(w) - 1 <= 14
               for w in vocab.words)
    assert " the" in vocab.words


def test_a_missing_tokenizer_names_the_file_and_the_setting(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        Vocab.load(tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "tokenizer.json") in msg
    assert "SPECAB_SIM_TOKENIZER" in msg and "fixtures/tokenizer" in msg
    with pytest.raises(FileNotFoundError, match=r"nothing\.json"):
        Vocab.load(tmp_path / "nothing.json")


def test_counts_agree_with_the_tokenizer(vocab: Vocab, tokenizer: Tokenizer) -> None:
    for text in TEXTS:
        expected = len(tokenizer.encode(text, add_special_tokens=False).ids)
        assert vocab.count(text) == expected, text
    assert vocab.count_many(TEXTS) == sum(vocab.count(t) for t in TEXTS)
    assert vocab.count("") == 0 and vocab.count_many([]) == 0
    assert vocab.count_many([""]) == 0
    assert vocab.count("hello") >= 1


@pytest.mark.parametrize("n", [1, 2, 17, 256])
def test_text_spelled_from_the_pool_retokenizes_to_as_many_tokens_as_words(
        vocab: Vocab, tokenizer: Tokenizer, n: int) -> None:
    """What the engine sends (`Engine.words_for`: a concatenation of pool words) is counted
    back by AIPerf to exactly the tokens the sim says it generated, in any order, and each
    word is the very token it was picked as."""
    rng = random.Random(n)
    for _ in range(20):
        words = [rng.choice(vocab.words) for _ in range(n)]
        text = "".join(words)
        assert vocab.count(text) == n, text
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert [tokenizer.decode([i]) for i in ids] == words
    # the same word repeated, and the whole pool in one text, still one token per word
    assert vocab.count(vocab.words[0] * n) == n
    assert vocab.count("".join(vocab.words)) == len(vocab.words)


def _tokenizer_with_words(tmp_path: Path, words: list[str]) -> Path:
    """A tiny word-level tokenizer.json whose vocabulary is `words` (plus [UNK])."""
    doc: dict[str, Any] = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "unk_token": "[UNK]",
                  "vocab": {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}},
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_tokenizer_without_enough_word_tokens_is_refused(tmp_path: Path) -> None:
    """A tokenizer whose tokens are not ' word' tokens cannot spell outputs: refused at
    load, not a sim that later sends text of the wrong length."""
    path = _tokenizer_with_words(tmp_path, ["alpha", "beta", "gamma"])
    with pytest.raises(ValueError, match="too few single-token words"):
        Vocab.load(path)
