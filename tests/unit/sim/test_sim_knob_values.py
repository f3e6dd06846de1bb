"""A bad `SPECAB_SIM_*` value is named by its variable and where a campaign sets it
(issue "The first night, for a newcomer", 12: the boot error named `depth`, not
`SPECAB_SIM_DEPTH` in `arms.depth7.env`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.sim import cli
from campaign.sim.config import ConfigError, knob_value_problem, load_config


def test_a_bad_knob_value_names_the_variable_and_the_arm_that_sets_it(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(environ={"SPECAB_SIM_DEPTH": "seven", "SPECAB_ARM": "depth7"},
                    overrides_file=tmp_path / "none")
    assert str(exc.value) == (
        "environment variable SPECAB_SIM_DEPTH='seven': not a whole number (draft depth k "
        "(num_speculative_tokens)); it is set in the campaign file's env of arm depth7 "
        "(arms.depth7.env, or server.env for every arm): give it a valid value there "
        "(knobs and their values: docs/simulator.md)")


def test_without_an_arm_the_error_names_the_places_a_campaign_sets_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(environ={"SPECAB_SIM_VERIFY": "adaptiv", "SPECAB_SIM_COST_BASE_MS": "x"},
                    overrides_file=tmp_path / "none")
    assert str(exc.value) == (
        "environment variable SPECAB_SIM_VERIFY='adaptiv': not one of 'fixed' or 'adaptive' "
        "(verify all k drafts, or let the adaptive controller choose); environment variable "
        "SPECAB_SIM_COST_BASE_MS='x': not a number (fixed cost of a step); they are set in "
        "a launch's env (in a campaign file: arms.<arm>.env, lanes.<lane>.server.env or "
        "server.env): give them valid values there (knobs and their values: "
        "docs/simulator.md)")


def test_sim_serve_exits_2_naming_the_variable(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECAB_SIM_DEPTH", "seven")
    monkeypatch.setenv("SPECAB_ARM", "depth7")
    monkeypatch.setenv("SPECAB_SIM_OVERRIDES", str(tmp_path / "none"))
    assert cli.main(["serve", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: environment variable SPECAB_SIM_DEPTH='seven': not a "
                          "whole number")
    assert "arms.depth7.env" in err and "depth:" not in err


@pytest.mark.parametrize("name,raw,problem", [
    ("SPECAB_SIM_DEPTH", "seven", "not a whole number (draft depth k (num_speculative_tokens))"),
    ("SPECAB_SIM_DEPTH", "20", "should be less than or equal to 16 (draft depth k "
                               "(num_speculative_tokens))"),
    ("SPECAB_SIM_ADAPTIVE_LIVE", "maybe", "not true or false (adaptive controller keeps its "
                                          "cost table live (else boot-measured))"),
    ("SPECAB_SIM_ACCEPTANCE_SHELL", "1.5", "acceptance.shell must be in (0, 1), got 1.5"),
    ("SPECAB_SIM_EFFECT", "0", "should be greater than 0 (speed factor: step times are "
                               "divided by it)"),
    ("SPECAB_SIM_DEPTH", "7", ""),
    ("SPECAB_SIM_SEED", "null", ""),
    ("SPECAB_SIM_CONFIG", "anything", ""),
    ("SPECAB_SIM_DEPHT", "7", ""),  # an unknown name is another check's (KNOWN_VARIABLES)
])
def test_each_knob_value_is_checked_alone(name: str, raw: str, problem: str) -> None:
    assert knob_value_problem(name, raw) == problem
