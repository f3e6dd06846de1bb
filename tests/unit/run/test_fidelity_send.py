"""The lossless check's requests (`run.fidelity.send`) and an arm's fidelity pass
(`run.fidelity.run_attempt`), in process against an OpenAI-compatible server answered by
`httpx.MockTransport`: what is asked (greedy, seeded, not streamed, the configured
tokens), what is kept for each prompt (its text, or why there is none), how the pass's time
bounds it, and what a pass leaves in the arm's folder and the journal (an invalid one: no
figure, and never a reference)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from campaign.campaignfile import Campaign, load_campaign
from campaign.campaignfile.schedule import Slot
from campaign.results import journal as jr
from campaign.results.store import RunStore
from campaign.run.measure import fidelity as fd
from campaign.run.measure.passes import PassCheck
from campaign.run.runtime import Runtime

CAMPAIGN = """
name: fid
hypothesis: h
lane: fake-lane
preregistration:
  pairs: 2
  seed: 7
  decision_cells: [{{workload: knee, level: c1}}]
  gates: {{pass_timeout_s: 42}}
server: {{backend: process, command: [never-run], port: 1}}
arms:
  control: {{}}
  cand: {{env: {{X: "1"}}}}
workloads:
  model: the-model
  tokenizer: tok
  endpoint_type: {endpoint}
  knee: {{concurrency: [1]}}
  agentfix:
    fixtures: {{shell: shell.jsonl, prose: prose.jsonl}}
  fidelity: {{prompts_per_class: 2, output_tokens: 16{seed}}}
