"""The metrics a pass can yield: name → unit, direction, source.

One table shared by the campaign file (validating `primary_metric` and guardrails), the
runner (naming the rows of `passes.csv`) and the verdicts (sign of a gain). A metric's
direction says which way is better; gains are always reported so that positive = better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]
Kind = Literal["ratio", "absolute"]
"""How two arms' values are compared: by their ratio, or by their difference (metrics often 0)."""


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction
    source: Literal["aiperf", "server", "spec_decode", "pass"]
    description: str


_METRICS = [
    Metric("output_token_throughput", "tok/s", "higher", "aiperf",
           "output tokens per second over the whole pass (all streams)"),
    Metric("output_token_throughput_server", "tok/s", "higher", "server",
           "output_token_throughput on the server's token count (vllm:generation_tokens_total"
           " ÷ AIPerf's re-tokenized count; one ratio per pass); absent without server "
           "counters"),
    Metric("output_token_throughput_per_user", "tok/s", "higher", "aiperf",
           "output tokens per second seen by one stream (mean over requests)"),
    Metric("request_throughput", "req/s", "higher", "aiperf", "completed requests per second"),
    Metric("ttft_p50", "ms", "lower", "aiperf", "time to first token, median"),
    Metric("ttft_p99", "ms", "lower", "aiperf", "time to first token, 99th percentile"),
    Metric("itl_p50", "ms", "lower", "aiperf", "inter-token latency, median"),
    Metric("itl_p99", "ms", "lower", "aiperf", "inter-token latency, 99th percentile"),
    Metric("request_latency_p50", "ms", "lower", "aiperf", "end-to-end request latency, median"),
    Metric("request_latency_p99", "ms", "lower", "aiperf",
           "end-to-end request latency, 99th percentile"),
    Metric("error_rate", "fraction", "lower", "pass", "failed requests ÷ all requests"),
    Metric("osl_mismatch_share", "fraction", "lower", "pass",
           "requests whose output length AIPerf counts differently from the one asked ÷ "
           "completed requests (AIPerf re-tokenizes; the server's count is generation_tokens)"),
    Metric("requests_completed", "count", "higher", "pass", "requests that completed"),
    Metric("output_tokens", "count", "higher", "pass", "output tokens generated in the pass"),
    Metric("acceptance_rate", "fraction", "higher", "spec_decode",
           "accepted ÷ draft tokens (vLLM's reported rate, not the per-position a)"),
    Metric("accepted_per_draft", "tokens", "higher", "spec_decode",
           "accepted tokens ÷ drafts: accepted drafts per verification step"),
    Metric("tokens_per_drafted_step", "tokens", "higher", "spec_decode",
           "1 + accepted ÷ drafts: tokens emitted per decode step that drafted (steps "
           "without a draft are left out: see tokens_per_decode_step)"),
    Metric("tokens_per_step", "tokens", "higher", "spec_decode",
           "results schema 1's name of tokens_per_drafted_step (read from older runs)"),
    Metric("implied_a", "fraction", "higher", "spec_decode",
           "per-position acceptance a of the geometric model, fitted from the per-position "
           "counters (else from accepted per draft and k); the journal names the method"),
    Metric("generation_tokens", "count", "higher", "spec_decode",
           "tokens the server generated in the pass (vllm:generation_tokens_total)"),
    Metric("draft_coverage", "fraction", "higher", "spec_decode",
           "drafts ÷ decode steps (generated − accepted): the share of steps that drafted"),
    Metric("tokens_per_decode_step", "tokens", "higher", "spec_decode",
           "generated ÷ decode steps (generated − accepted): tokens per step, drafted or not"),
    Metric("draft_tokens", "count", "higher", "spec_decode", "draft tokens proposed in the pass"),
    Metric("prefix_cache_hit_rate", "fraction", "higher", "spec_decode",
           "prompt tokens found in the prefix cache ÷ prompt tokens looked up over the pass "
           "(vllm:prefix_cache_hits_total ÷ vllm:prefix_cache_queries_total, vLLM V1's "
           "counters); absent without them"),
    Metric("drafts", "count", "higher", "spec_decode", "verification steps with drafts"),
    Metric("accepted_tokens", "count", "higher", "spec_decode", "draft tokens accepted"),
]

