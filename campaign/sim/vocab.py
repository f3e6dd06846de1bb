"""The shipped tokenizer, seen from the simulated lane: counting prompts, spelling outputs.

AIPerf counts a response's output tokens by tokenizing its text, so the text the sim
sends must re-tokenize to exactly the number of tokens the sim says it generated
(otherwise AIPerf reports an OSL mismatch and throughput comparisons are off).  We emit
only *word tokens*: a space followed by lowercase letters, whose decoded text encodes
back to that single token.  The byte-level pre-tokenizer splits text at each " word", so
any concatenation of such tokens encodes to the same token sequence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

_WORD_TOKEN = re.compile(r" [a-z]{2,14}")


class Vocab:
    """Tokenizer plus the pool of word tokens the sim may emit."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        pool: list[str] = []
        for token_id in sorted(tokenizer.get_vocab().values()):
            text = tokenizer.decode([token_id])
            if _WORD_TOKEN.fullmatch(text) and tokenizer.encode(
                text, add_special_tokens=False
            ).ids == [token_id]:
                pool.append(text)
        if len(pool) < 16:
            raise ValueError("tokenizer has too few single-token words to spell outputs")
        self.words: tuple[str, ...] = tuple(pool)

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Load from a folder holding tokenizer.json, or from the json file itself."""
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.exists():
            raise FileNotFoundError(
                f"tokenizer not found at {file}; set SPECAB_SIM_TOKENIZER to a folder with "
                "tokenizer.json (the repository ships fixtures/tokenizer)"
            )
        return cls(Tokenizer.from_file(str(file)))

    def count(self, text: str) -> int:
        """Number of tokens in `text` (no special tokens), as AIPerf would count it."""
        if not text:
            return 0
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> int:
        if not texts:
            return 0
        return sum(len(e.ids) for e in self._tok.encode_batch(list(texts),
                                                               add_special_tokens=False))

    def ids_many(self, texts: Sequence[str]) -> list[int]:
        """The token ids of `texts`, each encoded alone and then concatenated (no special
        tokens): `count_many` counts exactly these; the prefix cache hashes them."""
        if not texts:
            return []
        return [token for e in self._tok.encode_batch(list(texts), add_special_tokens=False)
                for token in e.ids]