"""

Handler = Callable[[httpx.Request], httpx.Response]


def _campaign(tmp_path: Path, endpoint: str = "completions", seed: str = "") -> Campaign:
    (tmp_path / "tok").mkdir(exist_ok=True)
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    (tmp_path / "shell.jsonl").write_text(
        '{"text": "ls -la"}\n\n{"text": "git status"}\n{"text": "never asked"}\n')
    (tmp_path / "prose.jsonl").write_text('{"text": "Write a haiku."}\n')
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN.format(endpoint=endpoint, seed=seed))
    return load_campaign(path)


def _echo(seen: list[httpx.Request]) -> Handler:
    """A greedy server: the same prompt always gets the same text."""
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        if request.url.path == "/v1/chat/completions":
            said = body["messages"][0]["content"]
            return httpx.Response(200, json={"choices": [
                {"message": {"role": "assistant", "content": f" echo {said}"}}]})
        return httpx.Response(200, json={"choices": [{"text": f" echo {body['prompt']}"}]})
    return handler


def _client(handler: Handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def test_prompts_are_the_first_of_each_class_file(tmp_path: Path) -> None:
    assert fd.prompts(_campaign(tmp_path)) == [
        ("shell-0", "ls -la"), ("shell-1", "git status"), ("prose-0", "Write a haiku.")]


def test_send_asks_greedily_one_prompt_at_a_time_and_keeps_each_text(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    seen: list[httpx.Request] = []
    items = fd.prompts(campaign)
    out = fd.send(_client(_echo(seen)), "http://box:8000/", campaign, items, 42.0,
                  clock=lambda: 0.0)
    assert out == [{"id": "shell-0", "text": " echo ls -la"},
                   {"id": "shell-1", "text": " echo git status"},
                   {"id": "prose-0", "text": " echo Write a haiku."}]
    assert [str(r.url) for r in seen] == ["http://box:8000/v1/completions"] * 3
    body = json.loads(seen[0].content)
    assert body == {"model": "the-model", "max_tokens": 16, "temperature": 0, "seed": 7,
                    "ignore_eos": True, "stream": False, "prompt": "ls -la"}
    assert seen[0].extensions["timeout"]["read"] == 42.0


def test_send_on_a_chat_endpoint_sends_messages_and_uses_the_fidelity_seed(
        tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, endpoint="chat", seed=", seed: 99")
    seen: list[httpx.Request] = []
    out = fd.send(_client(_echo(seen)), "http://box:8000", campaign, [("p", "hi")], 5.0)
    assert out == [{"id": "p", "text": " echo hi"}]
    assert seen[0].url.path == "/v1/chat/completions"
    body = json.loads(seen[0].content)
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "prompt" not in body
    assert body["seed"] == 99

    def empty(request: httpx.Request) -> httpx.Response:  # content null: an empty text
        return httpx.Response(200, json={"choices": [{"message": {"content": None}}]})

    assert fd.send(_client(empty), "http://box:8000", campaign, [("p", "hi")], 5.0) == [
        {"id": "p", "text": ""}]


def test_a_failed_request_is_kept_as_its_error_and_the_next_is_still_asked(
        tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    answers = iter([
        httpx.Response(500, text="engine dead"),
        httpx.Response(200, json={"choices": []}),              # no choice
        httpx.Response(200, json={"result": "?"}),              # not an OpenAI answer
        httpx.Response(200, text="<html>not json</html>"),
        httpx.Response(200, json={"choices": [{"text": " fine"}]}),
    ])

    def handler(request: httpx.Request) -> httpx.Response:
        return next(answers)

    items = [(f"p-{i}", "x") for i in range(5)]
    out = fd.send(_client(handler), "http://box:8000", campaign, items, 5.0)
    assert [o["id"] for o in out] == [i for i, _ in items]  # one answer per prompt, in order
    errors = [o.get("error", "") for o in out]
    assert errors[0].startswith("HTTPStatusError: Server error '500")
    assert errors[1].startswith("IndexError")
    assert errors[2].startswith("KeyError")
    assert errors[3].startswith("JSONDecodeError")
    assert out[4] == {"id": "p-4", "text": " fine"}
    assert not any("text" in o for o in out[:4])


def test_a_server_that_cannot_be_reached_is_an_error_per_prompt(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    out = fd.send(_client(refuse), "http://box:8000", campaign, [("a", "x"), ("b", "y")], 1.0)
    assert out == [{"id": "a", "error": "ConnectError: connection refused"},
                   {"id": "b", "error": "ConnectError: connection refused"}]


@dataclass
class FakeServer:
    base_url: str = "http://box:8000"


@dataclass
class FakeArm:
    """What the fidelity pass reads of a running arm (`fidelity.LiveSlot`)."""

    campaign: Campaign
    store: RunStore
    client: httpx.Client
    slot: Slot
    arm_dir: Path
    rt: Runtime
    server: Any = field(default_factory=FakeServer)  # a `Server`: only its base_url is read
    pair_attempt: int = 1
    started_at: str = "2026-12-01T00:00:00.000Z"


def _run(arm: FakeArm) -> PassCheck:
    """One attempt of the arm's fidelity pass on a server found healthy after it."""
    return fd.run_attempt(arm, 1, lambda: None)


