"""Fractions of a campaign file (a margin, a guardrail's limit, a drift band, a share of
requests): at most 1, written `0.10` or `10%`. A `10` meant as 10% is refused with "did
you mean 0.10 (10%)?", at its place in the file, never read as +1000%. An earlier run's
registration read back keeps what it registered."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from campaign.campaignfile import Campaign, load_campaign
from campaign.campaignfile.base import FractionOf
from campaign.errors import SpecError
from campaign.verdict import rule as rl
from tests.cli import invoke
from tests.runs import ROOT
from tests.unit.campaignfile.test_values import _models

SIM_PAIR = (ROOT / "examples" / "sim-pair.yaml").read_text()


def _write(tmp_path: Path, old: str, new: str) -> Path:
    assert SIM_PAIR.count(old) == 1, old
    path = tmp_path / "c.yaml"
    path.write_text(SIM_PAIR.replace(old, new))
    return path


def _load(tmp_path: Path, old: str, new: str) -> Campaign:
    return load_campaign(_write(tmp_path, old, new))


# (what is replaced, with {} the value, the field's place, a reader of the value)
FIELDS: list[tuple[str, str, str, Any]] = [
    ("  margin: 0.10 ", "  margin: {} ", "preregistration.margin (line 19)",
     lambda c: c.preregistration.margin),
    ("  drift_band: 0.03 ", "  drift_band: {} ", "preregistration.drift_band (line 20)",
     lambda c: c.preregistration.drift_band),
    ("{metric: ttft_p99, max_worsening: 0.25}", "{{metric: ttft_p99, max_worsening: {}}}",
     "preregistration.guardrails[0].max_worsening (line 28)",
     lambda c: c.preregistration.guardrails[0].max_worsening),
    ("{metric: ttft_p99, max_worsening: 0.25}",
     "{{metric: ttft_p99, max_worsening: 0.25, drift_band: {}}}",
     "preregistration.guardrails[0].drift_band (line 28)",
     lambda c: c.preregistration.guardrails[0].drift_band),
    # an absolute limit on a share is a fraction too (percentage points)
    ("max_worsening: 0.0, absolute: true}", "max_worsening: {}, absolute: true}}",
     "preregistration.guardrails[1].max_worsening (line 29)",
     lambda c: c.preregistration.guardrails[1].max_worsening),
    ("    max_error_rate: 0.0", "    max_error_rate: {}", "preregistration.gates.max_error_rate"
     " (line 35)", lambda c: c.preregistration.gates.max_error_rate),
    ("    max_error_rate: 0.0", "    max_error_rate: 0.0\n    max_osl_mismatch: {}",
     "preregistration.gates.max_osl_mismatch (line 36)",
     lambda c: c.preregistration.gates.max_osl_mismatch),
    ("    max_error_rate: 0.0", "    max_error_rate: 0.0\n    max_window_drift: {}",
     "preregistration.gates.max_window_drift (line 36)",
     lambda c: c.preregistration.gates.max_window_drift),
]
IDS = [f[2].split(" ")[0] for f in FIELDS]


@pytest.mark.parametrize(("old", "new", "where", "read"), FIELDS, ids=IDS)
def test_a_percent_typo_is_refused_with_the_fraction_meant(
        tmp_path: Path, old: str, new: str, where: str, read: Any) -> None:
    with pytest.raises(SpecError) as info:
        _load(tmp_path, old, new.format(2))
    field, line = where.split(" ", 1)
    assert info.value.problems == [
        f"{field}: 2 would be 200%: a fraction is written 0.10 (or 10%) for 10%; did you mean "
        f"0.02 (2%)? {line}"]


@pytest.mark.parametrize(("old", "new", "where", "read"), FIELDS, ids=IDS)
def test_a_percentage_is_read_as_its_fraction(
        tmp_path: Path, old: str, new: str, where: str, read: Any) -> None:
    assert read(_load(tmp_path, old, new.format("5%"))) == pytest.approx(0.05)
    assert read(_load(tmp_path, old, new.format('" 7.5 %"'))) == pytest.approx(0.075)
    assert read(_load(tmp_path, old, new.format(0.05))) == pytest.approx(0.05)


def test_the_worst_typos_of_the_audit_are_refused_through_check(tmp_path: Path) -> None:
    """`margin: 10` was +1000%, `max_worsening: 5` +500%; `margin: 10%` a raw message."""
    r = invoke("check", str(_write(tmp_path, "  margin: 0.10 ", "  margin: 10 ")))
    assert r.code == 2
    assert "preregistration.margin: 10 would be 1000%" in r.output
    assert "did you mean 0.10 (10%)?" in r.output
    path = _write(tmp_path, "{metric: ttft_p99, max_worsening: 0.25}",
                  "{metric: ttft_p99, max_worsening: 5}")
    r = invoke("check", str(path))
    assert r.code == 2 and "did you mean 0.05 (5%)?" in r.output
    r = invoke("check", str(_write(tmp_path, "  margin: 0.10 ", "  margin: 10% ")))
    assert r.code == 0, r.output
    assert "≥ +10%" in r.output


def test_one_hundred_percent_and_beyond(tmp_path: Path) -> None:
    assert _load(tmp_path, "  margin: 0.10 ", "  margin: 100% ").preregistration.margin == 1
    for value, says in (("150%", "150% is more than 100%: this fraction is at most 100%"),
                        ("250", "250 would be 25000%: a fraction is written 0.10 (or 10%) "
                                "for 10%; write a fraction, e.g. 0.10 or 10%"),
                        ("ten%", "'ten%' is not a percentage"),
                        ("true", "true is a yes/no value, not a fraction")):
        with pytest.raises(SpecError) as info:
            _load(tmp_path, "  margin: 0.10 ", f"  margin: {value} ")
        assert len(info.value.problems) == 1 and says in info.value.problems[0], value
    with pytest.raises(SpecError) as info:  # a band is below 1
        _load(tmp_path, "  drift_band: 0.03 ", "  drift_band: 1 ")
    assert "did you mean 0.01 (1%)?" in info.value.problems[0]


def test_an_absolute_limit_in_the_metrics_unit_is_no_fraction(tmp_path: Path) -> None:
    """An absolute limit on a latency is milliseconds: 5 is 5 ms, `5%` means nothing."""
    old = "{metric: ttft_p99, max_worsening: 0.25}"
    c = _load(tmp_path, old, "{metric: ttft_p99, max_worsening: 5, absolute: true}")
    assert c.preregistration.guardrails[0].max_worsening == 5
    with pytest.raises(SpecError) as info:
        _load(tmp_path, old, "{metric: ttft_p99, max_worsening: 5%, absolute: true}")
    assert info.value.problems == [
        "preregistration.guardrails[0].max_worsening: an absolute limit on ttft_p99 is a "
        "difference in ms, not a percentage: write a number of ms (or drop `absolute: true` "
        "for a limit relative to the control) (line 28)"]


def test_a_registration_read_back_keeps_its_margin() -> None:
    """A run registered before fractions were bounded (a margin of 1.5) still reports."""
    rule = rl.parse_rule({"margin": 1.5, "drift_band": 0.03}, 0.03)
    assert rule.prereg.margin == 1.5


def _fraction_meta(meta: list[Any]) -> bool:
    return any(isinstance(getattr(getattr(m, "func", None), "__self__", None), FractionOf) or
               getattr(getattr(m, "func", None), "__name__", "") == "_limit" for m in meta)


def _floats(tp: Any) -> tuple[bool, bool]:
    """(a float appears in the type, every float in it is a validated fraction)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        if base is float:
            return True, _fraction_meta(meta)
        return _floats(base)
    if tp is float:
        return True, False
    found, fractions = False, True
    for arg in get_args(tp):
        f, ok = _floats(arg)
        found |= f
        fractions &= ok or not f
    return found, fractions


