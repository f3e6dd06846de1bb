"""`verdict.showable`: what a registered design can show of each guardrail, before a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scipy import stats as sps

from campaign.campaignfile import load_campaign
from campaign.errors import SpecError
from campaign.verdict.showable import assess_campaign, refuse_unshowable, t_quantile
from tests.runs import ROOT

DEMO = ROOT / "examples" / "sim-pair.yaml"


def _copy(tmp_path: Path, pairs: int, limit: str = "0.25", aa: bool = False) -> Path:
    text = DEMO.read_text()
    text = re.sub(r"\n  pairs: \d+\n", f"\n  pairs: {pairs}\n", text)
    text = text.replace("{metric: ttft_p99, max_worsening: 0.25}",
                        f"{{metric: ttft_p99, max_worsening: {limit}}}")
    if aa:
        text = text.replace("    env:\n      SPECAB_SIM_VERIFY: adaptive\n", "")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_the_demo_shows_its_guardrail_and_more_pairs_show_it_more_often(
        tmp_path: Path) -> None:
    (demo,) = assess_campaign(load_campaign(DEMO))
    assert demo.ok and demo.shown_at_0 >= 0.8 and demo.design.requests == 128
    shown = [assess_campaign(load_campaign(_copy(tmp_path, n)))[0].shown_at_0
             for n in (2, 4, 8, 16)]
    assert shown == sorted(shown) and shown[0] < 0.8 <= shown[-1]


def test_a_limit_no_design_can_show_is_refused_with_its_fixes(tmp_path: Path) -> None:
    path = _copy(tmp_path, 2, limit="0.05")
    with pytest.raises(SpecError) as err:
        refuse_unshowable(load_campaign(path))
    said = str(err.value)
    assert "preregistration.guardrails[0]: guardrail ttft_p99 (limit +5%)" in said
    assert "so no candidate would ever be adopted" in said and "ttft_p50" in said


def test_one_pair_and_an_aa_are_not_assessed(tmp_path: Path) -> None:
    """One pair adopts nothing whatever its guardrails (the one-pair gate); an A/A
    measures the lane: neither is refused for a guardrail."""
    assert assess_campaign(load_campaign(_copy(tmp_path, 1, limit="0.05"))) == []
    assert assess_campaign(load_campaign(_copy(tmp_path, 4, limit="0.05", aa=True))) == []


@pytest.mark.parametrize("df", [5, 6, 10, 30, 200])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.975, 0.99])
def test_the_light_t_quantile_is_within_half_a_percent_from_5_df(df: int, p: float) -> None:
    exact = float(sps.t.ppf(p, df))
    assert abs(t_quantile(p, df) - exact) <= 0.005 * exact
