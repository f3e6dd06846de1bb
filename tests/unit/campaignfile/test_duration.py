"""The duration estimate says what it assumes about this campaign, not about every lane."""

from __future__ import annotations

from campaign.campaignfile import load_campaign
from campaign.campaignfile.duration import estimate, pairs_said
from campaign.fmt import clock
from tests.runs import ROOT


def test_a_process_lane_is_not_said_to_boot_like_docker() -> None:
    """Issue "The first night, for a newcomer", 12: the demo's estimate named a 420 s
    Docker boot though its lane is a process."""
    said = estimate(load_campaign(ROOT / "examples" / "sim-pair.yaml")).assumptions
    assert "boot 5 s (process)" in said and "docker" not in said


def test_a_docker_lane_says_its_own_boot() -> None:
    said = estimate(load_campaign(ROOT / "examples" / "gb300-dspark-onlinevc.yaml")).assumptions
    assert "boot 420 s (docker)" in said and "(process)" not in said


def test_a_sequential_campaign_is_estimated_as_a_range_of_pairs() -> None:
    """Issue "The first night, for a newcomer", 4: a sequential design was estimated as if
    it always ran its max_pairs; it may stop at its first look."""
    c = load_campaign(ROOT / "examples" / "sim-sequential.yaml")
    design = c.preregistration.sequential
    assert design is not None
    est = estimate(c)
    assert (est.min_pairs, est.pairs) == (design.schedule()[0], design.max_pairs)
    assert est.min_total_s == est.total_s * est.min_pairs / est.pairs < est.total_s
    said = est.length()
    assert said.startswith(f"{clock(est.min_total_s)} to {clock(est.total_s)} (at least "
                           f"{est.min_pairs} pairs, at most {est.pairs}: ")
    assert "may stop early" in said
    assert pairs_said(c) == (f"up to {design.max_pairs} pairs, looks from pair "
                             f"{design.schedule()[0]}, may stop early")


def test_a_fixed_campaign_is_estimated_at_its_pairs() -> None:
    c = load_campaign(ROOT / "examples" / "sim-pair.yaml")
    est = estimate(c)
    assert est.min_pairs == est.pairs == c.preregistration.pairs
    assert est.length() == clock(est.total_s)
    assert pairs_said(c) == f"{c.preregistration.pairs} pairs"