NOT_FRACTIONS = {
    # seconds
    "Gates.pass_timeout_s", "Gates.max_pair_gap_s", "Gates.max_stall_s",
    "KneeWorkload.duration_s", "RateWorkload.duration_s", "TraceWorkload.time_scale",
    "Readiness.timeout_s", "Readiness.poll_interval_s",
    "Readiness.expected_boot_s", "ProcessLaunch.stop_timeout_s", "ReadyCheck.timeout_s",
    "DockerLaunch.stop_timeout_s", "ExternalLaunch.hook_timeout_s",
    "ProcessLaunch.hook_timeout_s", "DockerLaunch.hook_timeout_s",
    # milliseconds: an SLO's latency bounds
    "Slo.ttft_ms", "Slo.itl_ms", "Slo.request_latency_ms", "Gates.max_send_lag_ms",
    # requests per second, and a gamma shape
    "RateWorkload.rates", "RateWorkload.smoothness",
    # probabilities of the rule, not changes of a metric
    "Preregistration.confidence", "Sequential.power",
}
"""Number fields that are no fraction of a metric's change or a share (a new field that is
one must use `Fraction`, `FractionBelowOne` or `FractionOf`)."""


def test_every_fraction_field_uses_the_fraction_type() -> None:
    seen = set()
    for model in _models():
        for name, f in model.model_fields.items():
            tp = f.annotation
            if f.metadata:
                tp = Annotated[(tp, *f.metadata)]  # a field's own Annotated lands here
            found, fractions = _floats(tp)
            key = f"{model.__name__}.{name}"
            if found and key not in NOT_FRACTIONS:
                seen.add(key)
                assert fractions, f"{key}: a float that is no Fraction"
    assert {"Preregistration.margin", "Preregistration.drift_band", "Guardrail.max_worsening",
            "Guardrail.drift_band", "Gates.max_error_rate", "Gates.max_osl_mismatch",
            "Gates.max_window_drift", "Slo.target"} == seen


