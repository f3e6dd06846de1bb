"""The lossless check: is the candidate still the same model?

With greedy decoding, speculative decoding must not change the output. After its measured
passes each arm answers a fixed set of prompts (the first `prompts_per_class` of every
agent-fixture class) at temperature 0 with a fixed seed, one request at a time, not
streamed (`send`). The texts are kept in `pairs/NN/<arm>/fidelity.jsonl` and in the
journal (`fidelity` event), so a resume or a rebuild keeps them.

Figures (`compare`, rows at workload `fidelity`, level `c1`): the share of requests whose
text equals the other's, the share of whitespace tokens equal at the same position (over
the longer text: a missing or extra token is a mismatch) and the mean position of the first
divergence. On a candidate's rows:
against the control of its pair. On the control's rows: the control against itself — the
previous pair's control (across boots), or, in the first pair, its own second answer on
the same boot — the reference a guardrail judges the candidate against, measured, not
assumed (engines are not bit-deterministic across batch shapes).

It is a pass like any other (`judge`): every prompt answered with a text, within
`gates.pass_timeout_s` for the whole pass (each request waits at most what is left of it),
on a server found healthy after it; else invalid, retried, then its pair redone or left
invalid (`campaign.run.slot.lifecycle`). Only a valid pass's answers are compared, and only
a valid control's are ever a reference.

The fidelity pass as a run measures it; as a campaign file registers it (its workload,
prompts and guardrail): `campaign.campaignfile.fidelity`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from campaign.campaignfile import CONTROL, Campaign
from campaign.campaignfile.builtin import builtin_path
from campaign.campaignfile.schedule import Slot
from campaign.results import journal as jr
from campaign.results.store import RunStore
from campaign.run.measure.passes import PassCheck, ServerFault
from campaign.servers import Server
from campaign.textfiles import atomic_write

WORKLOAD = "fidelity"
LEVEL = "c1"
SHIPPED_CLASSES = ("prose", "shell", "code", "tool_json", "structured")


def prompts(campaign: Campaign) -> list[tuple[str, str]]:
    """(id, text) of the fidelity prompts: the first N of each agent-fixture class file
    (the campaign's own, else the shipped ones)."""
    fid = campaign.workloads.fidelity
    assert fid is not None
    agentfix = campaign.workloads.agentfix
    files: dict[str, Path] = (
        {c: campaign.resolve(f) for c, f in agentfix.fixtures.items()} if agentfix
        else {c: p for c in SHIPPED_CLASSES
              if (p := builtin_path(f"builtin:agentfix/{c}")) is not None})
    out: list[tuple[str, str]] = []
    for cls, path in files.items():
        taken = 0
        for line in path.read_text(encoding="utf-8").splitlines():
            if taken >= fid.prompts_per_class:
                break
            if line.strip():
                text = str(json.loads(line).get("text", ""))
                out.append((f"{cls}-{taken}", text))
                taken += 1
    return out


def _request(campaign: Campaign, text: str) -> tuple[str, dict[str, Any]]:
    wl = campaign.workloads
    fid = wl.fidelity
    assert fid is not None
    seed = fid.seed if fid.seed is not None else campaign.preregistration.seed
    body: dict[str, Any] = {"model": wl.model, "max_tokens": fid.output_tokens,
                            "temperature": 0, "seed": seed, "ignore_eos": True,
                            "stream": False}
    if wl.endpoint_type == "chat":
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    return "/v1/completions", {**body, "prompt": text}


def _text_of(endpoint: str, data: Mapping[str, Any]) -> str:
    choice = data["choices"][0]
    if endpoint.endswith("chat/completions"):
        return str(choice["message"]["content"] or "")
    return str(choice["text"])


NOT_ASKED = "not asked: the pass's time (gates.pass_timeout_s) was spent"


def send(client: httpx.Client, base_url: str, campaign: Campaign,
         items: Sequence[tuple[str, str]], budget_s: float,
         clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """Each prompt's answer, in order: {id, text} or {id, error}. `budget_s` bounds the
    whole call, not each request: a request waits at most what is left of it, and a prompt
    reached once it is spent is not asked (its error says so)."""
    end = clock() + budget_s
    out: list[dict[str, Any]] = []
    for pid, text in items:
        left = end - clock()
        if left <= 0:
            out.append({"id": pid, "error": NOT_ASKED})
            continue
        endpoint, body = _request(campaign, text)
        try:
            resp = client.post(base_url.rstrip("/") + endpoint, json=body, timeout=left)
            resp.raise_for_status()
            out.append({"id": pid, "text": _text_of(endpoint, resp.json())})
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            out.append({"id": pid, "error": f"{type(exc).__name__}: {exc}"})
    return out


def compare(reference: Sequence[Mapping[str, Any]],
            other: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The figures of `other` against `reference`, request by request (matched by id; a
    failed or missing answer counts as a text with no token matched). Tokens are compared
    position by position over the longer of the two texts: a token missing or added is a
    mismatch. Nothing compared (0 of 0 tokens) is no agreement: a token match of 0."""
    theirs = {o["id"]: o for o in other}
    identical = 0
    matched = compared = 0
    firsts: list[int] = []
    for ref in reference:
        mine = theirs.get(ref["id"], {})
        if "text" not in ref or "text" not in mine:
            firsts.append(0)
            compared += max(len(str(ref.get("text", "")).split()),
                            len(str(mine.get("text", "")).split()))
            continue
        a, b = str(ref["text"]).split(), str(mine["text"]).split()
        same = [x == y for x, y in zip(a, b, strict=False)]
        matched += sum(same)
        compared += max(len(a), len(b))
        firsts.append(same.index(False) if False in same else len(same))
        identical += ref["text"] == mine["text"]
    requests = len(reference)
    return {
        "fidelity_token_match": matched / compared if compared else 0.0,
        "fidelity_identical_share": identical / requests if requests else 0.0,
        "fidelity_first_divergence": sum(firsts) / len(firsts) if firsts else 0.0,
        "fidelity_requests": float(requests),
    }


class _Edges(Protocol):
    """What the fidelity pass uses of the runner's edges (`campaign.run.runtime.Runtime`)."""

    @property
    def progress(self) -> Callable[..., None]: ...
    @property
    def monotonic(self) -> Callable[[], float]: ...


class LiveSlot(Protocol):
    """What the fidelity pass reads of a slot while its server runs
    (`campaign.run.slot.lifecycle.LiveSlot`)."""

    @property
    def campaign(self) -> Campaign: ...
    @property
    def store(self) -> RunStore: ...
    @property
    def rt(self) -> _Edges: ...
    @property
    def server(self) -> Server: ...
    @property
    def client(self) -> httpx.Client: ...
    @property
    def slot(self) -> Slot: ...
    @property
    def arm_dir(self) -> Path: ...
    @property
    def pair_attempt(self) -> int: ...
    @property
    def started_at(self) -> str: ...


def pass_name(attempt: int) -> str:
    """The pass's name in the journal and its files (`fidelity`, `fidelity.retry1`, …)."""
    return WORKLOAD if attempt == 1 else f"{WORKLOAD}.retry{attempt - 1}"


def run_attempt(live: LiveSlot, attempt: int,
                health: Callable[[], ServerFault | None]) -> PassCheck:
    """One attempt of the arm's fidelity pass (the control answers twice when no earlier
    pair's valid control did: its reference on the same boot), judged (`judge`, with
    what `health` finds wrong with the server after it), kept and journaled whatever it
    is, then the figures it completes when it is valid."""
    campaign, slot = live.campaign, live.slot
    items = prompts(campaign)
    timeout = campaign.preregistration.gates.pass_timeout_s
    rounds = 1
    if slot.arm == CONTROL and _earlier_control(live.store.read_journal(), slot.pair) is None:
        rounds = 2
    name = pass_name(attempt)
    live.rt.progress("slot_phase", pair=slot.pair, arm=slot.arm, phase=name)
    clock = live.rt.monotonic
    t0 = clock()
    answers: list[list[dict[str, Any]]] = []
    for _ in range(rounds):
        answers.append(send(live.client, live.server.base_url, campaign, items,
                            timeout - (clock() - t0), clock))
    wall_s = clock() - t0
    check = judge(answers, wall_s, timeout, health())
    fault = check.fault(slot.arm)
    lines: list[str] = []
    for rnd, outputs in enumerate(answers, start=1):
        lines += [json.dumps({"round": rnd, **o}) for o in outputs]
        live.store.journal("fidelity", slot=slot.index, pair=slot.pair,
                           pair_attempt=live.pair_attempt, arm=slot.arm, name=name,
                           attempt=attempt, round=rnd, started_at=live.started_at,
                           valid=check.valid, problems=check.problems,
                           **({"fault": fault} if fault else {}),
                           wall_s=round(wall_s, 3), outputs=outputs)
    atomic_write(live.arm_dir / f"{name}.jsonl", "\n".join(lines) + "\n")
    live.rt.progress("pass_done", pair=slot.pair, arm=slot.arm, name=name,
                     valid=check.valid, measured=True, summary={},
                     problems=check.all_problems())
    if check.valid:
        journal_figures(live.store, slot.pair, live.pair_attempt)
    return check


def judge(answers: Sequence[Sequence[Mapping[str, Any]]], wall_s: float, timeout_s: float,
          server_fault: ServerFault | None) -> PassCheck:
    """Whether a fidelity pass can be used, as any pass: every prompt answered with a text
    (a failed, timed-out or unasked request is no answer to compare: a crash is not a
    change of the model), within `pass_timeout_s`, on a server found healthy after it.
    Failed requests and the server's death are the server's own; a pass over its time with
    every answer in is the lane's."""
    problems: list[str] = []
    own: list[str] = []
    failed = [(o, rnd) for rnd, outputs in enumerate(answers, start=1)
              for o in outputs if "text" not in o]
    if failed:
        first, rnd = failed[0]
        total = sum(len(outputs) for outputs in answers)
        why = (f"{len(failed)} of {total} fidelity prompts got no answer (first: "
               f"{first['id']}, round {rnd}: {first.get('error', 'no answer')}): a pass "
               "without every answer compares nothing")
        problems.append(why)
        own.append(why)
    if wall_s > timeout_s:
        problems.append(f"the pass took {wall_s:.1f} s, over gates.pass_timeout_s "
                        f"{timeout_s:g} s")
    if server_fault is not None:
        problems.append(server_fault.reason)
        if not server_fault.scrape:
            own.append(server_fault.reason)
    return PassCheck(problems, {}, {}, tuple(own))


Key = tuple[int, int, str, int]
"""(pair, pair_attempt, arm, round)."""


def _outputs(events: jr.Events) -> dict[Key, Mapping[str, Any]]:
    """The answers of valid passes only (a journal older than the pass's validity: those
    with every prompt answered): an errored or timed-out answer is never compared, nor
    ever a reference."""
    return {(ev["pair"], ev["pair_attempt"], ev["arm"], ev["round"]): ev
            for ev in jr.of_kind(events, "fidelity")
            if ev.get("valid", all("text" in o for o in ev["outputs"]))}


def _earlier_control(events: jr.Events, pair: int) -> Mapping[str, Any] | None:
    """The latest valid first-round answers of a control of an earlier pair."""
    found = [ev for (p, _, a, r), ev in sorted(_outputs(events).items())
             if a == CONTROL and r == 1 and p < pair]
    return found[-1] if found else None


def journal_figures(store: RunStore, pair: int, pair_attempt: int) -> None:
    """Journal the figures this pair attempt's answers now allow and that are not yet
    journaled: each candidate against the control, the control against itself."""
    events = store.read_journal()
    outs = _outputs(events)
    done = {(ev["arm"]) for ev in jr.of_kind(events, "pass")
            if ev.get("workload") == WORKLOAD and ev.get("pair") == pair
            and ev.get("pair_attempt", 1) == pair_attempt}
    control = outs.get((pair, pair_attempt, CONTROL, 1))
    if control is None:
        return
    for (p, att, arm, rnd), ev in sorted(outs.items()):
        if (p, att) == (pair, pair_attempt) and rnd == 1 and arm != CONTROL \
                and arm not in done:
            _journal_rows(store, ev, compare(control["outputs"], ev["outputs"]),
                          f"against the control of pair {pair}")
    if CONTROL in done:
        return
    earlier = _earlier_control(events, pair)
    if earlier is not None:
        _journal_rows(store, control, compare(earlier["outputs"], control["outputs"]),
                      f"reference: against the control of pair {earlier['pair']}")
    elif (again := outs.get((pair, pair_attempt, CONTROL, 2))) is not None:
        _journal_rows(store, control, compare(control["outputs"], again["outputs"]),
                      "reference: against itself on the same boot")


def _journal_rows(store: RunStore, ev: Mapping[str, Any], figures: Mapping[str, float],
                  against: str) -> None:
    place = jr.PassPlace(store.run_id, ev["pair"], ev["pair_attempt"], ev["arm"], ev["slot"],
                         ev["started_at"], WORKLOAD, 1)
    rows = jr.pass_rows(place, [jr.LevelRows(LEVEL, figures)])
    store.journal("pass", slot=ev["slot"], pair=ev["pair"], pair_attempt=ev["pair_attempt"],
                  arm=ev["arm"], name=WORKLOAD, workload=WORKLOAD, attempt=1, valid=True,
                  problems=[], against=against, summary=dict(figures),
                  rows=[dataclasses.asdict(r) for r in rows])
    store.rebuild_passes_csv()
