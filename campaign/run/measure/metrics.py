"""vLLM /metrics snapshots, their before/after deltas, and the spec-decode figures.

A pass is bracketed by two scrapes; the spec-decode figures of the pass are differences
of vLLM's cumulative spec-decode counters (labels `model_name` and
`engine`, plus `position` for the per-position counter), summed over engines. The
derived figures are these (docs/simulator.md has the geometric-acceptance background):

    acceptance_rate          = accepted ÷ draft tokens   (vLLM's "draft acceptance rate")
    accepted_per_draft       = accepted ÷ drafts
    tokens_per_drafted_step  = 1 + accepted ÷ drafts     (vLLM's "mean acceptance length":
                               counts only the decode steps that drafted)
    acceptance_pos{i}        = accepted at position i ÷ drafts
    k                        = positions exported (else draft tokens ÷ drafts, rounded)
    implied_a                : per-position acceptance a of the geometric model, fitted
                               from the per-position counters when there are some (method
                               "per_position"), else from accepted per draft and k (method
                               "accepted_per_draft"); see `fit_a`

and, from vllm:generation_tokens_total over the same interval (every decode step of a
request emits 1 + accepted tokens, so decode steps = generated − accepted):

    generation_tokens        = tokens the server generated
    draft_coverage           = drafts ÷ decode steps      (n-gram drafts only on a match)
    tokens_per_decode_step   = generated ÷ decode steps   (the real gain per step)

AIPerf counts output tokens by re-tokenizing the text it received, which can differ from
what the server generated (`osl_mismatch_share`). Where the server counts, each level also
gets its throughput on the server's count (`add_server_throughput`):

    output_token_throughput_server = AIPerf's output_token_throughput
                                     × generated ÷ AIPerf's output tokens (all levels)

A knee sweep cut exactly at its level boundaries (`levelcut`) gives each level its own
ratio; otherwise one pair of scrapes brackets the whole pass and one pass-wide ratio
applies to every level. The spec-decode figures of a cut knee are filed per level too,
beside the sweep's total (level `all`).

A counter that went down between the two scrapes means the server restarted during the
pass; that raises CounterReset instead of yielding a negative or truncated delta.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
"""vLLM V1's prefix-cache counters, in prompt tokens looked up and found cached."""
PROCESS_START = "process_start_time_seconds"

# Labels that name *what* is counted and so are kept apart; every other label (engine,
# model_name, …) names *where* and is summed over. `le`/`quantile` keep histograms and
# summaries meaningful if anyone looks at them.
KEPT_LABELS = frozenset({"position", "le", "quantile"})

SCRAPE_TIMEOUT_S = 5.0

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


class MetricsError(Exception):
    """A /metrics problem: the runner records it with the pass."""


class ScrapeFailed(MetricsError):
    """GET /metrics failed or returned something that is not Prometheus text."""


class CounterReset(MetricsError):
    """A counter went down between two snapshots: the server restarted in between."""


@dataclass(frozen=True)
class Snapshot:
    """One parsed /metrics response. `text` is kept verbatim for the results directory."""

    series: Mapping[SeriesKey, float]
    text: str
    taken_at: float = 0.0  # wall-clock seconds (time.time()) when scraped

    def value(self, name: str, **labels: str) -> float | None:
        """Sum over engines of sample `name` (with kept labels as given), None if absent."""
        key = (name, tuple(sorted(labels.items())))
        return self.series.get(key)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Values of sample `name` keyed by one kept label (e.g. position)."""
        found: dict[str, float] = {}
        for (sample, labels), value in self.series.items():
            if sample != name:
                continue
            for key, val in labels:
                if key == label:
                    found[val] = found.get(val, 0.0) + value
        return found

    def has(self, name: str) -> bool:
        return any(sample == name for sample, _ in self.series)


def parse(text: str, *, taken_at: float = 0.0) -> Snapshot:
    """Prometheus text exposition → a Snapshot summed over all labels but KEPT_LABELS.

    Raises ScrapeFailed when the text cannot be parsed.
    """
    series: dict[SeriesKey, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                kept = tuple(sorted((k, v) for k, v in sample.labels.items()
                                    if k in KEPT_LABELS))
                key = (sample.name, kept)
                series[key] = series.get(key, 0.0) + float(sample.value)
    except ValueError as exc:
        raise ScrapeFailed(f"unparsable /metrics text: {exc}") from exc
    return Snapshot(series=series, text=text, taken_at=taken_at)


def scrape(
    client: httpx.Client,
    base_url: str,
    *,
    timeout_s: float = SCRAPE_TIMEOUT_S,
    wall_clock: Callable[[], float] = time.time,
) -> Snapshot:
    """GET `base_url`/metrics and parse it. Raises ScrapeFailed (server gone, non-200)."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        response = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ScrapeFailed(f"GET {url} failed: {exc!r}") from exc
    if response.status_code != 200:
        raise ScrapeFailed(f"GET {url} returned HTTP {response.status_code}")
    return parse(response.text, taken_at=wall_clock())