def _model_names() -> set[str]:
    return {m.__name__ for m in _models() if issubclass(m, BaseModel)}


def test_the_not_fractions_are_fields() -> None:
    names = _model_names()
    assert {k.split(".")[0] for k in NOT_FRACTIONS} <= names


@pytest.mark.parametrize(("old", "new", "where", "read"), FIELDS, ids=IDS)
def test_a_negative_fraction_is_refused(
        tmp_path: Path, old: str, new: str, where: str, read: Any) -> None:
    for value in ("-0.05", "-5%"):
        with pytest.raises(SpecError) as info:
            _load(tmp_path, old, new.format(value))
        field = where.split(" ")[0]
        assert [p for p in info.value.problems if p.startswith(field)] == [
            p for p in info.value.problems], info.value.problems
        assert "is negative: a fraction here is 0 or more" in info.value.problems[0]


def test_a_rule_override_reads_fractions_as_the_file_does() -> None:
    """`report --rule margin=10` is the same typo as `margin: 10`; `drift_band=2%` the same
    percentage."""
    from campaign.errors import UsageError

    registered = {"margin": 0.10, "drift_band": 0.03}
    with pytest.raises(UsageError) as info:
        rl.apply_overrides(registered, {"margin": "10"})
    assert str(info.value) == (
        "--rule overrides are invalid: margin: 10 would be 1000%: a fraction is written 0.10 "
        "(or 10%) for 10%; did you mean 0.10 (10%)?")
    out = rl.apply_overrides(registered, {"margin": "15%", "drift_band": "2%"})
    assert out["drift_band"] == pytest.approx(0.02)
    with pytest.raises(UsageError) as info:
        rl.apply_overrides(registered, {"drift_band": "3"})
    assert "--rule drift_band=3: must be a fraction in [0, 1)" in str(info.value)
    assert "did you mean 0.03 (3%)?" in str(info.value)


def test_an_absolute_limit_is_shown_in_its_unit(tmp_path: Path) -> None:
    """The thin-tail warning of an absolute 5 ms limit on ttft_p99 said "a 500% limit"
    (the decision passes cut to 32 requests, too few for a p99 of their own)."""
    path = _write(tmp_path, "{metric: ttft_p99, max_worsening: 0.25}",
                  "{metric: ttft_p99, max_worsening: 5, absolute: true}")
    assert path.read_text().count("    requests: 128\n") == 1
    path.write_text(path.read_text().replace("    requests: 128\n", "    requests: 32\n"))
    r = invoke("check", "--no-preflight", str(path))
    assert r.code == 0, r.output
    assert "as resolving a 5 ms limit needs" in r.output and "500%" not in r.output


@pytest.mark.parametrize("yes", ["true", "1", "yes", "on"])
def test_an_absolute_limit_written_any_yes_way_is_in_its_unit(tmp_path: Path, yes: str) -> None:
    c = _load(tmp_path, "{metric: ttft_p99, max_worsening: 0.25}",
              f"{{metric: ttft_p99, max_worsening: 5, absolute: {yes}}}")
    assert c.preregistration.guardrails[0].absolute
    assert c.preregistration.guardrails[0].max_worsening == 5
