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
    """Step time (real-time ms) by batch size and tokens verified in the step.

    An entry is measured the first time it is needed (`repeats` timed dummy steps of that
    shape, like a profiling pass), so only the shapes a run meets are ever measured; the
    one-stream row is measured at boot so the log shows it.
    """

    def __init__(self, sample: Callable[[int, int], float], repeats: int = 3) -> None:
        self._sample = sample
        self._repeats = repeats
        self.values: dict[tuple[int, int], float] = {}

    def cost(self, streams: int, tokens: int) -> float:
        """ms of a step where `streams` streams verify `tokens` tokens in all."""
        key = (max(1, streams), max(1, tokens))
        if key not in self.values:
            self.values[key] = sum(self._sample(*key) for _ in range(self._repeats)) / (
                self._repeats)
        return self.values[key]

    def update(self, streams: int, tokens: int, observed_ms: float, weight: float = 0.1) -> None:
        """Live mode: fold one observed step into the entry of its shape."""
        if not math.isfinite(observed_ms):
            return
        current = self.cost(streams, tokens)
        self.values[(max(1, streams), max(1, tokens))] = current + weight * (
            observed_ms - current)

    def render(self, streams: int, tokens: Sequence[int]) -> str:
        """'1=21.50, 2=23.10, …' (ms by verified tokens at `streams` streams) for the log."""
        return ", ".join(f"{t}={self.cost(streams, t):.2f}" for t in tokens)


def choose_verify(
    cost: Callable[[int], float],
    accept: Sequence[Sequence[float]],
    fixed_tokens: int = 0,
    min_verify: int = 1,
) -> list[int]:
    """Verify counts per stream.

    `cost(tokens)` is the step time for this batch when it verifies `tokens` tokens in all;
    `accept[i][j]` is stream i's estimated conditional acceptance of draft j (its length is
    the number of drafts available); `fixed_tokens` are tokens in the step regardless of the
    choice (streams in prefill).  Every stream always runs its bonus token and at least
    `min_verify` drafts: a stream verified at depth 0 would never again show how good its
    drafts are, and an unlucky start would pin it there.
    """
    # Greedy order: always the draft with the largest survival probability next.  The cost
    # curve has kinks (the compute knee), so rather than stopping at the first increment that
    # does not pay, walk the whole order and keep the best prefix.
    survive = [1.0] * len(accept)
    depth = [0] * len(accept)
    order: list[int] = []
    gains: list[float] = []
    heap: list[tuple[float, int]] = []
    forced_tokens = 0
    forced_gain = 0.0
    for i, probs in enumerate(accept):
        while depth[i] < min(min_verify, len(probs)):
            survive[i] *= probs[depth[i]]
            forced_gain += survive[i]
            depth[i] += 1
            forced_tokens += 1
        if depth[i] < len(probs):
            heapq.heappush(heap, (-(survive[i] * probs[depth[i]]), i))
    while heap:
        neg, i = heapq.heappop(heap)
        order.append(i)
        gains.append(-neg)
        survive[i] = -neg
        depth[i] += 1
        if depth[i] < len(accept[i]):
            heapq.heappush(heap, (-(survive[i] * accept[i][depth[i]]), i))
    tokens = fixed_tokens + len(accept) + forced_tokens
    gain = float(len(accept)) + forced_gain
    best, best_n = gain / cost(tokens), 0
    for n, g in enumerate(gains, start=1):
        gain += g
        rate = gain / cost(tokens + n)
        if rate > best:
            best, best_n = rate, n
    verify = [min(min_verify, len(probs)) for probs in accept]
    for i in order[:best_n]:
        verify[i] += 1
    return verify
