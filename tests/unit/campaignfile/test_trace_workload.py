"""`workloads.trace` (issue 41, item 4): the lab's mooncake JSONL replayed at its
timestamps, each file a cell `("trace", <name>)`. `check` validates the file (one message
with file:line and what to do, exit 2), summarises it, and the estimate uses its span."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from campaign.campaignfile import duration, load_campaign
from campaign.campaignfile import trace as tr
from campaign.errors import SpecError
from tests.cli import invoke
from tests.unit.campaignfile.test_campaignfile import BASE, write


def _trace_only(tmp_path: Path, lines: list[str] | str, extra: str = "") -> Path:
    head, _, _ = BASE.partition("  knee:\n")
    text = head.replace("{workload: knee, level: c1}", "{workload: trace, level: \"*\"}\n"
                        "  guardrails:\n    - {metric: error_rate, max_worsening: 0.0, "
                        "absolute: true}")
    path = write(tmp_path, text + "  trace:\n    files: {burst: burst.jsonl}\n" + extra)
    body = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
    (tmp_path / "burst.jsonl").write_text(body)
    return path


def _line(ts: float, **kw: object) -> str:
    return json.dumps({"timestamp": ts, "input_length": 100, "output_length": 20, **kw})


GOOD = [_line(0), _line(500), _line(520), _line(540), _line(30_000)]


def test_a_trace_is_a_cell_summarised_and_estimated_by_its_span(tmp_path: Path) -> None:
    c = load_campaign(_trace_only(tmp_path, GOOD))
    assert c.workloads.levels("trace") == ["burst"]
    info = tr.summary(tmp_path / "burst.jsonl")
    assert (info.requests, info.span_s) == (5, 30.0)
    assert info.mean_rate == pytest.approx(4 / 30)
    result = invoke("check", str(tmp_path / "campaign.yaml"), "--skip-preflight")
    assert result.code == 0, result.output
    assert "trace burst: 5 requests over 30 s (0.133 req/s)" in result.output
    half = load_campaign(_trace_only(tmp_path / "h", GOOD, "    time_scale: 0.5\n"))
    # the 30 s span (15 s at time_scale 0.5) is in each arm's estimate
    assert (duration.estimate(c).per_arm_s["control"]
            - duration.estimate(half).per_arm_s["control"]) == pytest.approx(15.0)


@pytest.mark.parametrize("lines, expected", [
    ([_line(0), "not json", _line(5)], ["burst.jsonl:2", "not a JSON object"]),
    ([_line(0), json.dumps({"input_length": 5, "output_length": 5})],
     ["burst.jsonl:2", "no timestamp"]),
    ([_line(0), _line(900), _line(400)],
     ["burst.jsonl:3", "timestamp 400 is before 900 (line 2)", "sort"]),
    ([_line(0), json.dumps({"timestamp": 3, "input_length": 5})],
     ["burst.jsonl:2", "output_length"]),
    ([_line(0), json.dumps({"timestamp": 3, "output_length": 5})],
     ["burst.jsonl:2", "input_length or text_input"]),
    ("", ["burst.jsonl", "empty"]),
    ([_line(0), _line(3 * 3600 * 1000)], ["burst.jsonl", "spans 3h", "at most 2 h"]),
])
def test_a_bad_trace_is_refused_with_its_line_and_a_fix(tmp_path: Path, lines: list[str] | str,
                                                        expected: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        load_campaign(_trace_only(tmp_path, lines))
    assert info.value.exit_code == 2
    problems = info.value.problems
    assert any("workloads.trace.files.burst" in p and all(s in p for s in expected)
               for p in problems), problems


def test_a_trace_over_50_mb_is_refused(tmp_path: Path) -> None:
    path = _trace_only(tmp_path, GOOD)
    with open(tmp_path / "burst.jsonl", "r+b") as f:
        f.truncate(tr.MAX_BYTES + 1)
    result = invoke("check", str(path), "--skip-preflight")
    assert result.code == 2
    assert "burst.jsonl" in result.output and "50 MB" in result.output


def test_the_shipped_trace_fixture_is_short_and_bursty() -> None:
    from campaign.campaignfile.builtin import BUILTIN_DIR
    path = BUILTIN_DIR / "traces" / "burst.jsonl"
    assert tr.file_problem(path) is None
    info = tr.summary(path)
    assert info.span_s <= 60 and info.requests >= 40
    stamps = [json.loads(x)["timestamp"] for x in path.read_text().splitlines()]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
    assert cv > 1.5  # burstier than Poisson (cv 1)


def test_a_trace_longer_than_the_pass_timeout_is_refused(tmp_path: Path) -> None:
    path = _trace_only(tmp_path, [_line(0), _line(400_000)])
    path.write_text(path.read_text().replace("  decision_cells:\n",
                                             "  gates: {pass_timeout_s: 300}\n  decision_cells:\n"))
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert any("workloads.trace.files.burst" in p and "spans 400 s" in p
               and "pass_timeout_s 300" in p for p in info.value.problems), info.value.problems
    path.write_text(path.read_text().replace("files: {burst: burst.jsonl}",
                                             "files: {burst: burst.jsonl}\n    time_scale: 0.5"))
    assert load_campaign(path).workloads.trace is not None  # 200 s at time_scale 0.5
