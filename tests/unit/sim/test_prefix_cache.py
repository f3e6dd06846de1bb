"""The simulated lane's prefix cache (issue 41, item 4): vLLM's automatic prefix caching
on the simulated clock.  A prompt is cut into blocks of 16 tokens, each keyed by the hash of
every token up to its end; a request prefills only the tokens after its longest cached
prefix (at least one token: the whole-prompt hit stops one block short, as in vLLM); the
cache holds a bounded number of blocks, least recently used out first; its queries and
hits are vLLM's `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from campaign.sim.config import (
    KNOWN_VARIABLES,
    VLLM_LIKE_BLOCKS,
    ConfigError,
    SimConfig,
    knob_value_problem,
    load_config,
)
from campaign.sim.costmodel import step_ms
from campaign.sim.engine import Engine
from campaign.sim.prefixcache import BLOCK_SIZE, PrefixCache
from campaign.sim.telemetry import Telemetry
from tests.unit.sim.test_sim_engine import WORDS, FakeClock, drive

LABELS = {"model_name": "sim", "engine": "0"}


def make_engine(**knobs: Any) -> Engine:
    base: dict[str, Any] = {"seed": 3, "drift_sigma": 0.0, "step_noise": 0.0,
                            "prefix_cache_blocks": VLLM_LIKE_BLOCKS}
    base.update(knobs)
    cfg = SimConfig.model_validate(base)
    return Engine(cfg, Telemetry(cfg.model, cfg.depth), WORDS, clock=FakeClock())


def serve(engine: Engine, prompts: Sequence[Sequence[int]], max_tokens: int = 4) -> None:
    """Serve `prompts` (token ids) together; return when every one has finished."""
    asyncio.run(drive(engine, [{"ids": ids, "max_tokens": max_tokens} for ids in prompts]))


def serve_one_by_one(engine: Engine, prompts: Sequence[Sequence[int]]) -> None:
    for ids in prompts:
        serve(engine, [ids])


def sample(engine: Engine, name: str) -> float:
    return float(engine.telemetry.registry.get_sample_value(name, LABELS) or 0.0)


def ttft_sum(engine: Engine) -> float:
    return sample(engine, "vllm:time_to_first_token_seconds_sum")


def hits(engine: Engine) -> float:
    return sample(engine, "vllm:prefix_cache_hits_total")


def queries(engine: Engine) -> float:
    return sample(engine, "vllm:prefix_cache_queries_total")


def prefill_step_s(engine: Engine, computed_tokens: int) -> float:
    """The modelled time of one stream's prefill step (no drift, no noise)."""
    return step_ms(engine.params, [1], [engine.depth], computed_tokens) / 1000.0


FIRST = list(range(1000, 5000))                   # 4000 tokens
SECOND = FIRST[:3900] + list(range(9000, 9100))   # shares 3900 tokens, same length


def test_a_second_request_sharing_a_long_prefix_answers_sooner() -> None:
    fresh = make_engine()
    serve(fresh, [SECOND])
    warm = make_engine()
    serve(warm, [FIRST])
    before = ttft_sum(warm)
    serve(warm, [SECOND])
    cold_ttft, warm_ttft = ttft_sum(fresh), ttft_sum(warm) - before
    # 3900 shared tokens are 243 whole blocks (3888 tokens); the other 112 are prefilled
    assert hits(warm) == 3888
    assert cold_ttft == pytest.approx(prefill_step_s(fresh, 4000), rel=1e-12)
    assert warm_ttft == pytest.approx(prefill_step_s(warm, 4000 - 3888), rel=1e-12)
    assert cold_ttft - warm_ttft == pytest.approx(3888 * 0.05 / 1000, rel=1e-9)  # 194 ms
    # vllm:prompt_tokens_total and the iteration histogram still count whole prompts, as
    # vLLM's do (prompt_len): the cache shows in its own counters and in time only
    assert sample(warm, "vllm:prompt_tokens_total") == 8000
    assert sample(warm, "vllm:iteration_tokens_total_sum") == 8000 + 2 * 4


