"""`workloads.rate` (issue 41, item 1): an open-loop sweep over offered request rates, each
level a cell `("rate", "r<rate>")` with the requests one accessor answers
(`Workloads.requests_in`), bad input refused with one message (exit 2), and
`preregistration.slo.target` (the share capacity at SLO is read against) registered without
changing the hash of a rule that does not give it."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.campaignfile import duration, load_campaign
from campaign.campaignfile.checks import thin_tails
from campaign.errors import SpecError
from campaign.results.registration import Registration, registered_levels
from tests.cli import invoke
from tests.unit.campaignfile.test_campaignfile import BASE, write

RATE = """  rate:
    rates: [4, 0.5, 16, 1]
"""


def _rate_only(rate: str = RATE, cells: str = "{workload: rate, level: \"*\"}") -> str:
    head, _, _ = BASE.partition("  knee:\n")
    return head.replace("{workload: knee, level: c1}", cells + "\n  guardrails:\n    - "
                        "{metric: error_rate, max_worsening: 0.0, absolute: true}") + rate


def test_rate_levels_are_sorted_cells_with_their_requests(tmp_path: Path) -> None:
    c = load_campaign(write(tmp_path, _rate_only(cells="{workload: rate, level: r4}")))
    wl = c.workloads
    assert wl.levels("rate") == ["r0.5", "r1", "r4", "r16"]
    assert [wl.requests_in("rate", lvl) for lvl in wl.levels("rate")] == [64, 64, 64, 64]
    assert wl.rate is not None and wl.rate.arrival == "poisson"
    assert (wl.rate.input_tokens, wl.rate.output_tokens) == (512, 128)
    assert wl.requests_in("rate", "r3") is None
    assert wl.requests_fields([("rate", "r4")]) == "workloads.rate.requests_per_level.r4"
    levels = registered_levels(c)
    assert [(d.workload, d.level) for d in levels.decision_cells] == [("rate", "r4")]


def test_a_duration_bounds_each_level_by_rate_times_seconds(tmp_path: Path) -> None:
    text = _rate_only("  rate:\n    rates: [0.5, 3]\n    duration_s: 5\n    arrival: gamma\n"
                      "    smoothness: 0.5\n    max_concurrency: 32\n")
    wl = load_campaign(write(tmp_path, text)).workloads
    assert [wl.requests_in("rate", lvl) for lvl in wl.levels("rate")] == [3, 15]
    assert wl.rate is not None and wl.rate.max_concurrency == 32


def test_per_level_requests_with_a_default(tmp_path: Path) -> None:
    text = _rate_only("  rate:\n    rates: [1, 2]\n    requests_per_level: "
                      "{\"*\": 20, r2: 90}\n")
    wl = load_campaign(write(tmp_path, text)).workloads
    assert [wl.requests_in("rate", lvl) for lvl in wl.levels("rate")] == [20, 90]


@pytest.mark.parametrize("rate, expected", [
    ("  rate:\n    rates: [2, 2]\n", ["workloads.rate.rates", "repeat"]),
    ("  rate:\n    rates: [0, 2]\n", ["workloads.rate.rates", "> 0"]),
    ("  rate:\n    rates: []\n", ["workloads.rate.rates"]),
    ("  rate:\n    rates: [2]\n    smoothness: 2\n",
     ["workloads.rate", "smoothness", "arrival: gamma"]),
    ("  rate:\n    rates: [2]\n    arrival: bursty\n", ["workloads.rate.arrival", "poisson"]),
    ("  rate:\n    rates: [2]\n    duration_s: 10\n    requests_per_level: 8\n",
     ["workloads.rate", "requests_per_level or duration_s"]),
    ("  rate:\n    rates: [2]\n    requests_per_level: {r3: 8}\n",
     ["requests_per_level", "'r3' is not a level", "r2"]),
])
def test_a_bad_rate_workload_is_refused_with_one_message(tmp_path: Path, rate: str,
                                                         expected: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path, _rate_only(rate)))
    assert info.value.exit_code == 2
    problems = info.value.problems
    assert any(all(s in p for s in expected) for p in problems), problems


def test_check_accepts_a_rate_sweep_and_estimates_it(tmp_path: Path) -> None:
    path = write(tmp_path, _rate_only("  rate:\n    rates: [1, 2]\n    requests_per_level: 30"
                                      "\n"))
    result = invoke("check", str(path), "--skip-preflight")
    assert result.code == 0, result.output
    c = load_campaign(path)
    one = duration.estimate(c)
    # 30 requests at 1 req/s last ~29 s, at 2 req/s ~14.5 s: more than the decode alone
    assert one.per_arm_s["control"] > 29 + 14.5
    longer = load_campaign(write(tmp_path / "b", _rate_only(
        "  rate:\n    rates: [0.5, 2]\n    requests_per_level: 30\n")))
    assert duration.estimate(longer).per_arm_s["control"] > one.per_arm_s["control"] + 25


def _registered(tmp_path: Path, slo: str) -> Registration:
    text = _rate_only().replace("  decision_cells:\n", slo + "  decision_cells:\n")
    c = load_campaign(write(tmp_path, text))
    rule = c.preregistration.model_dump(mode="json", by_alias=True)
    return Registration.new(rule, campaign=c.name, arms=c.arm_names, drift_band=0.03,
                            registered_at="2026-12-04T00:00:00Z")


def test_slo_target_defaults_to_90_percent_and_hashes_only_when_given(tmp_path: Path) -> None:
    plain = _registered(tmp_path, "  slo: {ttft_ms: 500}\n")
    assert plain.rule["slo"] == {"ttft_ms": 500.0, "itl_ms": None, "request_latency_ms": None}
    c = load_campaign(write(tmp_path, _rate_only().replace(
        "  decision_cells:\n", "  slo: {ttft_ms: 500}\n  decision_cells:\n")))
    assert c.preregistration.slo is not None and c.preregistration.slo.share == 0.90
    given = _registered(tmp_path, "  slo: {ttft_ms: 500, target: 0.95}\n")
    assert given.rule["slo"]["target"] == 0.95 and given.sha256 != plain.sha256
    with pytest.raises(SpecError) as info:
        _registered(tmp_path, "  slo: {ttft_ms: 500, target: 1.5}\n")
    assert any("preregistration.slo.target" in p for p in info.value.problems)


def test_capacity_at_slo_is_a_registerable_decision_cell(tmp_path: Path) -> None:
    """Design §4: `{workload: rate, level: capacity}` with primary metric capacity_at_slo
    registers as that one cell; it needs an SLO and at least two rates."""
    text = _rate_only(cells="{workload: rate, level: capacity}").replace(
        "primary_metric: output_token_throughput", "primary_metric: capacity_at_slo").replace(
        "  decision_cells:\n", "  slo: {ttft_ms: 500}\n  decision_cells:\n")
    path = write(tmp_path, text)
    c = load_campaign(path)
    levels = registered_levels(c)
    assert [(d.workload, d.level) for d in levels.decision_cells] == [("rate", "capacity")]
    # a guardrail at the decision is checked where the capacity is read from: every level
    assert levels.guardrail_cells() == [[("rate", lvl) for lvl in ("r0.5", "r1", "r4", "r16")]]
    result = invoke("check", str(path), "--skip-preflight")
    assert result.code == 0, result.output
    one = text.replace("rates: [4, 0.5, 16, 1]", "rates: [4]")
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path / "one", one))
    assert any("decision_cells[0]" in p and "at least two rates" in p
               for p in info.value.problems), info.value.problems
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path / "knee", text.replace("level: capacity", "level: r4")))
    assert any("capacity_at_slo" in p and "level: capacity" in p
               for p in info.value.problems), info.value.problems


def test_a_p99_guardrail_on_thin_rate_levels_names_the_field_to_raise(tmp_path: Path) -> None:
    text = _rate_only("  rate:\n    rates: [1, 2]\n    requests_per_level: 30\n").replace(
        "    - {metric: error_rate, max_worsening: 0.0, absolute: true}",
        "    - {metric: ttft_p99, max_worsening: 0.25}")
    thin = thin_tails(load_campaign(write(tmp_path, text)))
    assert len(thin) == 1 and thin[0].workload == "rate" and thin[0].requests == 30
    assert "(raise workloads.rate.requests_per_level)" in thin[0].text()


def test_a_level_longer_than_the_pass_timeout_is_refused(tmp_path: Path) -> None:
    """64 requests at 0.1 req/s take 630 s to send: a 300 s pass timeout would cut every
    attempt, so `check` says so before the night."""
    text = _rate_only("  rate:\n    rates: [0.1, 2]\n").replace(
        "  decision_cells:\n", "  gates: {pass_timeout_s: 300}\n  decision_cells:\n")
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path, text))
    assert info.value.exit_code == 2
    assert any("workloads.rate" in p and "r0.1" in p and "630 s" in p
               and "pass_timeout_s 300" in p for p in info.value.problems), info.value.problems
