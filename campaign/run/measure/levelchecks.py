"""Why a level's numbers cannot be used: how AIPerf ran it (the load generator's side) and
the server's answers against the registered gates (the server's side)."""

from __future__ import annotations

from campaign.run.measure.loadgen import LevelResult, PassOutcome

ZERO_IS_NO_MEASUREMENT = ("ttft_p50", "ttft_p99", "request_latency_p50",
                          "request_latency_p99")
"""Latency statistics a served request cannot have at 0: a level showing one is invalid."""


def level_problems(
    level: LevelResult,
    outcome: PassOutcome,
    *,
    max_error_rate: float,
    min_completed_requests: int,
    max_osl_mismatch: int | None = None,
    max_osl_mismatch_share: float | None = None,
) -> list[str]:
    """Why this level's numbers cannot be used; [] means valid: how AIPerf ran
    (`run_problems`), then the server's answers against the gates (`answer_problems`)."""
    return run_problems(level, outcome) + answer_problems(
        level, max_error_rate=max_error_rate, min_completed_requests=min_completed_requests,
        max_osl_mismatch=max_osl_mismatch, max_osl_mismatch_share=max_osl_mismatch_share)


def run_problems(level: LevelResult, outcome: PassOutcome) -> list[str]:
    """Why AIPerf's run of this level cannot be used (the load generator's side).

    The export is the authority (AIPerf exits 0 on cancelled runs). A non-zero exit still
    invalidates the pass unless it is explained by our own timeout stop of a run whose
    export for this level was already complete (AIPerf's hang at the very end).
    """
    reasons: list[str] = []
    if outcome.interrupted:
        reasons.append("pass interrupted (Ctrl-C / stop)")
    if outcome.returncode not in (0, None) and not outcome.timed_out:
        reasons.append(f"aiperf exit {outcome.returncode}")
    if not level.complete:
        reasons.append("export says incomplete (is_complete=false)")
    if level.cancelled:
        reasons.append("export says cancelled (was_cancelled=true)")
    return reasons


def answer_problems(
    level: LevelResult,
    *,
    max_error_rate: float,
    min_completed_requests: int,
    max_osl_mismatch: int | None = None,
    max_osl_mismatch_share: float | None = None,
) -> list[str]:
    """Why the server's answers in this level fail the registered gates (the server's
    side): failed requests, too few completed, another output length than asked, and a
    TTFT or request-latency statistic of 0, which is no measurement (judged as a ratio it
    would read as a 100% improvement)."""
    reasons: list[str] = []
    error_rate = level.metrics.get("error_rate", 0.0)
    if error_rate > max_error_rate:
        reasons.append(
            f"error rate {error_rate:.1%} > {max_error_rate:.1%} "
            f"({level.requests_errored} failed)")
    zero = [name for name in ZERO_IS_NO_MEASUREMENT if level.metrics.get(name) == 0.0]
    if zero:
        reasons.append(
            f"{', '.join(zero)} = 0 ms: a latency of 0 over a pass is no measurement (the "
            "server answered before it was asked, or AIPerf timed nothing)")
    if level.requests_completed < min_completed_requests:
        reasons.append(
            f"{level.requests_completed} requests completed < {min_completed_requests}")
    if (max_osl_mismatch is not None and level.osl_mismatch is not None
            and level.osl_mismatch > max_osl_mismatch):
        reasons.append(
            f"{level.osl_mismatch} requests with another output length than asked "
            "(server ignores ignore_eos/min_tokens, or another tokenizer)")
    share = level.metrics.get("osl_mismatch_share")
    if max_osl_mismatch_share is not None and share is not None \
            and share > max_osl_mismatch_share + 1e-12:
        reasons.append(
            f"{share:.0%} of requests with another output length than asked > "
            f"{max_osl_mismatch_share:.0%} pre-registered (AIPerf's re-tokenized count differs "
            "from the server's: its throughput would be off)")
    return reasons
