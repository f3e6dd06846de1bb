"""Per-turn figures of a sessions pass (issue 41): from the pass's AIPerf records (requests,
TTFT and ITL medians, mean input tokens per `metadata.turn_index`) and from two /metrics
scrapes (acceptance and tokens per step per turn, where the server exports the sim's
`specab_sim:spec_decode_num_*_by_turn_total` counters; None on a real vLLM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from campaign.run.measure import metrics, turns


def _record(turn: int | None, ttft: float, itl: float | None, isl: int, *,
            phase: str = "profiling", error: bool = False,
            phase_name: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"benchmark_phase": phase, "conversation_id": "s"}
    if turn is not None:
        meta["turn_index"] = turn
    if phase_name is not None:
        meta["phase_name"] = phase_name
    m: dict[str, Any] = {"time_to_first_token": {"value": ttft, "unit": "ms"},
                         "input_sequence_length": {"value": isl, "unit": "tokens"}}
    if itl is not None:
        m["inter_token_latency"] = {"value": itl, "unit": "ms"}
    out: dict[str, Any] = {"metadata": meta, "metrics": m}
    if error:
        out = {"metadata": meta, "metrics": {}, "error": {"code": 500, "message": "boom"}}
    return out


def _write(tmp_path: Path, rows: list[dict[str, Any]], torn: str = "") -> Path:
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn, encoding="utf-8")
    return path


def test_per_turn_requests_medians_and_input_tokens(tmp_path: Path) -> None:
    rows = [
        _record(0, 10.0, 2.0, 100), _record(0, 30.0, 4.0, 120), _record(0, 20.0, 3.0, 110),
        _record(1, 50.0, 5.0, 400), _record(1, 70.0, None, 420),
        _record(2, 90.0, 6.0, 900),
        _record(1, 999.0, 99.0, 9999, phase="warmup"),       # not measured
        _record(2, 0.0, 0.0, 0, error=True),                  # failed: counted apart
        _record(None, 5.0, 1.0, 5),                           # no turn index: left out
    ]
    got = turns.turn_records(_write(tmp_path, rows, torn='{"metadata": {"tu'))
    assert sorted(got) == [0, 1, 2]
    zero, one, two = got[0], got[1], got[2]
    assert (zero.requests, zero.errors) == (3, 0)
    assert zero.ttft_p50 == 20.0 and zero.itl_p50 == 3.0
    assert zero.input_tokens_mean == pytest.approx(110.0)
    # numpy's linear interpolation, as AIPerf's export: the median of 50 and 70 is 60; a
    # one-token request has no inter-token latency
    assert (one.requests, one.ttft_p50, one.itl_p50, one.input_tokens_mean) == (
        2, 60.0, 5.0, 410.0)
    assert (two.requests, two.errors, two.ttft_p50) == (1, 1, 90.0)
    assert two.as_dict() == {"turn": 2, "requests": 1, "errors": 1, "ttft_p50": 90.0,
                             "itl_p50": 6.0, "input_tokens_mean": 900.0}


def test_one_phase_of_a_one_process_run(tmp_path: Path) -> None:
    rows = [_record(0, 10.0, 1.0, 10, phase_name="a"), _record(0, 40.0, 1.0, 10,
                                                               phase_name="b")]
    path = _write(tmp_path, rows)
    assert turns.turn_records(path, phase="b")[0].ttft_p50 == 40.0
    assert turns.turn_records(path)[0].requests == 2


def test_no_records_file_gives_no_turns(tmp_path: Path) -> None:
    assert turns.turn_records(tmp_path / "missing.jsonl") == {}


LABELS = 'engine="0",model_name="sim"'


def _scrape(by_turn: dict[str, tuple[int, int, int]], declared: bool = True) -> metrics.Snapshot:
    """A /metrics text with the by-turn counters (turn → drafts, draft tokens, accepted)
    and vLLM's own totals."""
    lines = [f"vllm:spec_decode_num_drafts_total{{{LABELS}}} "
             f"{sum(v[0] for v in by_turn.values())}"]
    for i, what in enumerate(("drafts", "draft_tokens", "accepted_tokens")):
        name = f"specab_sim:spec_decode_num_{what}_by_turn_total"
        if declared:
            lines.append(f"# TYPE {name} counter")
        for turn, values in by_turn.items():
            lines.append(f'{name}{{{LABELS},turn="{turn}"}} {values[i]}')
    return metrics.parse("\n".join(lines) + "\n")


