"""campaign.run.measure.levelcut: a knee sweep's counters cut at its level boundaries, and the
request times of a level (campaign.run.measure.records.request_window)."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import httpx
import pytest

from campaign.run.measure import levelcut, loadgen, metrics, records
from campaign.run.slot import lifecycle
from tests.runs import TESTS


def prom(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float],
         generated: float, *, start: float = 1000.0) -> metrics.Snapshot:
    """vLLM-named counters as Prometheus text, parsed."""
    lines = [f"vllm:spec_decode_num_drafts_total {drafts}",
             f"vllm:spec_decode_num_draft_tokens_total {draft_tokens}",
             f"vllm:spec_decode_num_accepted_tokens_total {accepted}",
             f"vllm:generation_tokens_total {generated}",
             f"process_start_time_seconds {start}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    return metrics.parse("\n".join(lines) + "\n")


# The server's counters at: the pass's start, the end of level 1 (idle until level 4),
# the end of level 4 (idle until level 8), the pass's end.
S0 = prom(10, 40, 20, [8, 6, 4, 2], 100)
S1 = prom(60, 240, 150, [45, 40, 35, 30], 500)
S2 = prom(130, 520, 300, [100, 80, 70, 50], 1000)
S3 = prom(200, 800, 420, [150, 120, 90, 60], 1600)
WINDOWS = {1: (10.0, 20.0), 4: (25.0, 35.0), 8: (40.0, 50.0)}
COUNTS = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens",
          "acceptance_pos0", "acceptance_pos3")


def tick(at: float, snap: metrics.Snapshot) -> levelcut.Tick:
    return levelcut.Tick(at, at + 0.01, snap)


def busy(at: float, done: float) -> metrics.Snapshot:
    """Counters part-way through a level (a tick taken while requests run)."""
    return prom(60 + done * 70, 240 + done * 280, 150 + done * 150,
                [45 + done * 55, 40 + done * 40, 35 + done * 35, 30 + done * 20],
                500 + done * 500)


def counts(delta: metrics.PassDelta) -> dict[str, float]:
    assert delta.spec is not None
    return {"drafts": delta.spec.drafts, "draft_tokens": delta.spec.draft_tokens,
            "accepted_tokens": delta.spec.accepted_tokens,
            "generation_tokens": delta.tokens.generation_tokens or 0.0,
            **{f"pos{i}": v for i, v in enumerate(delta.spec.accepted_per_pos)}}


def test_cuts_in_the_idle_gaps_give_each_levels_own_counters() -> None:
    ticks = [tick(15.0, prom(30, 120, 70, [20, 15, 10, 5], 300)),  # inside level 1
             tick(21.0, S1), tick(24.0, S1),                         # gap 1 → 4
             tick(30.0, busy(30.0, 0.5)),                            # inside level 4
             tick(36.0, S2), tick(38.0, S2),                         # gap 4 → 8
             tick(45.0, prom(150, 600, 350, [120, 90, 80, 55], 1200))]
    cuts = levelcut.cut(S0, S3, ticks, WINDOWS)
    assert [c.concurrency for c in cuts] == [1, 4, 8]
    assert all(c.exact for c in cuts)
    # the last tick of each gap is the cut
    assert [(c.start, c.end) for c in cuts] == [(None, 24.01), (24.01, 38.01), (38.01, None)]
    assert counts(cuts[0].delta) == counts(metrics.pass_delta(S0, S1))
    assert counts(cuts[1].delta) == counts(metrics.pass_delta(S1, S2))
    assert counts(cuts[2].delta) == counts(metrics.pass_delta(S2, S3))
    c4 = cuts[1].delta.spec
    assert c4 is not None and c4.drafts == 70 and c4.accepted_tokens == 150
    assert c4.acceptance_rate == pytest.approx(150 / 280)
    assert c4.tokens_per_drafted_step == pytest.approx(1 + 150 / 70)
    assert c4.acceptance_pos == pytest.approx((55 / 70, 40 / 70, 35 / 70, 20 / 70))
    # the levels add up to the pass, counter by counter
    whole = counts(metrics.pass_delta(S0, S3))
    for key, total in whole.items():
        assert math.fsum(counts(c.delta)[key] for c in cuts) == pytest.approx(total)


def test_a_boundary_without_a_tick_in_its_gap_is_cut_nearest_and_said_so() -> None:
    # gap 4 → 8 holds no tick: the nearest one, inside level 8, is taken
    ticks = [tick(22.0, S1), tick(41.0, prom(140, 560, 320, [110, 85, 72, 52], 1100))]
    cuts = levelcut.cut(S0, S3, ticks, WINDOWS)
    assert [c.exact for c in cuts] == [True, False, False]
    assert "no /metrics tick between two levels" in cuts[1].reasons[0]
    assert cuts[1].reasons == cuts[2].reasons
    whole = counts(metrics.pass_delta(S0, S3))
    for key, total in whole.items():  # still adds up to the pass
        assert math.fsum(counts(c.delta)[key] for c in cuts) == pytest.approx(total)


def test_a_tick_just_after_the_last_response_is_not_taken_as_idle() -> None:
    # sent 0.01 s after level 1 ended: the server may still book its last request
    ticks = [tick(20.01, S1)]
    cuts = levelcut.cut(S0, S3, ticks, {1: (10.0, 20.0), 4: (25.0, 35.0)})
    assert not cuts[0].exact


def test_nothing_to_cut() -> None:
    assert levelcut.cut(S0, S3, [], WINDOWS) == []                 # no tick
    assert levelcut.cut(S0, S3, [tick(22.0, S1)], {1: (10.0, 20.0)}) == []  # one level
    restarted = prom(1, 1, 1, [1, 0, 0, 0], 5, start=2000.0)
    assert levelcut.cut(S0, S3, [tick(22.0, restarted)], WINDOWS) == []


def test_request_window_spans_every_request(tmp_path: Path) -> None:
    path = TESTS / "data" / "aiperf" / "records_sweep" / "concurrency_4" / records.RECORDS_NAME
    starts, ends = [], []
    for line in path.read_text().splitlines():
        meta = json.loads(line)["metadata"]
        starts.append(meta["request_start_ns"])
        ends.append(meta["request_end_ns"])
    assert records.request_window(path) == (min(starts) / 1e9, max(ends) / 1e9)
    odd = tmp_path / records.RECORDS_NAME
    odd.write_text('{"metadata": {"credit_issued_ns": 5000000000, "request_end_ns": '
                   '9000000000, "benchmark_phase": "warmup"}, "error": {"code": 500}}\n'
                   '{"metadata": {"request_start_ns": 6000000000}}\n{"torn": \n')
    assert records.request_window(odd) == (5.0, 9.0)  # failed and warm-up requests count
    assert records.request_window(tmp_path / "missing.jsonl") is None
    (tmp_path / "none.jsonl").write_text('{"metadata": {}}\n')
    assert records.request_window(tmp_path / "none.jsonl") is None


def test_ticker_scrapes_until_the_block_ends() -> None:
    served = threading.Event()
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 2:
            return httpx.Response(500)  # a failed scrape is skipped
        if len(calls) >= 4:
            served.set()
        return httpx.Response(200, text=S1.text + "vllm:num_requests_running 3\n")

    with levelcut.Ticker(lambda: httpx.Client(transport=httpx.MockTransport(handler)),
                         "http://sim", period_s=0.01) as ticker:
        assert served.wait(30)
    n = len(calls)
    ticks = ticker.ticks
    assert set(calls) == {"/metrics"} and len(ticks) == n - 1
    assert all(t.sent <= t.received for t in ticks)
    assert ticks[0].snapshot.value(metrics.DRAFTS) == 60
    # a tick keeps the counters a cut reads; its text only once nothing moved (idle)
    assert all(t.snapshot.value("vllm:num_requests_running") is None for t in ticks)
    assert ticks[0].snapshot.text == "" and "num_requests_running 3" in ticks[1].snapshot.text
    assert len(calls) == n  # stopped with the block


def _level(conc: int, tput: float, tokens: float) -> loadgen.LevelResult:
    return loadgen.LevelResult(conc, {"output_token_throughput": tput, "output_tokens": tokens},
                               8, 0, True, False, 0, Path("x"))


def test_server_throughput_per_level_when_every_level_is_cut_exactly() -> None:
    # AIPerf counted 500 and 1000 tokens; the server generated 400 and 500 (S0→S1→S2)
    whole = metrics.pass_delta(S0, S2)
    cuts = levelcut.cut(S0, S2, [tick(22.0, S1)], {1: (10.0, 20.0), 4: (25.0, 35.0)})
    levels = [_level(1, 100.0, 500.0), _level(4, 300.0, 1000.0)]
    lifecycle.server_throughput(levels, whole, cuts)
    assert [lv.metrics["output_token_throughput_server"] for lv in levels] == pytest.approx(
        [100.0 * 400 / 500, 300.0 * 500 / 1000])
    # a boundary not cut exactly: one ratio for the whole pass (900 ÷ 1500)
    inexact = levelcut.cut(S0, S2, [tick(20.01, S1)], {1: (10.0, 20.0), 4: (25.0, 35.0)})
    levels = [_level(1, 100.0, 500.0), _level(4, 300.0, 1000.0)]
    lifecycle.server_throughput(levels, whole, inexact)
    assert [lv.metrics["output_token_throughput_server"] for lv in levels] == pytest.approx(
        [100.0 * 900 / 1500, 300.0 * 900 / 1500])
