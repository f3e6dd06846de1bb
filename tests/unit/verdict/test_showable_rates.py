"""`verdict.showable` on the open-loop workloads (issue 41): a guardrail registered on a rate
level, or at a capacity rule's decision cell (checked at the sweep's rate levels), is
assessed before the run like one on a knee level; rate, trace and sessions cells count
among a guardrail's deterioration cells as the verdict counts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.errors import SpecError
from campaign.results.registration import registered_levels
from campaign.verdict.showable import assess_campaign, decision_cells, refuse_unshowable

CAMPAIGN = """
name: open-loop
hypothesis: depth 7 against depth 5 under open-loop load
lane: sim
preregistration:
  primary_metric: PRIMARY
  pairs: PAIRS
  seed: 7
  decision_cells: [DECISION]
  guardrails: [GUARD]
  slo: {ttft_ms: 500}
server:
  backend: process
  command: [spec-ab, sim, serve, --host, 127.0.0.1, --port, "18800"]
  host: 127.0.0.1
  port: 18800
arms:
  control: {}
  depth7: {env: {SPECAB_SIM_DEPTH: "7"}}
workloads:
  model: sim
  tokenizer: builtin:tokenizer
  warmup: []
  knee: {concurrency: [1, 4], requests_per_level: 64}
  rate: {rates: [2, 4, 8], requests_per_level: RATE_REQUESTS}
  sessions:
    fixtures: {shell: builtin:sessions/shell, coding: builtin:sessions/coding}
    sessions: 4
"""


def _campaign(tmp_path: Path, guard: str, *, pairs: int = 4,
              decision: str = "{workload: knee, level: c4}",
              primary: str = "output_token_throughput",
              rate_requests: str = "{'*': 64, r8: 400}") -> Path:
    text = (CAMPAIGN.replace("PRIMARY", primary).replace("PAIRS", str(pairs))
            .replace("DECISION", decision).replace("GUARD", guard)
            .replace("RATE_REQUESTS", rate_requests))
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_a_guardrail_on_rate_levels_is_assessed_at_their_fewest_requests(
        tmp_path: Path) -> None:
    """ttft_p99 at every rate level: the design is read at the fewest requests of those
    levels (64, not r8's 400), and too few pairs are refused naming the rate field."""
    guard = "{metric: ttft_p99, max_worsening: 0.25, workload: rate}"
    (shown,) = assess_campaign(load_campaign(_campaign(tmp_path, guard)))
    assert shown.design.requests == 64
    assert shown.requests_field == "workloads.rate.requests_per_level.r2, " \
        "workloads.rate.requests_per_level.r4"
    with pytest.raises(SpecError) as err:
        refuse_unshowable(load_campaign(_campaign(tmp_path, guard.replace("0.25", "0.3"),
                                                  pairs=3)))
    said = str(err.value)
    assert "preregistration.guardrails[0]: guardrail ttft_p99 (limit +30%): the registered " \
        "design (3 pairs, 64 requests per pass)" in said
    assert "register 13 pairs or 300 requests per pass (workloads.rate.requests_per_level" \
        ".r2, workloads.rate.requests_per_level.r4)" in said


def test_a_guardrail_at_a_capacity_decision_cell_is_read_at_the_sweeps_levels(
        tmp_path: Path) -> None:
    """A rule deciding on capacity_at_slo: its `at: decision` TTFT guardrail is checked at
    the rate levels the capacity is read from (as `guardrails.guardrail_targets` does), so
    the design is assessed at their requests; its deterioration cells are the knee levels
    and the session classes."""
    path = _campaign(tmp_path, "{metric: ttft_p99, max_worsening: 0.25}",
                     decision="{workload: rate, level: capacity}",
                     primary="capacity_at_slo", rate_requests="32")
    (shown,) = assess_campaign(load_campaign(path))
    assert shown.design.requests == 32
    assert shown.requests_field == "workloads.rate.requests_per_level"
    assert shown.design.cells == 3 + 2 + 2  # r2, r4, r8; deterioration: c1, c4, 2 classes


def test_deterioration_cells_count_the_rate_and_sessions_cells(tmp_path: Path) -> None:
    """A knee guardrail's noise is pooled over every other cell of its metric the verdict
    checks for deterioration: the rate levels and the session classes too."""
    guard = "{metric: ttft_p99, max_worsening: 0.25, workload: knee, level: c4}"
    (shown,) = assess_campaign(load_campaign(_campaign(tmp_path, guard)))
    assert shown.design.requests == 64
    assert shown.design.cells == 1 + 1 + 3 + 2  # c4; c1, r2, r4, r8, shell, coding


@pytest.mark.parametrize(("primary", "decision", "want"), [
    ("acceptance_rate", "{workload: knee, level: '*'}", [("knee", "all")]),
    ("capacity_at_slo", "{workload: rate, level: capacity}", [("rate", "capacity")]),
    ("output_token_throughput", "{workload: rate, level: '*'}",
     [("rate", "r2"), ("rate", "r4"), ("rate", "r8")]),
])
def test_decision_cells_resolve_as_the_registration_does(
        tmp_path: Path, primary: str, decision: str, want: list[tuple[str, str]]) -> None:
    """`*` resolves where the primary is measured, as `registered_levels` registers it: a
    knee's spec-decode figures around the whole sweep (`all`), rate levels by rate."""
    c = load_campaign(_campaign(tmp_path, "{metric: error_rate, max_worsening: 0.0, "
                                          "absolute: true}", decision=decision,
                                primary=primary))
    assert decision_cells(c) == want
    assert [(x.workload, x.level) for x in registered_levels(c).decision_cells] == want


def test_a_guardrail_on_a_session_class_is_assessed_at_its_files_turns(
        tmp_path: Path) -> None:
    """A session class's pass sends `sessions` whole sessions, every user turn a request:
    the design is read at sessions × the file's turns per session (4 × 5.7 ≈ 23 requests
    for the shipped shell class), not skipped as unknown, and a refusal names the field to
    raise (`workloads.sessions.sessions`)."""
    guard = "{metric: ttft_p99, max_worsening: 0.25, workload: sessions, level: shell}"
    c = load_campaign(_campaign(tmp_path, guard))
    (shown,) = assess_campaign(c)
    assert shown.design.requests == c.requests_in("sessions", "shell") == 23
    assert shown.requests_field == "workloads.sessions.sessions"
    with pytest.raises(SpecError) as err:
        refuse_unshowable(c)
    assert "workloads.sessions.sessions" in str(err.value)
