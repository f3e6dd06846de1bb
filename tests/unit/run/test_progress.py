"""The live run display: ETA from the start (and learnt from earlier runs), requests done
inside a pass from the server's success counter, a clock that ticks between events, and
plain lines off a terminal."""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path

import pytest
from rich.console import Console

from campaign.campaignfile import load_campaign
from campaign.run.progress import Eta, PassWatch, PlainProgress, RichProgress, count_successes
from tests.runs import ROOT


def sim_campaign():  # type: ignore[no-untyped-def]
    return load_campaign(ROOT / "examples" / "sim-pair.yaml")


def test_eta_is_known_before_the_first_pair_and_counts_down() -> None:
    eta = Eta(sim_campaign())
    total = eta.total()
    assert total > 0 and eta.remaining(0.0) == total
    eta.pair_started(1)
    eta.start_slot(1, "control", 100.0)
    assert eta.remaining(110.0) == total - 10
    eta.finish_slot("control", 2 * eta.per_arm["control"])  # this run is twice as slow
    left = eta.remaining(200.0)
    assert left == 2 * (total - eta.per_arm["control"])
    eta.pair_started(1)  # a redo: the pair's arms are ahead again
    assert eta.remaining(200.0) > left


def test_eta_learns_from_earlier_runs_of_the_lane(tmp_path: Path) -> None:
    campaign = sim_campaign()
    earlier = tmp_path / "2026-01-01-sim-adaptive-x"
    earlier.mkdir()
    (earlier / "campaign.yaml").write_text("name: sim-adaptive\nlane: sim\n")
    (earlier / "journal.jsonl").write_text("".join(
        json.dumps({"event": "slot_done", "arm": arm, "wall_s": 50.0, "boot_s": 2.0}) + "\n"
        for arm in ("control", "adaptive", "control", "adaptive")))
    eta = Eta(campaign, tmp_path / "now-run")
    assert eta.learned and eta.per_arm == {"control": 50.0, "adaptive": 50.0}
    # every arm of every registered pair at the learned 50 s
    assert eta.total() == campaign.preregistration.pairs * 2 * 50.0


def test_a_learned_boot_replaces_the_boot_the_estimate_assumed(tmp_path: Path) -> None:
    # another campaign on the same lane booted in 2 s; this one states a 300 s boot, which
    # the estimate put into each arm: the learned boot replaces exactly that
    from campaign.campaignfile.duration import estimate

    text = (ROOT / "examples" / "sim-pair.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("  readiness:\n", "  readiness:\n    expected_boot_s: 300\n", 1))
    campaign = load_campaign(path)
    earlier = tmp_path / "2026-01-01-other-x"
    earlier.mkdir()
    (earlier / "campaign.yaml").write_text("name: other\nlane: sim\n")
    (earlier / "journal.jsonl").write_text(
        json.dumps({"event": "slot_done", "arm": "a", "wall_s": 9.0, "boot_s": 2.0}) + "\n")
    eta = Eta(campaign, tmp_path / "now-run")
    est = estimate(campaign)
    assert est.per_arm_s["control"] > 300
    assert eta.per_arm["control"] == pytest.approx(est.per_arm_s["control"] - 300.0 + 2.0)


def test_requests_done_from_the_success_counter() -> None:
    texts = iter([
        'vllm:request_success_total{finished_reason="stop"} 10.0\n'
        'vllm:request_success_total{finished_reason="length"} 5.0\n',
        'vllm:request_success_total{finished_reason="length"} 37.0\n'
        'vllm:request_success_created 1.0\n',
    ])
    watch = PassWatch("http://x", 48, ["c1", "c4", "c16"], get=lambda url: next(texts))
    assert count_successes('vllm:request_success_total{a="b"} 3\n# x\n') == 3
    assert watch.poll() == 22
    assert watch.level() == "c4 (2/3)"


def test_requests_done_read_by_the_runners_parser_on_real_expositions() -> None:
    """The display counts requests with the parser the runner scrapes with: on vLLM's own
    captured /metrics (every finished_reason, the _created lines) the count is the sum of
    the success series, and a text that is not Prometheus text is skipped, not a count."""
    data = Path(__file__).resolve().parents[2] / "data" / "metrics"
    before = (data / "vllm032_cpu_ngram_k4_before.prom").read_text()
    after = (data / "vllm032_cpu_ngram_k4_after.prom").read_text()
    assert (count_successes(before), count_successes(after)) == (5.0, 21.0)
    assert count_successes("<html>502 Bad Gateway</html>\n{") is None
    assert count_successes("# HELP nothing here\n") is None
    texts = iter([before, "<html>502</html>\n{", after])
    watch = PassWatch("http://x", 16, ["c1"], get=lambda url: next(texts))
    assert watch.poll() == 0  # a garbled scrape changes nothing
    assert watch.poll() == 16


def test_plain_lines_off_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="campaign.run")
    buf = io.StringIO()
    sink = PlainProgress(Console(file=buf, width=200), sim_campaign())
    sink("pair_start", pair=1, pairs=2, pair_attempt=1)
    sink("slot_start", pair=1, arm="control", phase="boot")
    sink("pass_start", pair=1, arm="control", name="warmup-1", measured=False,
         base_url=None, levels=["c2"], requests=4)
    sink("pass_done", pair=1, arm="control", name="warmup-1", valid=True, measured=False,
         summary={"c2": 99.0}, problems=[])
    sink("slot_done", pair=1, arm="control", wall_s=30.0)
    text = buf.getvalue()
    assert "in all (the estimate)" in text.splitlines()[0]
    assert "control: warmup-1 (4 requests)" in text
    assert "to go" in text and "about 0s to go" not in text
    assert sink.last == ""  # a warm-up's figure is never "the last measured"
    logged = [r.getMessage() for r in caplog.records]
    assert logged == ["pair 1 control: booting", "control: pass warmup-1 starts (4 requests)",
                      "control: pass warmup-1 ends: ok", "control: stopped after 30s"]