def test_an_arms_pass_keeps_its_answers_and_journals_the_figures(tmp_path: Path) -> None:
    """Pair 1: the control answers twice (its own reference on its boot), the candidate
    once; each answer is in fidelity.jsonl and the journal, and the figures follow."""
    campaign = _campaign(tmp_path)
    store = RunStore.create(tmp_path / "results", "fid", b"name: fid\n", short_id="abcdef")
    said: list[tuple[str, dict[str, Any]]] = []
    rt = Runtime(progress=lambda event, **data: said.append((event, data)))
    seen: list[httpx.Request] = []
    client = _client(_echo(seen))

    def arm(name: str, index: int) -> FakeArm:
        folder = store.run_dir / "pairs" / "01" / name
        folder.mkdir(parents=True)
        return FakeArm(campaign, store, client, Slot(index=index, pair=1, arm=name,
                                                     position=index), folder, rt)

    control = arm("control", 0)
    _run(control)
    assert len(seen) == 2 * 3  # two rounds of the three prompts
    assert said[0] == ("slot_phase", {"pair": 1, "arm": "control", "phase": "fidelity"})
    assert [(e, d["name"], d["valid"]) for e, d in said[1:]] == [
        ("pass_done", "fidelity", True)]
    kept = [json.loads(line)
            for line in (control.arm_dir / "fidelity.jsonl").read_text().splitlines()]
    assert [(k["round"], k["id"]) for k in kept] == [
        (1, "shell-0"), (1, "shell-1"), (1, "prose-0"),
        (2, "shell-0"), (2, "shell-1"), (2, "prose-0")]
    assert kept[0]["text"] == " echo ls -la"
    events = store.read_journal()
    fid = jr.of_kind(events, "fidelity")
    assert [(e["arm"], e["round"]) for e in fid] == [("control", 1), ("control", 2)]
    assert fid[0]["outputs"] == [{k: v for k, v in o.items() if k != "round"}
                                 for o in kept[:3]]
    (ref,) = [e for e in jr.of_kind(events, "pass") if e.get("workload") == "fidelity"]
    assert ref["arm"] == "control" and ref["against"] == (
        "reference: against itself on the same boot")
    assert ref["summary"]["fidelity_identical_share"] == 1.0

    cand = arm("cand", 1)
    _run(cand)
    assert len(seen) == 2 * 3 + 3  # the candidate answers once
    assert len((cand.arm_dir / "fidelity.jsonl").read_text().splitlines()) == 3
    passes = [e for e in jr.of_kind(store.read_journal(), "pass")
              if e.get("workload") == "fidelity"]
    assert [(e["arm"], e["against"]) for e in passes] == [
        ("control", "reference: against itself on the same boot"),
        ("cand", "against the control of pair 1")]
    assert passes[1]["summary"]["fidelity_token_match"] == 1.0
    assert "fidelity_token_match" in (store.run_dir / "passes.csv").read_text()


