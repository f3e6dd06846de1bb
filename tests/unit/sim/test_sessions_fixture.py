"""The multi-turn agent-session fixture (campaign/fixtures/sessions, issue 41): built
offline by scripts/build-sessions (same bytes every run), in AIPerf 0.13's `multi_turn`
format, three classes of 24 sessions of 3–8 turns that the simulated lane classifies as
their agents' content; replayed with their history, a session's later turns hit the sim's
prefix cache more and its spec-decode counters split by turn."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from aiperf.dataset.loader.models import MultiTurn

from campaign.sim.acceptance import class_of_messages
from campaign.sim.config import VLLM_LIKE_BLOCKS, SimConfig
from campaign.sim.server import SimServer
from campaign.sim.vllmlog import Log
from campaign.sim.vocab import Vocab
from tests.runs import ROOT

SESSIONS = ROOT / "campaign" / "fixtures" / "sessions"
CLASSES = {"coding": "code", "shell": "shell", "tool_json": "tool_json"}
LABELS = {"model_name": "sim", "engine": "0"}


def _sessions(name: str) -> list[dict[str, Any]]:
    lines = (SESSIONS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_the_build_script_reproduces_the_shipped_files(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build-sessions"),
                           "--out", str(tmp_path)], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in CLASSES:
        assert (tmp_path / f"{name}.jsonl").read_bytes() == \
            (SESSIONS / f"{name}.jsonl").read_bytes(), name
    assert sorted(p.name for p in SESSIONS.glob("*.jsonl")) == sorted(
        f"{n}.jsonl" for n in CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_file_is_aiperf_multi_turn_with_24_sessions_of_3_to_8_turns(name: str) -> None:
    assert (SESSIONS / f"{name}.jsonl").stat().st_size < 300_000
    sessions = _sessions(name)
    assert len(sessions) == 24
    ids = [s["session_id"] for s in sessions]
    assert len(set(ids)) == 24 and all(i.startswith(f"{name}-") for i in ids)
    firsts = {s["turns"][1]["text"] for s in sessions}
    assert len(firsts) == 24                           # every session its own task
    for session in sessions:
        assert set(session) == {"type", "session_id", "turns"}
        assert session["type"] == "multi_turn"
        parsed = MultiTurn.model_validate(session)       # AIPerf's own schema
        system, *turns = parsed.turns
        assert system.role == "system" and system.text
        assert 3 <= len(turns) <= 8
        for turn in session["turns"][1:]:
            # the new user message only (AIPerf resends the history), nothing that would
            # override the campaign's output length or schedule
            assert set(turn) == {"text"} and turn["text"].strip()
        assert len({t.text for t in turns}) == len(turns)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_request_of_a_session_lands_in_its_class(name: str) -> None:
    for session in _sessions(name):
        texts = [session["turns"][0]["text"]]
        for turn in session["turns"][1:]:
            texts.append(turn["text"])
            assert class_of_messages(texts) == CLASSES[name], (session["session_id"],
                                                                len(texts))
            texts.append("ran it")  # the reply AIPerf appends


class Posted:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    async def json(self) -> dict[str, Any]:
        return self.body


def _sample(sim: SimServer, name: str, **labels: str) -> float:
    value = sim.telemetry.registry.get_sample_value(name, {**LABELS, **labels})
    return float(value or 0.0)


async def _replay(sim: SimServer, sessions: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Each session turn after turn, with its history: turn → (queries, hits) summed."""
    per_turn: dict[int, list[float]] = {}
    await sim.start_background()
    try:
        for session in sessions:
            messages = [{"role": "system", "content": session["turns"][0]["text"]}]
            for k, turn in enumerate(session["turns"][1:]):
                messages.append({"role": "user", "content": turn["text"]})
                q0 = _sample(sim, "vllm:prefix_cache_queries_total")
                h0 = _sample(sim, "vllm:prefix_cache_hits_total")
                resp = await sim.chat(cast(web.Request, Posted(
                    {"model": "sim", "messages": messages, "max_tokens": 24,
                     "ignore_eos": True})))
                assert isinstance(resp, web.Response) and resp.status == 200
                body = json.loads(cast(bytes, resp.body))
                messages.append({"role": "assistant",
                                 "content": body["choices"][0]["message"]["content"]})
                slot = per_turn.setdefault(k, [0.0, 0.0])
                slot[0] += _sample(sim, "vllm:prefix_cache_queries_total") - q0
                slot[1] += _sample(sim, "vllm:prefix_cache_hits_total") - h0
    finally:
        await sim.stop_background()
    return per_turn


def test_later_turns_of_a_session_hit_the_prefix_cache_more() -> None:
    cfg = SimConfig.model_validate({"seed": 1, "drift_sigma": 0.0, "step_noise": 0.0,
                                    "time_scale": 1000.0,
                                    "prefix_cache_blocks": VLLM_LIKE_BLOCKS})
    sim = SimServer(cfg, Vocab.load(ROOT / "fixtures" / "tokenizer"), Log(io.StringIO()))
    sessions = _sessions("coding")[:8]
    per_turn = asyncio.run(_replay(sim, sessions))
    rates = [hits / queries for _, (queries, hits) in sorted(per_turn.items())]
    # turn 0 finds only the shared system prompt; each later turn resends a longer
    # history, cached but for its newest message (and the reply: generated tokens are
    # not cached), so its hit rate grows
    assert rates[0] < 0.5 < rates[1]
    assert all(b > a for a, b in itertools.pairwise(rates[:4]))
    assert rates[-1] > 0.8
    # the spec-decode counters split by turn: turns 0..n−1 of the longest session
    longest = max(len(s["turns"]) - 1 for s in sessions)
    turns = {str(k) for k in range(longest)}
    drafted = {t for t in turns if _sample(
        sim, "specab_sim:spec_decode_num_draft_tokens_by_turn_total", turn=t) > 0}
    assert drafted == turns