def test_per_turn_acceptance_from_two_scrapes() -> None:
    before = _scrape({"0": (10, 50, 40)})
    after = _scrape({"0": (30, 150, 120), "1": (20, 100, 50), "15": (4, 20, 2)})
    got = turns.turn_acceptance(before, after)
    assert got is not None and sorted(got) == [0, 1, 15]
    zero = got[0]
    # turn 0: 80 of 100 new draft tokens accepted over 20 drafts: 1 + 80/20 = 5 per step
    assert (zero.drafts, zero.draft_tokens, zero.accepted) == (20, 100, 80)
    assert zero.acceptance_rate == pytest.approx(0.8)
    assert zero.tokens_per_step == pytest.approx(5.0)
    # a turn the first scrape had not seen yet counts from 0
    assert got[1].acceptance_rate == pytest.approx(0.5)
    assert got[1].tokens_per_step == pytest.approx(3.5)
    assert got[15].as_dict() == {"turn": 15, "drafts": 4, "draft_tokens": 20, "accepted": 2,
                                 "acceptance_rate": pytest.approx(0.1),
                                 "tokens_per_step": pytest.approx(1.5)}


def test_turns_without_new_drafts_are_left_out_and_a_declared_server_gives_a_mapping() -> None:
    same = _scrape({"0": (10, 50, 40)})
    assert turns.turn_acceptance(same, _scrape({"0": (10, 50, 40)})) == {}
    empty = _scrape({})
    assert turns.turn_acceptance(empty, empty) == {}


def test_a_real_vllm_without_the_counters_gives_none() -> None:
    vllm = metrics.parse(f"vllm:spec_decode_num_drafts_total{{{LABELS}}} 7\n")
    assert turns.turn_acceptance(vllm, vllm) is None


def test_a_counter_that_went_down_is_a_restart() -> None:
    with pytest.raises(metrics.CounterReset, match="restarted"):
        turns.turn_acceptance(_scrape({"1": (30, 150, 120)}), _scrape({"1": (3, 15, 12)}))


def test_entries_join_the_records_and_the_acceptance_per_turn(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record(0, 10.0, 2.0, 100), _record(1, 30.0, 4.0, 300),
                             _record(2, 50.0, 6.0, 500)])
    got = turns.turn_records(path)
    acceptance = turns.turn_acceptance(_scrape({}), _scrape({"0": (10, 50, 40),
                                                             "1": (10, 50, 25)}))
    entries = turns.turn_entries(got, acceptance)
    assert entries == [
        {"turn": 0, "requests": 1, "ttft_p50": 10.0, "itl_p50": 2.0,
         "input_tokens_mean": 100.0, "acceptance": 0.8, "tokens_per_step": 5.0},
        {"turn": 1, "requests": 1, "ttft_p50": 30.0, "itl_p50": 4.0,
         "input_tokens_mean": 300.0, "acceptance": 0.5, "tokens_per_step": 3.5},
        # no drafts counted for turn 2 between the scrapes
        {"turn": 2, "requests": 1, "ttft_p50": 50.0, "itl_p50": 6.0,
         "input_tokens_mean": 500.0, "acceptance": None, "tokens_per_step": None}]
    # a real vLLM: the records' figures, no acceptance
    assert [e["acceptance"] for e in turns.turn_entries(got, None)] == [None, None, None]
    assert json.loads(json.dumps(entries)) == entries