def test_a_later_pairs_control_answers_once_against_the_earlier_control(
        tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    store = RunStore.create(tmp_path / "results", "fid", b"name: fid\n", short_id="abcdef")
    seen: list[httpx.Request] = []
    client = _client(_echo(seen))
    for pair in (1, 2):
        folder = store.run_dir / "pairs" / f"{pair:02d}" / "control"
        folder.mkdir(parents=True)
        _run(FakeArm(campaign, store, client, Slot(index=2 * (pair - 1), pair=pair,
                                                   arm="control", position=0),
                     folder, Runtime()))
    assert len(seen) == 2 * 3 + 3
    refs = [e["against"] for e in jr.of_kind(store.read_journal(), "pass")
            if e.get("workload") == "fidelity"]
    assert refs == ["reference: against itself on the same boot",
                    "reference: against the control of pair 1"]


def _failed_control(tmp_path: Path, status: int) -> tuple[RunStore, Path]:
    """Pair 1's control on a server that answers every fidelity request with `status`."""
    campaign = _campaign(tmp_path)
    store = RunStore.create(tmp_path / "results", "fid", b"name: fid\n", short_id="abcdef")
    folder = store.run_dir / "pairs" / "01" / "control"
    folder.mkdir(parents=True)

    def fail(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status)

    _run(FakeArm(campaign, store, _client(fail), Slot(index=0, pair=1, arm="control",
                                                      position=0), folder, Runtime()))
    return store, folder


def _fidelity_passes(store: RunStore) -> list[Mapping[str, Any]]:
    return [e for e in jr.of_kind(store.read_journal(), "pass")
            if e.get("workload") == "fidelity"]


@pytest.mark.parametrize("status", [404, 503])
def test_a_pass_against_a_failing_server_keeps_each_error_and_is_invalid(
        tmp_path: Path, status: int) -> None:
    store, folder = _failed_control(tmp_path, status)
    kept = [json.loads(line) for line in (folder / "fidelity.jsonl").read_text().splitlines()]
    assert len(kept) == 6 and all(str(status) in k["error"] for k in kept)
    assert not any("text" in k for k in kept)
    answers = jr.of_kind(store.read_journal(), "fidelity")
    assert [(e["round"], e["valid"]) for e in answers] == [(1, False), (2, False)]
    assert answers[0]["problems"][0].startswith(
        "6 of 6 fidelity prompts got no answer (first: shell-0, round 1: HTTPStatusError")
    assert answers[0]["fault"] == "lane"  # the control's: always the lane's


def test_a_control_that_answered_nothing_is_no_perfect_token_match(tmp_path: Path) -> None:
    """A control whose every request failed has nothing to agree with: it is no reference
    (no figure of 100% of tokens matched, for it or a candidate against it)."""
    store, _ = _failed_control(tmp_path, 503)
    folder = store.run_dir / "pairs" / "01" / "cand"
    folder.mkdir(parents=True)
    _run(FakeArm(store=store, campaign=_campaign(tmp_path), client=_client(_echo([])),
                 slot=Slot(index=1, pair=1, arm="cand", position=1), arm_dir=folder,
                 rt=Runtime()))
    assert not [p for p in _fidelity_passes(store)
                if p["summary"]["fidelity_token_match"] == 1.0]
    assert not _fidelity_passes(store)  # no valid control: nothing to compare with


def test_the_pass_time_bounds_the_whole_pass_not_each_request(tmp_path: Path) -> None:
    """A server that answers two prompts (5 s each) and then hangs: each request waits at
    most what is left of the pass's time, and a prompt reached after it is spent is not
    asked: 10 prompts at pass_timeout_s 25 take 25 s, not 25 s each."""
    campaign = _campaign(tmp_path)
    now = [0.0]
    waits: list[float] = []

    def slow_then_hung(request: httpx.Request) -> httpx.Response:
        wait = request.extensions["timeout"]["read"]
        waits.append(wait)
        if len(waits) <= 2:
            now[0] += 5.0
            return httpx.Response(200, json={"choices": [{"text": " ok"}]})
        now[0] += wait
        raise httpx.ReadTimeout("timed out", request=request)

    items = [(f"p-{i}", "x") for i in range(10)]
    out = fd.send(_client(slow_then_hung), "http://box:8000", campaign, items, 25.0,
                  clock=lambda: now[0])
    assert now[0] == 25.0 and waits == [25.0, 20.0, 15.0]
    assert [o.get("text") for o in out[:2]] == [" ok", " ok"]
    assert out[2]["error"].startswith("ReadTimeout")
    assert all(o["error"].startswith("not asked: the pass's time") for o in out[3:])


def test_an_invalid_control_is_never_a_later_pairs_reference(tmp_path: Path) -> None:
    """Pair 1's control times out on most requests: its pass is invalid, gives no figures,
    and pair 2's control (on a healthy server) is no more compared with it: it answers
    twice and is its own reference on its boot."""
    campaign = _campaign(tmp_path)
    store = RunStore.create(tmp_path / "results", "fid", b"name: fid\n", short_id="abcdef")
    seen: list[httpx.Request] = []

    def hung(request: httpx.Request) -> httpx.Response:
        if len(seen) >= 1:
            raise httpx.ReadTimeout("timed out", request=request)
        return _echo(seen)(request)

    for pair, client in ((1, _client(hung)), (2, _client(_echo(seen)))):
        folder = store.run_dir / "pairs" / f"{pair:02d}" / "control"
        folder.mkdir(parents=True)
        check = _run(FakeArm(campaign, store, client, Slot(index=2 * (pair - 1), pair=pair,
                                                           arm="control", position=0),
                             folder, Runtime()))
        assert check.valid == (pair == 2)
    refs = [(e["pair"], e["against"]) for e in _fidelity_passes(store)]
    assert refs == [(2, "reference: against itself on the same boot")]
    assert [(e["pair"], e["round"], e["valid"])
            for e in jr.of_kind(store.read_journal(), "fidelity")] == [
        (1, 1, False), (1, 2, False), (2, 1, True), (2, 2, True)]
