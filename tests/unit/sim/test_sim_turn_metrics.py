"""Issue 41's sim metrics: spec-decode counters per session turn
(`specab_sim:spec_decode_num_*_by_turn_total{turn}`: turn = user messages − 1, capped at
"15"; completions are turn 0) and vLLM's `vllm:request_queue_time_seconds` histogram (the
time a request waited before it was first scheduled, vLLM's buckets)."""

from __future__ import annotations

import asyncio
import io
from typing import Any, cast

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from campaign.run.measure import metrics
from campaign.sim.config import SimConfig
from campaign.sim.engine import Engine
from campaign.sim.server import SimServer
from campaign.sim.telemetry import E2E_BUCKETS, Telemetry
from campaign.sim.vllmlog import Log
from campaign.sim.vocab import Vocab
from tests.runs import ROOT
from tests.unit.sim.test_sim_engine import WORDS, FakeClock, drive

LABELS = {"model_name": "sim", "engine": "0"}
BY_TURN = "specab_sim:spec_decode_num_{}_by_turn_total"
QUEUE = "vllm:request_queue_time_seconds"


class Posted:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    async def json(self) -> dict[str, Any]:
        return self.body


def _server() -> SimServer:
    cfg = SimConfig.model_validate({"seed": 1, "drift_sigma": 0.0, "step_noise": 0.0,
                                    "time_scale": 1000.0})
    return SimServer(cfg, Vocab.load(ROOT / "fixtures" / "tokenizer"), Log(io.StringIO()))


def _chat(users: int) -> dict[str, Any]:
    messages: list[dict[str, str]] = [{"role": "system", "content": "You run shell tools."}]
    for i in range(users):
        if i:
            messages.append({"role": "assistant", "content": f"ran step {i}"})
        messages.append({"role": "user", "content": f"$ ls -la /tmp/{i}\ntotal {i}"})
    return {"messages": messages}


async def _requests(sim: SimServer, bodies: list[tuple[str, dict[str, Any]]]) -> str:
    await sim.start_background()
    try:
        for path, body in bodies:
            handler = sim.chat if path == "chat" else sim.completions
            resp = await handler(cast(web.Request, Posted(
                {"model": "sim", "ignore_eos": True, "max_tokens": 40, **body})))
            assert isinstance(resp, web.Response) and resp.status == 200, resp
        out = await sim.metrics(cast(web.Request, None))
        return cast(bytes, out.body).decode()
    finally:
        await sim.stop_background()


def _by_turn(text: str, what: str) -> dict[str, float]:
    found: dict[str, float] = {}
    name = BY_TURN.format(what)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                assert {k: v for k, v in sample.labels.items() if k != "turn"} == LABELS
                found[sample.labels["turn"]] = sample.value
    return found


def test_spec_decode_counters_by_turn_add_up_to_vllms_counters() -> None:
    sim = _server()
    text = asyncio.run(_requests(sim, [("chat", _chat(1)), ("chat", _chat(3)),
                                       ("chat", _chat(3)), ("completions", {"prompt": "x y"}),
                                       ("chat", _chat(17)), ("chat", _chat(16))]))
    snap = metrics.parse(text)
    drafts = _by_turn(text, "drafts")
    tokens = _by_turn(text, "draft_tokens")
    accepted = _by_turn(text, "accepted_tokens")
    # turn = user messages − 1 (system and assistant messages do not count); a
    # completions request is turn 0; 16 and 17 user messages both land in "15"
    assert set(drafts) == set(tokens) == {"0", "2", "15"}
    assert set(accepted) <= {"0", "2", "15"}
    assert sum(drafts.values()) == snap.value(metrics.DRAFTS)
    assert sum(tokens.values()) == snap.value(metrics.DRAFT_TOKENS)
    assert sum(accepted.values()) == snap.value(metrics.ACCEPTED)
    # 40 tokens each at depth 5: every request drafts; turn 2 had two requests, as turn 0
    # and turn 15 did, so each turn label holds two requests' drafts
    assert all(n >= 2 * 6 for n in drafts.values())
    # depth 5: five drafts verified a step, fewer only next to max_tokens
    assert 4 * drafts["2"] < tokens["2"] <= 5 * drafts["2"]


def test_a_server_with_no_drafts_yet_still_declares_the_by_turn_families() -> None:
    sim = _server()
    text = asyncio.run(_requests(sim, []))
    families = {f.name: (f.type, len(f.samples))
                for f in text_string_to_metric_families(text)}
    for what in ("drafts", "draft_tokens", "accepted_tokens"):
        assert families[BY_TURN.format(what).removesuffix("_total")] == ("counter", 0)


def _queue_run(max_num_seqs: int) -> Telemetry:
    cfg = SimConfig.model_validate({"seed": 3, "drift_sigma": 0.0, "step_noise": 0.0,
                                    "max_num_seqs": max_num_seqs})
    telemetry = Telemetry(cfg.model, cfg.depth)
    engine = Engine(cfg, telemetry, WORDS, clock=FakeClock())
    asyncio.run(drive(engine, [{"prompt": 20, "max_tokens": 30, "text": f"p{i}"}
                               for i in range(6)]))
    return telemetry


def _queue_buckets(tel: Telemetry) -> dict[float, float]:
    text = tel.render().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == QUEUE + "_bucket":
                out[float(sample.labels["le"])] = sample.value
    return out


def test_queue_time_histogram_counts_the_wait_before_scheduling_in_vllms_buckets() -> None:
    roomy = _queue_buckets(_queue_run(max_num_seqs=8))
    # vLLM's request latency buckets, +Inf last
    assert sorted(roomy)[:-1] == list(E2E_BUCKETS)
    # nobody waited: all six scheduled at once, in the first bucket
    assert roomy[E2E_BUCKETS[0]] == 6
    tel = _queue_run(max_num_seqs=2)
    queued = tel.registry.get_sample_value(QUEUE + "_sum", LABELS) or 0.0
    count = tel.registry.get_sample_value(QUEUE + "_count", LABELS)
    e2e = tel.registry.get_sample_value("vllm:e2e_request_latency_seconds_sum", LABELS) or 0.0
    assert count == 6
    # four of six waited for a slot: a pair's whole service time, then two, then …
    # pairs of alike requests served one pair at a time (T each): waits 0, 0, T, T, 2T,
    # 2T (6T in all) against latencies T, T, 2T, 2T, 3T, 3T (12T): half
    assert 0.4 < queued / e2e < 0.55
