"""Real AIPerf against the simulated lane: no errors, 0 OSL mismatch (integration)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from campaign.sim.testing import running_sim, sim_env
from tests.runs import require

AIPERF = Path(sys.executable).parent / "aiperf"


def _metrics(base: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:spec_decode_num_") and "_created" not in line:
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = out.get(name.split("{")[0], 0.0) + float(value)
    return out


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> bytes:
    """Run AIPerf in its own process group; on timeout SIGINT the group (it then still
    writes partial results), SIGKILL if that does not end it, and fail."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"aiperf timed out:\n{out.decode(errors='replace')[-2000:]}")


def test_aiperf_profile_against_sim(tmp_path: Path, tokenizer_dir: Path) -> None:
    require(AIPERF.exists(), "aiperf", "pip install 'aiperf>=0.13,<0.14' into .venv")
    env = sim_env(time_scale=20, seed=2, drift_sigma=0)
    with running_sim(env=env) as sim:
        before = _metrics(sim.base_url)
        artifacts = tmp_path / "artifacts"
        # AIPerf puts ZMQ ipc sockets under TMPDIR; their paths must stay < 108 bytes,
        # so pytest's deep tmp_path will not do.
        tmp = Path(tempfile.mkdtemp(prefix="ap-", dir="/tmp"))
        cmd = [str(AIPERF), "profile", "--model", "sim", "--url", sim.base_url,
               "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer_dir),
               "--concurrency", "2", "--request-count", "8", "--isl", "64", "--osl", "32",
               "--extra-inputs", "ignore_eos:true", "--random-seed", "1",
               "--artifact-dir", str(artifacts), "--ui-type", "none",
               # nothing of the server's is polled: its counters are read around the run,
               # and there is no GPU (no DCGM endpoint to probe)
               "--no-server-metrics", "--no-gpu-telemetry"]
        child_env = {**os.environ, "TMPDIR": str(tmp)}
        child_env.pop("HF_HUB_OFFLINE", None)
        try:
            out = _run(cmd, child_env, timeout=90)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        after = _metrics(sim.base_url)
    export = artifacts / "profile_export_aiperf.json"
    assert export.exists(), out.decode(errors="replace")[-2000:]
    data = json.loads(export.read_text())
    assert data["is_complete"] is True and data["was_cancelled"] is False
    assert data["error_summary"] == []
    assert data["request_count"]["avg"] == 8
    assert data["osl_mismatch_count"]["avg"] == 0
    assert data["output_sequence_length"]["min"] == data["output_sequence_length"]["max"] == 32
    # AIPerf's synthetic prompts are classified as such: acceptance near the configured 0.80.
    drafted = after["vllm:spec_decode_num_draft_tokens_total"] - before.get(
        "vllm:spec_decode_num_draft_tokens_total", 0.0)
    accepted = after["vllm:spec_decode_num_accepted_tokens_total"] - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0)
    assert accepted / drafted == pytest.approx(0.80, abs=0.08)
