"""How a closed-loop pass hands out its requests: a concurrency cap behind a fast ticker,
not AIPerf's pure concurrency mode.

AIPerf 0.13 runs `--concurrency N` alone as its request-rate loop with no interval: when
every slot is taken, the loop yields to its event loop and asks again at once, so its
timing-manager process spins a core for the whole pass while the requests are in flight
(py-spy on one: every sample of a 6 s window in `RequestRateStrategy.execute_phase` and its
slot checks). Measured here, one pass of the decision cell of examples/sim-sequential.yaml
(200 prose requests at 4 streams, 96 tokens, the 8x simulated lane) on this 2-core host
with the test suite beside it: 20.0 and 17.5 s of AIPerf CPU (user) per pass spinning,
8.3 and 8.5 s paced as below (docs/plan.md, "A closed-loop pass does not spin a core").
On a lab host it costs one core of many; on a 2-core CI host it was a quarter of the CPU.

Paced: the same `--concurrency N` cap plus `--request-rate R --arrival-pattern constant`.
The loop then sleeps to each tick (a Linux timerfd, ~50 µs precision) and sends when a slot
is free: each request leaves at most one tick (1/R) after its slot frees, 0.5 ms on average
at R = 1000 req/s. Nothing measured starts earlier: TTFT and request latency run from the
send. What can move is the pass's wall time by that wait per request, the same on both
arms (at 4 streams and ~450 ms a request, 0.1%; the two passes above: 834.6 and 826.7
tokens/s spinning, 834.1 and 845.2 paced). R grows with the concurrency (`PER_STREAM`
ticks a second per stream) so the ticker is never what limits the pass: a closed loop of
N streams sends N / latency requests a second, and R stays 20x that until a request takes
under 50 ms.

Timed replays (`replay.TIMED`: a schedule at its timestamps) are AIPerf's fixed-schedule
loop, which sleeps to each timestamp and needs none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TICK_RATE = 1000.0
"""The ticker's floor (req/s): at most 1 ms between a free slot and its next request."""
PER_STREAM = 20.0
"""Ticks a second per stream above the floor: 5,120 req/s at 256 streams."""


def rate(concurrency: Sequence[int]) -> float:
    """The ticker of a pass whose levels are `concurrency` (a sweep gets one rate: its
    largest level's)."""
    return max(TICK_RATE, PER_STREAM * max(concurrency, default=1))


def flags(concurrency: Sequence[int]) -> list[str]:
    """The command-line flags that pace a closed loop of `concurrency` (beside its
    `--concurrency`)."""
    return ["--request-rate", f"{rate(concurrency):g}", "--arrival-pattern", "constant"]


def phase(concurrency: int) -> dict[str, Any]:
    """A YAML config's phase fields for a paced closed loop at `concurrency`."""
    return {"type": "constant", "rate": rate((concurrency,)), "concurrency": concurrency}
