"""Pooling the shards of a sharded campaign (`lanes:`) into one verdict: what is pooled,
what is refused, and what the lanes add to the verdict (per-lane window check, the
lanes-disagree gate, pairs owed per lane)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest

from campaign import report as rp
from campaign.campaignfile import Preregistration
from campaign.errors import UsageError
from campaign.results.journal import PassRow
from campaign.results.store import RunStore
from campaign.verdict import stats as st
from tests.runs import T0, TPUT, frame, record_passes

C1 = ("knee", "c1", TPUT)


def campaign_text(lanes: tuple[str, ...] = ("a", "b"), **rule_kw: Any) -> bytes:
    rule_kw.setdefault("decision_cells", [{"workload": "knee", "level": "c1"}])
    rule_kw.setdefault("guardrails", [])
    rule = Preregistration(**rule_kw).model_dump(mode="json", by_alias=True)
    campaign = {
        "name": "demo",
        "hypothesis": "The candidate decodes faster at one stream.",
        "lanes": {lane: {"server": {"port": 8000 + i}} for i, lane in enumerate(lanes)},
        "preregistration": rule,
        "server": {"backend": "process", "command": ["serve"], "port": 8000},
        "arms": {"control": {}, "cand": {"env": {"K": "1"}}},
        "workloads": {"model": "m", "tokenizer": "t", "knee": {"concurrency": [1, 4]}},
    }
    return json.dumps(campaign, indent=1).encode()


def make_shard(root: Path, lane: str, values: list[tuple[float, float]], *,
               text: bytes | None = None, start: dt.datetime = T0, band: float = 0.03,
               complete: bool = True, lane_in_manifest: bool = True,
               plain: bool = False) -> Path:
    """A shard's results directory as `spec-ab run FILE --lane LANE` writes it: the
    campaign file frozen byte for byte, its lane in the journal and the manifest."""
    text = text or campaign_text()
    doc = json.loads(text)
    if plain:  # a run of a campaign without lanes
        doc.pop("lanes")
        doc["lane"] = lane
        text = json.dumps(doc, indent=1).encode()
    store = RunStore.create(root, f"demo-{lane}", text, clock=lambda: start,
                            short_id=f"{lane}{len(values)}"[:6].ljust(6, "0"))
    rule = doc["preregistration"]
    digest = store.register(rule, campaign="demo", arms=["control", "cand"], drift_band=band)
    store.journal_registered(sha256=digest, lane=lane)
    if lane_in_manifest:
        store.write_manifest({"campaign": {"name": "demo", "lane": lane}})
    df = frame({C1: list(values)}, run=store.run_id)
    shift = start - T0
    df["started_at"] = [(dt.datetime.fromisoformat(t.replace("Z", "+00:00")) + shift)
                        .isoformat().replace("+00:00", "Z") for t in df["started_at"]]
    rows = [PassRow(**r) for r in df.to_dict("records")]  # type: ignore[arg-type]
    return record_passes(store, rows, complete=complete)


def gains(*changes: float, base: float = 100.0) -> list[tuple[float, float]]:
    return [(base, base * (1 + c)) for c in changes]


def decision_cell(rep: rp.Report) -> Any:
    (cell,) = rep.latest.decision_cells()
    return cell


def test_two_shards_pool_into_one_verdict_over_both_lanes(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", gains(0.14, 0.15))
    b = make_shard(tmp_path, "b", gains(0.13, 0.16), start=T0 + dt.timedelta(minutes=5))
    rep = rp.build_report([b, a])  # any order
    run = rep.latest
    cell = decision_cell(rep)
    assert len(rep.runs) == 1 and run.decision == "adopt"
    assert cell.stats.n == 4 and cell.planned_pairs == 4 and not cell.flags
    # pairs numbered in the order they started: a's pair 1, b's pair 1, a's 2, b's 2
    assert run.lane_of == {1: "a", 2: "b", 3: "a", 4: "b"}
    assert [round(p.change, 3) for p in cell.pairs] == [0.14, 0.13, 0.15, 0.16]
    doc = rp.to_dict(rep)
    assert [s["lane"] for s in doc["lanes"]["shards"]] == ["a", "b"]
    assert doc["lanes"]["shards"][1]["pairs"] == [2, 4]
    assert doc["lanes"]["shards"][1]["shard_pairs"] == [1, 2]
    assert doc["lanes"]["missing"] == []
    (dc,) = doc["lanes"]["decision_cells"]
    assert dc["agree"] and [(x["lane"], x["n"]) for x in dc["by_lane"]] == [("a", 2), ("b", 2)]
    assert round(dc["by_lane"][0]["change"], 4) == round(math.sqrt(1.14 * 1.15) - 1, 4)
    cell_json = next(c for c in doc["cells"] if c["decision_cell"])
    assert [p["lane"] for p in cell_json["pairs"]] == ["a", "b", "a", "b"]
    assert doc["run"]["pairs_planned"] == 4 and doc["run"]["lane"] == "a, b"
    md = rp.render(rep, "markdown")
    assert "a: 2 pair(s) (pooled 1, 3), complete" in md
    assert "by lane: a +14.5% (2 pairs), b +14.5% (2 pairs) — the lanes agree" in md


def test_a_shard_whose_copies_disagree_makes_the_pooled_verdict_not_pre_registered(
        tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", gains(0.14, 0.15))
    b = make_shard(tmp_path, "b", gains(0.13, 0.16), start=T0 + dt.timedelta(minutes=5))
    path = b / "preregistration.json"
    path.chmod(0o644)
    path.write_text(path.read_text().replace('"registered_at"', '"registered_at" ', 1))
    run = rp.build_report([a, b]).latest
    assert run.exploratory and run.disagreements
    assert run.disagreements[0].startswith("b: preregistration.json and journal.jsonl disagree")


def test_lanes_that_disagree_are_flagged_not_averaged_away(tmp_path: Path) -> None:
    """+24% on one lane and +4% on the other average to +14%, which clears the bar with
    every pair beyond the band: pooled blindly under `point` it would adopt."""
    text = campaign_text(rule="point")
    a = make_shard(tmp_path, "a", gains(0.24, 0.24), text=text)
    b = make_shard(tmp_path, "b", gains(0.04, 0.04), text=text)
    rep = rp.build_report([a, b])
    cell = decision_cell(rep)
    assert "lanes-disagree" in cell.flags and cell.verdict == "inconclusive"
    assert "find what differs between the lanes" in rep.latest.verdict.settle
    assert any("lanes-disagree — not one change: a +24.0% (better) (2 pairs), b +4.0% "
               "(better) (2 pairs)" in r for r in cell.reasons)
    # the same pairs as one plain run adopt: the flag is what stops it
    plain = make_shard(tmp_path / "plain", "x", gains(0.24, 0.04, 0.24, 0.04), plain=True,
                       text=campaign_text(pairs=4, rule="point"))
    assert rp.build_report([plain]).latest.decision == "adopt"
    # under `bound` (the default) the pairs' spread alone already keeps its lower bound
    # below half the margin
    bound = make_shard(tmp_path / "bound", "x", gains(0.24, 0.04, 0.24, 0.04), plain=True,
                       text=campaign_text(pairs=4))
    assert rp.build_report([bound]).latest.decision == "keep-default"


def test_lanes_test_matches_its_formula() -> None:
    d = [math.log(1.12)] * 2 + [math.log(0.98)] * 2
    mean = sum(d) / 4
    stat = 2 * (math.log(1.12) - mean) ** 2 + 2 * (math.log(0.98) - mean) ** 2
    from scipy import stats as sp

    assert st.lanes_test(d, ["a", "a", "b", "b"], 0.04) == pytest.approx(
        sp.chi2.sf(stat / 0.04**2, 1))
    assert st.lanes_test(d, ["a"] * 4, 0.04) is None
    assert st.lanes_test([0.1, 0.1, 0.1], ["a", "b", "c"], 0.04) == pytest.approx(1.0)


def test_each_lane_is_its_own_window(tmp_path: Path) -> None:
    """Lane a's control climbs 30% across its window while lane b's falls 30%: each
    lane's window was unstable, though the two slopes cancel when the lanes' pairs are
    taken as one window."""
    up = [(100.0 * 1.09**i, 100.0 * 1.09**i * 1.15) for i in range(4)]
    down = [(140.0 / 1.09**i, 140.0 / 1.09**i * 1.15) for i in range(4)]
    a = make_shard(tmp_path, "a", up, text=campaign_text(pairs=4))
    b = make_shard(tmp_path, "b", down, text=campaign_text(pairs=4))
    cell = decision_cell(rp.build_report([a, b]))
    assert "window-drift" in cell.flags and cell.verdict == "inconclusive"
    assert any("window-drift: the control itself moved" in r and "on lane " in r
               for r in cell.reasons)
    steady = make_shard(tmp_path / "s", "a", gains(0.15, 0.15, 0.15, 0.15),
                        text=campaign_text(pairs=4))
    faster = make_shard(tmp_path / "s", "b", [(140.0, 161.0)] * 4, text=campaign_text(pairs=4))
    assert "window-drift" not in decision_cell(rp.build_report([steady, faster])).flags


def test_a_lane_with_no_shard_leaves_the_pooled_verdict_incomplete(tmp_path: Path) -> None:
    text = campaign_text(lanes=("a", "b", "c"))
    a = make_shard(tmp_path, "a", gains(0.2, 0.2), text=text)
    b = make_shard(tmp_path, "b", gains(0.2, 0.2), text=text)
    rep = rp.build_report([a, b])
    cell = decision_cell(rep)
    assert rep.latest.decision == "keep-default" and rep.latest.incomplete
    assert "incomplete" in cell.flags and cell.planned_pairs == 6
    assert any("lane(s) c: no shard given" in n for n in rep.latest.notes)
    assert rp.to_dict(rep)["lanes"]["missing"] == ["c"]
    assert rp.exit_code_for(rep, ["incomplete"]) == 4


@pytest.mark.parametrize(("second", "expected"), [
    ({"text": campaign_text(margin=0.05)},
     ["the frozen campaign file", "the registered rule", "a (", "b ("]),
    ({"band": 0.02}, ["the registered values"]),
    ({"lane": "a"}, ["lane 'a' is given twice"]),
    ({"plain": True}, ["are shards of a sharded campaign", "are not"]),
])
def test_shards_that_do_not_belong_together_are_refused(
        tmp_path: Path, second: dict[str, Any], expected: list[str]) -> None:
    a = make_shard(tmp_path, "a", gains(0.2, 0.2))
    lane = second.pop("lane", "b")
    b = make_shard(tmp_path, lane, gains(0.2, 0.2), start=T0 + dt.timedelta(days=1), **second)
    with pytest.raises(UsageError) as exc:
        rp.build_report([a, b])
    assert all(e in str(exc.value) for e in expected), str(exc.value)
    assert exc.value.exit_code == 2


def test_plain_runs_stay_a_history(tmp_path: Path) -> None:
    one = make_shard(tmp_path, "x", gains(0.2, 0.2), plain=True)
    two = make_shard(tmp_path, "y", gains(0.2, 0.2), plain=True,
                     start=T0 + dt.timedelta(days=1))
    rep = rp.build_report([one, two])
    assert len(rep.runs) == 2 and rep.latest.pooled is None
    assert rp.to_dict(rep)["lanes"] is None


def test_the_lane_comes_from_the_journal_when_the_manifest_lacks_it(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", gains(0.2, 0.2), lane_in_manifest=False)
    b = make_shard(tmp_path, "b", gains(0.2, 0.2), lane_in_manifest=False)
    assert rp.build_report([a, b]).latest.lane_of == {1: "a", 2: "b", 3: "a", 4: "b"}


def test_a_shard_alone_has_no_verdict_of_its_own(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", gains(0.14, 0.16))
    lines = rp.summary_lines(rp.build_report([a]))
    assert lines[0] == ("Shard of lane a: 2 of 2 pairs, complete; no verdict until every "
                        "lane's shard is pooled (a, b)")
    assert "knee c1 output_token_throughput by lane: a +15.0% (2 pairs) — one lane" in lines[1]
    assert lines[-1] == f"  pool: spec-ab report {a} <b's run directory>"
    assert not any("Decision:" in line for line in lines)


def test_lanes_that_disagree_are_unstable_and_shown_in_every_format(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", gains(0.24, 0.24))
    b = make_shard(tmp_path, "b", gains(0.04, 0.04))
    rep = rp.build_report([a, b])
    assert rp.exit_code_for(rep, ["unstable"]) == 4
    wanted = "a +24.0% (2 pairs), b +4.0% (2 pairs) — the lanes DISAGREE (lanes-disagree)"
    for fmt in ("table", "markdown", "html"):
        text = rp.render(rep, fmt, width=200)
        assert wanted in text.replace("\n", " ").replace("  ", " "), fmt


def test_the_window_plot_draws_each_lane_as_its_own_window(tmp_path: Path) -> None:
    from campaign.report import plots

    a = make_shard(tmp_path, "a", gains(0.14, 0.16))
    b = make_shard(tmp_path, "b", [(140.0, 161.0), (141.0, 162.0)])
    fig = plots.control_window(rp.build_report([a, b]).latest)
    assert fig is not None
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in fig.axes[0].get_lines()}
    assert lines == {"control (knee c1), lane a": [100.0, 100.0],
                     "control (knee c1), lane b": [140.0, 141.0]}


def test_shards_of_different_nights_do_not_pool(tmp_path: Path) -> None:
    """Lane a registered on 11-28 and lane b four days later, from the same unchanged
    file (equal hashes): two registrations, not one. Picking one lane's best night would
    otherwise raise the false-adopt rate."""
    a = make_shard(tmp_path, "a", gains(0.14, 0.15))
    b = make_shard(tmp_path, "b", gains(0.13, 0.16), start=T0 + dt.timedelta(days=4))
    assert (a / "campaign.yaml").read_bytes() == (b / "campaign.yaml").read_bytes()
    with pytest.raises(UsageError) as exc:
        rp.build_report([a, b])
    text = str(exc.value)
    assert exc.value.exit_code == 2
    assert f"lane a's shard ({a.name}) was registered 2026-11-28T22:00:00.000Z" in text
    assert f"lane b's ({b.name}) 2026-12-02T22:00:00.000Z, 96.0 hours apart" in text
    assert "pool the shards of one night" in (exc.value.hint or "")
    late = make_shard(tmp_path / "late", "b", gains(0.13, 0.16),
                      start=T0 + dt.timedelta(hours=11, minutes=59))
    assert rp.build_report([a, late]).latest.decision == "adopt"  # one night: pooled
