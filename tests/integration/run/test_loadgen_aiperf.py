"""campaign.run.measure.loadgen against real AIPerf and the simulated lane: a sweep's levels and
exact output lengths, a hang cut by the pass's timeout, a server death counted as errors,
an agent-fixture pass (the fakes of tests/unit/run/test_loadgen.py, for real)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from campaign.run.measure import levelchecks, loadgen
from campaign.run.measure.loadgen import PassPlan
from tests.runs import require
from tests.unit.run.test_loadgen import make_plan


def _running_sim() -> Callable[..., contextlib.AbstractContextManager[Any]] | None:
    try:
        from campaign.sim.testing import running_sim
    except ImportError:
        return None
    return running_sim


def _sim_or_skip() -> Callable[..., contextlib.AbstractContextManager[Any]]:
    running_sim = _running_sim()
    require(running_sim is not None, "the simulated lane (campaign.sim.testing)",
            "finish campaign/sim (issue: simulated lane)")
    require(loadgen.aiperf_version() is not None, "AIPerf", "pip install 'aiperf>=0.13,<0.14'")
    assert running_sim is not None
    return running_sim


def _sim_plan(base_url: str, tokenizer_dir: Path, **changes: Any) -> PassPlan:
    settings: dict[str, Any] = {
        "base_url": base_url, "model": "sim", "tokenizer": tokenizer_dir,
        "requests_per_level": 6, "input_tokens": 32, "output_tokens": 16,
        "timeout_s": 180.0, "executable": None}
    return make_plan(**{**settings, **changes})


def test_real_aiperf_sweep_against_sim(tmp_path: Path, tokenizer_dir: Path) -> None:
    import httpx

    from campaign.run.measure import metrics
    from campaign.sim.testing import sim_env

    running_sim = _sim_or_skip()
    with running_sim(env=sim_env(time_scale=20, seed=1)) as sim, httpx.Client() as client:
        before = metrics.scrape(client, sim.base_url)
        plan = _sim_plan(sim.base_url, tokenizer_dir, concurrency=(1, 2))
        outcome = loadgen.run_pass(plan, tmp_path / "knee")
        after = metrics.scrape(client, sim.base_url)
    assert outcome.returncode == 0, outcome.stdout_path.read_text()[-3000:]
    assert outcome.problems == []
    assert [level.concurrency for level in outcome.levels] == [1, 2]
    for level in outcome.levels:
        assert levelchecks.level_problems(level, outcome, max_error_rate=0.0,
                                      min_completed_requests=6) == []
        assert level.osl_mismatch == 0  # exact output lengths honoured end to end
        assert level.metrics["output_tokens"] == 6 * 16
    assert metrics.token_delta(before, after).generation_tokens == 2 * 6 * 16
    figures = metrics.spec_decode_delta(before, after)
    assert figures is not None and figures.drafts > 0
    assert len(figures.acceptance_pos) == 5  # the sim's default depth k = 5
    # drafts near the end of a 16-token request are shorter, so the mean draft is < 5
    assert figures.k is not None and 1 <= figures.k <= 5


def test_real_aiperf_hang_times_out_with_partial_export(tmp_path: Path,
                                                        tokenizer_dir: Path) -> None:
    from campaign.sim.testing import sim_env

    running_sim = _sim_or_skip()
    with running_sim(env=sim_env(time_scale=20, seed=1),
                     config={"hang_after_requests": 3}) as sim:
        # long enough for AIPerf to boot (~6-11 s here) and reach the hang
        plan = _sim_plan(sim.base_url, tokenizer_dir, concurrency=(2,), requests_per_level=12,
                         timeout_s=25.0)
        outcome = loadgen.run_pass(plan, tmp_path / "hang")
    assert outcome.timed_out and not outcome.interrupted
    assert outcome.problems[0].startswith("timed out after 25 s")
    for level in outcome.levels:  # a partial export, never a valid level
        assert not level.complete and level.cancelled
        assert levelchecks.level_problems(level, outcome, max_error_rate=0.0,
                                      min_completed_requests=12)


def test_real_aiperf_server_death_counts_as_errors(tmp_path: Path,
                                                   tokenizer_dir: Path) -> None:
    from campaign.sim.testing import sim_env

    running_sim = _sim_or_skip()
    with running_sim(env=sim_env(time_scale=20, seed=1),
                     config={"die_after_requests": 4}) as sim:
        plan = _sim_plan(sim.base_url, tokenizer_dir, concurrency=(2,), requests_per_level=12,
                         timeout_s=120.0)
        outcome = loadgen.run_pass(plan, tmp_path / "die")
    # AIPerf exits 0 and calls the run complete: only the error counts tell
    assert outcome.returncode == 0 and not outcome.timed_out
    [level] = outcome.levels
    assert level.complete and level.requests_errored > 0
    reasons = levelchecks.level_problems(level, outcome, max_error_rate=0.01,
                                     min_completed_requests=12)
    assert any(reason.startswith("error rate") for reason in reasons)


def _fixture_pass(folder: Path, tokenizer_dir: Path, fixture: Path, *, concurrency: int,
                  requests: int) -> loadgen.PassOutcome:
    """One agent-fixture pass of `fixture` through real AIPerf against a fresh sim, run
    into `folder`."""
    from campaign.sim.testing import sim_env

    running_sim = _sim_or_skip()
    with running_sim(env=sim_env(time_scale=20, seed=1)) as sim:
        plan = _sim_plan(sim.base_url, tokenizer_dir, name=f"agentfix-{fixture.stem}",
                         kind="agentfix", concurrency=(concurrency,),
                         requests_per_level=requests, input_tokens=None, input_file=fixture)
        return loadgen.run_pass(plan, folder)


def test_real_aiperf_agent_fixture_pass(tmp_path: Path, tokenizer_dir: Path,
                                        repo_root: Path) -> None:
    outcome = _fixture_pass(tmp_path / "agentfix", tokenizer_dir,
                            repo_root / "fixtures" / "agentfix" / "shell.jsonl",
                            concurrency=2, requests=8)
    assert outcome.returncode == 0, outcome.stdout_path.read_text()[-3000:]
    [level] = outcome.levels
    assert level.concurrency == 2 and level.osl_mismatch == 0
    assert levelchecks.level_problems(level, outcome, max_error_rate=0.0,
                                  min_completed_requests=8) == []
    assert level.metrics["output_tokens"] == 8 * 16


def test_a_paced_closed_loop_keeps_its_cap_full_and_never_above_it(
        tmp_path: Path, tokenizer_dir: Path, repo_root: Path) -> None:
    """`pacing`, for real: the agent-fixture pass at 3 streams goes out as AIPerf's cap
    behind a 1,000 req/s ticker, and its records show what a closed loop of 3 is: never
    more than 3 in flight, 3 in flight between the first fill and the drain, and a freed
    slot refilled within a few ticks (median; a loaded host may delay one)."""
    from campaign.run.measure import records

    outcome = _fixture_pass(tmp_path / "agentfix", tokenizer_dir,
                            repo_root / "fixtures" / "agentfix" / "prose.jsonl",
                            concurrency=3, requests=15)
    assert outcome.returncode == 0, outcome.stdout_path.read_text()[-3000:]
    command = (tmp_path / "agentfix" / loadgen.COMMAND_NAME).read_text()
    assert "--concurrency 3 --request-rate 1000 --arrival-pattern constant" in command
    [level] = outcome.levels
    spans = sorted((m["request_start_ns"], m["request_end_ns"])
                   for m in records.record_metadata(records.records_path(level)))
    assert len(spans) == 15
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    in_flight, most = 0, 0
    for _, step in events:
        in_flight += step
        most = max(most, in_flight)
    assert most == 3, most  # the cap, reached and never passed
    ends = sorted(e for _, e in spans)
    starts = [s for s, _ in spans][3:]  # each start after the first fill refills a slot
    gaps_ms = sorted((s - max(e for e in ends if e <= s)) / 1e6 for s in starts)
    assert gaps_ms[len(gaps_ms) // 2] < 20, gaps_ms