def check_no_reset(before: Snapshot, after: Snapshot) -> None:
    """Raise CounterReset when the server restarted between the two snapshots.

    Evidence: any `*_total` series present in both that went down, or a changed
    `process_start_time_seconds`.
    """
    start_before = before.value(PROCESS_START)
    start_after = after.value(PROCESS_START)
    if start_before is not None and start_after is not None and start_after != start_before:
        raise CounterReset(
            f"server restarted during the pass ({PROCESS_START} "
            f"{start_before:.0f} → {start_after:.0f})")
    went_down = sorted(
        f"{name}{dict(labels) or ''} {value:g} → {after.series[(name, labels)]:g}"
        for (name, labels), value in before.series.items()
        if name.endswith("_total") and (name, labels) in after.series
        and after.series[(name, labels)] < value
    )
    if went_down:
        raise CounterReset(
            "server restarted during the pass: counters went down: " + "; ".join(went_down[:3])
            + (f" (+{len(went_down) - 3} more)" if len(went_down) > 3 else ""))


def counter_delta(before: Snapshot, after: Snapshot, name: str, **labels: str) -> float | None:
    """after − before of one counter; None when `after` lacks it.

    A counter missing before but present after counts from 0 (vLLM-like servers may create
    labelled series lazily). Raises CounterReset when it went down.
    """
    end = after.value(name, **labels)
    if end is None:
        return None
    begin = before.value(name, **labels) or 0.0
    if end < begin:
        raise CounterReset(f"server restarted during the pass: {name} {begin:g} → {end:g}")
    return end - begin


def _geometric_sum(a: float, k: int) -> float:
    return sum(a ** i for i in range(1, k + 1))


def solve_a(per_draft: float, k: int) -> float:
    """The a in [0, 1] with a + a² + … + a^k = `per_draft` (accepted tokens per draft of k),
    by `scipy.optimize.brentq`: the sum rises strictly from 0 (a = 0) to k (a = 1), so the
    root is unique; values outside [0, k] are clamped."""
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    if not math.isfinite(per_draft):
        raise ValueError(f"accepted per draft must be finite, got {per_draft}")
    if per_draft <= 0.0:
        return 0.0
    if per_draft >= k:
        return 1.0
    from scipy.optimize import brentq  # here: `check` and `--help` import no scipy

    return float(brentq(lambda a: _geometric_sum(a, k) - per_draft, 0.0, 1.0, xtol=1e-13))


def fit_a(drafts: float, accepted: float, k: int,
          per_pos: tuple[float, ...] = ()) -> tuple[float, str]:
    """(a, method): the per-position acceptance of the geometric model (accept position i
    with probability a once positions < i were accepted).

    With per-position counters ("per_position"): the maximum-likelihood a of that chain,
    accepted ÷ trials where each draft tries position 0 and each acceptance at position
    i < k−1 tries position i+1. Otherwise ("accepted_per_draft"): a solving
    a + a² + … + a^k = accepted ÷ drafts. Drafts shorter than k (n-gram drafts often are)
    bias neither fit upward, whereas solving the acceptance *rate* (accepted ÷ draft
    tokens) for a does, since short drafts shrink its denominator: it gave a above the
    position-0 acceptance, which the model rules out. On data that is not geometric
    (acceptance rising with position, as with looping outputs) any fitted a may still
    differ from position 0's acceptance: it is a summary, read it with acceptance_pos*.
    """
    if k < 1:
        raise ValueError(f"k must be ≥ 1, got {k}")
    if drafts <= 0 or accepted <= 0:
        return 0.0, "per_position" if per_pos else "accepted_per_draft"
    if per_pos:
        trials = drafts + math.fsum(per_pos[:k - 1])
        return min(1.0, accepted / trials), "per_position"
    return solve_a(accepted / drafts, k), "accepted_per_draft"


