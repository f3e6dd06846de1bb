"""The look the runner takes after a pair under a sequential design (`run.sequential`), in
process on run directories written with the store's API: a look that decides stops the
night and is journaled with what it saw; a look that is not due, or a fixed design, does
nothing; a look on a damaged file is journaled with its problem and the night goes on;
and the pair a journaled look stopped after is what a resumed session reads back."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from campaign.campaignfile import Campaign, load_campaign
from campaign.results import journal as jr
from campaign.results.store import RunStore
from campaign.run import sequential
from campaign.run.runtime import Runtime
from tests.runs import TPUT, make_run

CELL = ("knee", "c1", TPUT)
GAIN = [(1000.0, 1250.0), (1000.0, 1262.0), (1000.0, 1255.0)]
"""A +25% change: the design adopts at its second look (pair 3), not at its first."""


class Said:
    """The progress sink: what the runner would print."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **data: Any) -> None:
        self.events.append((event, data))


def _night(tmp_path: Path, values: Sequence[tuple[float, ...]], **kw: Any
           ) -> tuple[Campaign, RunStore, Runtime, Said]:
    kw.setdefault("sequential", {"max_pairs": 6})
    run_dir = make_run(tmp_path, {CELL: list(values)}, guardrails=[], complete=False, **kw)
    campaign = load_campaign(run_dir / "campaign.yaml", check_files=False)
    said = Said()
    return campaign, RunStore.open(run_dir), Runtime(progress=said), said


def _looks(store: RunStore) -> list[Mapping[str, Any]]:
    return jr.of_kind(store.read_journal(), "look")


def test_a_look_that_decides_stops_the_night_and_is_journaled(tmp_path: Path) -> None:
    campaign, store, rt, said = _night(tmp_path, GAIN)
    assert sequential.take_look(campaign, store, rt, 3) is True
    (look,) = _looks(store)
    assert look["pair"] == 3 and look["stop"] is True
    assert look["look"] == 2  # the design's looks at pairs 2 and 3
    cand = look["candidates"]["cand"]
    assert cand["state"] == "adopt" and cand["pairs"] == 3
    (cell,) = cand["cells"]
    assert cell["outcome"] == "adopt" and 0.2 < cell["change"] < 0.3
    assert "problem" not in look
    # strict JSON (no infinity): a bound never crossed is journaled as null
    json.dumps(look, allow_nan=False)
    # said once, with the report's own words
    (event, data), = said.events
    assert event == "look" and data["pair"] == 3 and data["stop"] is True
    (line,) = data["lines"]
    assert "look 2 of ≤ 5 (pair 3)" in line and not line.startswith("cand:")
    # a session resumed later reads where the night stopped
    assert sequential.decided_before(store.read_journal()) == 3


def test_an_undecided_look_is_journaled_and_the_night_goes_on(tmp_path: Path) -> None:
    campaign, store, rt, said = _night(tmp_path, [(1000.0, 1120.0), (1000.0, 1020.0)])
    assert sequential.take_look(campaign, store, rt, 2) is False
    (look,) = _looks(store)
    assert look["pair"] == 2 and look["stop"] is False and look["look"] == 1
    assert look["candidates"]["cand"]["state"] not in ("adopt", "keep-default")
    assert said.events[0][1]["stop"] is False
    assert any("look 1 of ≤ 5 (pair 2)" in line for line in said.events[0][1]["lines"])
    assert sequential.decided_before(store.read_journal()) is None


def test_with_two_candidates_the_night_stops_only_when_both_are_decided(
        tmp_path: Path) -> None:
    arms = ("control", "a", "b")
    both = [(1000.0, 1250.0, 1251.0), (1000.0, 1262.0, 1258.0), (1000.0, 1255.0, 1249.0)]
    campaign, store, rt, said = _night(tmp_path / "both", both, arms=arms)
    assert sequential.take_look(campaign, store, rt, 3) is True
    lines = said.events[0][1]["lines"]
    assert [line.split(":", 1)[0] for line in lines] == ["a", "b"]  # each named, in order
    assert set(_looks(store)[0]["candidates"]) == {"a", "b"}

    one = [(1000.0, 1250.0, 1120.0), (1000.0, 1262.0, 1020.0), (1000.0, 1255.0, 1060.0)]
    campaign, store, rt, said = _night(tmp_path / "one", one, arms=arms)
    assert sequential.take_look(campaign, store, rt, 3) is False
    (look,) = _looks(store)
    assert look["stop"] is False and look["candidates"]["a"]["state"] == "adopt"
    assert look["candidates"]["b"]["state"] not in ("adopt", "keep-default")


def test_no_look_before_min_pairs_or_without_a_design(tmp_path: Path) -> None:
    campaign, store, rt, said = _night(tmp_path / "seq", GAIN[:1])
    assert not sequential.due(campaign, 1)
    assert sequential.due(campaign, 2) and sequential.due(campaign, 6)
    assert sequential.take_look(campaign, store, rt, 1) is False
    fixed, fstore, frt, fsaid = _night(tmp_path / "fixed", GAIN, sequential=None, pairs=3)
    assert sequential.take_look(fixed, fstore, frt, 3) is False
    assert _looks(store) == [] and _looks(fstore) == []
    assert said.events == [] and fsaid.events == []


def test_a_look_on_a_damaged_file_is_journaled_with_its_problem_and_the_night_goes_on(
        tmp_path: Path) -> None:
    campaign, store, rt, said = _night(tmp_path, GAIN)
    (store.run_dir / "preregistration.json").write_text("{ not json")
    assert sequential.take_look(campaign, store, rt, 3) is False  # never stops the night
    (look,) = _looks(store)
    assert look["pair"] == 3 and look["stop"] is False
    assert "preregistration.json" in look["problem"]
    (event, data), = said.events
    assert event == "look" and data["stop"] is False
    (line,) = data["lines"]
    assert line.startswith("look after pair 3: not judged (") and line.endswith("going on")
    assert sequential.decided_before(store.read_journal()) is None


def test_the_earliest_stopping_look_is_where_the_night_stopped() -> None:
    events = [{"event": "look", "pair": 2, "stop": False},
              {"event": "look", "pair": 4, "stop": True},
              {"event": "look", "pair": 3, "stop": True},
              {"event": "pair_done", "pair": 5}]
    assert sequential.decided_before(events) == 3
    assert sequential.decided_before([]) is None
    # a look taken again by a resumed session: its last journaling counts
    assert sequential.decided_before([{"event": "look", "pair": 2, "stop": True},
                                  {"event": "look", "pair": 2, "stop": False}]) is None
