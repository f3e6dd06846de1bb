"""The simulated lane's queue (issue 41, item 4): past `max_num_seqs` running streams a
request waits, `vllm:num_requests_waiting` shows it, and its time to first token includes
the wait, as on a real vLLM whose offered rate exceeds its capacity."""

from __future__ import annotations

import asyncio

from campaign.sim.config import SimConfig
from campaign.sim.engine import Engine
from campaign.sim.telemetry import Telemetry
from tests.unit.sim.test_sim_engine import WORDS, drive

LABELS = {"model_name": "sim", "engine": "0"}


class Recorder:
    """Stands in for a histogram child: keeps every observation in order."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, value: float) -> None:
        self.values.append(value)


class SamplingClock:
    """A fake clock (time moves only when the engine sleeps) that reads the waiting and
    running gauges each time a step starts."""

    def __init__(self) -> None:
        self.t = 0.0
        self.telemetry: Telemetry | None = None
        self.waiting: list[float] = []
        self.running: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline: float) -> None:
        assert self.telemetry is not None
        registry = self.telemetry.registry
        self.waiting.append(registry.get_sample_value("vllm:num_requests_waiting", LABELS)
                            or 0.0)
        self.running.append(registry.get_sample_value("vllm:num_requests_running", LABELS)
                            or 0.0)
        self.t = max(self.t, deadline)
        await asyncio.sleep(0)


def run(max_num_seqs: int, n: int = 6, tokens: int = 30) -> tuple[Engine, SamplingClock,
                                                                     Recorder, Recorder]:
    cfg = SimConfig.model_validate({"seed": 3, "drift_sigma": 0.0, "step_noise": 0.0,
                                    "max_num_seqs": max_num_seqs})
    clock = SamplingClock()
    telemetry = Telemetry(cfg.model, cfg.depth)
    clock.telemetry = telemetry
    engine = Engine(cfg, telemetry, WORDS, clock=clock)
    ttft, e2e = Recorder(), Recorder()
    telemetry.ttft = ttft  # type: ignore[assignment]
    telemetry.e2e = e2e  # type: ignore[assignment]

    asyncio.run(drive(engine, [{"prompt": 20, "max_tokens": tokens, "min_tokens": tokens,
                                "text": f"p{i}"} for i in range(n)]))
    return engine, clock, ttft, e2e


def test_requests_past_max_num_seqs_wait_and_the_gauge_shows_them() -> None:
    _, clock, _, _ = run(max_num_seqs=2)
    assert max(clock.waiting) == 4
    assert max(clock.running) == 2
    # the queue drains as streams finish, and never refills
    assert clock.waiting[0] == 4 and clock.waiting[-1] == 0
    assert all(b <= a for a, b in zip(clock.waiting, clock.waiting[1:], strict=False))
    _, roomy, _, _ = run(max_num_seqs=8)
    assert max(roomy.waiting) == 0 and max(roomy.running) == 6


def test_time_to_first_token_includes_the_wait() -> None:
    _, _, ttft, e2e = run(max_num_seqs=2)
    assert len(ttft.values) == 6
    first_step = ttft.values[0]
    assert ttft.values[1] == first_step
    # all six arrived at 0, so e2e is a finish time; a slot opens only when a stream
    # finishes: the k-th admitted (k ≥ 2) starts after the (k − 1)-th finish, at once,
    # and its first token comes one step later
    finished = sorted(e2e.values)
    for k in range(2, 6):
        waited = ttft.values[k] - finished[k - 2]
        assert 0 < waited < 3 * first_step
    _, _, roomy, _ = run(max_num_seqs=8)
    assert roomy.values == [roomy.values[0]] * 6
    assert max(ttft.values) > 2 * max(e2e.values[:2]) > 2 * max(roomy.values)
