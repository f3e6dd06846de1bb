"""The fidelity pass as the runner runs it, with the fake edges of `test_runner` (a fake
server, a scripted AIPerf, an httpx MockTransport that also answers the fidelity
prompts): a pass like any other — failed or timed-out requests make it invalid, retried,
then the pair redone (the control's) or left invalid (the candidate's own); the server's
health is checked after it; `pass_timeout_s` bounds the whole pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from campaign.campaignfile import Campaign
from campaign.results.store import load_run
from campaign.run import runner
from tests.unit.run.test_runner import (
    CAMPAIGN,
    FakeServer,
    Metrics,
    Script,
    _campaign,
    listener,
    make_rt,
    start,
    transport,
)

__all__ = ["listener"]  # the fixture, imported from test_runner

FIDELITY = CAMPAIGN.replace(
    "log_captures:",
    "  fidelity: {prompts_per_class: 5, output_tokens: 8}\nlog_captures:").replace(
    "min_completed_requests: 2}", "min_completed_requests: 2, pass_timeout_s: 25}")

Answer = Callable[[FakeServer, int, httpx.Request], httpx.Response]
"""(the server answering, its fidelity request's number from 1, the request) → answer."""


def _fidelity_campaign(tmp_path: Path) -> Campaign:
    campaign = _campaign(tmp_path, FIDELITY)
    (tmp_path / "shell.jsonl").write_text(
        "".join(json.dumps({"text": f"prompt {i}"}) + "\n" for i in range(5)))
    return campaign


def echo(request: httpx.Request) -> httpx.Response:
    said = json.loads(request.content)["messages"][0]["content"]
    return httpx.Response(200, json={"choices": [
        {"message": {"role": "assistant", "content": f" {said} a b c d e f"}}]})


def _run(tmp_path: Path, listener: int, answer: Answer, now: list[float] | None = None,
         sick: Callable[[FakeServer], bool] = lambda s: False
         ) -> tuple[runner.RunResult, list[dict[str, Any]]]:
    """The campaign run with `answer` serving the fidelity prompts (everything else as
    `test_runner`'s transport); `now`: a fake monotonic clock the answers move; `sick`:
    whether a server's /health answers 503 now."""
    campaign = _fidelity_campaign(tmp_path)
    script = Script()
    rt = make_rt(tmp_path, listener, script, [])
    metrics = Metrics()

    def client() -> httpx.Client:
        server = script.servers[-1]  # the slot's server is made before its client
        asked = [0]

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/v1/chat/completions" and b"prompt " in request.content:
                asked[0] += 1
                return answer(server, asked[0], request)
            if request.url.path == "/health" and sick(server):
                return httpx.Response(503)
            return transport(metrics).handler(request)  # type: ignore[attr-defined,no-any-return]

        return httpx.Client(transport=httpx.MockTransport(handler))

    rt.http = client
    if now is not None:
        rt.monotonic = lambda: now[0]
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    return result, load_run(store.run_dir).journal


def _figures(journal: list[dict[str, Any]]) -> dict[tuple[int, int, str], float]:
    return {(e["pair"], e["pair_attempt"], e["arm"]): e["summary"]["fidelity_token_match"]
            for e in journal if e["event"] == "pass" and e.get("workload") == "fidelity"}


def test_a_candidate_whose_server_dies_under_the_fidelity_pass_is_no_fidelity_figure(
        tmp_path: Path, listener: int) -> None:
    """The candidate of pair 1 dies after 2 of its 5 fidelity requests: no 0.4 match
    judged as a lossy change — the pair is invalid, the candidate's own failure (never
    redone), and the campaign is short."""
    def dies(server: FakeServer, n: int, request: httpx.Request) -> httpx.Response:
        if server.ctx.arm == "cand" and server.ctx.pair == 1 and n > 2:
            server.alive_flag = False
            raise httpx.ConnectError("connection refused", request=request)
        return echo(request)

    result, journal = _run(tmp_path, listener, dies)
    assert not result.complete and set(result.pairs_invalid) == {1}
    (invalid,) = [e for e in journal if e["event"] == "pair_invalid"]
    assert invalid["reason"] == "server exited with code 1 during fidelity"
    assert invalid["fault"] == "own"
    assert not [e for e in journal if e["event"] == "pair_redo"]
    assert (1, 1, "cand") not in _figures(journal)
    (kept,) = [e for e in journal if e["event"] == "fidelity" and e["arm"] == "cand"
               and e["pair"] == 1]
    assert not kept["valid"] and "3 of 5 fidelity prompts got no answer" in kept["problems"][0]


def test_a_control_that_hangs_under_the_fidelity_pass_is_retried_redone_never_a_reference(
        tmp_path: Path, listener: int) -> None:
    """Pair 1's control answers 2 of its fidelity requests, then hangs: each attempt of the
    pass (and its retry) ends within pass_timeout_s (25 s), not 25 s a request; the pass is
    invalid (the lane's), pair 1 is redone at the end of the night, and pair 2's control is
    not compared with the hung one."""
    now = [0.0]

    def hangs(server: FakeServer, n: int, request: httpx.Request) -> httpx.Response:
        if server.ctx.arm == "control" and server.ctx.pair == 1 and n > 2 \
                and ".redo" not in str(server.ctx.log_path):
            now[0] += request.extensions["timeout"]["read"]
            raise httpx.ReadTimeout("timed out", request=request)
        now[0] += 1.0
        return echo(request)

    result, journal = _run(tmp_path, listener, hangs, now)
    assert result.complete and result.pairs_valid == [1, 2]
    assert [e["pair"] for e in journal if e["event"] == "pair_redo"] == [1]
    hung = [e for e in journal if e["event"] == "fidelity" and e["pair"] == 1
            and e["pair_attempt"] == 1 and e["arm"] == "control"]
    assert {(e["attempt"], e["round"]) for e in hung} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert not any(e["valid"] for e in hung) and all(e["fault"] == "lane" for e in hung)
    (slot,) = [e for e in journal if e["event"] == "slot_done" and e["pair"] == 1
               and e["arm"] == "control"][:1]
    assert slot["fidelity_s"] <= 2 * 25.0  # two attempts, each within its 25 s
    against = {(e["pair"], e["pair_attempt"], e["arm"]): e["against"] for e in journal
               if e["event"] == "pass" and e.get("workload") == "fidelity"}
    assert (1, 1, "control") not in against and (1, 1, "cand") not in against
    assert against[(2, 1, "control")] == "reference: against itself on the same boot"
    assert against[(1, 2, "cand")] == "against the control of pair 1"
    assert set(_figures(journal).values()) == {1.0}


def test_a_server_unhealthy_after_the_fidelity_pass_makes_the_pair_invalid(
        tmp_path: Path, listener: int) -> None:
    """The candidate answers every fidelity prompt, but its engine is dead after them
    (/health 503): its health is checked after the pass, as after any other."""
    sick: set[int] = set()

    def answers_then_dies(server: FakeServer, n: int, request: httpx.Request
                          ) -> httpx.Response:
        if server.ctx.arm == "cand" and server.ctx.pair == 1 and n == 5:
            sick.add(id(server))
        return echo(request)

    result, journal = _run(tmp_path, listener, answers_then_dies, sick=lambda s: id(s) in sick)
    (invalid,) = [e for e in journal if e["event"] == "pair_invalid"]
    assert invalid["reason"] == "server unhealthy (/health → 503) during fidelity"
    assert invalid["fault"] == "own" and set(result.pairs_invalid) == {1}
