"""`check` on an SLO-attainment guardrail (a share of requests, limited in points): how
often the registered design shows it within its limit at no change, refused below 80%
with its fixes; and that number against the real verdict (`judge_run`) on campaigns drawn
under the same assumptions (`showable.ASSUMED_SHARE` of the control's requests meet the
SLO, the share moving ±`share_jitter()` points a pass, binomial sampling of each pass's
requests)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from campaign.campaignfile import Preregistration, load_campaign
from campaign.errors import SpecError
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td
from campaign.verdict.showable import (
    ASSUMED_SHARE,
    ShareShowable,
    assess_campaign,
    refuse_unshowable,
    share_jitter,
)
from tests.runs import ROOT

DEMO = ROOT / "examples" / "sim-pair.yaml"
CONTROL, CAND = "control", "cand"


def _copy(tmp_path: Path, limit: float) -> Path:
    text = DEMO.read_text().replace(
        "    - {metric: error_rate, max_worsening: 0.0, absolute: true}\n",
        "    - {metric: error_rate, max_worsening: 0.0, absolute: true}\n"
        f"    - {{metric: slo_attainment, max_worsening: {limit}}}\n", 1)
    text = text.replace("  gates:\n    max_error_rate: 0.0",
                        "  slo: {ttft_ms: 40}\n  gates:\n    max_error_rate: 0.0", 1)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def _share(tmp_path: Path, limit: float) -> ShareShowable:
    found = [s for s in assess_campaign(load_campaign(_copy(tmp_path, limit)))
             if isinstance(s, ShareShowable)]
    assert len(found) == 1
    return found[0]


def test_a_one_point_limit_is_refused_with_its_fixes(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        refuse_unshowable(load_campaign(_copy(tmp_path, 0.01)))
    said = str(err.value)
    assert "preregistration.guardrails[2]: guardrail slo_attainment (limit 1 point)" in said
    assert "so no candidate would ever be adopted" in said
    assert re.search(r"register \d+ pairs or a limit of 3 points", said), said


def test_wider_limits_are_shown_more_often(tmp_path: Path) -> None:
    shown = [_share(tmp_path, lim).shown_at_0 for lim in (0.01, 0.02, 0.03, 0.05)]
    assert shown == sorted(shown) and shown[0] < 0.8 <= shown[-2]


def _campaign(rng: np.random.Generator, pairs: int, requests: int) -> td.RunTable:
    t = td.RunTable(run="synth")
    t.pairs = list(range(1, pairs + 1))
    t.slots = {k + 1: {CONTROL: 2 * k, CAND: 2 * k + 1} for k in range(pairs)}
    names = ("output_token_throughput", "slo_attainment", "requests_completed",
             "error_rate", "output_tokens")
    cells = {m: td.CellData("agentfix", "prose", m) for m in names}
    for k in range(pairs):
        for m in cells.values():
            m.values[k + 1] = {}
        for arm in (CONTROL, CAND):
            p = min(1.0, max(0.0, ASSUMED_SHARE + rng.normal(0, share_jitter())))
            share = rng.binomial(requests, p) / requests
            tput = 1000.0 * math.exp(rng.normal(0, 0.03)) * (1.25 if arm == CAND else 1.0)
            for m, v in zip(names, (tput, share, requests, 0.0, 20000.0), strict=True):
                cells[m].values[k + 1][arm] = td.ArmValue(v, v, v, 1)
    for m, data in cells.items():
        t.cells[("agentfix", "prose", m)] = data
    return t


def test_the_assessment_matches_the_real_verdict(tmp_path: Path) -> None:
    """300 campaigns at the demo's design (11 pairs, 128 requests) with a 3-point limit:
    the verdict shows the share within it about as often as `check` says (normal
    approximation; measured: 81.9% said, 81.3% through judge_run at seed 5)."""
    said = _share(tmp_path, 0.03)
    pre = Preregistration(
        pairs=11, decision_cells=[{"workload": "agentfix", "level": "prose"}],
        slo={"ttft_ms": 40},
        guardrails=[{"metric": "slo_attainment", "max_worsening": 0.03}])
    r = rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)
    rng = np.random.default_rng(5)
    sims = 300
    adopted = sum(vd.judge_run(_campaign(rng, 11, 128), r, [CONTROL, CAND],
                               levels={"agentfix": ["prose"]}, metrics=[]).decision == "adopt"
                  for _ in range(sims)) / sims
    # 300 campaigns: a binomial sd of ~2.3 points; the approximation within ~3 more
    assert abs(adopted - said.shown_at_0) <= 0.08, (adopted, said.shown_at_0)


def test_a_p99_that_cannot_be_shown_names_the_share_as_another_statistic(
        tmp_path: Path) -> None:
    text = DEMO.read_text().replace("{metric: ttft_p99, max_worsening: 0.25}",
                                    "{metric: ttft_p99, max_worsening: 0.05}")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        refuse_unshowable(load_campaign(path))
    assert "or the share of requests within an SLO: slo_attainment" in str(err.value)
