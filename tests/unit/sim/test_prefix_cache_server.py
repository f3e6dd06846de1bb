"""The prefix cache seen from outside: multi-turn chat through the sim server's handlers
(in process, no socket: the unit tier opens no server; the shipped tokenizer) exports
vLLM's V1 counters `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`
(tokens, labels `model_name` and `engine`), which spec-ab's own scraper
(`campaign.run.measure.metrics`) parses and differences without error."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any, cast

from aiohttp import web

from campaign.run.measure import metrics
from campaign.sim.config import VLLM_LIKE_BLOCKS, SimConfig
from campaign.sim.prefixcache import BLOCK_SIZE
from campaign.sim.server import SimServer
from campaign.sim.vllmlog import Log
from campaign.sim.vocab import Vocab
from tests.runs import ROOT

SYSTEM = ("You are a coding agent working in a git repository. Use the tools to read files, "
          "run the tests and edit code; answer with one tool call at a time. ") * 30
TURN1 = "The build fails in campaign/run/measure/metrics.py: find out why and fix it."
TURN2 = "The tests pass now; run ruff and mypy and report what they say."
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"


class Posted:
    """What a handler reads of a POST: its JSON body."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    async def json(self) -> dict[str, Any]:
        return self.body


def _server(**knobs: Any) -> SimServer:
    base: dict[str, Any] = {"seed": 1, "drift_sigma": 0.0, "step_noise": 0.0,
                            "time_scale": 1000.0, "prefix_cache_blocks": VLLM_LIKE_BLOCKS}
    base.update(knobs)
    cfg = SimConfig.model_validate(base)
    return SimServer(cfg, Vocab.load(ROOT / "fixtures" / "tokenizer"), Log(io.StringIO()))


async def _post(sim: SimServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    handler = sim.chat if path == "/v1/chat/completions" else sim.completions
    resp = await handler(cast(web.Request, Posted({"model": "sim", "ignore_eos": True,
                                                   **body})))
    assert isinstance(resp, web.Response) and resp.status == 200
    assert resp.body is not None
    return cast(dict[str, Any], json.loads(cast(bytes, resp.body)))


async def _scrape(sim: SimServer) -> metrics.Snapshot:
    resp = await sim.metrics(cast(web.Request, None))
    return metrics.parse(cast(bytes, resp.body).decode())


async def _session(sim: SimServer) -> tuple[list[metrics.Snapshot], list[int]]:
    """Two turns of one chat session, /metrics read before, between and after."""
    await sim.start_background()
    try:
        snaps: list[metrics.Snapshot] = []
        tokens: list[int] = []
        messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": TURN1}]
        for turn in (1, 2):
            snaps.append(await _scrape(sim))
            body = await _post(sim, "/v1/chat/completions",
                               {"messages": messages, "max_tokens": 24})
            tokens.append(body["usage"]["prompt_tokens"])
            if turn == 1:
                messages += [{"role": "assistant",
                              "content": body["choices"][0]["message"]["content"]},
                             {"role": "user", "content": TURN2}]
        snaps.append(await _scrape(sim))
    finally:
        await sim.stop_background()
    return snaps, tokens


def test_a_second_turn_hits_the_first_turns_prompt_in_vllm_metric_names() -> None:
    sim = _server()
    snaps, (first, second) = asyncio.run(_session(sim))
    assert first > 800 and second > first
    q1 = metrics.counter_delta(snaps[0], snaps[1], QUERIES)
    h1 = metrics.counter_delta(snaps[0], snaps[1], HITS)
    q2 = metrics.counter_delta(snaps[1], snaps[2], QUERIES)
    h2 = metrics.counter_delta(snaps[1], snaps[2], HITS)
    assert (q1, h1) == (first, 0)
    # turn 2 resends turn 1's prompt whole: every whole block of it is a hit
    assert (q2, h2) == (second, first // BLOCK_SIZE * BLOCK_SIZE)
    assert metrics.counter_delta(snaps[0], snaps[2], metrics.PROMPT_TOKENS) == first + second
    # the same labels as the sim's other counters
    text = snaps[2].text
    for name in (QUERIES, HITS, metrics.PROMPT_TOKENS):
        assert f'{name}{{engine="0",model_name="sim"}}' in text


def test_token_id_prompts_are_cached_by_their_ids() -> None:
    sim = _server()

    async def go() -> tuple[metrics.Snapshot, metrics.Snapshot]:
        await sim.start_background()
        try:
            before = await _scrape(sim)
            for _ in range(2):
                await _post(sim, "/v1/completions",
                            {"prompt": list(range(100, 300)), "max_tokens": 3})
            return before, await _scrape(sim)
        finally:
            await sim.stop_background()

    before, after = asyncio.run(go())
    assert metrics.counter_delta(before, after, QUERIES) == 400
    assert metrics.counter_delta(before, after, HITS) == 192      # ⌊199 / 16⌋ blocks


def test_the_engine_log_line_and_sim_stats_show_the_cache() -> None:
    stream = io.StringIO()
    sim = _server(log_interval=0.05)
    sim.log = Log(stream)

    async def go() -> dict[str, Any]:
        await sim.start_background()
        try:
            for _ in range(2):
                await _post(sim, "/v1/completions",
                            {"prompt": list(range(320)), "max_tokens": 3})
            await asyncio.sleep(0.2)
            resp = await sim.stats(cast(web.Request, None))
            return cast(dict[str, Any], json.loads(cast(bytes, resp.body)))
        finally:
            await sim.stop_background()

    stats = asyncio.run(go())
    lines = [line for line in stream.getvalue().splitlines() if "Engine 000:" in line]
    # 304 of 640 queried tokens hit: 47.5%
    assert lines and lines[-1].endswith("Prefix cache hit rate: 47.5%")
    assert stats["prefix_cache"] == {"capacity_blocks": 65536, "blocks": 20,
                                     "queries": 640, "hits": 304, "evicted_blocks": 0}


def test_the_cache_keys_are_the_tokens_the_usage_counts() -> None:
    vocab = Vocab.load(ROOT / "fixtures" / "tokenizer")
    texts = [SYSTEM, TURN1, "", "{\"tool\": \"grep\", \"args\": [\"-rn\", \"TODO\"]}"]
    ids = vocab.ids_many(texts)
    assert len(ids) == vocab.count_many(texts)
    assert ids == [t for text in texts for t in vocab.ids_many([text])]
    assert ids[:len(vocab.ids_many(texts[:2]))] == vocab.ids_many(texts[:2])
    assert vocab.ids_many([]) == []