_METRICS += [
    Metric("fidelity_token_match", "fraction", "higher", "pass",
           "fidelity pass: whitespace tokens equal at the same position ÷ the tokens of "
           "the longer text (missing or extra tokens are mismatches; 0 when nothing was "
           "compared), candidate against the control of its pair; on the "
           "control's rows its agreement with itself (the reference)"),
    Metric("fidelity_identical_share", "fraction", "higher", "pass",
           "fidelity pass: requests whose output equals the other's ÷ requests"),
    Metric("fidelity_first_divergence", "tokens", "higher", "pass",
           "fidelity pass: mean whitespace-token position of the first difference (the "
           "compared length when none)"),
    Metric("fidelity_requests", "count", "higher", "pass",
           "fidelity pass: prompts compared"),
]
_METRICS += [
    Metric("slo_attainment", "fraction", "higher", "pass",
           "requests meeting every bound of preregistration.slo ÷ requests sent (failed "
           "ones included; compared by differences, in points)"),
    Metric("ttft_slo_attainment", "fraction", "higher", "pass",
           "requests whose time to first token is within preregistration.slo.ttft_ms ÷ "
           "requests sent"),
    Metric("itl_slo_attainment", "fraction", "higher", "pass",
           "requests whose mean inter-token latency is within preregistration.slo.itl_ms ÷ "
           "requests sent"),
    Metric("goodput", "req/s", "higher", "pass",
           "requests meeting every bound of preregistration.slo per second (AIPerf's "
           "goodput: request_throughput × those requests ÷ completed requests)"),
]
_METRICS += [
    Metric("offered_rate", "req/s", "higher", "pass",
           "open-loop rate level: requests per second of the schedule the pass replayed "
           "(identical for both arms by construction; descriptive)"),
    Metric("achieved_rate", "req/s", "higher", "pass",
           "open-loop rate level: requests per second the load generator actually sent, "
           "(n − 1) ÷ (last request start − first); below 95% of offered_rate the level "
           "is invalid (the lane's fault, not the server's); descriptive"),
    Metric("send_lag_p99_ms", "ms", "lower", "pass",
           "open-loop level: 99th percentile of how late the load generator sent a "
           "request after its scheduled time; beyond gates.max_send_lag_ms the level is "
           "invalid; compared by differences (ms)"),
    Metric("queue_delay_p50", "ms", "lower", "server",
           "time a request waited in the server's queue, median (vLLM's "
           "vllm:request_queue_time_seconds); often 0 at a light load: compared by "
           "differences (ms); absent without the histogram"),
    Metric("queue_delay_p99", "ms", "lower", "server",
           "time a request waited in the server's queue, 99th percentile; compared by "
           "differences (ms); absent without the histogram"),
    Metric("capacity_at_slo", "req/s", "higher", "pass",
           "the highest offered rate at which an arm's slo_attainment stays at or above "
           "preregistration.slo.target (default 0.90), interpolated between the rate "
           "levels of one pair (cell rate capacity; `verdict.capacity`)"),
]
SLO_METRICS: dict[str, str] = {"slo_attainment": "", "ttft_slo_attainment": "ttft_ms",
                               "itl_slo_attainment": "itl_ms", "goodput": "",
                               "capacity_at_slo": ""}
"""Metrics counted against `preregistration.slo` → the bound each needs ("" any)."""
SLO_SHARES = frozenset({"slo_attainment", "ttft_slo_attainment", "itl_slo_attainment"})
"""Shares of requests: compared by differences, in points (`verdict.rule`)."""

DIFFERENCE_MS = frozenset({"send_lag_p99_ms", "queue_delay_p50", "queue_delay_p99"})
"""Milliseconds often exactly 0 (no queueing, a punctual sender): compared by differences
(`verdict.rule.ABSOLUTE_METRICS`), as error_rate is."""

FIDELITY_METRICS = frozenset({"fidelity_token_match", "fidelity_identical_share",
                              "fidelity_first_divergence"})
"""Judged against the control's own agreement (`verdict.guardrails`), not pair noise."""

MAX_POSITIONS = 16
for _i in range(MAX_POSITIONS):
    _METRICS.append(Metric(f"acceptance_pos{_i}", "fraction", "higher", "spec_decode",
                           f"accepted at draft position {_i} ÷ drafts"))

METRICS: dict[str, Metric] = {m.name: m for m in _METRICS}


def direction(name: str) -> Direction:
    """Direction of a known metric; unknown names count as higher-is-better."""
    metric = METRICS.get(name)
    return metric.direction if metric else "higher"


def is_known(name: str) -> bool:
    return name in METRICS


QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
"""A metric name's quantile suffix → the quantile (`ttft_p99` is the 0.99 quantile of the
level's requests)."""


def quantile_of(metric: str) -> float | None:
    """The quantile a metric is of its level's requests (`ttft_p99` → 0.99, with a unit
    suffix too: `send_lag_p99_ms` → 0.99), else None."""
    parts = metric.split("_")
    if len(parts) > 2 and parts[-1] == "ms":
        parts.pop()
    return QUANTILES.get(parts[-1])


def has_rows_at(metric: str, workload: str, level: str) -> bool:
    """Whether a rule's cell of `metric` is at (workload, level): a knee sweep's spec-decode
    figures are judged on the whole sweep (level `all`; their per-level rows describe, they
    are not registered), every other metric per level (and not at `all`). Unknown metrics
    are taken to be per level. Capacity at SLO has its own cell, `(rate, capacity)`, and
    nothing else is measured there."""
    if metric == "capacity_at_slo" or (workload, level) == ("rate", "capacity"):
        return metric == "capacity_at_slo" and (workload, level) == ("rate", "capacity")
    info = METRICS.get(metric)
    sweep = workload == "knee" and info is not None and info.source == "spec_decode"
    return (level == "all") == sweep
