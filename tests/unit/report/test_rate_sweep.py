"""The report of a rate sweep: each arm's capacity at SLO, the crossover line per
candidate, the latency-against-rate plot, and acceptance per session turn — over a
results directory written through the store's own API (fabricated passes and journal)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from campaign import report as rp
from campaign.campaignfile import Preregistration
from campaign.report import plots
from campaign.report.turns import from_journal, session_turns
from campaign.results.journal import PassRow
from campaign.results.registration import CellRef, RegisteredLevels
from campaign.results.store import RunStore
from tests.runs import T0, frame, record_passes

RATES = (2, 4, 8, 16)
CONTROL_SLO = (0.99, 0.98, 0.93, 0.40)
CAND_SLO = (0.99, 0.99, 0.95, 0.30)
TTFT = (100.0, 110.0, 150.0, 500.0)
CAND_TTFT = (0.82, 0.85, 1.01, 1.40)  # better at light load, worse past saturation
TURNS = {"coding": [
    {"turn": 0, "requests": 8, "ttft_p50": 40.0, "itl_p50": 9.0, "acceptance": 0.60,
     "tokens_per_step": 2.2},
    {"turn": 1, "requests": 8, "ttft_p50": 30.0, "itl_p50": 9.0, "acceptance": 0.70,
     "tokens_per_step": 2.6}]}


def _spec(cand_slo: tuple[float, ...] = CAND_SLO
          ) -> dict[tuple[str, str, str], list[tuple[Any, ...]]]:
    spec: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    wiggle = (1.0, 1.01, 0.99)
    for i, rate in enumerate(RATES):
        lvl = f"r{rate}"
        spec[("rate", lvl, "slo_attainment")] = [(CONTROL_SLO[i], cand_slo[i])] * 3
        for metric, scale in (("ttft_p50", 1.0), ("ttft_p99", 2.5),
                              ("request_latency_p50", 6.0)):
            spec[("rate", lvl, metric)] = [
                (TTFT[i] * scale * w, TTFT[i] * scale * w * CAND_TTFT[i] * w2)
                for w, w2 in zip(wiggle, (1.0, 0.995, 1.005), strict=True)]
    return spec


def rate_run(root: Path, turns: bool = False,
             cand_slo: tuple[float, ...] = CAND_SLO) -> Path:
    rule = Preregistration(
        pairs=3, primary_metric="capacity_at_slo", guardrails=[],
        decision_cells=[{"workload": "rate", "level": "capacity"}],
        slo={"ttft_ms": 500}).model_dump(mode="json", by_alias=True)
    campaign = {
        "name": "rates", "hypothesis": "Deeper drafts pay at light load.", "lane": "sim",
        "preregistration": rule,
        "server": {"backend": "process", "command": ["serve"], "port": 8000},
        "arms": {a: {"description": a, "env": {"K": str(i)}}
                 for i, a in enumerate(("control", "cand"))},
        "workloads": {"model": "m", "tokenizer": "t", "rate": {"rates": list(RATES)}},
    }
    store = RunStore.create(root, "rates", json.dumps(campaign, indent=1).encode(),
                            clock=lambda: T0, short_id="rrrrrr")
    # the capacity cell as registered (written out: `check` may not know it yet)
    levels = RegisteredLevels(decision_cells=[CellRef(workload="rate", level="capacity")],
                              guardrails=[])
    digest = store.register(rule, campaign="rates", arms=["control", "cand"],
                            drift_band=0.03, levels=levels, guardrail_bands=[])
    store.journal_registered(sha256=digest, lane="sim")
    if turns:
        for pair in (1, 2, 3):
            for arm in ("control", "cand"):
                store.journal("pass", pair=pair, pair_attempt=1, arm=arm, name="coding",
                              workload="sessions", valid=True, rows=[], turns=TURNS)
    spec = _spec(cand_slo)
    if turns:
        spec[("sessions", "coding", "output_token_throughput")] = [(100.0, 110.0)] * 3
    df = frame(spec, run=store.run_id)
    return record_passes(store, [PassRow(**r) for r in df.to_dict("records")])


def test_markdown_says_each_arms_capacity_and_the_crossover(tmp_path: Path) -> None:
    text = rp.render(rp.build_report([rate_run(tmp_path)]), "markdown")
    control = 8 + 8 * 0.03 / 0.53
    cand = 8 + 8 * 0.05 / 0.65
    assert (f"capacity at SLO (90% of requests within the SLO), control: {control:.4g} "
            f"req/s (median of 3 pairs, {control:.4g}–{control:.4g})") in text
    assert f"capacity at SLO (90% of requests within the SLO), cand: {cand:.4g} req/s" in text
    assert ("rate sweep, cand vs control: r2: candidate better (latency p50 -18.0%); "
            "r4: better (-15.0%); r8: no clear change (+1.0%); r16: worse (+40.0%): "
            "cand stops paying between 4 and 16 req/s") in text


@pytest.mark.parametrize("fmt", ["table", "html"])
def test_every_text_format_has_the_sweep_lines(tmp_path: Path, fmt: rp.Format) -> None:
    text = " ".join(rp.render(rp.build_report([rate_run(tmp_path, turns=True)]),
                              fmt).split())
    assert "cand stops paying between 4 and 16 req/s" in text
    assert "capacity at SLO (90% of requests within the SLO), control:" in text
    assert "acceptance per session turn, cand" in text


def test_json_carries_capacity_per_arm_and_the_crossover(tmp_path: Path) -> None:
    out = json.loads(rp.render(rp.build_report([rate_run(tmp_path)]), "json"))
    sweep = out["rate_sweep"]
    assert sweep["target"] == 0.9
    assert [(c["arm"], round(c["value"], 4), c["bound"]) for c in sweep["capacity"]] == [
        ("control", round(8 + 8 * 0.03 / 0.53, 4), ""),
        ("cand", round(8 + 8 * 0.05 / 0.65, 4), "")]
    [x] = sweep["crossover"]
    assert (x["arm"], x["metric"], x["between"]) == ("cand", "request_latency_p50", [4.0, 16.0])
    assert [s["verdict"] for s in x["levels"]] == ["better", "better", "no clear change",
                                                  "worse"]
    decision = [c for c in out["cells"] if c["decision_cell"]]
    assert [(c["workload"], c["level"], c["metric"]) for c in decision] == [
        ("rate", "capacity", "capacity_at_slo")]


def test_the_plot_draws_latency_against_rate_with_each_capacity(tmp_path: Path) -> None:
    rep = rp.build_report([rate_run(tmp_path)])
    figs = {name: fig for name, _, fig in plots.figures(rep)}
    fig = figs["rates"]
    top, bottom = fig.axes[:2]
    gids = {line.get_gid() for line in top.get_lines()}
    assert {"capacity:control", "capacity:cand"} <= gids
    labels = [line.get_label() for line in top.get_lines()]
    assert "control TTFT p50" in labels and "cand TTFT p99" in labels
    xs = next(line.get_xdata() for line in top.get_lines()
              if line.get_label() == "control TTFT p50")
    assert list(xs) == [2.0, 4.0, 8.0, 16.0]
    assert bottom.get_ylabel().startswith("requests within")


def test_acceptance_per_session_turn_from_the_journal(tmp_path: Path) -> None:
    text = rp.render(rp.build_report([rate_run(tmp_path, turns=True)]), "markdown")
    assert "acceptance per session turn, control" in text
    assert "| coding | 1 | 24 | 0.7 | 2.6 | 30 |" in text
    out = json.loads(rp.render(rp.build_report([rate_run(tmp_path / "j", turns=True)]), "json"))
    assert out["session_turns"]["cand"]["coding"][0] == {
        "turn": 0, "requests": 24, "acceptance": 0.6, "tokens_per_step": 2.2,
        "ttft_p50": 40.0}


def test_per_turn_figures_are_weighted_by_requests() -> None:
    passes = [("control", {"shell": [{"turn": 0, "requests": 10, "acceptance": 0.5,
                                      "ttft_p50": 20.0}]}),
              ("control", {"shell": [{"turn": 0, "requests": 30, "acceptance": 0.9,
                                      "tokens_per_step": None, "ttft_p50": 40.0}]}),
              ("cand", {"shell": [{"turn": 2, "requests": 5}]})]
    got = session_turns(passes, ["control", "cand"])
    assert got is not None
    (arm, rows), (arm2, rows2) = got.arms
    assert (arm, rows[0].requests, round(rows[0].acceptance or 0, 6),
            rows[0].tokens_per_step, rows[0].ttft_p50) == ("control", 40, 0.8, None, 30.0)
    assert (arm2, rows2[0].cells()) == ("cand", ("shell", "2", "5", "—", "—", "—"))
    events = [{"event": "pass", "pair": 1, "arm": "cand", "name": "s", "valid": True,
               "pair_attempt": 1, "turns": {"a": []}},
              {"event": "pass", "pair": 1, "arm": "cand", "name": "s", "valid": False,
               "pair_attempt": 1, "turns": {"b": []}},
              {"event": "pass", "pair": 1, "arm": "cand", "name": "s", "valid": True,
               "pair_attempt": 2, "turns": {"c": []}}]
    assert from_journal(events) == [("cand", {"c": []})]


def test_the_sweep_and_the_turns_in_json_match_the_schema(tmp_path: Path) -> None:
    from tests.unit.report.test_report import SCHEMA, _validate

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    doc = json.loads(rp.render(rp.build_report([rate_run(tmp_path, turns=True)]), "json"))
    assert {"rate_sweep", "session_turns"} <= set(doc) <= set(schema["properties"])
    assert _validate(doc, schema, schema, "$") == []
    doc["rate_sweep"]["capacity"][0]["bound"] = "about"
    del doc["session_turns"]["cand"]["coding"][0]["requests"]
    errs = _validate(doc, schema, schema, "$")
    assert any("bound" in e for e in errs) and any("missing requests" in e for e in errs)


def test_the_reading_guide_pastes_what_the_report_prints(tmp_path: Path) -> None:
    from tests.runs import ROOT

    doc = (ROOT / "docs" / "reading-a-report.md").read_text(encoding="utf-8")
    block = doc.split("adds its own lines before the cells", 1)[1].split("```")[1]
    pasted = [line for line in block.splitlines() if line]
    rep = rp.build_report([rate_run(tmp_path)])
    assert rep.latest.rate_sweep is not None
    assert pasted == rep.latest.rate_sweep.lines()


def test_a_censored_capacity_is_marked_in_the_report_words(tmp_path: Path) -> None:
    """The candidate meets the target at every rate: its capacity is at least the top
    rate, marked `≥`, and the decision cell says its change is understated."""
    rep = rp.build_report([rate_run(tmp_path, cand_slo=(0.99, 0.99, 0.97, 0.95))])
    text = rp.render(rep, "markdown")
    assert ("capacity at SLO (90% of requests within the SLO), cand: ≥ 16 req/s "
            "(median of 3 pairs, 16–16)") in text
    assert ("capacity censored: cand met the SLO target at every rate measured in 3 "
            "pair(s): its capacity there is at least the top rate (≥), not measured "
            "beyond it") in text
