"""The simulated lane's prefix cache: vLLM's automatic prefix caching, reduced to what
changes a request's prefill time and the two counters vLLM exports.

A prompt's token ids are cut into blocks of `BLOCK_SIZE` (vLLM's default block size, 16);
only whole blocks are cached.  Block i is keyed by a hash of block i − 1's key and block
i's tokens (a chain), so a key names every token from the prompt's start to the block's
end and two prompts share a block only when they share the whole prefix up to it.

When the engine schedules a request (`admit`), as vLLM's scheduler does:

  * the request's hit is its longest run of cached blocks from the start, at most
    ⌊(n − 1) / 16⌋ blocks of an n-token prompt: even a prompt cached whole computes its
    last block, as vLLM recomputes the last token to get its logits and counts only whole
    blocks;
  * queries += n and hits += the hit's tokens (vLLM V1's `prefix_cache_queries` and
    `prefix_cache_hits`, in tokens);
  * the prompt's whole blocks are then cached, so a request scheduled after it (even in
    the same step) can hit them.

The cache holds at most `capacity` blocks, least recently used out first.  A request's
blocks are touched last block first, so its first blocks are the most recent: like vLLM,
which frees a request's blocks in reverse order, an old chain loses its tail before its
head and a long shared prefix outlives the turns that extended it.

Not modelled: blocks held by running requests (vLLM cannot evict them; here the bound
applies to all cached blocks alike), the KV memory that running streams use, generated
tokens (vLLM caches the blocks a reply fills too), chunked prefill and cache salts.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence

BLOCK_SIZE = 16
"""Tokens per block (vLLM's default `--block-size`)."""
RECENT_REQUESTS = 1000
"""The log line's hit rate is over this many latest requests (vLLM's window)."""
_ROOT = b"\0" * 16


def block_keys(ids: Sequence[int], block_size: int = BLOCK_SIZE) -> list[bytes]:
    """The chained keys of the prompt's whole blocks: key i hashes key i − 1 and block i."""
    keys: list[bytes] = []
    parent = _ROOT
    for start in range(0, len(ids) - block_size + 1, block_size):
        tokens = ",".join(map(str, ids[start:start + block_size])).encode()
        parent = hashlib.blake2b(parent + tokens, digest_size=16).digest()
        keys.append(parent)
    return keys


class PrefixCache:
    """A bounded LRU of block keys, with vLLM's query and hit counts (see module doc)."""

    def __init__(self, capacity: int, block_size: int = BLOCK_SIZE) -> None:
        if capacity < 1:
            raise ValueError(f"a prefix cache holds at least 1 block, got {capacity}")
        self.capacity = capacity
        self.block_size = block_size
        self.queries = 0
        self.hits = 0
        self.evicted = 0
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT_REQUESTS)

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, ids: Sequence[int]) -> int:
        """Schedule a prompt: its hit in tokens (counted), then cache its whole blocks."""
        keys = block_keys(ids, self.block_size)
        limit = max(0, len(ids) - 1) // self.block_size
        hit_blocks = 0
        for key in keys[:limit]:
            if key not in self._blocks:
                break
            hit_blocks += 1
        hit = hit_blocks * self.block_size
        self.queries += len(ids)
        self.hits += hit
        self._recent.append((len(ids), hit))
        for key in reversed(keys):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
            self.evicted += 1
        return hit

    def recent_hit_rate(self) -> float:
        """Hits ÷ queries over the latest `RECENT_REQUESTS` requests (0 before any)."""
        queried = sum(q for q, _ in self._recent)
        return sum(h for _, h in self._recent) / queried if queried else 0.0
