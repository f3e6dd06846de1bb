"""The batching engine on a fake clock: token accounting, EOS, effect, adaptive control."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from campaign.sim.acceptance import per_position_a
from campaign.sim.config import SimConfig, load_config
from campaign.sim.controller import CostTable, choose_verify
from campaign.sim.engine import Delivery, Engine
from campaign.sim.telemetry import Telemetry

WORDS = tuple(f" w{i}" for i in range(32))


class FakeClock:
    """Time moves only when the engine sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)
        await asyncio.sleep(0)


def make_engine(**knobs: Any) -> tuple[Engine, FakeClock]:
    base: dict[str, Any] = {"seed": 3, "drift_sigma": 0.0, "step_noise": 0.0}
    base.update(knobs)
    cfg = SimConfig.model_validate(base)
    clock = FakeClock()
    return Engine(cfg, Telemetry(cfg.model, cfg.depth), WORDS, clock=clock), clock


async def drive(engine: Engine, specs: list[dict[str, Any]]) -> list[list[Delivery]]:
    """Submit every request of `specs` at once (`prompt`: its length in tokens, or `ids`:
    its token ids; `text`: its prompt text) and collect each one's deliveries."""
    task = asyncio.ensure_future(engine.run())
    reqs = []
    for spec in specs:
        ids = spec.get("ids")
        req = engine.new_request(spec.get("prompt", 10 if ids is None else len(ids)),
                                 spec["max_tokens"], spec.get("min_tokens", 0),
                                 spec.get("ignore_eos", True), spec.get("klass", "prose"),
                                 prompt=spec.get("text", ""), prompt_ids=ids)
        engine.submit(req)
        reqs.append(req)
    out: list[list[Delivery]] = []
    for req in reqs:
        got: list[Delivery] = []
        while True:
            d = await asyncio.wait_for(req.queue.get(), timeout=5)
            got.append(d)
            if d.finish_reason:
                break
        out.append(got)
    task.cancel()
    return out


def counter(tel: Telemetry, name: str) -> float:
    value = tel.registry.get_sample_value(name, {"model_name": "sim", "engine": "0"})
    return float(value or 0.0)


def test_ignore_eos_yields_exactly_max_tokens_and_consistent_counters() -> None:
    engine, _ = make_engine()
    specs = [{"max_tokens": 40, "klass": k} for k in ("prose", "shell", "code", "synthetic")]
    outs = asyncio.run(drive(engine, specs))
    for got in outs:
        assert sum(d.tokens for d in got) == 40
        assert got[-1].finish_reason == "length"
        assert all(1 <= d.tokens <= engine.depth + 1 for d in got)
        assert sum(len(d.text.split()) for d in got) == 40
    tel = engine.telemetry
    gen = counter(tel, "vllm:generation_tokens_total")
    drafts = counter(tel, "vllm:spec_decode_num_drafts_total")
    accepted = counter(tel, "vllm:spec_decode_num_accepted_tokens_total")
    assert gen == 160
    assert counter(tel, "vllm:prompt_tokens_total") == 40
    # every token is a first token, a bonus token of a verify step, or an accepted draft
    assert 0 < gen - drafts - accepted <= 2 * len(specs)
    per_pos = sum(
        tel.registry.get_sample_value(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            {"model_name": "sim", "engine": "0", "position": str(i)}) or 0
        for i in range(engine.depth))
    assert per_pos == accepted


def test_eos_never_before_min_tokens() -> None:
    engine, _ = make_engine(eos_mean_tokens=2.0)
    specs = [{"max_tokens": 50, "min_tokens": 20, "ignore_eos": False} for _ in range(10)]
    outs = asyncio.run(drive(engine, specs))
    lengths = [sum(d.tokens for d in got) for got in outs]
    assert all(20 <= n <= 50 for n in lengths)
    assert any(got[-1].finish_reason == "stop" for got in outs)


def test_effect_knob_scales_time_exactly() -> None:
    times = []
    for effect in (1.0, 1.25):
        engine, clock = make_engine(effect=effect)
        asyncio.run(drive(engine, [{"max_tokens": 60} for _ in range(3)]))
        times.append(clock.t)
    assert times[0] / times[1] == pytest.approx(1.25, rel=1e-9)


def test_time_scale_divides_wall_time() -> None:
    times = []
    for scale in (1.0, 10.0):
        engine, clock = make_engine(time_scale=scale)
        asyncio.run(drive(engine, [{"max_tokens": 30}]))
        times.append(clock.t)
    assert times[0] / times[1] == pytest.approx(10.0, rel=1e-9)


def test_chained_steps_match_model_on_fake_clock() -> None:
    engine, _ = make_engine()
    asyncio.run(drive(engine, [{"max_tokens": 200} for _ in range(4)]))
    t = engine.timing
    assert t.steps > 10
    assert t.wall_s * 1000 == pytest.approx(t.model_ms, rel=1e-9)


def test_shell_accepts_far_more_than_prose() -> None:
    rates = {}
    for klass in ("shell", "prose"):
        engine, _ = make_engine()
        asyncio.run(drive(engine, [{"max_tokens": 400, "klass": klass} for _ in range(4)]))
        tel = engine.telemetry
        rates[klass] = (counter(tel, "vllm:spec_decode_num_accepted_tokens_total")
                        / counter(tel, "vllm:spec_decode_num_draft_tokens_total"))
    assert rates["shell"] == pytest.approx(0.91, abs=0.04)
    assert rates["prose"] == pytest.approx(0.30, abs=0.05)


