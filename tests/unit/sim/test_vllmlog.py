"""The log lines the simulated lane prints (`sim.vllmlog`), in process: each message in
the format docs/simulator.md shows for vLLM (so the runner's log capture and boot-failure
reading are tested against the real formats), the `LEVEL MM-DD HH:MM:SS [source]` prefix,
and what the runner makes of a sim log (its captures, its first error line)."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.results.bootfail import first_error
from campaign.run.slot.serverwatch import write_captures
from campaign.sim import vllmlog as vl
from tests.runs import ROOT

PREFIX = re.compile(r"^(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] ")
DOC = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")


def _doc_message(start: str) -> str:
    """The message part of the docs' sample line that starts with `start`."""
    line = next(ln for ln in DOC.splitlines() if start in ln)
    return line[line.index(start):]


def test_the_prefix_is_level_date_time_and_source() -> None:
    now = time.mktime((2026, 11, 29, 15, 44, 1, 0, 0, -1))
    assert vl.prefix("INFO", "api_server.py:1", now) == "INFO 11-29 15:44:01 [api_server.py:1]"
    assert PREFIX.match(vl.prefix("WARNING", "x.py:9") + " ")


def test_spec_decoding_line_is_the_one_in_the_docs() -> None:
    """10 drafts of 5 tokens less 6 unused positions: 44 drafted, 20 accepted (7, 6, 3, 3,
    1 by position) in a 1.0006 s interval: the docs' sample line, figure by figure."""
    msg = vl.spec_decoding_message(drafts=10, draft_tokens=44, accepted=20,
                                   per_pos=[7, 6, 3, 3, 1], elapsed_s=1.0006)
    assert msg == _doc_message("SpecDecoding metrics:")


def test_spec_decoding_line_without_drafts_or_time() -> None:
    """An interval with nothing drafted: mean length 1, zero throughputs, a rate that is
    not a number (vLLM's own `nan`), zero per-position rates, never a division by zero."""
    msg = vl.spec_decoding_message(drafts=0, draft_tokens=0, accepted=0, per_pos=[0, 0],
                                   elapsed_s=0.0)
    assert "Mean acceptance length: 1.00," in msg
    assert "Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s" in msg
    assert "Per-position acceptance rate: 0.000, 0.000," in msg
    assert msg.endswith("Avg Draft acceptance rate: nan%")


def test_engine_stats_line_is_the_one_in_the_docs() -> None:
    assert vl.engine_stats_message(31.0, 32.0, 0, 0) == _doc_message("Engine 000:")
    busy = vl.engine_stats_message(1.26, 80.14, 2, 1)
    assert ("Avg prompt throughput: 1.3 tokens/s, Avg generation throughput: 80.1 tokens/s, "
            "Running: 2 reqs, Waiting: 1 reqs, GPU KV cache usage: 0.8%") in busy
    # the KV cache usage never reads 100% or more, however many requests run
    assert "GPU KV cache usage: 99.9%" in vl.engine_stats_message(0, 0, 1000, 0)


def test_adaptive_verification_lines_are_the_ones_in_the_docs() -> None:
    assert vl.controller_message(4, 2.1, 5, 0.712) == _doc_message("Adaptive verification:")
    assert (vl.cost_table_message("live", 4, "4=38.60, 8=48.90, ...")
            == _doc_message("Adaptive verification cost table (live"))
    assert (vl.cost_table_message("boot", 1, "1=22.80, 2=25.50, ...")
            == _doc_message("Adaptive verification cost table (boot"))


def test_log_writes_prefixed_lines_and_raw_uvicorn_lines() -> None:
    out = io.StringIO()
    log = vl.Log(out)
    log.info("api_server.py:1", "Starting vLLM API server 0 on http://127.0.0.1:8000")
    log.warning("shm_broadcast.py:466", "No available shared memory broadcast block")
    log.error("core.py:700", "EngineCore encountered a fatal error (simulated, crash).")
    log.raw("INFO:     Application startup complete.")
    lines = out.getvalue().splitlines()
    assert [ln.split(" ", 1)[0] for ln in lines] == ["INFO", "WARNING", "ERROR", "INFO:"]
    assert all(PREFIX.match(ln) for ln in lines[:3])
    assert lines[0].endswith("[api_server.py:1] Starting vLLM API server 0 on "
                             "http://127.0.0.1:8000")
    assert lines[3] == "INFO:     Application startup complete."  # no vLLM prefix


def test_log_without_a_stream_writes_to_the_current_stdout(
        capsys: pytest.CaptureFixture[str]) -> None:
    log = vl.Log()
    log.info("a.py:1", "hello")
    log.raw("bye")
    out = capsys.readouterr().out.splitlines()
    assert PREFIX.match(out[0]) and out[0].endswith("[a.py:1] hello")
    assert out[1] == "bye"


def test_the_runner_captures_the_spec_decoding_lines_and_reads_the_error(
        tmp_path: Path) -> None:
    """A sim log as the runner sees it: examples/sim-pair.yaml's `spec_decoding` capture
    keeps exactly the SpecDecoding lines; a boot failure is read as the ERROR line."""
    log_path = tmp_path / "server.log"
    with open(log_path, "w", encoding="utf-8") as f:
        log = vl.Log(f)
        log.info("loggers.py:123", vl.engine_stats_message(31.0, 32.0, 1, 0))
        log.info("metrics.py:89", vl.spec_decoding_message(10, 44, 20, [7, 6, 3, 3, 1], 1.0))
        log.info("adaptive.py:42", vl.controller_message(4, 2.1, 5, 0.712))
        log.info("metrics.py:89", vl.spec_decoding_message(4, 20, 8, [3, 2, 1, 1, 1], 1.0))
        log.error("core.py:700", "EngineCore encountered a fatal error (simulated, crash).")
        log.raw("INFO:     Shutting down")
    campaign = load_campaign(ROOT / "examples" / "sim-pair.yaml", check_files=False)
    assert "spec_decoding" in campaign.log_captures
    write_captures(campaign, log_path, tmp_path / "arm", values=[])
    captured = (tmp_path / "arm" / "captures" / "spec_decoding.log").read_text().splitlines()
    assert len(captured) == 2
    assert all("SpecDecoding metrics: Mean acceptance length:" in ln for ln in captured)
    assert "Accepted: 8 tokens, Drafted: 20 tokens" in captured[1]
    error = first_error(log_path.read_text().splitlines())
    assert "EngineCore encountered a fatal error" in error
