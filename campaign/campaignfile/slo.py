"""`preregistration.slo`: the service-level objective a request is judged against.

A request **meets the SLO** when it completed and each registered bound holds for it: its
time to first token ≤ `ttft_ms`, its inter-token latency (the mean gap between its tokens,
as AIPerf records it per request; a request of one token has none and meets it) ≤
`itl_ms`, its end-to-end latency ≤ `request_latency_ms`. A failed request never meets it.
From the per-request records of each measured level the runner then derives
(`campaign.run.measure.records.slo_metrics`):

- `slo_attainment`: requests meeting every registered bound ÷ requests sent (failed ones
  included): the share users of a serving SLO watch;
- `ttft_slo_attainment`, `itl_slo_attainment`: the same share for one bound alone;
- `goodput`: requests meeting every registered bound per second of the level (AIPerf's
  goodput: the level's request throughput × those requests ÷ its completed requests).

The shares are compared by differences in points (`verdict.rule.ABSOLUTE_METRICS`), so a
guardrail `{metric: slo_attainment, max_worsening: 0.02}` lets the share fall by at most
2 points; a share is a proportion over every request of a pass, not its slowest one or
two, which is what lets a night show it within a tight limit (docs/verdict.md).

`target` (a share, default 0.90) is what capacity at SLO reads a rate level against: the
highest offered rate whose `slo_attainment` reaches it (docs/campaign-file.md). A rule that
does not give it registers without it (its hash as before).

The bounds are registered with the rule (hashed before the first boot): changing them
after a night would change every share it measured.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from campaign import catalog
from campaign.campaignfile.base import Fraction, Model

TARGET = 0.90
"""The share of requests meeting the SLO a rate level needs when `target` is not given."""


class Slo(Model):
    """Per-request latency bounds (ms); give at least one."""

    ttft_ms: float | None = Field(None, gt=0, description="Time to first token a request "
                                  "may take (ms).")
    itl_ms: float | None = Field(None, gt=0, description="Mean inter-token latency a request "
                                 "may have (ms; AIPerf's per-request inter_token_latency).")
    request_latency_ms: float | None = Field(None, gt=0, description="End-to-end latency a "
                                             "request may take (ms).")
    target: Fraction | None = Field(
        None, gt=0, le=1, description="The share of requests that must meet the SLO for a "
        f"rate level to count as within it (capacity at SLO); default {TARGET:g}.")

    @model_validator(mode="after")
    def _some(self) -> Slo:
        if not self.bounds():
            raise ValueError("give at least one of ttft_ms, itl_ms, request_latency_ms")
        return self

    @property
    def share(self) -> float:
        """The registered target share (`target`, default 0.90)."""
        return TARGET if self.target is None else self.target

    def bounds(self) -> dict[str, float]:
        """AIPerf's per-request tag → its bound (ms), for the bounds given."""
        given = {"time_to_first_token": self.ttft_ms, "inter_token_latency": self.itl_ms,
                 "request_latency": self.request_latency_ms}
        return {tag: v for tag, v in given.items() if v is not None}


def missing_bound(metric: str, slo: Slo | None) -> str | None:
    """Why `metric` cannot be measured under `slo` (an SLO metric without the bound it
    counts against), or None."""
    needs = catalog.SLO_METRICS.get(metric)
    if needs is None:
        return None
    if slo is None:
        return (f"{metric} counts requests against preregistration.slo: register it "
                "(e.g. `slo: {ttft_ms: 2000, itl_ms: 50}`)")
    if needs and getattr(slo, needs) is None:
        return f"{metric} needs preregistration.slo.{needs}: add it"
    return None
