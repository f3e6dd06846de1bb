"""The knee's spec-decode figures per level, for real: one short sim campaign (real sim
servers, real AIPerf over c1 and c4, the real CLI), its knee run either as AIPerf's sweep
(a process per level) or as one process of phases (`workloads.knee.one_process`). Each
level's counters are cut from timer scrapes in the idle gap between two levels (AIPerf's
restart, or the pause phase); they must add up to the whole pass's before/after delta, and
each level's must be its own (the sim generates exactly the asked output length, so a
level's generated tokens are its requests × output tokens)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from campaign.results.store import load_run
from campaign.run.measure import metrics
from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import (
    campaign_text,
    journal_events,
    lock_env,
    out,  # noqa: F401  (the fixture: no process left behind)
    run_cli,
    run_dir_of,
    write_campaign,
)

COUNTS = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens")


def _whole_pass(arm_dir: Path) -> dict[str, float]:
    """The knee pass's counters from its own before/after scrapes, kept beside it."""
    before = metrics.parse((arm_dir / "metrics" / "knee-before.prom").read_text())
    after = metrics.parse((arm_dir / "metrics" / "knee-after.prom").read_text())
    figures = metrics.pass_delta(before, after).as_metrics()
    return {k: v for k, v in figures.items() if k in COUNTS}


@pytest.mark.parametrize("one_process", [False, True], ids=["sweep", "one-process"])
def test_knee_figures_per_level_add_up_to_the_pass(tmp_path: Path, out: Path,  # noqa: F811
                                                   one_process: bool) -> None:
    text = campaign_text(free_port(), name="levels")  # the knee in one process
    if not one_process:
        assert "    one_process: true\n" in text
        text = text.replace("    one_process: true\n", "")  # a sweep: a process per level
    path = write_campaign(tmp_path, text)
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_of(out)
    p = load_run(run_dir).passes
    knee = p[p.workload == "knee"]
    assert knee.valid.all(), knee[~knee.valid].reason.unique()
    for arm in ("control", "cand"):
        rows = knee[knee.arm == arm]
        value = {(r.level, r.metric): r.value for r in rows.itertuples()}
        whole = _whole_pass(run_dir / "pairs" / "01" / arm)
        assert whole["drafts"] > 0 and whole["generation_tokens"] == 2 * 8 * 32
        for name, total in whole.items():
            assert value[("all", name)] == total  # `knee all` stays the sweep's total
            assert math.fsum(value[(lvl, name)] for lvl in ("c1", "c4")) == total, name
        positions = sorted({m for (_, m) in value if m.startswith("acceptance_pos")})
        assert positions and all((lvl, m) in value for lvl in ("c1", "c4") for m in positions)
        for lvl in ("c1", "c4"):
            # the cut is at the boundary: a level's generated tokens are its own
            assert value[(lvl, "generation_tokens")] == value[(lvl, "output_tokens")] == 8 * 32
            for name in ("acceptance_rate", "tokens_per_drafted_step", "implied_a",
                         "tokens_per_decode_step", "draft_coverage"):
                assert (lvl, name) in value, (arm, lvl, name)
            assert value[(lvl, "acceptance_rate")] == pytest.approx(
                value[(lvl, "accepted_tokens")] / value[(lvl, "draft_tokens")])
        assert (run_dir / "pairs" / "01" / arm / "metrics" / "knee-after-c1.prom").is_file()
    cuts = [e["level_cuts"] for e in journal_events(run_dir)
            if e["event"] == "pass" and e["name"] == "knee"]
    assert len(cuts) == 2 and all(c["exact"] for arm_cuts in cuts for c in arm_cuts)
    for arm in ("control", "cand"):  # how the knee ran, as the pass folder keeps it
        knee_dir = run_dir / "pairs" / "01" / arm / "passes" / "knee"
        command = (knee_dir / "aiperf.command").read_text()
        assert ("--config" in command) is one_process, command
        assert (knee_dir / "aiperf-config.yaml").is_file() is one_process
    # the JSON report: tokens per step and acceptance at every knee level, both arms
    rep = run_cli("report", str(run_dir), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    cells = {(c["level"], c["metric"]): c for c in json.loads(rep.stdout)["cells"]
             if c["workload"] == "knee"}
    for lvl in ("c1", "c4", "all"):
        for name in ("acceptance_rate", "tokens_per_decode_step"):
            cell = cells[(lvl, name)]
            assert cell["control"] > 0 and cell["candidate"] > 0, (lvl, name)