@dataclass(frozen=True)
class SpecDecodeFigures:
    """Spec-decode counters over one pass and the figures derived from them.

    Ratios are None when the pass had no drafts (nothing to divide by).
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: tuple[float, ...]
    k: int | None
    acceptance_rate: float | None
    accepted_per_draft: float | None
    tokens_per_drafted_step: float | None
    acceptance_pos: tuple[float, ...]
    implied_a: float | None
    implied_a_method: str | None = None
    """How implied_a was fitted: "per_position" or "accepted_per_draft" (see fit_a)."""
    generation_tokens: float | None = None
    """vllm:generation_tokens_total over the pass (None: the server has no such counter)."""
    draft_coverage: float | None = None
    tokens_per_decode_step: float | None = None

    def as_metrics(self) -> dict[str, float]:
        """Catalog names → values (campaign/catalog.py); undefined ratios are left out."""
        out: dict[str, float] = {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
        }
        for name in ("acceptance_rate", "accepted_per_draft", "tokens_per_drafted_step",
                     "implied_a", "generation_tokens", "draft_coverage",
                     "tokens_per_decode_step"):
            value = getattr(self, name)
            if value is not None:
                out[name] = float(value)
        for i, rate in enumerate(self.acceptance_pos):
            out[f"acceptance_pos{i}"] = rate
        return out


def derive(drafts: float, draft_tokens: float, accepted: float,
           per_pos: Iterable[float] = (), *,
           generation_tokens: float | None = None) -> SpecDecodeFigures:
    """The spec-decode figures (module docstring) from counter deltas (pure)."""
    per_pos = tuple(per_pos)
    coverage = per_decode_step = None
    steps = generation_tokens - accepted if generation_tokens is not None else 0.0
    if steps > 0 and generation_tokens is not None:
        coverage = min(1.0, drafts / steps)
        per_decode_step = generation_tokens / steps
    if drafts <= 0:
        return SpecDecodeFigures(drafts, draft_tokens, accepted, per_pos, None, None, None,
                                 None, (), None, None, generation_tokens, coverage,
                                 per_decode_step)
    # k is the configured depth: vLLM exports one `position` series per draft position.
    # draft_tokens ÷ drafts undercounts it when drafts are cut short near max_tokens.
    k = len(per_pos) if per_pos else round(draft_tokens / drafts)
    rate = accepted / draft_tokens if draft_tokens > 0 else None
    a, method = fit_a(drafts, accepted, k, per_pos) if k >= 1 else (None, None)
    return SpecDecodeFigures(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_pos=per_pos,
        k=k,
        acceptance_rate=rate,
        accepted_per_draft=accepted / drafts,
        tokens_per_drafted_step=1.0 + accepted / drafts,
        acceptance_pos=tuple(p / drafts for p in per_pos),
        implied_a=a,
        implied_a_method=method,
        generation_tokens=generation_tokens,
        draft_coverage=coverage,
        tokens_per_decode_step=per_decode_step,
    )


def spec_decode_delta(before: Snapshot, after: Snapshot) -> SpecDecodeFigures | None:
    """Spec-decode figures over the interval; None when the server has no such counters.

    Raises CounterReset when the server restarted between the snapshots.
    """
    check_no_reset(before, after)
    drafts = counter_delta(before, after, DRAFTS)
    draft_tokens = counter_delta(before, after, DRAFT_TOKENS)
    accepted = counter_delta(before, after, ACCEPTED)
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    positions = sorted(after.by_label(ACCEPTED_PER_POS, "position"), key=int)
    per_pos = [counter_delta(before, after, ACCEPTED_PER_POS, position=p) or 0.0
               for p in positions]
    return derive(drafts, draft_tokens, accepted, per_pos,
                  generation_tokens=counter_delta(before, after, GENERATION_TOKENS))


@dataclass(frozen=True)
class TokenDelta:
    """Server-side token counters over the interval (None: the server has no such counter)."""

    generation_tokens: float | None
    prompt_tokens: float | None
    prefix_queries: float | None = None
    prefix_hits: float | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Prompt tokens found in the prefix cache ÷ those looked up (None: no counters or
        no lookup in the interval)."""
        if not self.prefix_queries or self.prefix_hits is None:
            return None
        return self.prefix_hits / self.prefix_queries