@pytest.mark.parametrize("length,hit", [(4000, 3984), (32, 16), (33, 32), (17, 16), (16, 0),
                                        (1, 0)])
def test_a_repeated_prompt_still_computes_its_last_block(length: int, hit: int) -> None:
    engine = make_engine()
    prompt = list(range(length))
    serve_one_by_one(engine, [prompt, prompt])
    assert hits(engine) == hit
    assert queries(engine) == 2 * length


def _reference_hits(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Per prompt: the longest whole-block prefix it shares with an earlier one, at most
    ⌊(n − 1) / 16⌋ blocks (an unbounded cache, by brute force)."""
    out = []
    for i, ids in enumerate(prompts):
        best = 0
        for earlier in prompts[:i]:
            same = 0
            for a, b in zip(ids, earlier, strict=False):
                if a != b:
                    break
                same += 1
            best = max(best, same)
        cap = (len(ids) - 1) // BLOCK_SIZE * BLOCK_SIZE
        out.append(min(best // BLOCK_SIZE * BLOCK_SIZE, cap))
    return out


def _agent_like_prompts(seed: int) -> list[list[int]]:
    """Sessions of growing turns over three shared system prompts, interleaved."""
    rng = random.Random(seed)
    systems = [[rng.randrange(50_000) for _ in range(rng.randrange(100, 700))] for _ in range(3)]
    histories = [list(systems[i % 3]) for i in range(6)]
    prompts = []
    for _ in range(4):
        for history in histories:
            history.extend(rng.randrange(50_000) for _ in range(rng.randrange(1, 90)))
            prompts.append(list(history))
    return prompts


def test_hits_and_queries_add_up_whether_requests_come_together_or_one_by_one() -> None:
    prompts = _agent_like_prompts(11)
    expected = _reference_hits(prompts)
    assert sum(expected) > 0.5 * sum(map(len, prompts))   # the workload does reuse
    together, one_by_one = make_engine(), make_engine()
    serve(together, prompts)
    serve_one_by_one(one_by_one, prompts)
    for engine in (together, one_by_one):
        assert hits(engine) == sum(expected)
        assert queries(engine) == sum(map(len, prompts))
        assert queries(engine) == sample(engine, "vllm:prompt_tokens_total")


def test_the_cache_is_keyed_by_tokens_only_and_replays_under_one_seed() -> None:
    prompts = _agent_like_prompts(5)
    runs = []
    for seed in (7, 7, 8):
        engine = make_engine(seed=seed)
        serve(engine, prompts, max_tokens=12)
        runs.append((hits(engine), queries(engine), ttft_sum(engine)))
    assert runs[0] == runs[1]
    assert runs[2][:2] == runs[0][:2]


def test_a_prefix_must_match_from_the_first_token() -> None:
    engine = make_engine()
    shifted = [0, *FIRST[:-1]]            # the same tokens, one place later: no block matches
    serve_one_by_one(engine, [FIRST, shifted])
    assert hits(engine) == 0


# --- the LRU bound ----------------------------------------------------------------------

def blocks(tag: int, count: int) -> list[int]:
    return [tag * 100_000 + i for i in range(count * BLOCK_SIZE)]


def test_the_lru_bound_evicts_the_least_recently_used_blocks() -> None:
    a, b, c = blocks(1, 8), blocks(2, 8), blocks(3, 8)
    cache = PrefixCache(16)
    assert [cache.admit(p) for p in (a, b)] == [0, 0]
    assert len(cache) == 16
    assert cache.admit(a) == 112           # a is now the more recent of the two
    assert cache.admit(c) == 0             # 8 blocks more: b's go
    assert len(cache) == 16 and cache.evicted == 8
    assert cache.admit(a) == 112
    assert cache.admit(b) == 0


def test_a_prompt_longer_than_the_cache_keeps_its_first_blocks() -> None:
    cache = PrefixCache(6)
    a = blocks(1, 8)
    cache.admit(a)
    assert len(cache) == 6
    assert cache.admit(a) == 6 * BLOCK_SIZE   # the tail went first; the prefix still serves


def test_the_knob_bounds_the_engine_cache() -> None:
    a, b = blocks(1, 8), blocks(2, 8)
    small, big = make_engine(prefix_cache_blocks=8), make_engine(prefix_cache_blocks=16)
    for engine in (small, big):
        serve_one_by_one(engine, [a, b, a])
    assert hits(small) == 0                 # b evicted a
    assert hits(big) == 112
    assert ttft_sum(small) - ttft_sum(big) == pytest.approx(112 * 0.05 / 1000, rel=1e-9)


def test_the_vllm_like_size_holds_a_few_hundred_prompts_of_a_few_thousand_tokens() -> None:
    assert SimConfig().prefix_cache_blocks == 0  # off unless asked for
    assert VLLM_LIKE_BLOCKS * BLOCK_SIZE >= 250 * 4096
    engine = make_engine()
    rng = random.Random(1)
    prompts = [[rng.randrange(50_000) for _ in range(4000)] for _ in range(250)]
    serve_one_by_one(engine, prompts)
    before = hits(engine)
    serve_one_by_one(engine, prompts[:3])
    assert hits(engine) - before == 3 * 3984


def test_knob_zero_turns_the_cache_off() -> None:
    engine = make_engine(prefix_cache_blocks=0)
    serve_one_by_one(engine, [FIRST, FIRST])
    assert hits(engine) == 0 and queries(engine) == 0   # vLLM counts no queries either
    assert ttft_sum(engine) == pytest.approx(2 * prefill_step_s(engine, 4000), rel=1e-12)


def test_a_request_without_token_ids_is_not_looked_up() -> None:
    engine = make_engine()

    async def go() -> None:
        task = asyncio.ensure_future(engine.run())
        for _ in range(2):
            req = engine.new_request(4000, 4, 0, True, "prose")
            engine.submit(req)
            while not (await asyncio.wait_for(req.queue.get(), timeout=5)).finish_reason:
                pass
        task.cancel()

    asyncio.run(go())
    assert hits(engine) == 0 and queries(engine) == 0
    assert ttft_sum(engine) == pytest.approx(2 * prefill_step_s(engine, 4000), rel=1e-12)


# --- the knob's values --------------------------------------------------------------------

DESCRIPTION = SimConfig.model_fields["prefix_cache_blocks"].description


def test_the_knob_is_a_known_variable_read_from_the_environment(tmp_path: Path) -> None:
    assert "SPECAB_SIM_PREFIX_CACHE_BLOCKS" in KNOWN_VARIABLES
    cfg = load_config(environ={"SPECAB_SIM_PREFIX_CACHE_BLOCKS": "128"},
                      overrides_file=tmp_path / "none")
    assert cfg.prefix_cache_blocks == 128


@pytest.mark.parametrize("raw,problem", [
    ("lots", f"not a whole number ({DESCRIPTION})"),
    ("1.5", f"not a whole number ({DESCRIPTION})"),
    ("-1", f"should be greater than or equal to 0 ({DESCRIPTION})"),
    ("true", f"not a whole number ({DESCRIPTION})"),
    ("0", ""),
    ("4096", ""),
])
def test_a_value_that_is_not_a_non_negative_integer_is_refused(raw: str, problem: str) -> None:
    assert knob_value_problem("SPECAB_SIM_PREFIX_CACHE_BLOCKS", raw) == problem


def test_a_bad_value_stops_the_boot_naming_the_variable_and_the_arm(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(environ={"SPECAB_SIM_PREFIX_CACHE_BLOCKS": "-5", "SPECAB_ARM": "cand"},
                    overrides_file=tmp_path / "none")
    assert str(exc.value) == (
        f"environment variable SPECAB_SIM_PREFIX_CACHE_BLOCKS='-5': should be greater than "
        f"or equal to 0 ({DESCRIPTION}); it is set in the campaign file's env of arm cand "
        "(arms.cand.env, or server.env for every arm): give it a valid value there "
        "(knobs and their values: docs/simulator.md)")
