"""The sim's output text: the target's for a seed and prompt whatever the draft/verify path
(greedy decoding is lossless), and `lossy` = p makes accepted drafts differ on purpose."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from campaign.sim.config import SimConfig, load_config
from campaign.sim.engine import Engine
from campaign.sim.telemetry import Telemetry
from tests.unit.sim.test_sim_engine import WORDS, FakeClock

PROMPTS = [f"prompt number {i}, please write some prose about item {i}." for i in range(6)]


def texts(tokens: int = 200, prompts: list[str] = PROMPTS, **knobs: Any) -> list[str]:
    base: dict[str, Any] = {"seed": 3, "drift_sigma": 0.0, "step_noise": 0.0}
    base.update(knobs)
    cfg = SimConfig.model_validate(base)
    engine = Engine(cfg, Telemetry(cfg.model, cfg.depth), WORDS, clock=FakeClock())

    async def go() -> list[str]:
        task = asyncio.ensure_future(engine.run())
        reqs = []
        for p in prompts:
            req = engine.new_request(10, tokens, 0, True, "prose", prompt=p)
            engine.submit(req)
            reqs.append(req)
        out = []
        for req in reqs:
            parts = []
            while True:
                d = await asyncio.wait_for(req.queue.get(), timeout=5)
                parts.append(d.text)
                if d.finish_reason:
                    break
            out.append("".join(parts))
        task.cancel()
        return out

    return asyncio.run(go())


def test_text_does_not_depend_on_the_draft_or_verify_path() -> None:
    control = texts()
    assert all(len(t.split()) == 200 for t in control)
    assert len(set(control)) == len(control)  # each prompt its own text
    for other in ({"depth": 8}, {"depth": 2}, {"depth": 0}, {"verify": "adaptive"},
                  {"effect": 1.3}, {"max_num_seqs": 1}):
        assert texts(**other) == control, other
    # the order and batch the prompts arrive in do not matter either
    assert texts(prompts=PROMPTS[::-1]) == control[::-1]
    # a prompt sent twice on one boot gives the same text (greedy decoding)
    twice = texts(prompts=[PROMPTS[0], PROMPTS[0]])
    assert twice == [control[0], control[0]]


def test_another_seed_gives_another_text() -> None:
    assert texts(seed=4) != texts()


def first_divergence(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a.split(), b.split(), strict=True)):
        if x != y:
            return i
    return None


def test_lossy_changes_an_accepted_draft_and_what_follows() -> None:
    control = texts()
    lossy = texts(lossy=0.05)
    assert all(len(t.split()) == 200 for t in lossy)
    firsts = [first_divergence(c, x) for c, x in zip(control, lossy, strict=True)]
    assert all(f is not None for f in firsts)
    for c, x, f in zip(control, lossy, firsts, strict=True):
        assert f is not None and f > 0  # the first token is the prefill's: the target's
        # after the wrong token the text is conditioned on it: most of the rest differs
        rest = list(zip(c.split()[f:], x.split()[f:], strict=True))
        assert sum(a != b for a, b in rest) > 0.8 * len(rest)
    assert texts(lossy=0.05) == lossy  # seeded
    assert texts(lossy=1e-9) == control


def test_lossy_rate_scales_with_p_and_only_accepted_drafts_flip() -> None:
    # depth 0: no drafts, nothing to flip, whatever p
    assert texts(depth=0, lossy=1.0) == texts(depth=0)
    low = [first_divergence(c, x) for c, x in
           zip(texts(tokens=400), texts(tokens=400, lossy=0.005), strict=True)]
    high = [first_divergence(c, x) for c, x in
            zip(texts(tokens=400), texts(tokens=400, lossy=0.1), strict=True)]
    mean = lambda v: sum(400 if f is None else f for f in v) / len(v)  # noqa: E731
    assert mean(high) < mean(low)


def test_lossy_knob_is_validated_and_read_from_the_environment() -> None:
    assert load_config(environ={"SPECAB_SIM_LOSSY": "0.02"}).lossy == 0.02
    assert "SPECAB_SIM_LOSSY" in __import__("campaign.sim.config", fromlist=["x"]).KNOWN_VARIABLES
    with pytest.raises(Exception, match="lossy"):
        load_config(environ={"SPECAB_SIM_LOSSY": "1.5"})