def token_delta(before: Snapshot, after: Snapshot) -> TokenDelta:
    """Deltas of vllm:generation_tokens_total and vllm:prompt_tokens_total.

    Raises CounterReset when the server restarted between the snapshots.
    """
    check_no_reset(before, after)
    return TokenDelta(
        generation_tokens=counter_delta(before, after, GENERATION_TOKENS),
        prompt_tokens=counter_delta(before, after, PROMPT_TOKENS),
        prefix_queries=counter_delta(before, after, PREFIX_QUERIES),
        prefix_hits=counter_delta(before, after, PREFIX_HITS),
    )


@dataclass(frozen=True)
class PassDelta:
    """Token and spec-decode deltas of a pass's two scrapes (`pass_delta`)."""

    tokens: TokenDelta
    spec: SpecDecodeFigures | None
    seconds: float = field(default=0.0)  # wall time between the scrapes
    queue: Mapping[str, float] = field(default_factory=dict)
    """`queue_delay_p50` / `queue_delay_p99` (ms) from vLLM's queue-time histogram."""

    def as_metrics(self) -> dict[str, float]:
        """The spec-decode figures (without spec-decode counters, the generated tokens) and
        the prefix cache's hit rate where the server counts it."""
        gen = self.tokens.generation_tokens
        out = (self.spec.as_metrics() if self.spec is not None
               else {"generation_tokens": gen} if gen is not None else {})
        if (rate := self.tokens.prefix_cache_hit_rate) is not None:
            out["prefix_cache_hit_rate"] = rate
        return {**out, **self.queue}


QUEUE_TIME = "vllm:request_queue_time_seconds"
"""vLLM's histogram of the time a request waited before it was first scheduled."""


def histogram_quantile(before: Snapshot, after: Snapshot, name: str,
                       q: float) -> float | None:
    """The q-quantile of a histogram's observations between two scrapes, as Prometheus'
    `histogram_quantile` reads it: linear within the bucket that holds the rank, the
    highest finite bound when the rank falls in `+Inf`. None: no observation, or no such
    histogram. Raises CounterReset when a bucket went down."""
    buckets = []
    for le, end in after.by_label(f"{name}_bucket", "le").items():
        begin = before.by_label(f"{name}_bucket", "le").get(le, 0.0)
        if end < begin:
            raise CounterReset(f"server restarted during the pass: {name} le={le}")
        buckets.append((float(le), end - begin))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = bound, count
    return lower


def queue_delays(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """`queue_delay_p50` and `queue_delay_p99` (ms) of the requests a pass scheduled ({}
    when the server has no queue-time histogram)."""
    out = {}
    for metric, q in (("queue_delay_p50", 0.50), ("queue_delay_p99", 0.99)):
        v = histogram_quantile(before, after, QUEUE_TIME, q)
        if v is not None:
            out[metric] = v * 1000.0
    return out


def pass_delta(before: Snapshot, after: Snapshot) -> PassDelta:
    """Token and spec-decode deltas over one pass. Raises CounterReset on a restart."""
    return PassDelta(tokens=token_delta(before, after), spec=spec_decode_delta(before, after),
                     seconds=max(0.0, after.taken_at - before.taken_at),
                     queue=queue_delays(before, after))


SERVER_THROUGHPUT = "output_token_throughput_server"


def add_server_throughput(levels: Iterable[dict[str, float]],
                          generation_tokens: float | None) -> float | None:
    """Add `output_token_throughput_server` to each level's metrics (module docstring).

    Returns the ratio used (server's tokens ÷ AIPerf's), or None when there is nothing to
    scale: no server count, or AIPerf counted no output tokens.
    """
    levels = list(levels)
    counted = sum(lv.get("output_tokens", 0.0) for lv in levels)
    if generation_tokens is None or counted <= 0 or generation_tokens <= 0:
        return None
    ratio = generation_tokens / counted
    for lv in levels:
        if "output_token_throughput" in lv:
            lv[SERVER_THROUGHPUT] = lv["output_token_throughput"] * ratio
    return ratio

