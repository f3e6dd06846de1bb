"""Pairs × arms → slots, in the pre-registered order."""

from __future__ import annotations

import pytest

from campaign.campaignfile.schedule import plan_slots


def arms_by_pair(pairs: int, arms: list[str], order: str, seed: int = 0) -> list[list[str]]:
    out: dict[int, list[str]] = {}
    for s in plan_slots(pairs, arms, order, seed):  # type: ignore[arg-type]
        out.setdefault(s.pair, []).append(s.arm)
    return [out[p] for p in sorted(out)]


def test_ab() -> None:
    assert arms_by_pair(3, ["control", "b"], "AB") == [["control", "b"]] * 3


def test_abba_alternates() -> None:
    assert arms_by_pair(4, ["control", "b"], "ABBA") == [
        ["control", "b"], ["b", "control"], ["control", "b"], ["b", "control"]]


def test_multi_candidate_blocks_keep_every_candidate_in_the_window() -> None:
    blocks = arms_by_pair(2, ["control", "b", "c"], "AB")
    assert blocks == [["control", "b", "c"], ["control", "b", "c"]]


def test_random_is_seeded_and_a_permutation() -> None:
    a = arms_by_pair(8, ["control", "b", "c"], "random", seed=5)
    b = arms_by_pair(8, ["control", "b", "c"], "random", seed=5)
    c = arms_by_pair(8, ["control", "b", "c"], "random", seed=6)
    assert a == b and a != c
    assert all(sorted(block) == ["b", "c", "control"] for block in a)
    assert len({tuple(block) for block in a}) > 1  # not one fixed order


def test_slot_indices_and_positions() -> None:
    slots = plan_slots(2, ["control", "b"], "ABBA")
    assert [s.index for s in slots] == [0, 1, 2, 3]
    assert [(s.pair, s.position, s.arm) for s in slots] == [
        (1, 0, "control"), (1, 1, "b"), (2, 0, "b"), (2, 1, "control")]
    assert slots[2].key == "02/b"


def test_every_other_lane_starts_abba_with_ba() -> None:
    """Three pairs a lane in ABBA: one lane alone puts the control first twice in three;
    two lanes pooled put it first in exactly half their pairs."""
    def arms(lane: int) -> list[list[str]]:
        out: dict[int, list[str]] = {}
        for s in plan_slots(3, ["control", "b"], "ABBA", lane=lane):
            out.setdefault(s.pair, []).append(s.arm)
        return [out[p] for p in sorted(out)]
    assert arms(0) == arms_by_pair(3, ["control", "b"], "ABBA")
    assert arms(1) == [["b", "control"], ["control", "b"], ["b", "control"]]
    assert arms(2) == arms(0)
    firsts = [block[0] for lane in (0, 1) for block in arms(lane)]
    assert firsts.count("control") == 3


def test_each_lane_shuffles_from_a_stream_of_its_own() -> None:
    def arms(lane: int) -> list[tuple[str, ...]]:
        out: dict[int, list[str]] = {}
        for s in plan_slots(12, ["control", "b", "c"], "random", 5, lane):
            out.setdefault(s.pair, []).append(s.arm)
        return [tuple(out[p]) for p in sorted(out)]
    assert arms(0) == [tuple(b) for b in arms_by_pair(12, ["control", "b", "c"], "random", 5)]
    assert len({tuple(arms(lane)) for lane in range(4)}) == 4
    assert arms(1) == arms(1)  # seeded, not drawn at run time
    assert [a for a in plan_slots(2, ["control", "b"], "AB", lane=3)] == \
        plan_slots(2, ["control", "b"], "AB")


@pytest.mark.parametrize("pairs, arms", [(0, ["control", "b"]), (1, ["control"]),
                                         (1, ["control", "control"])])
def test_bad_input(pairs: int, arms: list[str]) -> None:
    with pytest.raises(ValueError):
        plan_slots(pairs, arms, "AB")


def test_a_negative_lane_is_refused() -> None:
    with pytest.raises(ValueError, match="lane"):
        plan_slots(2, ["control", "b"], "AB", lane=-1)
