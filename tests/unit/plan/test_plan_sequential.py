"""The plan of a sequential design: its figures, the fixed design beside it, and its
cross-check through the real verdict (`judge_run`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from campaign.campaignfile import Preregistration
from campaign.plan.sequential import plan_sequential
from campaign.verdict import rule as rl
from tests.cli import invoke
from tests.runs import ROOT


def _rule(max_pairs: int) -> rl.Rule:
    pre = Preregistration(decision_cells=[{"workload": "knee", "level": "c1"}], guardrails=[],
                          sequential={"max_pairs": max_pairs})
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)


def test_the_design_of_the_example_beats_the_fixed_design_it_replaces() -> None:
    """examples/sim-sequential.yaml (max_pairs 6) on the assumed lane noise σ0: the same or
    better error rates than the fixed design that meets the targets (4 pairs), with fewer
    expected pairs at no change and at 2m."""
    r = _rule(6)
    plan = plan_sequential(r, r.pair_sd, sims=3000, seed=1, check=20)
    rows = {row.label: row for row in plan.rows}
    assert plan.fixed_pairs == 4
    assert rows["m/2"].adopt <= min(0.05, rows["m/2"].fixed_adopt + 0.005)
    assert rows["1.5m"].adopt >= max(0.90, rows["1.5m"].fixed_adopt)
    assert rows["0"].expected_pairs < plan.fixed_pairs
    assert rows["2m"].expected_pairs < plan.fixed_pairs
    assert rows["0"].adopt == 0.0
    for row in plan.rows:
        assert abs(row.adopt + row.keep_default + row.inconclusive - 1) < 1e-9
    assert plan.recommended_max_pairs is not None and plan.recommended_max_pairs <= 6
    assert plan.checked == 20 and plan.disagree == 0


def test_a_noisier_lane_needs_a_larger_max_pairs() -> None:
    r = _rule(6)
    quiet = plan_sequential(r, r.pair_sd, sims=1500, seed=2, check=0)
    noisy = plan_sequential(r, 2 * r.pair_sd, sims=1500, seed=2, check=0)
    assert quiet.recommended_max_pairs is not None and noisy.recommended_max_pairs is not None
    assert noisy.recommended_max_pairs > quiet.recommended_max_pairs
    rows = {row.label: row for row in noisy.rows}
    assert rows["m/2"].adopt <= 0.05  # valid whatever the noise; power is what it costs
    assert rows["1.5m"].adopt < 0.9


def test_plan_of_the_sequential_example_has_its_figures_in_json() -> None:
    from campaign.campaignfile import load_campaign
    from campaign.plan.campaign import plan_campaign
    from campaign.plan.render import plan_json
    from tests.runs import ROOT

    campaign = load_campaign(ROOT / "examples" / "sim-sequential.yaml")
    doc = plan_json(plan_campaign(campaign, effect=0.15, noise_run=None, drift=None,
                                  sims=400, pairs=4))
    rows = doc["sequential"]
    assert [r["name"] for r in rows] == ["0", "m/2", "m", "1.5m", "2m"]
    for r in rows:
        assert {"effect", "adopt", "keep_default", "inconclusive", "expected_pairs"} <= set(r)
        assert 2 <= r["expected_pairs"] <= 12
    design = doc["sequential_design"]
    assert design["max_pairs"] == 12 and design["judge_run_disagree"] == 0
    assert design["judge_run_checked"] > 0
    # the fixed table beside it is the fixed `bound` design (no sequential rule in it)
    assert doc["rule"]["used"] == "bound" and doc["table"][0]["pairs"] == 1


def test_plan_says_what_unequal_lane_noise_costs() -> None:
    """2 lanes, the second twice as noisy: the lanes-disagree flag (which assumes equal
    noise) fires on no change far beyond its share, and power falls; the false adopt at
    m/2 stays within the registered 5% (cross-checked through judge_run)."""
    from campaign.campaignfile import load_campaign
    from campaign.plan.campaign import plan_campaign
    from campaign.plan.render import plan_json
    from tests.runs import ROOT

    campaign = load_campaign(ROOT / "examples" / "sim-pair.yaml")
    result = plan_campaign(campaign, effect=0.15, noise_run=None, drift=None, sims=600,
                           pairs=2)
    u = result.unequal_lanes
    assert u is not None and u.noisier == 2.0 and u.disagree is not None
    assert u.disagree.p > 0.05 and u.false_adopt.p <= 0.05
    two = next(x for x in result.lanes if x.lanes == 2)
    assert u.power.p < two.power.p and u.exact_checked > 0
    assert plan_json(result)["lanes_unequal"]["second_lane_noise"] == 2.0


# --------------------------------------------------------------------------- bad designs


def _sequential_file(tmp_path: Path, design: str, rule: str = "bound") -> Path:
    text = (ROOT / "examples" / "sim-sequential.yaml").read_text()
    old = ("    max_pairs: 12         # the most pairs the night may spend\n"
           "    min_pairs: 3          # the first look (a look at 2 costs the guardrail α ÷ 11)\n"
           "    look: pair            # or block: after every ABBA block\n")
    assert old in text and "  rule: bound " in text
    path = tmp_path / "seq.yaml"
    path.write_text(text.replace(old, design).replace("  rule: bound ", f"  rule: {rule} "))
    return path


def test_a_block_design_from_an_odd_pair_is_planned() -> None:
    """min_pairs 3, max_pairs 5, look block was an IndexError: the search for the max_pairs
    to recommend tried one (3) that the block design never looks at."""
    pre = Preregistration(decision_cells=[{"workload": "knee", "level": "c1"}], guardrails=[],
                          sequential={"max_pairs": 5, "min_pairs": 3, "look": "block"})
    r = rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)
    plan = plan_sequential(r, r.pair_sd, sims=500, seed=1, check=4)
    for row in plan.rows:
        assert abs(row.adopt + row.keep_default + row.inconclusive - 1) < 1e-9
    assert plan.recommended_max_pairs is None or plan.recommended_max_pairs % 2 == 0
    assert plan.exact and plan.disagree == 0


def test_check_refuses_a_block_design_on_half_a_block(tmp_path: Path) -> None:
    """look: block under order AB with an odd count was accepted silently (the first look
    moved to the next block, the last one fell inside one)."""
    path = _sequential_file(tmp_path, "    max_pairs: 5\n    min_pairs: 3\n    look: block\n")
    r = invoke("check", "--skip-preflight", str(path))
    assert r.code == 2
    assert ("preregistration.sequential.min_pairs: min_pairs 3 is odd, but look: block looks "
            "after whole blocks of two pairs, so the first look would be at 4 pairs: write "
            "min_pairs: 4 (or look: pair) (line 24)") in r.stderr
    assert "sequential.max_pairs: max_pairs 5 is odd" in r.stderr
    assert "write max_pairs: 4 or 6 (or look: pair) (line 23)" in r.stderr
    r = invoke("plan", str(path))
    assert r.code == 2 and "min_pairs 3 is odd" in r.stderr
    path = _sequential_file(tmp_path, "    max_pairs: 12\n    min_pairs: 4\n    look: block\n")
    assert invoke("check", "--skip-preflight", str(path)).code == 0


def test_plan_refuses_a_rule_check_refuses(tmp_path: Path) -> None:
    """`plan --rule point` on a sequential design printed a table of a campaign `check`
    refuses: it says what check says."""
    design = "    max_pairs: 6\n    min_pairs: 2\n    look: pair\n"
    r = invoke("check", "--skip-preflight", str(_sequential_file(tmp_path, design, "point")))
    assert r.code == 2
    said = r.stderr.split("preregistration: ", 1)[1].rsplit(" (line", 1)[0]
    assert said.startswith("a sequential design needs rule bound, not point")
    r = invoke("plan", str(_sequential_file(tmp_path, design)), "--rule", "point")
    assert r.code == 2 and r.stdout == ""
    assert f"--rule point: {said}" in r.stderr


def test_a_sequential_plan_of_64_pairs_is_bounded_and_says_so(tmp_path: Path) -> None:
    """max_pairs 64 printed nothing for minutes: the judge's boundaries are simulated anew
    at each look, 63 of them. Now: a progress line on stderr, a pairs table of sparse rows
    above 16, and the design's figures on the whole schedule's boundaries, said so."""
    path = _sequential_file(tmp_path, "    max_pairs: 64\n    min_pairs: 2\n    look: pair\n")
    r = invoke("plan", str(path), "--sims", "200", "--format", "json", seconds=120)
    assert r.code == 0, r.stderr
    assert "plan: simulating 200 campaigns at each of 22 pair counts (1 to 64)…" in r.stderr
    assert "plan: simulating the sequential design (63 looks)…" in r.stderr
    doc = json.loads(r.stdout)
    assert [row["pairs"] for row in doc["table"]][15:] == [16, 20, 24, 32, 40, 48, 64]
    design = doc["sequential_design"]
    assert design["looks"] == 63 and design["exact_boundaries"] is False
    assert design["max_pairs"] == 64 and design["judge_run_checked"] > 0


def test_a_short_plan_says_nothing_on_stderr(tmp_path: Path) -> None:
    path = _sequential_file(tmp_path, "    max_pairs: 6\n    min_pairs: 2\n    look: pair\n")
    r = invoke("plan", str(path), "--sims", "200", "--format", "json")
    assert r.code == 0 and r.stderr == ""
    assert json.loads(r.stdout)["sequential_design"]["exact_boundaries"] is True


def _tables(draw: object, *args: object, **kw: object) -> tuple[str, list[Table]]:
    """What a renderer prints: its text, and every table it printed."""
    console = Console(record=True, width=400, color_system=None)
    tables: list[Table] = []
    printed = console.print

    def keep(*objects: object, **options: object) -> None:
        tables.extend(o for o in objects if isinstance(o, Table))
        printed(*objects, **options)  # type: ignore[arg-type]

    console.print = keep  # type: ignore[method-assign]
    draw(console, *args, **kw)  # type: ignore[operator]
    return console.export_text(), tables


def test_plan_leads_with_the_registered_sequential_design(tmp_path: Path) -> None:
    """Issue "The first night, for a newcomer", 5: `plan` of a sequential file was 60 lines
    and 5 tables, its own design last. Now it leads with the sequential table and its
    verdict on that design; the tables by pairs, AB vs ABBA and lanes wait for --all."""
    path = _sequential_file(tmp_path, "    max_pairs: 6\n    min_pairs: 2\n    look: pair\n")
    wide = {"COLUMNS": "1000"}
    r = invoke("plan", str(path), "--sims", "200", env=wide)
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("plan sim-sequential: sequential design, up to 6 pairs, looks "
                               "from pair 2, may stop early")
    first_table = next(i for i, x in enumerate(lines) if "━" in x or "─" in x)
    title = next(i for i, x in enumerate(lines) if x.startswith("the registered design"))
    assert title < first_table
    assert lines[title].startswith("the registered design: sequential, up to 6 pairs")
    verdict = next(x for x in lines if x.startswith("verdict on the registered design"))
    assert lines.index(verdict) < first_table + 12
    for later in ("P(adopt) by pairs", "arm order under a linear drift", "lanes (pairs per "
                  "lane", "guardrails, flags and candidates by pairs"):
        assert later not in r.stdout, later
    assert "spec-ab plan FILE --all" in r.stdout
    assert len(lines) < 30
    full = invoke("plan", str(path), "--sims", "200", "--all", env=wide)
    assert full.code == 0, full.stderr
    for later in ("P(adopt) by pairs", "arm order under a linear drift", "lanes (pairs per "
                  "lane", "guardrails, flags and candidates by pairs"):
        assert later in full.stdout, later
    doc = json.loads(invoke("plan", str(path), "--sims", "200", "--format", "json").stdout)
    assert {"table", "orders", "lanes", "sequential", "sequential_design"} <= set(doc)


def test_every_plan_column_has_a_header_and_says_rule_alone_or_with_guardrails(
        tmp_path: Path) -> None:
    """Issue "The first night, for a newcomer", 5: a column without a header, and two tables
    showing P(adopt) of the same fixed design (88.4% against 91.3%) without saying that one
    is the rule alone and the other the rule with its guardrails."""
    from campaign import plan
    from campaign.campaignfile import load_campaign

    path = _sequential_file(tmp_path, "    max_pairs: 6\n    min_pairs: 2\n    look: pair\n")
    result = plan.plan_campaign(load_campaign(path), effect=0.15, noise_run=None,
                                drift=None, sims=200)
    text, tables = _tables(plan.print_plan, result, full=True)
    assert len(tables) >= 4 and "verdict on the registered design: it " in text
    for t in tables:
        assert all(str(c.header).strip() for c in t.columns), t.title
    seq = next(t for t in tables if str(t.title).startswith("the registered design"))
    fixed = [str(c.header) for c in seq.columns if "fixed" in str(c.header)]
    assert fixed == [f"fixed {result.sequential.fixed_pairs} pairs: P(adopt), rule "  # type: ignore[union-attr]
                     "alone"]
    by_pairs = next(t for t in tables if str(t.title).startswith("P(adopt) by pairs"))
    assert "with guardrails" in str(by_pairs.title)
    assert "1.5m, rule alone" in [str(c.header) for c in by_pairs.columns]
    # the sequential rows carry the guardrails (issue "Guardrails that protect", 6), the
    # rule alone kept in its own columns
    assert "with its guardrails (ttft_p99" in str(seq.title)
    assert "P(adopt), rule alone" in [str(c.header) for c in seq.columns]
