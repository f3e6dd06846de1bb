"""The simulated lane as a real process, driven over HTTP (integration)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer

from campaign.sim.config import OVERRIDES_PATH, read_yaml
from campaign.sim.testing import SimHandle, running_sim, sim_env
from tests.runs import ROOT

TOKENIZER = Tokenizer.from_file(str(ROOT / "fixtures" / "tokenizer" / "tokenizer.json"))
FAST = sim_env(time_scale=50, seed=5, log_interval=0.3, drift_sigma=0)
SHELL = "$ ls -la /var/log | grep nginx\nGive me the command that tails the newest log."
PROSE = "Write a warm letter to a friend about the autumn walk we took last year."


def chat(prompt: str, max_tokens: int = 32, stream: bool = False, **extra: object) -> dict:
    body: dict[str, object] = {"model": "sim", "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
    body.update(extra)
    return body


def sse(client: httpx.Client, url: str, body: dict) -> list[dict]:
    events = []
    with client.stream("POST", url, json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                events.append({"done": True})
                break
            events.append(json.loads(data))
    return events


def scrape(client: httpx.Client, base: str) -> dict[str, float]:
    text = client.get(f"{base}/metrics").text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def series(name: str, **labels: str) -> str:
    merged = {"engine": "0", "model_name": "sim", **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(merged.items())) + "}"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with running_sim(env=FAST) as handle:
        yield handle


@pytest.fixture()
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20) as c:
        yield c


def test_health_models_and_startup_log(sim: SimHandle, client: httpx.Client) -> None:
    assert client.get(f"{sim.base_url}/health").status_code == 200
    models = client.get(f"{sim.base_url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["sim"]
    log = sim.log()
    assert "Application startup complete." in log
    assert re.search(r"^INFO \d\d-\d\d \d\d:\d\d:\d\d \[\S+\] Starting vLLM API server", log,
                     re.M)


def test_streaming_chat_chunks_usage_and_exact_token_count(sim: SimHandle,
                                                           client: httpx.Client) -> None:
    events = sse(client, f"{sim.base_url}/v1/chat/completions",
                 chat(PROSE, 37, stream=True, stream_options={"include_usage": True}))
    assert events[-1] == {"done": True}
    chunks = [e for e in events[:-1] if e.get("choices")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage = events[-2]["usage"]
    assert events[-2]["choices"] == []
    assert usage["completion_tokens"] == 37
    assert usage["prompt_tokens"] == len(TOKENIZER.encode(PROSE, add_special_tokens=False).ids)
    # AIPerf re-tokenizes the text: it must be exactly the reported count.
    assert len(TOKENIZER.encode(text, add_special_tokens=False).ids) == 37


def test_non_streaming_chat_and_completions(sim: SimHandle, client: httpx.Client) -> None:
    body = chat(SHELL, 20)
    body["max_completion_tokens"] = 25
    resp = client.post(f"{sim.base_url}/v1/chat/completions", json=body).json()
    assert resp["object"] == "chat.completion"
    assert resp["usage"]["completion_tokens"] == 25
    content = resp["choices"][0]["message"]["content"]
    assert len(TOKENIZER.encode(content, add_special_tokens=False).ids) == 25
    comp = client.post(f"{sim.base_url}/v1/completions",
                       json={"model": "sim", "prompt": "def f(x):", "max_tokens": 9,
                             "ignore_eos": True}).json()
    assert comp["object"] == "text_completion"
    assert comp["usage"]["completion_tokens"] == 9
    events = sse(client, f"{sim.base_url}/v1/completions",
                 {"model": "sim", "prompt": "hello", "max_tokens": 7, "ignore_eos": True,
                  "stream": True})
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert len(TOKENIZER.encode(text, add_special_tokens=False).ids) == 7


def test_min_tokens_and_eos(sim: SimHandle, client: httpx.Client) -> None:
    for _ in range(5):
        resp = client.post(f"{sim.base_url}/v1/chat/completions",
                           json=chat(PROSE, 300, ignore_eos=False, min_tokens=12)).json()
        assert 12 <= resp["usage"]["completion_tokens"] <= 300


def test_openai_errors(sim: SimHandle, client: httpx.Client) -> None:
    url = f"{sim.base_url}/v1/chat/completions"
    r = client.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    r = client.post(url, json={**chat(PROSE), "model": "other"})
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = client.post(url, json=chat(PROSE, 5, min_tokens=9))
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"
    r = client.post(url, json={"model": "sim", "messages": []})
    assert r.status_code == 400


def test_metric_deltas_match_tokens_served(sim: SimHandle, client: httpx.Client) -> None:
    before = scrape(client, sim.base_url)
    served = 0
    prompts = 0
    for i in range(6):
        resp = client.post(f"{sim.base_url}/v1/chat/completions",
                           json=chat(SHELL if i % 2 else PROSE, 30 + i)).json()
        served += resp["usage"]["completion_tokens"]
        prompts += resp["usage"]["prompt_tokens"]
    after = scrape(client, sim.base_url)

    def delta(name: str, **labels: str) -> float:
        key = series(name, **labels)
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("vllm:generation_tokens_total") == served
    assert delta("vllm:prompt_tokens_total") == prompts
    drafts = delta("vllm:spec_decode_num_drafts_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert 0 < accepted <= delta("vllm:spec_decode_num_draft_tokens_total") <= 5 * drafts
    assert 0 < served - drafts - accepted <= 2 * 6
    per_pos = sum(delta("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
                  for i in range(5))
    assert per_pos == accepted
    assert delta("vllm:time_to_first_token_seconds_count") == 6
    assert delta("vllm:iteration_tokens_total_sum") == served + prompts
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        assert series(name) in after


def acceptance_of(client: httpx.Client, base: str, prompt: str, n: int = 6) -> float:
    before = scrape(client, base)
    for _ in range(n):
        client.post(f"{base}/v1/chat/completions", json=chat(prompt, 120))
    after = scrape(client, base)
    acc = series("vllm:spec_decode_num_accepted_tokens_total")
    drafted = series("vllm:spec_decode_num_draft_tokens_total")
    return (after[acc] - before[acc]) / (after[drafted] - before[drafted])


def test_acceptance_by_class_in_metric_deltas(sim: SimHandle, client: httpx.Client) -> None:
    shell = acceptance_of(client, sim.base_url, SHELL)
    prose = acceptance_of(client, sim.base_url, PROSE)
    assert shell == pytest.approx(0.91, abs=0.05)
    assert prose == pytest.approx(0.30, abs=0.08)


def test_spec_decoding_log_line_format(sim: SimHandle, client: httpx.Client) -> None:
    client.post(f"{sim.base_url}/v1/chat/completions", json=chat(SHELL, 200))
    pattern = re.compile(
        r"SpecDecoding metrics: Mean acceptance length: [\d.]+, Accepted throughput: [\d.]+ "
        r"tokens/s, Drafted throughput: [\d.]+ tokens/s, Accepted: \d+ tokens, Drafted: \d+ "
        r"tokens, Per-position acceptance rate: (?:[\d.]+, ){4}[\d.]+, Avg Draft acceptance "
        r"rate: [\d.]+%")
    deadline = time.monotonic() + 5
    while not pattern.search(sim.log()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pattern.search(sim.log())
    assert "Engine 000: Avg prompt throughput:" in sim.log()


def test_many_concurrent_streams(sim: SimHandle) -> None:
    import asyncio

    async def one(client: httpx.AsyncClient) -> int:
        async with client.stream("POST", f"{sim.base_url}/v1/chat/completions",
                                 json=chat(PROSE, 16, stream=True)) as resp:
            n = 0
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    n += 1
            return n

    async def main() -> list[int]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            return await asyncio.gather(*(one(client) for _ in range(64)))

    counts = asyncio.run(main())
    assert len(counts) == 64 and all(c >= 2 for c in counts)


# --- knobs ---------------------------------------------------------------------------------

def test_env_knobs_and_effect(client: httpx.Client) -> None:
    env = {**FAST, **sim_env(model="lane", depth=3, effect=1.25, step_noise=0)}
    with running_sim(env=env) as handle:
        assert client.get(f"{handle.base_url}/v1/models").json()["data"][0]["id"] == "lane"
        client.post(f"{handle.base_url}/v1/chat/completions",
                    json={**chat(SHELL, 60), "model": "lane"})
        stats = client.get(f"{handle.base_url}/sim/stats").json()
        text = client.get(f"{handle.base_url}/metrics").text
    assert stats["depth"] == 3 and stats["effect"] == 1.25
    # Every step's time is the cost model's divided by the effect (drift 1, no noise).
    assert stats["scheduled_ms"] == pytest.approx(stats["model_ms"] / 1.25, rel=1e-9)
    assert 'position="2"' in text and 'position="3"' not in text


def test_override_file_and_shipped_default(tmp_path: Path, client: httpx.Client) -> None:
    assert OVERRIDES_PATH.exists() and read_yaml(OVERRIDES_PATH) == {}
    over = tmp_path / "overrides.yaml"
    over.write_text("verify: adaptive\ndepth: 6\n")
    env = {**FAST, "SPECAB_SIM_OVERRIDES": str(over), **sim_env(adaptive_live=True)}
    with running_sim(env=env, config={"depth": 2}) as handle:
        client.post(f"{handle.base_url}/v1/chat/completions", json=chat(PROSE, 80))
        stats = client.get(f"{handle.base_url}/sim/stats").json()
        deadline = time.monotonic() + 5
        while "Adaptive verification: running:" not in handle.log() and (
                time.monotonic() < deadline):
            time.sleep(0.1)
        log = handle.log()
    assert stats["verify"] == "adaptive" and stats["depth"] == 6
    assert f"overrides file {over}: depth, verify" in log
    assert re.search(r"Adaptive verification cost table \(live, 1 streams, ms by verified "
                     r"tokens\): 1=[\d.]+, 2=[\d.]+", log)
    assert re.search(r"Adaptive verification: running: \d+ reqs, verified [\d.]+ of 6 drafts "
                     r"per stream, est. acceptance [\d.]+", log)


def test_boot_delay_opens_port_only_after_loading(client: httpx.Client) -> None:
    with running_sim(env={**FAST, **sim_env(boot_delay=1.5)}, wait_ready=False) as handle:
        refused = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if client.get(f"{handle.base_url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                refused += 1
            time.sleep(0.05)
        log = handle.log()
    assert refused > 0
    took = re.search(r"Model loading took 0.0 GiB and ([\d.]+) seconds", log)
    assert took and float(took.group(1)) >= 1.5
    assert log.index("Model loading took") < log.index("Application startup complete.")


def test_die_after_requests_exits_nonzero(client: httpx.Client) -> None:
    with running_sim(env={**FAST, **sim_env(die_after_requests=2)}) as handle:
        for _ in range(2):
            client.post(f"{handle.base_url}/v1/chat/completions", json=chat(PROSE, 8))
        code = handle.proc.wait(timeout=10)
        log = handle.log()
    assert code != 0
    assert "EngineCore encountered a fatal error" in log


def test_die_after_seconds_unhealthy_mode(client: httpx.Client) -> None:
    env = {**FAST, **sim_env(die_after_seconds=0.5, death_mode="unhealthy")}
    with running_sim(env=env) as handle:
        deadline = time.monotonic() + 10
        while (client.get(f"{handle.base_url}/health").status_code == 200
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert client.get(f"{handle.base_url}/health").status_code == 503
        r = client.post(f"{handle.base_url}/v1/chat/completions", json=chat(PROSE, 8))
        assert r.status_code == 500 and r.json()["error"]["type"] == "EngineDeadError"
        assert handle.proc.poll() is None


def test_hang_stops_answering(client: httpx.Client) -> None:
    with running_sim(env={**FAST, **sim_env(hang_after_requests=1)}) as handle:
        assert client.post(f"{handle.base_url}/v1/chat/completions",
                           json=chat(PROSE, 8)).status_code == 200
        time.sleep(0.2)
        with pytest.raises(httpx.TimeoutException):
            client.get(f"{handle.base_url}/health", timeout=1.0)
        with pytest.raises(httpx.TimeoutException):
            client.post(f"{handle.base_url}/v1/chat/completions", json=chat(PROSE, 8),
                        timeout=1.0)
        assert handle.proc.poll() is None


def test_error_rate_answers_500(client: httpx.Client) -> None:
    with running_sim(env={**FAST, **sim_env(error_rate=1.0)}) as handle:
        r = client.post(f"{handle.base_url}/v1/chat/completions", json=chat(PROSE, 8))
        assert r.status_code == 500
        assert r.json()["error"]["type"] == "InternalServerError"
        assert client.get(f"{handle.base_url}/health").status_code == 200


def test_bad_knob_exits_2() -> None:
    from campaign.sim.testing import SimBootError
    with pytest.raises(SimBootError, match="exited with 2"), \
            running_sim(env={"SPECAB_SIM_DEPHT": "3"}, boot_timeout=20):
        pass


def test_unhealthy_death_ends_streams_in_flight_with_an_error_event() -> None:
    import asyncio

    env = {**FAST, **sim_env(die_after_requests=1, death_mode="unhealthy")}

    async def main(base: str) -> tuple[list[str], int]:
        async with httpx.AsyncClient(timeout=20) as client:
            async def long_stream() -> list[str]:
                lines = []
                async with client.stream("POST", f"{base}/v1/chat/completions",
                                         json=chat(PROSE, 5000, stream=True)) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: "):
                            lines.append(line)
                return lines

            task = asyncio.create_task(long_stream())
            await asyncio.sleep(0.2)
            short = await client.post(f"{base}/v1/chat/completions", json=chat(PROSE, 4))
            return await task, short.status_code

    with running_sim(env=env) as handle:
        lines, short_status = asyncio.run(main(handle.base_url))
        health = httpx.get(f"{handle.base_url}/health", timeout=5).status_code
    assert short_status == 200
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][len("data: "):])
    assert error["error"]["type"] == "EngineDeadError"
    assert health == 503
