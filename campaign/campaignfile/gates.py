"""When a pass counts as valid: the registered gates (`preregistration.gates`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from campaign.campaignfile.base import (
    CellTokens,
    Fraction,
    FractionBelowOne,
    Int,
    Model,
    Requests,
)


class Gates(Model):
    """When a pass counts as valid. An invalid pass is retried, then kept as invalid."""

    max_error_rate: Fraction = Field(
        0.0, ge=0, le=1, description="Largest share of failed requests in a valid pass "
        "(0.02 or `2%`)."
    )
    min_completed_requests: Requests = Field(
        4, ge=1, description="Fewest completed requests per level in a valid pass."
    )
    pass_timeout_s: float = Field(
        1800, gt=0, description="Wall-clock limit of one AIPerf invocation, and of one "
        "attempt of the fidelity pass, all its requests (seconds)."
    )
    retries: Int = Field(1, ge=0, le=5, description="Retries of an invalid pass.")
    pair_retries: Int = Field(
        1, ge=0, le=5,
        description="Redos of a whole pair cut by the lane mid-pass: the control's server "
        "died, restarted or turned unhealthy, or /metrics stopped answering (the pair is "
        "redone at once, both arms, so it stays in one window). A candidate's server failing "
        "is its own failure: that pair is invalid, never redone.",
    )
    tail_requests: Literal["warn", "refuse"] = Field(
        "warn",
        description="A guardrail on a quantile (`ttft_p99`) needs enough requests per level "
        "for the quantile to be one: fewer than 1 ÷ (1 − q) (100 for a p99) and the pass's "
        "p99 is just its slowest request or two. `warn`: `check` and `run` say so, per "
        "guardrail and workload, with the requests that would make it meaningful; `refuse`: "
        "they exit 2 instead.",
    )
    redo_budget: Int = Field(
        2, ge=0, le=50,
        description="Pairs left invalid by the lane (AIPerf crashing or timing out while "
        "the server stays healthy, a /metrics scrape failure, any invalid pass of the "
        "control) that are measured again within the night, whole (both arms, a new pair "
        "attempt), at the end of the slots, before the campaign is called short. A "
        "candidate's own failures (its requests failing beyond the gates, its server dying "
        "or never becoming ready) are never redone.",
    )
    max_pair_gap_s: float = Field(
        3600,
        gt=0,
        description="Largest allowed time between the starts of a pair's arms; beyond it "
        "the pair is flagged `split-pair`.",
    )
    min_output_tokens: CellTokens = Field(
        2000,
        ge=0,
        description="Fewer measured output tokens than this in a cell flags it "
        "`small-sample` (a hint, not a number); a small-sample decision cell cannot adopt.",
    )
    max_stall_s: float = Field(
        10,
        gt=0,
        allow_inf_nan=False,
        description="Longest wait for a token (a request's first token, or the gap between "
        "two of its chunks) in a valid pass, seconds: beyond it the server froze or the "
        "host stalled (a swap storm, a stuck collective, SIGSTOP) and the pass is invalid "
        "(the lane's fault: retried, then the pair redone), never measured. Raise it for "
        "prompts whose prefill alone takes longer.",
    )
    max_send_lag_ms: float = Field(
        250, gt=0, allow_inf_nan=False,
        description="Longest a replayed schedule's requests (a rate level, a trace) may be "
        "sent after their time, as the p99 over a level (ms); beyond it, or with the level "
        "sent at under 95% of its schedule's own rate, the load generator did not offer the "
        "load and the level is invalid (the lane's fault, not the server's).",
    )
    max_osl_mismatch: Fraction | None = Field(
        None,
        ge=0,
        le=1,
        description="Largest share of a level's requests whose output length AIPerf counts "
        "differently from what was asked (its own re-tokenization); beyond it the pass is "
        "invalid. Default: not gated, but measured (`osl_mismatch_share`) and shown.",
    )
    max_window_drift: FractionBelowOne | None = Field(
        None,
        ge=0,
        lt=1,
        description="Largest movement of the control across the window that still counts "
        "as stable (a fraction); beyond it, and beyond the lane's noise, a decision cell is "
        "flagged `window-drift` and cannot adopt. Default: the drift band.",
    )
