"""The crossover where drafts stop paying (issue 41, item 4), on the simulated engine with
its default cost model and acceptance: requests arrive open-loop (Poisson, seeded) and a
deeper-draft candidate (depth 4) against a control of depth 2 (and 1) is faster at a low
offered rate, where spare compute pays for the drafts, and slower past saturation, where
verifying four drafts per stream per step costs more throughput than it gains and the
requests in the server pile up faster.

Deterministic: a fixed seed, no per-boot drift, vLLM-like per-step noise (σ 0.02) drawn
from the seed, so each run gives the same numbers (no false-alarm rate to state: the
assertions are on exact replays, not on a statistical decision). The margins asserted
(≥ 5%) are well inside the measured gaps (about 12% both ways, docs/simulator.md).
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from campaign.sim.config import SimConfig
from campaign.sim.engine import Engine
from campaign.sim.telemetry import Telemetry
from tests.unit.sim.test_sim_engine import WORDS

PROMPT_TOKENS, OUTPUT_TOKENS = 200, 64
"""A coding agent's turn: its class `code` (acceptance 0.62 at k = 5, the default)."""


class Recorder:
    """Stands in for a histogram child: keeps every observation."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)


class ArrivalClock:
    """A fake clock (time moves when the engine sleeps) that hands the engine each request
    at its scheduled arrival: those due by the end of a step join the queue then, with
    their own arrival time (so their wait counts), as on a server that receives them
    while it computes."""

    def __init__(self, engine_box: list[Engine], arrivals: list[float]) -> None:
        self.t = 0.0
        self.box = engine_box
        self.pending = deque(enumerate(arrivals))
        self.in_server: list[int] = []
        """Requests in the server (running + waiting) as each request arrives."""

    def now(self) -> float:
        return self.t

    def release(self) -> None:
        engine = self.box[0]
        while self.pending and self.pending[0][0] >= 0 and self.pending[0][1] <= self.t:
            i, at = self.pending.popleft()
            self.in_server.append(len(engine.running) + len(engine.waiting))
            req = engine.new_request(PROMPT_TOKENS, OUTPUT_TOKENS, OUTPUT_TOKENS, True,
                                     "code", prompt=f"turn {i}")
            req.arrival = at
            engine.submit(req)

    async def sleep_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)
        self.release()
        await asyncio.sleep(0)


@dataclass
class Load:
    ttft_ms: float
    latency_ms: float
    in_server_mid: int
    in_server_last: int
    served_per_s: float


def serve(depth: int, rate: float, n: int = 400, **knobs: Any) -> Load:
    """n Poisson arrivals at `rate` req/s (seeded, the same for every depth) served by the
    engine at `depth`: mean TTFT and latency, requests in the server when the middle and
    the last request arrive, and requests served per second over the run."""
    rng = random.Random(41)
    arrivals, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    cfg = SimConfig.model_validate({"seed": 3, "drift_sigma": 0.0, "depth": depth, **knobs})
    box: list[Engine] = []
    clock = ArrivalClock(box, arrivals)
    telemetry = Telemetry(cfg.model, cfg.depth)
    ttft, e2e = Recorder(), Recorder()
    telemetry.ttft = ttft  # type: ignore[assignment]
    telemetry.e2e = e2e  # type: ignore[assignment]
    engine = Engine(cfg, telemetry, WORDS, clock=clock)
    box.append(engine)

    async def go() -> None:
        task = asyncio.ensure_future(engine.run())
        while len(e2e.values) < n:
            await asyncio.sleep(0)
            if clock.pending and not engine.running and not engine.waiting:
                clock.t = max(clock.t, clock.pending[0][1])   # idle: skip to the next
                clock.release()
        task.cancel()

    asyncio.run(go())
    return Load(ttft_ms=1000 * statistics.mean(ttft.values),
                latency_ms=1000 * statistics.mean(e2e.values),
                in_server_mid=clock.in_server[n // 2], in_server_last=clock.in_server[-1],
                served_per_s=n / clock.t)


def test_deeper_drafts_win_at_a_low_rate_and_lose_past_saturation() -> None:
    low = {depth: serve(depth, rate=0.5) for depth in (1, 2, 4)}
    high = {depth: serve(depth, rate=7.0) for depth in (1, 2, 4)}
    # light load (about one request in the server): depth 4 finishes requests sooner
    assert low[4].in_server_last <= 2
    assert low[4].latency_ms < 0.95 * low[2].latency_ms < 0.95 * low[1].latency_ms
    # past saturation the requests in the server pile up for every depth …
    for depth in (1, 2, 4):
        assert high[depth].in_server_last > high[depth].in_server_mid + 30
        assert high[depth].served_per_s < 6.0
    # … and depth 4 serves fewer per second than the control, so its requests wait and
    # finish later
    assert high[4].served_per_s < high[2].served_per_s
    assert high[4].latency_ms > 1.05 * high[2].latency_ms
    assert high[4].ttft_ms > 1.3 * high[2].ttft_ms
    assert high[4].latency_ms > high[1].latency_ms
