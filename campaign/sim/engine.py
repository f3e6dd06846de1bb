"""The batching engine: one loop steps every running stream together, like vLLM's core.

Each step, for every running stream: a new stream is prefilled and emits its first token
(only the prompt tokens after its longest cached prefix cost prefill time, `prefixcache`);
a decoding stream has k drafts proposed, verifies v of them (v = k, or the adaptive
controller's choice), accepts the prefix the acceptance model samples and emits accepted + 1
tokens. A request's draws (acceptance, natural length) are fixed by its key: the seed, the
prompt and how often this boot has seen it (`acceptance.accepted_at`), so a boot with the
same seed replays the same requests with the same acceptance.  The step lasts what the
cost model says for that batch, scaled by per-boot drift, per-step noise, the `effect` knob
and `time_scale`.  Steps are chained on absolute deadlines, so event-loop jitter does not
accumulate and the mean measured step time equals the modelled one (the benchmark checks
this within 2%).

The clock is passed in (`Clock`), so unit tests step the engine without real sleeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from campaign.sim.acceptance import accepted_at, keyed_uniform, per_position_a
from campaign.sim.config import SimConfig
from campaign.sim.controller import CostTable, choose_verify
from campaign.sim.costmodel import CostParams, step_ms
from campaign.sim.prefixcache import PrefixCache
from campaign.sim.telemetry import Telemetry

PRIOR_A = 0.7
PRIOR_WEIGHT = 4.0
EOS_SLOT = 0xFF
"""The keyed draw of a request's natural length (draft slots are 0..depth − 1)."""
LOSSY_SLOT = 0xFE
"""The keyed draw of a lossy verifier's wrong token (`lossy`)."""
WORD_SLOT = 0xFD
"""The keyed draw of the target's word at an output position."""
CHAIN_TOLERANCE_S = 0.05
"""A step that starts at most this late still starts at its deadline (the next one catches
up), so a loaded host's scheduling delays do not leak into the mean step time."""


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class RealClock:
    """Monotonic wall clock; sleeps on the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        await asyncio.sleep(delay if delay > 0 else 0)


class EngineDead(Exception):
    """The simulated engine has died; requests cannot be served."""


@dataclass
class Delivery:
    """What one step hands to a request's HTTP handler."""

    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None


@dataclass
class Request:
    rid: str
    prompt_tokens: int
    target: int
    finish_reason: str
    klass: str
    a: float
    arrival: float
    key: int = 0
    """Fixes the request's draws: seed, prompt and its occurrence on this boot."""
    text_key: int = 0
    """Fixes the target's output words: seed and prompt only (greedy decoding gives one
    text per prompt, whatever the draft/verify path, batch or occurrence)."""
    branch: int = 0
    """0 while the output is the target's; a lossy token moves the text onto another
    branch (what follows is conditioned on the wrong token)."""
    prompt_ids: Sequence[int] | None = None
    """The prompt's token ids (the prefix cache's keys); None: not looked up."""
    cached: int = 0
    """Prompt tokens found in the prefix cache when scheduled (not prefilled again)."""
    turn: int = 0
    """The request's session turn (a chat request's user messages − 1; 0 otherwise)."""
    scheduled_at: float | None = None
    """When it left the queue (its wait is scheduled_at − arrival)."""
    queue: asyncio.Queue[Delivery] = field(default_factory=asyncio.Queue)
    produced: int = 0
    prefilled: bool = False
    last_at: float = 0.0
    successes: int = 0
    failures: int = 0
    cancelled: bool = False

    def estimated_a(self) -> float:
        """Conditional acceptance estimated from this stream's own history (with a prior)."""
        return (self.successes + PRIOR_A * PRIOR_WEIGHT) / (
            self.successes + self.failures + PRIOR_WEIGHT
        )


