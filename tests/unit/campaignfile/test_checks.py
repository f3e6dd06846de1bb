"""The cross-field checks `check` and `run` ask beyond the loader: a guardrail on a quantile
its passes are too small to give (`checks.thin_tails`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from campaign.campaignfile import load_campaign
from campaign.campaignfile.checks import refuse_thin_tails, thin_tails
from campaign.errors import SpecError
from tests.unit.campaignfile.test_campaignfile import sub, write

REFUSE = ("  decision_cells:", "  gates: {tail_requests: refuse}\n  decision_cells:")


def _thin(tmp_path: Path, *edits: tuple[str, str]) -> list[tuple[str, str, int, int]]:
    text = sub("  decision_cells:", "  decision_cells:")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    campaign = load_campaign(write(tmp_path, text))
    return [(t.metric, t.workload, t.requests, t.meaningful) for t in thin_tails(campaign)]


EVERYWHERE = ("  decision_cells:", "  guardrails: [{metric: ttft_p99, at: all}]\n"
              "  decision_cells:")


def test_a_p99_guardrail_needs_100_requests_per_level(tmp_path: Path) -> None:
    """The default guardrail (p99 TTFT where the decision is made: the knee here) on 8
    requests per knee level: one warning; checked everywhere (`at: all`), also on the 30
    requests per agent-fixture class: one warning per workload."""
    assert _thin(tmp_path) == [("ttft_p99", "knee", 8, 100)]
    assert _thin(tmp_path, EVERYWHERE) == [("ttft_p99", "knee", 8, 100),
                                           ("ttft_p99", "agentfix", 30, 100)]


def test_enough_requests_no_warning(tmp_path: Path) -> None:
    assert _thin(tmp_path, ("requests_per_level: 8", "requests_per_level: 100"),
                 ("      shell: shell.jsonl", "      shell: shell.jsonl\n    requests: 100")) == []


def test_the_knee_sweep_gives_every_level_its_largest_request_count(tmp_path: Path) -> None:
    """Without requests_per_level a level gets max(8, 4 × concurrency) requests, and AIPerf's
    one sweep gives every level the largest: 4 × 32 = 128 ≥ 100."""
    assert _thin(tmp_path, EVERYWHERE, ("concurrency: [1, 4]", "concurrency: [1, 32]"),
                 ("    requests_per_level: 8\n", "")) == [("ttft_p99", "agentfix", 30, 100)]


def test_only_quantiles_of_the_named_workload(tmp_path: Path) -> None:
    guards = ("  decision_cells:", "  guardrails:\n"
              "    - {metric: ttft_p50}\n"
              "    - {metric: itl_p99, workload: knee, max_worsening: 0.1}\n"
              "    - {metric: error_rate, absolute: true, max_worsening: 0}\n"
              "  decision_cells:")
    assert _thin(tmp_path, guards) == [("itl_p99", "knee", 8, 100)]
    duration = ("    requests_per_level: 8\n", "    duration_s: 30\n")
    assert _thin(tmp_path, guards, duration) == []  # unknown until measured


def test_refuse_exits_2_naming_each_guardrail_and_workload(tmp_path: Path) -> None:
    text = sub(*REFUSE).replace(*EVERYWHERE, 1)
    campaign = load_campaign(write(tmp_path, text))
    with pytest.raises(SpecError) as info:
        refuse_thin_tails(campaign)
    assert info.value.exit_code == 2 and len(info.value.problems) == 2
    assert info.value.problems[0].startswith(
        "preregistration.guardrails[0]: guardrail ttft_p99 at knee: 8 requests per level "
        "cannot give a p99 of their own (8 × 1% = 0.08 requests beyond it, fewer than 1")
    warned = load_campaign(write(tmp_path / "w", sub(*EVERYWHERE)))
    assert len(refuse_thin_tails(warned)) == 2  # `warn` (default): returned, not raised


def test_the_p99_of_too_few_requests_is_the_largest_one() -> None:
    """What the warning says, on numbers: below 100 requests numpy's linear p99 (AIPerf's)
    lies between the two slowest requests; from 100 on, a request beyond it exists."""
    rng = np.random.default_rng(3)
    for n in (8, 30, 99):
        x = np.sort(rng.lognormal(3, 0.3, n))
        assert x[-2] <= np.percentile(x, 99) <= x[-1]
    x = np.sort(rng.lognormal(3, 0.3, 100))
    assert np.percentile(x, 99) < x[-1] and (x > np.percentile(x, 99)).sum() == 1


# --------------------------------------------------------------------------- token shapes

HF = "hf_" + "Q7" * 17


@pytest.mark.parametrize(("old", "new", "where"), [
    ("hypothesis: depth 7 beats depth 5 at one stream",
     f"hypothesis: depth 7 beats depth 5 ({HF})", "hypothesis:"),
    ("lane: sim", f"lane: sim\nlog_captures:\n  spec: \"token {HF}\"", "log_captures.spec:"),
    ("  depth7:\n", f"  depth7:\n    description: \"tried with {HF}\"\n",
     "arms.depth7.description:"),
    ("lane: sim", f"lane: sim\nlog_captures:\n  {HF}: spec", "log_captures: a name"),
    ("lane: sim", f"lane: sim  # {HF}", "line 3"),
])
def test_a_token_in_any_free_text_field_is_refused_with_the_fix(
        tmp_path: Path, old: str, new: str, where: str) -> None:
    """A literal token in the hypothesis, a capture's regex, a description, a name or a
    comment would be frozen into every results folder (`campaign.yaml` is kept byte for
    byte): refused, named by its place, never quoted."""
    with pytest.raises(SpecError) as info:
        load_campaign(write(tmp_path, sub(old, new)))
    text = str(info.value)
    assert "Hugging Face token" in text and where in text, text
    assert "${HF_TOKEN}" in text and HF not in text


def test_a_frozen_copy_with_a_token_is_read_back(tmp_path: Path) -> None:
    path = write(tmp_path, sub("hypothesis: depth 7", f"hypothesis: {HF} depth 7"))
    assert load_campaign(path, check_files=False).hypothesis.startswith(HF)