def test_per_boot_drift_is_lognormal_and_seeded() -> None:
    a, _ = make_engine(drift_sigma=0.03, drift_seed=11)
    b, _ = make_engine(drift_sigma=0.03, drift_seed=11)
    c, _ = make_engine(drift=1.07)
    assert a.drift == b.drift != 1.0
    assert 0.85 < a.drift < 1.15
    assert c.drift == 1.07


def test_a_request_key_is_the_seed_the_prompt_and_its_occurrence() -> None:
    """The n-th sending of a prompt draws alike on every boot of one seed; a second
    sending on the same boot, another prompt or another seed draws afresh."""
    a, _ = make_engine(seed=5)
    b, _ = make_engine(seed=5)
    c, _ = make_engine(seed=6)
    first, again = a.request_key("hello"), a.request_key("hello")
    assert b.request_key("other") != first
    assert b.request_key("hello") == first and b.request_key("hello") == again != first
    assert c.request_key("hello") != first


def test_same_seed_replays_a_request_whatever_its_batch() -> None:
    """A prompt sent alone or among others emits the same tokens per step."""
    def steps(engine: Engine, prompts: list[str]) -> list[int]:
        async def go() -> list[int]:
            task = asyncio.ensure_future(engine.run())
            reqs = [engine.new_request(10, 60, 60, True, "prose", prompt=p) for p in prompts]
            for r in reqs:
                engine.submit(r)
            got: list[int] = []
            while True:
                d = await asyncio.wait_for(reqs[0].queue.get(), timeout=5)
                got.append(d.tokens)
                if d.finish_reason:
                    break
            task.cancel()
            return got
        return asyncio.run(go())

    alone = steps(make_engine(seed=5)[0], ["the prompt"])
    crowded = steps(make_engine(seed=5)[0], ["the prompt", "a", "b", "c"])
    other_seed = steps(make_engine(seed=6)[0], ["the prompt"])
    assert alone == crowded
    assert alone != other_seed


def test_controller_verifies_less_for_low_acceptance_and_big_batches() -> None:
    engine, _ = make_engine(verify="adaptive", depth=8)
    table = engine.table
    assert table is not None
    hi = per_position_a(0.91)
    lo = per_position_a(0.30)
    one_hi = choose_verify(lambda t: table.cost(1, t), [[hi] * 8])
    one_lo = choose_verify(lambda t: table.cost(1, t), [[lo] * 8])
    many_hi = choose_verify(lambda t: table.cost(32, t), [[hi] * 8] * 32)
    many_lo = choose_verify(lambda t: table.cost(32, t), [[lo] * 8] * 32)
    assert one_hi[0] > one_lo[0] >= 1
    assert sum(many_lo) / 32 < one_lo[0]
    assert sum(many_lo) < sum(many_hi)
    assert min(many_lo) >= 1  # never verify zero: the stream would stop being measured


def test_cost_table_measures_once_and_updates_live() -> None:
    calls: list[tuple[int, int]] = []

    def sample(streams: int, tokens: int) -> float:
        calls.append((streams, tokens))
        return 10.0 * streams + tokens

    table = CostTable(sample, repeats=2)
    assert table.cost(1, 2) == 12.0
    assert table.cost(1, 2) == 12.0
    assert calls == [(1, 2), (1, 2)]
    table.update(1, 2, 22.0, weight=0.5)
    assert table.cost(1, 2) == 17.0
    assert table.render(1, [1, 2]) == "1=11.00, 2=17.00"


def test_adaptive_beats_fixed_on_prose_and_keeps_speculating_on_shell() -> None:
    def throughput(klass: str, verify: str, streams: int) -> float:
        engine, clock = make_engine(verify=verify)
        asyncio.run(drive(engine, [{"max_tokens": 200, "klass": klass}] * streams))
        return streams * 200 / clock.t

    assert throughput("prose", "adaptive", 8) > throughput("prose", "fixed", 8)
    # on shell the controller keeps verifying deep: within a few % of fixed k=5
    assert throughput("shell", "adaptive", 8) > 0.9 * throughput("shell", "fixed", 8)


def test_adaptive_engine_serves_exact_lengths() -> None:
    engine, _ = make_engine(verify="adaptive", adaptive_live=True)
    outs = asyncio.run(drive(engine, [{"max_tokens": 33, "klass": "prose"} for _ in range(6)]))
    assert all(sum(d.tokens for d in got) == 33 for got in outs)
    assert engine.totals.verify_decisions > 0


def test_config_precedence(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("depth: 3\neffect: 1.5\nseed: 1\ncost:\n  base_ms: 20\n")
    over = tmp_path / "over.yaml"
    over.write_text("effect: 2.0\nacceptance:\n  shell: 0.5\n")
    env = {"SPECAB_SIM_SEED": "7", "SPECAB_SIM_COST_FETCH_MS_PER_EXPERT": "1.0"}
    cfg = load_config(config_file=cfg_file, cli={"seed": 9, "depth": None}, environ=env,
                      overrides_file=over)
    assert cfg.depth == 3                     # file
    assert cfg.effect == 2.0                  # overrides beat the config file
    assert cfg.seed == 9                      # CLI beats env
    assert cfg.cost.base_ms == 20 and cfg.cost.fetch_ms_per_expert == 1.0
    assert cfg.acceptance["shell"] == 0.5 and cfg.acceptance["prose"] == 0.30


def test_config_errors_name_their_source(tmp_path: Path) -> None:
    from campaign.sim.config import ConfigError
    with pytest.raises(ConfigError, match="SPECAB_SIM_DEPHT"):
        load_config(environ={"SPECAB_SIM_DEPHT": "3"}, overrides_file=tmp_path / "none")
    bad = tmp_path / "over.yaml"
    bad.write_text("effect: -1\n")
    with pytest.raises(ConfigError, match="overrides file"):
        load_config(environ={}, overrides_file=bad)
