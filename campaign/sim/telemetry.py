"""Prometheus metrics of the simulated lane, with vLLM's names, types and labels.

Names follow vLLM v1's Prometheus metrics:
counters are declared without `_total` and exposed with it, every series carries
`model_name` and `engine` ("0": one engine core), the per-position counter adds
`position`.  The prefix cache's two counters are vLLM V1's, in tokens.  Histogram
buckets are vLLM's, so dashboards and the runner's parser see the same shapes as on a
real lane.
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

    def on_draft(self, verified: int, accepted: int) -> None:
        """One stream verified `verified` drafts in a step and accepted the first `accepted`."""
        if verified <= 0:
            return
        self.drafts.inc()
        self.draft_tokens.inc(verified)
        if accepted:
            self.accepted.inc(accepted)
            for i in range(min(accepted, len(self.per_pos))):
                self.per_pos[i].inc()

    def on_finished(self, reason: str, latency_s: float) -> None:
        self.request_success.labels(*self._labels, reason).inc()
        self.e2e.observe(latency_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
