"""The open-loop rate metrics (issue 41) in the catalog, judged the way they are measured.

Queue delays and the load generator's send lag are milliseconds that are often 0 at a
light load: compared by differences, never refused or re-worded as a ratio; their `_p99`
is the 0.99 quantile of a level's requests (the drift gate's request count). Capacity at
SLO is a rate, higher is better, counted against the registered SLO.
"""

from __future__ import annotations

from campaign import catalog
from campaign.campaignfile import Preregistration
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td
from campaign.verdict.flags import drift_requests_needed


def _rule(**kw: object) -> rl.Rule:
    kw.setdefault("decision_cells", [{"workload": "knee", "level": "*"}])
    pre = Preregistration(pairs=6, guardrails=[], **kw)  # type: ignore[arg-type]
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)


def _table(metric: str, control: list[float], cand: list[float]) -> td.RunTable:
    t = td.RunTable(run="r")
    t.pairs = list(range(1, len(control) + 1))
    t.slots = {p: {"control": 2 * p, "cand": 2 * p + 1} for p in t.pairs}
    tput = td.CellData("knee", "c1", "output_token_throughput")
    cell = td.CellData("rate", "r4", metric)
    for p, (x, y) in enumerate(zip(control, cand, strict=True), start=1):
        tput.values[p] = {a: td.ArmValue(100.0, 100.0, 100.0, 1) for a in ("control", "cand")}
        cell.values[p] = {"control": td.ArmValue(x, x, x, 1), "cand": td.ArmValue(y, y, y, 1)}
    t.cells[("knee", "c1", "output_token_throughput")] = tput
    t.cells[("rate", "r4", metric)] = cell
    return t


def test_rate_metrics_have_their_units_and_directions() -> None:
    got = {m: (catalog.METRICS[m].unit, catalog.direction(m)) for m in (
        "offered_rate", "achieved_rate", "send_lag_p99_ms", "queue_delay_p50",
        "queue_delay_p99", "capacity_at_slo")}
    assert got == {"offered_rate": ("req/s", "higher"), "achieved_rate": ("req/s", "higher"),
                   "send_lag_p99_ms": ("ms", "lower"), "queue_delay_p50": ("ms", "lower"),
                   "queue_delay_p99": ("ms", "lower"), "capacity_at_slo": ("req/s", "higher")}


def test_their_quantiles_are_the_levels_requests() -> None:
    assert [catalog.quantile_of(m) for m in (
        "send_lag_p99_ms", "queue_delay_p50", "queue_delay_p99", "capacity_at_slo",
        "offered_rate", "achieved_rate")] == [0.99, 0.5, 0.99, None, None, None]
    assert drift_requests_needed("send_lag_p99_ms") == drift_requests_needed("ttft_p99") == 300


def test_a_queue_delay_of_0_is_a_measurement_compared_in_ms() -> None:
    """Control never queues at 4 req/s, the candidate queues 5–7 ms: worse by ~6 ms, by
    differences from the start (no ratio, no 'arrived in one burst' wording)."""
    t = _table("queue_delay_p50", [0.0] * 6, [5.0, 6.0, 7.0, 6.0, 5.0, 7.0])
    v = vd.judge_run(t, _rule(), ["control", "cand"], metrics=["queue_delay_p50"])
    cell = next(c for c in v.candidates[0].cells if c.metric == "queue_delay_p50")
    assert (cell.kind, cell.verdict) == ("absolute", "worse")
    assert cell.stats is not None and round(cell.stats.gain, 3) == -6.0
    assert not any("one burst" in r for r in cell.reasons)


def test_send_lag_is_compared_in_ms() -> None:
    t = _table("send_lag_p99_ms", [2.0, 3.0, 2.5, 2.0, 3.0, 2.5],
               [2.5, 2.0, 3.0, 2.5, 2.0, 3.0])
    v = vd.judge_run(t, _rule(), ["control", "cand"], metrics=["send_lag_p99_ms"])
    cell = next(c for c in v.candidates[0].cells if c.metric == "send_lag_p99_ms")
    assert (cell.kind, cell.verdict) == ("absolute", "no-clear-change")


def test_capacity_at_slo_needs_a_registered_slo() -> None:
    assert catalog.SLO_METRICS.get("capacity_at_slo") == ""
    assert catalog.has_rows_at("capacity_at_slo", "rate", "capacity")
