"""Prometheus metrics of the simulated lane, with vLLM's names, types and labels.

Names follow vLLM v1's Prometheus metrics:
counters are declared without `_total` and exposed with it, every series carries
`model_name` and `engine` ("0": one engine core), the per-position counter adds
`position`.  The prefix cache's two counters are vLLM V1's, in tokens.  Histogram
buckets are vLLM's, so dashboards and the runner's parser see the same shapes as on a
real lane.  `vllm:request_queue_time_seconds` is vLLM's too: a finished request's wait
between its arrival and its first scheduling, in vLLM's request latency buckets.

The sim's own `specab_sim:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_by_turn`
counters split vLLM's three spec-decode counters by session turn (label `turn`: the chat
request's user messages − 1, a completions request is turn 0; "15" counts every turn
≥ 15), so a multi-turn pass gets its acceptance per turn; real vLLM has no such series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

TURN_CAP = 15
"""The last `turn` label: "15" counts turns 15 and later."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Telemetry:
    """The sim's metric registry; the engine calls the `on_*` hooks."""

    def __init__(self, model_name: str, depth: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name", "engine"]
        values = (model_name, "0")
        r = self.registry
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                              labels, registry=r).labels(*values)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens",
                                    "Number of draft tokens.", labels,
                                    registry=r).labels(*values)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens",
                                "Number of accepted tokens.", labels,
                                registry=r).labels(*values)
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                          "Accepted tokens per draft position.", [*labels, "position"],
                          registry=r)
        self.per_pos = [per_pos.labels(*values, str(i)) for i in range(depth)]
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     labels, registry=r).labels(*values)
        self.generation_tokens = Counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.", labels,
                                         registry=r).labels(*values)
        self.prefix_cache_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", labels,
            registry=r).labels(*values)
        self.prefix_cache_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            labels, registry=r).labels(*values)
        turn_labels = [*labels, "turn"]
        self.drafts_by_turn = Counter(
            "specab_sim:spec_decode_num_drafts_by_turn",
            "Spec decoding drafts by session turn (user messages - 1; 15: 15 or more).",
            turn_labels, registry=r)
        self.draft_tokens_by_turn = Counter(
            "specab_sim:spec_decode_num_draft_tokens_by_turn",
            "Draft tokens by session turn (user messages - 1; 15: 15 or more).",
            turn_labels, registry=r)
        self.accepted_by_turn = Counter(
            "specab_sim:spec_decode_num_accepted_tokens_by_turn",
            "Accepted tokens by session turn (user messages - 1; 15: 15 or more).",
            turn_labels, registry=r)
        self.request_success = Counter("vllm:request_success",
                                       "Count of successfully processed requests.",
                                       [*labels, "finished_reason"], registry=r)
        self._labels = values
        self.running = Gauge("vllm:num_requests_running",
                             "Number of requests in model execution batches.", labels,
                             registry=r).labels(*values)
        self.waiting = Gauge("vllm:num_requests_waiting",
                             "Number of requests waiting to be processed.", labels,
                             registry=r).labels(*values)
        self.iteration_tokens = Histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.",
                                          labels, buckets=ITERATION_BUCKETS,
                                          registry=r).labels(*values)
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", labels,
                              buckets=TTFT_BUCKETS, registry=r).labels(*values)
        self.itl = Histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", labels,
                             buckets=ITL_BUCKETS, registry=r).labels(*values)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", labels,
                             buckets=E2E_BUCKETS, registry=r).labels(*values)
        self.queue_time = Histogram("vllm:request_queue_time_seconds",
                                    "Histogram of time spent in WAITING phase for request.",
                                    labels, buckets=E2E_BUCKETS, registry=r).labels(*values)

    def on_draft(self, verified: int, accepted: int, turn: int = 0) -> None:
        """One stream verified `verified` drafts in a step and accepted the first `accepted`;
        `turn`: its request's session turn (0-based)."""
        if verified <= 0:
            return
        self.drafts.inc()
        self.draft_tokens.inc(verified)
        label = str(min(max(turn, 0), TURN_CAP))
        self.drafts_by_turn.labels(*self._labels, label).inc()
        self.draft_tokens_by_turn.labels(*self._labels, label).inc(verified)
        accepted_by_turn = self.accepted_by_turn.labels(*self._labels, label)
        if accepted:
            self.accepted.inc(accepted)
            accepted_by_turn.inc(accepted)
            for i in range(min(accepted, len(self.per_pos))):
                self.per_pos[i].inc()

    def on_finished(self, reason: str, latency_s: float, queued_s: float = 0.0) -> None:
        """A request finished: `latency_s` since its arrival, `queued_s` of it waiting to
        be first scheduled (vLLM observes both when a request finishes)."""
        self.request_success.labels(*self._labels, reason).inc()
        self.e2e.observe(latency_s)
        self.queue_time.observe(queued_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
