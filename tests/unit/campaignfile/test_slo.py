"""`preregistration.slo`: an SLO metric needs the bound it counts against (one message naming
the field), the bounds are registered with the rule, and a rule without an SLO registers
exactly as before (its hash unchanged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.errors import SpecError
from campaign.results.registration import Registration, rule_hash
from tests.unit.campaignfile.test_campaignfile import sub, write

SLO_GUARD = """  guardrails:
    - {metric: ttft_slo_attainment, max_worsening: 0.02}
"""


def _with(text: str) -> str:
    return sub("  decision_cells:\n", text + "  decision_cells:\n")


@pytest.mark.parametrize("added, expected", [
    (SLO_GUARD, ["preregistration", "guardrails[0]", "ttft_slo_attainment",
                 "preregistration.slo", "ttft_ms: 2000"]),
    (SLO_GUARD + "  slo: {itl_ms: 50}\n",
     ["guardrails[0]", "needs preregistration.slo.ttft_ms"]),
    ("  slo: {}\n", ["preregistration.slo", "at least one of ttft_ms"]),
    ("  slo: {ttft_ms: 500}\n  guardrails:\n"
     "    - {metric: slo_attainment, max_worsening: 0.02, absolute: false}\n",
     ["guardrails[0]", "limited in points", "drop `absolute: false`"]),
    ("  slo: {ttft_ms: -5}\n", ["preregistration.slo.ttft_ms", "greater than 0"]),
])
def test_an_slo_metric_without_its_bound_is_refused(tmp_path: Path, added: str,
                                                    expected: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path, _with(added)))
    assert info.value.exit_code == 2
    problems = info.value.problems
    assert any(all(s in p for s in expected) for p in problems), problems


def test_the_primary_metric_may_be_goodput(tmp_path: Path) -> None:
    text = _with("  slo: {ttft_ms: 500, itl_ms: 40}\n").replace(
        "primary_metric: output_token_throughput", "primary_metric: goodput")
    c = load_campaign(write(tmp_path, text))
    assert c.preregistration.primary_metric == "goodput"
    assert c.preregistration.slo is not None
    assert c.preregistration.slo.bounds() == {"time_to_first_token": 500.0,
                                              "inter_token_latency": 40.0}


def _registered(tmp_path: Path, text: str) -> Registration:
    c = load_campaign(write(tmp_path, text))
    rule = c.preregistration.model_dump(mode="json", by_alias=True)
    return Registration.new(rule, campaign=c.name, arms=c.arm_names, drift_band=0.03,
                            registered_at="2026-12-04T00:00:00Z")


def test_a_rule_without_slo_registers_as_before_and_one_with_it_is_hashed(
        tmp_path: Path) -> None:
    plain = _registered(tmp_path, _with(""))
    assert "slo" not in plain.rule and "sequential" not in plain.rule
    with_slo = _registered(tmp_path, _with(SLO_GUARD + "  slo: {ttft_ms: 2000}\n"))
    assert with_slo.rule["slo"] == {"ttft_ms": 2000.0, "itl_ms": None,
                                    "request_latency_ms": None}
    assert with_slo.sha256 == rule_hash(with_slo.rule) != plain.sha256
