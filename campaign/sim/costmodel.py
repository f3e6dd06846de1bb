"""Step-time cost model of a speculative-decoding MoE engine (pure, no clock, no I/O).

One engine step verifies, for every running stream, the bonus token plus the drafts it
chose to verify, and runs the drafter for the next step.  The step time is

    base                                   (attention, shared expert, launch overheads)
  + stream_ms        · streams             (per-sequence KV / sampling work)
  + verify_ms_per_token · T                (dense compute, memory-bound regime)
  + compute_ms_per_token · max(0, T − compute_knee_tokens)   (compute-bound regime)
  + fetch_ms_per_expert · offloaded_fraction · U(Q_eff)      (expert weights over the link)
  + draft_ms_per_position · max depth + draft_ms_per_token · Σ depth   (the drafter)
  + prefill_ms_per_token · prompt tokens prefilled in the step

where T is the number of verified tokens in the step and U is the number of unique routed
experts touched (per layer).  Under uniform routing Q tokens touch N·(1 − (1 − r/N)^Q)
experts; tokens of one stream are correlated (consecutive tokens route alike), which we
model with an effective token count: a stream verifying q tokens counts as
1 + routing_correlation·(q − 1) independent tokens, while different streams are independent.

The defaults are calibrated on the published facts in docs/simulator.md (one GB300,
DeepSeek-V4.1-Flash, 384 experts, 6 per token, a quarter offloaded):
  * one stream verifying k = 5 drafts (6 tokens) touches ≈ 22.5 unique experts vs 6 for
    one token (3.7×; uniform routing would say ≈ 35);
  * the expert fetch is ≈ 1/3 of that step (36 ms);
  * the marginal verified token at one stream costs ≈ 2.6 ms;
and so that the knee shows the published crossover (deeper drafts win at one stream and
lose at eight or more) at the acceptance of AIPerf's synthetic prompts.
`tests/test_sim_costmodel.py` pins these calibration facts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class CostParams:
    """Parameters of the step-time model, in real-time milliseconds."""

    base_ms: float = 15.9
    stream_ms: float = 0.3
    verify_ms_per_token: float = 0.88
    compute_knee_tokens: float = 10.0
    compute_ms_per_token: float = 0.8
    n_experts: int = 384
    experts_per_token: int = 6
    routing_correlation: float = 0.5668
    offloaded_fraction: float = 0.25
    fetch_ms_per_expert: float = 2.1333
    draft_ms_per_position: float = 0.3
    draft_ms_per_token: float = 0.2
    prefill_ms_per_token: float = 0.05

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class StepCost:
    """A step's time split by term (ms), so tests and the benchmark can show the parts."""

    base: float
    streams: float
    dense: float
    fetch: float
    draft: float
    prefill: float
    unique_experts: float

    @property
    def total(self) -> float:
        return self.base + self.streams + self.dense + self.fetch + self.draft + self.prefill


def unique_experts(q_eff: float, n_experts: int, experts_per_token: int) -> float:
    """Expected unique experts touched by `q_eff` independent tokens under uniform routing."""
    if q_eff <= 0:
        return 0.0
    return float(n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** q_eff))


def effective_tokens(verify_tokens: Sequence[int], correlation: float) -> float:
    """Independent-token equivalent of the streams' verified tokens (see module docstring)."""
    return sum(1.0 + correlation * (q - 1) for q in verify_tokens if q > 0)


def step_cost(
    params: CostParams,
    verify_tokens: Sequence[int],
    draft_depths: Sequence[int],
    prefill_tokens: int = 0,
) -> StepCost:
    """Cost of one step.

    `verify_tokens[i]` is the number of tokens stream i runs through the target model this
    step (1 bonus + drafts verified; 1 for a stream in its prefill step), `draft_depths[i]`
    the number of positions the drafter proposes for it, `prefill_tokens` the prompt tokens
    prefilled in the step.
    """
    n_streams = len(verify_tokens)
    total = sum(verify_tokens)
    q_eff = effective_tokens(verify_tokens, params.routing_correlation)
    unique = unique_experts(q_eff, params.n_experts, params.experts_per_token)
    dense = params.verify_ms_per_token * total + params.compute_ms_per_token * max(
        0.0, total - params.compute_knee_tokens
    )
    depth_max = max(draft_depths, default=0)
    draft = (params.draft_ms_per_position * depth_max
             + params.draft_ms_per_token * sum(draft_depths)) if depth_max > 0 else 0.0
    return StepCost(
        base=params.base_ms if n_streams or prefill_tokens else 0.0,
        streams=params.stream_ms * n_streams,
        dense=dense,
        fetch=params.fetch_ms_per_expert * params.offloaded_fraction * unique,
        draft=draft,
        prefill=params.prefill_ms_per_token * prefill_tokens,
        unique_experts=unique,
    )


def step_ms(params: CostParams, verify_tokens: Sequence[int], draft_depths: Sequence[int],
            prefill_tokens: int = 0) -> float:
    """Total time of one step in real-time milliseconds."""
    return step_cost(params, verify_tokens, draft_depths, prefill_tokens).total


def uniform_step_ms(params: CostParams, streams: int, verify: int, depth: int) -> float:
    """Step time when `streams` streams each verify `verify` drafts proposed `depth` deep."""
    return step_ms(params, [verify + 1] * streams, [depth] * streams)


def marginal_verify_ms(params: CostParams, streams: int = 1, verify: int = 5) -> float:
    """Cost of verifying one more draft token per step at `streams` streams (drafter fixed).

    Taken as the central difference around `verify`, the way it is measured on hardware
    (step time at k+1 minus step time at k-1, halved).
    """
    depth = verify + 1
    up = step_ms(params, [verify + 2] + [verify + 1] * (streams - 1), [depth] * streams)
    down = step_ms(params, [verify] + [verify + 1] * (streams - 1), [depth] * streams)
    return (up - down) / 2.0


def expected_tokens_per_step(a: Sequence[float]) -> float:
    """E[tokens emitted] for one stream: 1 bonus + E[accepted prefix] given the conditional
    acceptance probabilities `a[i]` of draft positions 0..v−1."""
    survive = 1.0
    total = 1.0
    for p in a:
        survive *= p
        total += survive
    return total


def geometric_rate(a: float, k: int) -> float:
    """vLLM's reported acceptance rate at depth k under geometric acceptance a."""
    if k <= 0:
        return math.nan
    return sum(a**i for i in range(1, k + 1)) / k
