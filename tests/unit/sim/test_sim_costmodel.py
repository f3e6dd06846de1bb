"""The cost model reproduces the published facts it is calibrated on (docs/simulator.md)."""

from __future__ import annotations

import pytest

from campaign.sim.acceptance import DEFAULT_DECAY, per_position_a
from campaign.sim.costmodel import (
    CostParams,
    effective_tokens,
    expected_tokens_per_step,
    geometric_rate,
    marginal_verify_ms,
    step_cost,
    uniform_step_ms,
    unique_experts,
)

P = CostParams()


def test_uniform_routing_formula() -> None:
    # N(1 - (1 - r/N)^Q): one token touches exactly r experts; 6 tokens ≈ 34.6
    # (docs/simulator.md: ~35).
    assert unique_experts(1, 384, 6) == pytest.approx(6.0)
    assert unique_experts(6, 384, 6) == pytest.approx(34.62, abs=0.01)
    assert unique_experts(0, 384, 6) == 0.0
    assert unique_experts(10_000, 384, 6) == pytest.approx(384, rel=1e-6)


def test_correlated_routing_gives_published_unique_expert_ratio() -> None:
    # k = 5 drafts at one stream: 22.5 unique experts vs 6 for one token (3.7x).
    six = step_cost(P, [6], [5]).unique_experts
    one = step_cost(P, [1], [0]).unique_experts
    assert six == pytest.approx(22.5, rel=0.01)
    assert six / one == pytest.approx(3.75, rel=0.02)


def test_streams_are_independent_but_tokens_within_a_stream_correlate() -> None:
    assert effective_tokens([6], P.routing_correlation) < 6
    assert effective_tokens([1] * 6, P.routing_correlation) == 6


def test_fetch_is_a_third_of_a_step_and_marginal_token_costs_2_6_ms() -> None:
    cost = step_cost(P, [6], [5])
    assert cost.fetch / cost.total == pytest.approx(1 / 3, rel=0.02)
    assert marginal_verify_ms(P, streams=1, verify=5) == pytest.approx(2.6, rel=0.02)


def test_step_time_grows_with_streams_and_depth() -> None:
    assert uniform_step_ms(P, 2, 5, 5) > uniform_step_ms(P, 1, 5, 5)
    assert uniform_step_ms(P, 1, 8, 8) > uniform_step_ms(P, 1, 5, 5)
    assert step_cost(P, [], []).total == 0.0


def _knee(streams: int, depth: int, rate: float = 0.80) -> float:
    a = per_position_a(rate)
    e = expected_tokens_per_step([a * DEFAULT_DECAY**i for i in range(depth)])
    return streams * e / uniform_step_ms(P, streams, depth, depth) * 1000


def test_model_knee_crossover_deep_wins_alone_loses_in_a_crowd() -> None:
    # The published crossover at the synthetic-prompt acceptance: deeper wins at 1 stream,
    # depth 8 loses to shallower drafts at 8 and 16 streams.
    assert _knee(1, 8) > _knee(1, 5) > _knee(1, 3)
    for streams in (8, 16):
        assert _knee(streams, 8) < _knee(streams, 5)
        assert _knee(streams, 8) < _knee(streams, 3)


def test_geometric_rate_matches_design_examples() -> None:
    # docs/simulator.md: rate 0.435 at k=4 and 0.333 at k=6 both mean a ≈ 0.69.
    assert geometric_rate(0.69, 4) == pytest.approx(0.435, abs=0.01)
    assert geometric_rate(0.69, 6) == pytest.approx(0.333, abs=0.01)
    assert expected_tokens_per_step([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)
