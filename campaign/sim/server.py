"""The simulated lane's HTTP face: vLLM's OpenAI-compatible API on aiohttp.

Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions
(streaming SSE and not), GET /metrics (Prometheus text), GET /sim/stats (the sim's own
step-timing figures, read by scripts/bench-sim).  Errors are OpenAI-style JSON:
`{"error": {"message", "type", "param", "code"}}` with the HTTP status in `code`.

Like vLLM, the port opens only once the "model" is loaded (after `boot_delay`), and the
last startup line is uvicorn's "Application startup complete.".  Failure injection
(die / hang / HTTP 500 at a rate) lives here, because it is about how the server looks
from outside; the engine only knows how to die or wedge.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from campaign.sim.acceptance import class_of_messages
from campaign.sim.config import SimConfig, overrides_path, read_yaml
from campaign.sim.engine import Delivery, Engine, EngineDead, Request
from campaign.sim.telemetry import CONTENT_TYPE, Telemetry
from campaign.sim.vllmlog import (
    Log,
    controller_message,
    cost_table_message,
    engine_stats_message,
    spec_decoding_message,
)
from campaign.sim.vocab import Vocab

DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
API_SOURCE = "api_server.py:1"
LOGGER_SOURCE = "loggers.py:123"
SPEC_SOURCE = "metrics.py:89"
CONTROL_SOURCE = "adaptive.py:42"


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


class SimServer:
    """State shared by the handlers: config, engine, telemetry, failure injection."""

    def __init__(self, config: SimConfig, vocab: Vocab, log: Log) -> None:
        self.config = config
        self.vocab = vocab
        self.log = log
        self.telemetry = Telemetry(config.model, config.depth)
        self.engine = Engine(config, self.telemetry, vocab.words, on_finished=self._finished)
        self.started = time.time()
        self.requests_seen = 0
        self.error_rng = random.Random(self.engine.seed + 2)
        self.hung = False
        self._tasks: list[asyncio.Task[None]] = []

    # --- failure injection --------------------------------------------------------------

    def _finished(self, count: int) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        if cfg.die_after_requests is not None and count >= cfg.die_after_requests:
            loop.call_soon(self.die, f"after {count} finished requests")
        if cfg.hang_after_requests is not None and count >= cfg.hang_after_requests:
            loop.call_soon(self.hang, f"after {count} finished requests")

    def die(self, why: str) -> None:
        if self.engine.dead:
            return
        self.log.error("core.py:700", f"EngineCore encountered a fatal error (simulated, {why}).")
        if self.config.death_mode == "exit":
            self.log.error("core.py:701", "Engine core died unexpectedly; exiting with status 1.")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        self.engine.fail_all(DEAD_MESSAGE)
        self.log.error(API_SOURCE, "AsyncLLM output_handler failed. EngineDeadError: "
                       "engine is dead; /health now answers 503.")

    def hang(self, why: str) -> None:
        if self.hung:
            return
        self.log.warning("shm_broadcast.py:466",
                         f"No available shared memory broadcast block found in 60 seconds "
                         f"(simulated hang, {why}).")
        self.hung = True
        self.engine.hang()

    async def _after(self, seconds: float, action: Callable[[str], None], why: str) -> None:
        await asyncio.sleep(seconds)
        action(why)

    # --- background tasks ---------------------------------------------------------------

    async def _stats_logger(self) -> None:
        """vLLM's periodic log lines: engine throughput, spec-decode metrics, controller."""
        eng = self.engine
        last_t = time.monotonic()
        last = _snapshot(eng)
        while True:
            await asyncio.sleep(self.config.log_interval)
            if self.hung:
                continue
            now = time.monotonic()
            cur = _snapshot(eng)
            dt = max(1e-9, now - last_t)
            d = {k: cur[k] - last[k] for k in ("prompt", "gen", "drafts", "draft_tokens",
                                             "accepted", "vsum", "vdec")}
            if d["gen"] or d["prompt"] or eng.running or eng.waiting:
                cache = eng.prefix_cache
                self.log.info(LOGGER_SOURCE, engine_stats_message(
                    d["prompt"] / dt, d["gen"] / dt, len(eng.running), len(eng.waiting),
                    cache.recent_hit_rate() if cache is not None else 0.0))
            if d["drafts"]:
                per_pos = [c - p for c, p in zip(cur["per_pos"], last["per_pos"], strict=True)]
                self.log.info(SPEC_SOURCE, spec_decoding_message(
                    d["drafts"], d["draft_tokens"], d["accepted"], per_pos, dt))
            if eng.table is not None and d["vdec"]:
                est = d["accepted"] / d["draft_tokens"] if d["draft_tokens"] else 0.0
                self.log.info(CONTROL_SOURCE, controller_message(
                    len(eng.running), d["vsum"] / d["vdec"], eng.depth, est))
                if self.config.adaptive_live:
                    streams = max(1, len(eng.running))
                    self.log.info(CONTROL_SOURCE, cost_table_message(
                        "live", streams, eng.table.render(
                            streams, range(streams, streams * (eng.depth + 1) + 1, streams))))
            last, last_t = cur, now

    async def start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.engine.run()))
        self._tasks.append(loop.create_task(self._stats_logger()))
        cfg = self.config
        if cfg.die_after_seconds is not None:
            self._tasks.append(loop.create_task(
                self._after(cfg.die_after_seconds, self.die,
                            f"after {cfg.die_after_seconds:g} s")))
        if cfg.hang_after_seconds is not None:
            self._tasks.append(loop.create_task(
                self._after(cfg.hang_after_seconds, self.hang,
                            f"after {cfg.hang_after_seconds:g} s")))
        if cfg.die_after_requests == 0:
            loop.call_soon(self.die, "at start (die_after_requests = 0)")
        if cfg.hang_after_requests == 0:
            loop.call_soon(self.hang, "at start (hang_after_requests = 0)")

    async def stop_background(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    # --- handlers -----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self.engine.dead:
            return web.Response(status=503)
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.config.model, "object": "model", "created": int(self.started),
            "owned_by": "vllm", "root": self.config.model, "parent": None,
            "max_model_len": 131072,
        }]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.telemetry.render(),
                            headers={"Content-Type": CONTENT_TYPE})

    async def stats(self, request: web.Request) -> web.Response:
        eng = self.engine
        t = eng.timing
        cache = eng.prefix_cache
        return web.json_response({
            "steps": t.steps, "wall_s": t.wall_s, "model_ms": t.model_ms,
            "scheduled_ms": t.scheduled_ms, "tokens": t.tokens, "streams": t.streams,
            "time_scale": self.config.time_scale, "drift": eng.drift,
            "effect": self.config.effect, "seed": eng.seed, "depth": eng.depth,
            "verify": self.config.verify, "running": len(eng.running),
            "waiting": len(eng.waiting), "finished": eng.totals.finished,
            "cost_table_1_stream": [eng.table.cost(1, t) for t in range(1, eng.depth + 2)]
            if eng.table is not None else None,
            "prefix_cache": {"capacity_blocks": cache.capacity, "blocks": len(cache),
                             "queries": cache.queries, "hits": cache.hits,
                             "evicted_blocks": cache.evicted}
            if cache is not None else None,
        })

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        self.requests_seen += 1
        try:
            body = await _json_body(request)
            if self.config.error_rate > 0 and self.error_rng.random() < self.config.error_rate:
                raise ApiError(500, "Simulated internal server error (error_rate).",
                               "InternalServerError")
            if self.engine.dead:
                raise ApiError(500, DEAD_MESSAGE, "EngineDeadError")
            params = self._parse(body, chat)
            req = self.engine.new_request(params.prompt_tokens, params.max_tokens,
                                          params.min_tokens, params.ignore_eos, params.klass,
                                          prompt=params.prompt, prompt_ids=params.prompt_ids,
                                          turn=params.turn)
            self.engine.submit(req)
        except ApiError as err:
            return web.json_response(err.body(), status=err.status)
        except EngineDead:
            dead = ApiError(500, DEAD_MESSAGE, "EngineDeadError")
            return web.json_response(dead.body(), status=500)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            if params.stream:
                return await self._stream(request, req, params, ident, chat)
            return await self._whole(req, params, ident, chat)
        finally:
            self.engine.cancel(req)

    def _parse(self, body: dict[str, Any], chat: bool) -> Params:
        model = body.get("model", self.config.model)
        if model != self.config.model:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise bad_request("'messages' must be a non-empty list", "messages")
            texts = [_message_text(m) for m in messages]
            prompt_ids = self.vocab.ids_many(texts)
            turn = max(0, sum(1 for m in messages if m.get("role") == "user") - 1)
        else:
            prompt = body.get("prompt")
            texts, prompt_ids = _prompt_texts(prompt, self.vocab)
            turn = 0
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is None:
            max_tokens = self.config.default_max_tokens
        min_tokens = body.get("min_tokens", 0) or 0
        n = body.get("n", 1)
        for name, value, low in (("max_tokens", max_tokens, 1), ("min_tokens", min_tokens, 0),
                                 ("n", n, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise bad_request(f"'{name}' must be an integer ≥ {low}, got {value!r}", name)
        if n != 1:
            raise bad_request("the simulated lane serves n = 1 only", "n")
        if min_tokens > max_tokens:
            raise bad_request(f"min_tokens ({min_tokens}) must be ≤ max_tokens ({max_tokens})",
                              "min_tokens")
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise bad_request("'ignore_eos' must be a boolean", "ignore_eos")
        stream = bool(body.get("stream", False))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object", "stream_options")
        klass = self.config.force_class or class_of_messages(texts)
        return Params(prompt_tokens=len(prompt_ids), max_tokens=max_tokens,
                      min_tokens=min_tokens, ignore_eos=ignore_eos, stream=stream,
                      include_usage=bool(options.get("include_usage", False)),
                      klass=klass, model=self.config.model, prompt="\n".join(texts),
                      prompt_ids=prompt_ids, turn=turn)

    async def _whole(self, req: Request, params: Params, ident: str,
                     chat: bool) -> web.Response:
        parts: list[str] = []
        tokens = 0
        reason: str | None = None
        async for delivery in _deliveries(req):
            parts.append(delivery.text)
            tokens += delivery.tokens
            reason = delivery.finish_reason or reason
        text = "".join(parts)
        usage = _usage(params.prompt_tokens, tokens)
        created = int(time.time())
        if chat:
            choice: dict[str, Any] = {
                "index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None, "finish_reason": reason, "stop_reason": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                      "stop_reason": None}
            obj = "text_completion"
        return web.json_response({"id": ident, "object": obj, "created": created,
                                  "model": params.model, "choices": [choice], "usage": usage})

    async def _stream(self, request: web.Request, req: Request, params: Params, ident: str,
                      chat: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str, reason: str | None, first: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {
                    "content": text}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                          "finish_reason": reason}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            if reason is not None:
                choice["stop_reason"] = None
            return {"id": ident, "object": obj, "created": created, "model": params.model,
                    "choices": [choice]}

        tokens = 0
        try:
            if chat:
                await _send(resp, chunk("", None, first=True))
            async for delivery in _deliveries(req):
                tokens += delivery.tokens
                await _send(resp, chunk(delivery.text, delivery.finish_reason))
            if params.include_usage:
                await _send(resp, {"id": ident, "object": obj, "created": created,
                                   "model": params.model, "choices": [],
                                   "usage": _usage(params.prompt_tokens, tokens)})
            await resp.write(b"data: [DONE]\n\n")
        except EngineDead as dead:
            err = ApiError(500, str(dead), "EngineDeadError")
            await _send(resp, err.body())
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.engine.cancel(req)
            raise
        return resp


class Params:
    """A validated completion request."""

    def __init__(self, *, prompt_tokens: int, max_tokens: int, min_tokens: int,
                 ignore_eos: bool, stream: bool, include_usage: bool, klass: str,
                 model: str, prompt: str = "", prompt_ids: list[int] | None = None,
                 turn: int = 0) -> None:
        self.prompt = prompt
        """The prompt's text (its turns joined): keys the request's draws."""
        self.prompt_ids = prompt_ids
        """The prompt's token ids (each turn encoded alone): the prefix cache's keys."""
        self.turn = turn
        """The session turn: user messages − 1 (a completions request: 0)."""
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.ignore_eos = ignore_eos
        self.stream = stream
        self.include_usage = include_usage
        self.klass = klass
        self.model = model


async def _deliveries(req: Request) -> AsyncIterator[Delivery]:
    """A request's deliveries until its last token; an engine death raises EngineDead."""
    while True:
        delivery = await req.queue.get()
        if delivery.error is not None:
            raise EngineDead(delivery.error)
        yield delivery
        if delivery.finish_reason is not None:
            return


async def _send(resp: web.StreamResponse, payload: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion}


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def _message_text(message: Any) -> str:
    if not isinstance(message, dict) or "role" not in message:
        raise bad_request("each message must be an object with a 'role'", "messages")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    raise bad_request("message content must be a string or a list of parts", "messages")


def _prompt_texts(prompt: Any, vocab: Vocab) -> tuple[list[str], list[int]]:
    """The prompt's texts and its token ids (a list of ids is taken as given)."""
    if isinstance(prompt, str):
        return [prompt], vocab.ids_many([prompt])
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt), vocab.ids_many(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return [], list(prompt)
    raise bad_request("'prompt' must be a string, a list of strings or of token ids", "prompt")


def _snapshot(eng: Engine) -> dict[str, Any]:
    t = eng.totals
    return {"prompt": t.prompt_tokens, "gen": t.generation_tokens, "drafts": t.drafts,
            "draft_tokens": t.draft_tokens, "accepted": t.accepted, "per_pos": list(t.per_pos),
            "vsum": t.verified_sum, "vdec": t.verify_decisions}


@web.middleware
async def _hang_middleware(request: web.Request,
                           handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                           ) -> web.StreamResponse:
    sim: SimServer = request.app[SIM_KEY]
    if sim.hung:
        await asyncio.Event().wait()
    return await handler(request)


SIM_KEY: web.AppKey[SimServer] = web.AppKey("sim", SimServer)


def make_app(sim: SimServer) -> web.Application:
    app = web.Application(middlewares=[_hang_middleware], client_max_size=64 * 1024 * 1024)
    app[SIM_KEY] = sim
    app.router.add_get("/health", sim.health)
    if sim.config.serve_models:
        app.router.add_get("/v1/models", sim.models)
    if sim.config.serve_metrics:
        app.router.add_get("/metrics", sim.metrics)
    app.router.add_get("/sim/stats", sim.stats)
    app.router.add_post("/v1/chat/completions", sim.chat)
    app.router.add_post("/v1/completions", sim.completions)
    return app


def boot(config: SimConfig, log: Log) -> SimServer:
    """Everything before the port opens: 'load the model' (tokenizer, cost table, delay)."""
    log.info(API_SOURCE, f"vLLM API server version 0.0.0+sim (spec-ab simulated lane), "
                         f"pid {os.getpid()}")
    log.info(API_SOURCE, "non-default args: " + json.dumps(
        {k: v for k, v in config.model_dump(exclude={"cost", "acceptance"}).items()
         if v != SimConfig.model_fields[k].default}, default=str))
    over = overrides_path()
    keys = sorted(read_yaml(over)) if over.exists() else []
    log.info(API_SOURCE, f"overrides file {over}: "
                         f"{', '.join(keys) if keys else 'no overrides'}")
    log.info("speculative.py:1", f"Speculative decoding: method=sim, num_speculative_tokens="
                                 f"{config.depth}, verify={config.verify}")
    t0 = time.monotonic()
    vocab = Vocab.load(config.tokenizer)
    sim = SimServer(config, vocab, log)
    eng = sim.engine
    log.info("gpu_model_runner.py:1", f"Starting to load model {config.model} (simulated; "
                                      f"seed {eng.seed}, boot drift ×{eng.drift:.4f}, "
                                      f"effect ×{config.effect:g}, time_scale ×"
                                      f"{config.time_scale:g}).")
    if eng.table is not None:
        kind = "live" if config.adaptive_live else "boot"
        log.info(CONTROL_SOURCE, cost_table_message(kind, 1, eng.table.render(
            1, range(1, eng.depth + 2))))
    if config.boot_delay > 0:
        time.sleep(config.boot_delay)
    log.info("gpu_model_runner.py:2", f"Model loading took 0.0 GiB and "
                                      f"{time.monotonic() - t0:.2f} seconds")
    return sim


async def serve_async(config: SimConfig, host: str, port: int, log: Log,
                      sim: SimServer | None = None) -> None:
    """Open the port and serve until SIGINT/SIGTERM."""
    sim = sim or boot(config, log)
    app = make_app(sim)
    # vLLM exits promptly on SIGTERM even with streams in flight; so do we.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    await sim.start_background()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(API_SOURCE, f"Starting vLLM API server 0 on http://{host}:{port}")
    log.info("launcher.py:1", "Available routes are: /health, /v1/models, /metrics, "
                              "/v1/chat/completions, /v1/completions, /sim/stats")
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    try:
        await stop.wait()
    finally:
        log.raw("INFO:     Shutting down")
        await sim.stop_background()
        await runner.cleanup()
        log.raw(f"INFO:     Finished server process [{os.getpid()}]")
