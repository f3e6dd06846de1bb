"""The duration estimate says what it assumes about this campaign, not about every lane."""

from __future__ import annotations

from campaign.campaignfile import load_campaign
from campaign.campaignfile.duration import estimate
from tests.runs import ROOT


def test_a_process_lane_is_not_said_to_boot_like_docker() -> None:
    """Issue "The first night, for a newcomer", 12: the demo's estimate named a 420 s
    Docker boot though its lane is a process."""
    said = estimate(load_campaign(ROOT / "examples" / "sim-pair.yaml")).assumptions
    assert "boot 5 s (process)" in said and "docker" not in said


def test_a_docker_lane_says_its_own_boot() -> None:
    said = estimate(load_campaign(ROOT / "examples" / "gb300-dspark-onlinevc.yaml")).assumptions
    assert "boot 420 s (docker)" in said and "(process)" not in said