@dataclass
class Totals:
    """Cumulative counts the periodic log lines difference."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    verified_sum: int = 0
    verify_decisions: int = 0
    finished: int = 0


@dataclass
class StepTiming:
    """Chained (back-to-back) steps: wall time measured vs what the model asked for."""

    steps: int = 0
    wall_s: float = 0.0
    model_ms: float = 0.0
    scheduled_ms: float = 0.0
    tokens: int = 0
    streams: int = 0


def boot_drift(config: SimConfig) -> float:
    """This boot's speed factor: explicit, or log-normal(0, drift_sigma) from drift_seed."""
    if config.drift is not None:
        return config.drift
    if config.drift_sigma <= 0:
        return 1.0
    rng = random.Random(config.drift_seed)
    return math.exp(rng.gauss(0.0, config.drift_sigma))


class Engine:
    """Continuous-batching simulated engine (see module docstring)."""

    def __init__(
        self,
        config: SimConfig,
        telemetry: Telemetry,
        words: tuple[str, ...],
        clock: Clock | None = None,
        on_finished: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config
        self.telemetry = telemetry
        self.words = words
        self.clock: Clock = clock or RealClock()
        self.on_finished = on_finished
        self.params: CostParams = config.cost.params()
        self.depth = config.depth
        self.drift = boot_drift(config)
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
        self.seed = seed
        self.rng = random.Random(seed)
        self.noise_rng = random.Random(seed + 1)
        self.a_by_class = {
            name: per_position_a(rate, config.acceptance_decay)
            for name, rate in config.acceptance.items()
        }
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.totals = Totals(per_pos=[0] * self.depth)
        self.timing = StepTiming()
        self.table: CostTable | None = None
        self.prefix_cache = (PrefixCache(config.prefix_cache_blocks)
                             if config.prefix_cache_blocks > 0 else None)
        self.dead: str | None = None
        self.hung = False
        self._wake = asyncio.Event()
        self._ids = itertools.count(1)
        self._seen: dict[bytes, int] = {}
        self._last_end: float | None = None
        self._deadline: float | None = None
        if config.verify == "adaptive" and self.depth > 0:
            self.table = self.measure_cost_table()

    # --- cost ---------------------------------------------------------------------------

    def _noise(self) -> float:
        sigma = self.config.step_noise
        return math.exp(self.noise_rng.gauss(-sigma * sigma / 2, sigma)) if sigma > 0 else 1.0

    def scale(self, model_ms: float) -> float:
        """Real-time ms of a step after drift, noise and the effect knob."""
        return model_ms * self.drift * self._noise() / self.config.effect

    def measure_cost_table(self) -> CostTable:
        """The controller's table: timed dummy steps (T tokens spread over B streams, with
        this boot's drift and step noise); the one-stream row is measured now, at boot."""

        def sample(streams: int, tokens: int) -> float:
            shape = [tokens // streams + (1 if i < tokens % streams else 0)
                     for i in range(streams)]
            return self.scale(step_ms(self.params, shape, [self.depth] * streams))

        table = CostTable(sample)
        for tokens in range(1, self.depth + 2):
            table.cost(1, tokens)
        return table

    # --- requests -----------------------------------------------------------------------

    def text_key(self, prompt: str) -> int:
        """The key of a prompt's target text: this boot's seed and the prompt."""
        digest = hashlib.blake2b(f"{self.seed}\0text\0{prompt}".encode("utf-8", "surrogatepass"),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "little")

    def words_for(self, req: Request, start: int, count: int, drafted: int) -> str:
        """The text of output positions start..start+count−1, the first `drafted` of them
        accepted drafts: the target's word at each position (keyed by the prompt and the
        branch), except that a lossy verifier (`lossy` = p) lets an accepted draft differ
        from it with probability p, and the text goes on from the wrong token."""
        n = len(self.words)
        out: list[str] = []
        for j in range(count):
            pos = start + j
            key = req.text_key ^ req.branch
            index = int(keyed_uniform(key, pos, WORD_SLOT) * n)
            if j < drafted and self.config.lossy > 0 and \
                    keyed_uniform(req.key, pos, LOSSY_SLOT) < self.config.lossy:
                index = (index + 1 + int(keyed_uniform(req.key, pos, WORD_SLOT) * (n - 1))) % n
                req.branch = (int(keyed_uniform(req.key ^ req.branch, pos, LOSSY_SLOT) * 2**52)
                              | 1)
            out.append(self.words[index])
        return "".join(out)

    def request_key(self, prompt: str) -> int:
        """The key of a request's draws: this boot's seed, the prompt, and how many times
        this boot has seen that prompt before (the n-th sending of a prompt draws alike on
        every boot with the same seed; two sendings on one boot draw independently)."""
        digest = hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"),
                                 digest_size=16).digest()
        seen = self._seen.get(digest, 0)
        self._seen[digest] = seen + 1
        salt = f"{self.seed}\0{seen}\0".encode()
        return int.from_bytes(hashlib.blake2b(salt + digest, digest_size=8).digest(), "little")

    def new_request(self, prompt_tokens: int, max_tokens: int, min_tokens: int,
                    ignore_eos: bool, klass: str, prompt: str = "",
                    prompt_ids: Sequence[int] | None = None, turn: int = 0) -> Request:
        """A request with its output length decided now (EOS never before min_tokens).
        `prompt` (its text) keys the request's draws (`request_key`); `prompt_ids` (its
        token ids) are looked up in the prefix cache when it is scheduled (without them the
        request is not: nothing is queried, the whole prompt is prefilled); `turn` (its
        session turn) labels its spec-decode counts by turn."""
        if self.dead:
            raise EngineDead(self.dead)
        key = self.request_key(prompt)
        target, reason = max_tokens, "length"
        if not ignore_eos:
            u = keyed_uniform(key, 0, EOS_SLOT)
            natural = 1 + int(-math.log1p(-u) * self.config.eos_mean_tokens)
            natural = max(natural, min_tokens)
            if natural < max_tokens:
                target, reason = natural, "stop"
        return Request(
            rid=f"{next(self._ids)}",
            prompt_tokens=prompt_tokens,
            target=max(1, target),
            finish_reason=reason,
            klass=klass,
            a=self.a_by_class[klass],
            arrival=self.clock.now(),
            key=key,
            text_key=self.text_key(prompt),
            prompt_ids=prompt_ids,
            turn=turn,
        )

    def submit(self, request: Request) -> None:
        if self.dead:
            raise EngineDead(self.dead)
        self.waiting.append(request)
        self._wake.set()

    def cancel(self, request: Request) -> None:
        """The client went away: drop the request at the next step."""
        request.cancelled = True

    def fail_all(self, reason: str) -> None:
        """Engine death in 'unhealthy' mode: every request in flight gets an error."""
        self.dead = reason
        for req in [*self.running, *self.waiting]:
            req.queue.put_nowait(Delivery(error=reason))
        self.running.clear()
        self.waiting.clear()
        self._wake.set()

    def hang(self) -> None:
        """Stop stepping for good (a wedged engine): streams stall, nothing completes."""
        self.hung = True
        self._wake.set()

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            if self.hung or self.dead:
                await asyncio.Event().wait()
            self._admit()
            if not self.running:
                self._last_end = None
                self._deadline = None
                self._wake.clear()
                await self._wake.wait()
                continue
            await self.step()

    def _admit(self) -> None:
        self.running = [r for r in self.running if not r.cancelled]
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            req = self.waiting.popleft()
            if not req.cancelled:
                req.scheduled_at = self.clock.now()
                self._look_up(req)
                self.running.append(req)
        self.telemetry.running.set(len(self.running))
        self.telemetry.waiting.set(len(self.waiting))

    def _look_up(self, req: Request) -> None:
        """Scheduled now: the prompt's cached prefix (vLLM's queries and hits, in tokens);
        its blocks are cached for the requests scheduled after it."""
        if self.prefix_cache is None or req.prompt_ids is None:
            return
        req.cached = self.prefix_cache.admit(req.prompt_ids)
        self.telemetry.prefix_cache_queries.inc(len(req.prompt_ids))
        self.telemetry.prefix_cache_hits.inc(req.cached)

    def plan(self) -> tuple[list[int], list[int], int]:
        """Per running stream: drafts to verify (−1: prefill step) and drafter depth; plus
        the prompt tokens prefilled in the step (those after each prompt's cached prefix).
        Verification never runs past max_tokens."""
        verify: list[int] = []
        depths: list[int] = []
        prefill = 0
        caps: list[int] = []
        for req in self.running:
            remaining = req.target - req.produced
            cap = max(0, min(self.depth, remaining - 1))
            caps.append(cap)
            depths.append(self.depth if remaining > 1 else 0)
            if not req.prefilled:
                prefill += req.prompt_tokens - req.cached
                verify.append(-1)
            else:
                verify.append(cap)
        if self.table is not None:
            decode = [i for i, v in enumerate(verify) if v >= 0]
            decay = self.config.acceptance_decay
            accept = []
            for i in decode:
                a_hat = self.running[i].estimated_a()
                accept.append([min(1.0, a_hat * decay**j) for j in range(caps[i])])
            table, streams = self.table, len(verify)
            chosen = choose_verify(lambda tokens: table.cost(streams, tokens), accept,
                                   fixed_tokens=len(verify) - len(decode))
            for i, v in zip(decode, chosen, strict=True):
                verify[i] = v
                self.totals.verified_sum += v
                self.totals.verify_decisions += 1
        return verify, depths, prefill

    async def step(self) -> None:
        verify, depths, prefill = self.plan()
        verify_tokens = [1 if v < 0 else v + 1 for v in verify]
        model_ms = step_ms(self.params, verify_tokens, depths, prefill)
        scheduled_ms = self.scale(model_ms)
        duration = scheduled_ms / 1000.0 / self.config.time_scale
        now = self.clock.now()
        chained = self._deadline is not None and now - self._deadline < CHAIN_TOLERANCE_S
        start = self._deadline if chained and self._deadline is not None else now
        self._deadline = start + duration
        await self.clock.sleep_until(self._deadline)
        if self.hung or self.dead:
            return
        end = self.clock.now()
        if chained and self._last_end is not None:
            t = self.timing
            t.steps += 1
            t.wall_s += end - self._last_end
            t.model_ms += model_ms
            t.scheduled_ms += scheduled_ms
            t.tokens += sum(verify_tokens)
            t.streams += len(verify_tokens)
        self._last_end = end
        if self.table is not None and self.config.adaptive_live:
            self.table.update(len(verify_tokens), sum(verify_tokens), scheduled_ms)
        prompts = sum(r.prompt_tokens for r, v in zip(self.running, verify, strict=True)
                      if v < 0)
        self._emit(verify, prompts, end)

    def _emit(self, verify: list[int], prompts: int, now: float) -> None:
        """Hand out the step's tokens. `prompts`: the prompt tokens of the streams prefilled
        in the step, cached ones included (vLLM's iteration histogram counts them so)."""
        tel = self.telemetry
        totals = self.totals
        emitted_total = 0
        still: list[Request] = []
        for req, v in zip(self.running, verify, strict=True):
            if req.cancelled:
                continue
            accepted = 0
            if v < 0:
                req.prefilled = True
                emit = 1
                tel.prompt_tokens.inc(req.prompt_tokens)
                totals.prompt_tokens += req.prompt_tokens
                tel.ttft.observe(now - req.arrival)
            else:
                accepted = accepted_at(req.key, req.produced, req.a,
                                       self.config.acceptance_decay, v)
                emit = accepted + 1
                if v > 0:
                    tel.on_draft(v, accepted, req.turn)
                    totals.drafts += 1
                    totals.draft_tokens += v
                    totals.accepted += accepted
                    for i in range(accepted):
                        totals.per_pos[i] += 1
                    req.successes += accepted
                    req.failures += 1 if accepted < v else 0
                tel.itl.observe(now - req.last_at)
            req.last_at = now
            text = self.words_for(req, req.produced, emit, accepted)
            req.produced += emit
            emitted_total += emit
            done = req.produced >= req.target
            req.queue.put_nowait(Delivery(text=text, tokens=emit,
                                          finish_reason=req.finish_reason if done else None))
            if done:
                totals.finished += 1
                scheduled = req.arrival if req.scheduled_at is None else req.scheduled_at
                tel.on_finished(req.finish_reason, now - req.arrival, scheduled - req.arrival)
                if self.on_finished is not None:
                    self.on_finished(totals.finished)
            else:
                still.append(req)
        tel.generation_tokens.inc(emitted_total)
        totals.generation_tokens += emitted_total
        tel.iteration_tokens.observe(prompts + emitted_total)
        self.running = still
        tel.running.set(len(self.running))
