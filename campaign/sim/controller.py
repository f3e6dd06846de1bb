"""Adaptive verification: choose how many drafts each stream verifies this step.

The drafter always proposes k tokens per stream; verifying them is what costs.  The
controller holds a *cost table* (step time in ms indexed by the number of tokens verified in
the step) and, for the running streams with their estimated acceptance, picks the verify
counts v_i ≤ k that maximise expected tokens per millisecond:

    Σ_i E_i(v_i) / table[Σ_i (v_i + 1)]

greedily: start at v_i = 0 and keep adding the draft with the largest expected gain
(its survival probability) while the ratio improves.  The table is measured at boot by
timing dummy steps (each sample with its step noise), or kept *live* (an exponentially
weighted average updated with every real step) when `adaptive_live` is set — the two
variants a campaign can A/B the way the published experiment did.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence


class CostTable:
    """Step time (real-time ms) by tokens verified in the step, 1..size."""

    def __init__(self, values: Sequence[float]) -> None:
        if not values:
            raise ValueError("a cost table needs at least one entry")
        self.values = [float(v) for v in values]

    @classmethod
    def measure(cls, sample: Callable[[int], float], size: int, repeats: int = 3) -> CostTable:
        """Build from `repeats` timed samples per token count (the boot-time measurement)."""
        return cls([sum(sample(t) for _ in range(repeats)) / repeats for t in range(1, size + 1)])

    @property
    def size(self) -> int:
        return len(self.values)

    def cost(self, tokens: int) -> float:
        """ms for a step of `tokens` verified tokens; linear extrapolation past the end."""
        if tokens <= 0:
            return self.values[0]
        if tokens <= self.size:
            return self.values[tokens - 1]
        if self.size == 1:
            return self.values[0] * tokens
        slope = (self.values[-1] - self.values[0]) / (self.size - 1)
        return self.values[-1] + slope * (tokens - self.size)

    def update(self, tokens: int, observed_ms: float, weight: float = 0.1) -> None:
        """Live mode: fold one observed step into the entry of its token count."""
        if 1 <= tokens <= self.size and math.isfinite(observed_ms):
            i = tokens - 1
            self.values[i] += weight * (observed_ms - self.values[i])

    def render(self, points: Sequence[int] | None = None) -> str:
        """'1=12.30, 2=13.10, …' for the log line the runner captures."""
        pts = points or range(1, self.size + 1)
        return ", ".join(f"{t}={self.cost(t):.2f}" for t in pts)


def choose_verify(
    table: CostTable,
    accept: Sequence[Sequence[float]],
    fixed_tokens: int = 0,
) -> list[int]:
    """Verify counts per stream.

    `accept[i][j]` is stream i's estimated conditional acceptance of draft j (its length is
    the number of drafts available); `fixed_tokens` are tokens in the step regardless of the
    choice (streams in prefill).  Every stream always runs its bonus token.
    """
    verify = [0] * len(accept)
    survive = [1.0] * len(accept)
    gain = float(len(accept))
    tokens = fixed_tokens + len(accept)
    heap: list[tuple[float, int]] = []
    for i, probs in enumerate(accept):
        if probs:
            heapq.heappush(heap, (-probs[0], i))
    best = gain / table.cost(tokens)
    while heap:
        neg, i = heapq.heappop(heap)
        candidate = (gain - neg) / table.cost(tokens + 1)
        if candidate <= best:
            break
        gain -= neg
        tokens += 1
        best = candidate
        survive[i] = -neg
        verify[i] += 1
        nxt = verify[i]
        if nxt < len(accept[i]):
            heapq.heappush(heap, (-(survive[i] * accept[i][nxt]), i))
    return verify