def test_live_display_ticks_between_events() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    sink = RichProgress(console, sim_campaign())
    try:
        sink("pair_start", pair=1, pairs=2, pair_attempt=1)
        sink("slot_start", pair=1, arm="control", phase="boot")
        a = str(Console(file=io.StringIO(), width=120).render_lines(sink)[-1])
        time.sleep(1.2)
        b = str(Console(file=io.StringIO(), width=120).render_lines(sink)[-1])
        assert a != b  # the clock moved with no event in between
    finally:
        sink.close()


def seq_campaign():  # type: ignore[no-untyped-def]
    return load_campaign(ROOT / "examples" / "sim-sequential.yaml")


def test_a_sequential_run_says_so_first_and_its_pairs_read_up_to() -> None:
    """Issue 39, 4: the live status read "pair 1/12" as if 12 were certain."""
    buf = io.StringIO()
    sink = PlainProgress(Console(file=buf, width=200), seq_campaign())
    sink("pair_start", pair=1, pairs=12, pair_attempt=1)
    sink("pair_start", pair=2, pairs=12, pair_attempt=2)
    lines = buf.getvalue().splitlines()
    assert "up to 12 pairs, looks from pair 3, may stop early" in lines[0]
    assert "in all (the estimate)" in lines[0] and "at most" in lines[0]
    assert lines[1].endswith("] pair 1 of up to 12")
    assert lines[2].endswith("] pair 2 of up to 12 (redo)")
    fixed = io.StringIO()
    PlainProgress(Console(file=fixed, width=200), sim_campaign())(
        "pair_start", pair=1, pairs=11, pair_attempt=1)
    assert fixed.getvalue().splitlines()[1].endswith("] pair 1/11")
    assert "up to" not in fixed.getvalue()


def _interrupted_run(tmp_path: Path) -> Path:
    """Pair 1 done; pair 2's control done, then the run stopped (its pair is redone)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "campaign.yaml").write_text("name: sim-adaptive\nlane: sim\n")
    lines = [{"event": "pair_start", "pair": 1, "pair_attempt": 1},
             {"event": "slot_done", "pair": 1, "arm": "control", "wall_s": 60.0},
             {"event": "slot_done", "pair": 1, "arm": "adaptive", "wall_s": 60.0},
             {"event": "pair_done", "pair": 1, "pair_attempt": 1},
             {"event": "pair_start", "pair": 2, "pair_attempt": 1},
             {"event": "slot_done", "pair": 2, "arm": "control", "wall_s": 60.0},
             {"event": "interrupted", "pair": 2, "pair_attempt": 1}]
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return run


def test_a_resumed_runs_eta_counts_only_the_slots_of_settled_pairs(tmp_path: Path) -> None:
    """Issue 39, 11: on --resume the ETA counts what is left to measure: every slot of
    every pair not settled, the interrupted pair whole (its finished control is redone)."""
    campaign = sim_campaign()
    run = _interrupted_run(tmp_path)
    eta = Eta(campaign, run)
    per_pair = eta.per_arm["control"] + eta.per_arm["adaptive"]
    left = (campaign.preregistration.pairs - 1) * per_pair
    assert eta.remaining(0.0) == pytest.approx(left)
    eta.pair_started(2)
    eta.start_slot(2, "control", 0.0)
    assert eta.remaining(0.0) == pytest.approx(left)
    buf = io.StringIO()
    PlainProgress(Console(file=buf, width=200), campaign, run)
    first = buf.getvalue().splitlines()[0]
    from campaign.fmt import clock

    assert f"about {clock(left)} to go" in first, first
    pairs = campaign.preregistration.pairs
    assert f"{pairs - 1} of {pairs} pairs left" in first, first
