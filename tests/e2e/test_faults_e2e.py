"""Fault tests of `spec-ab run` for real (simulated lane, process backend, real AIPerf, the
CLI in a subprocess): a secret in the server's environment reaches the server and nothing
else; an engine that dies inside a live process (/health 503) is a server death (the
candidate's: its own failure, never redone); a results disk that fills up mid-run exits 3
naming the file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from campaign.run.guards import portguard
from campaign.sim.testing import free_port
from tests.e2e.test_run_e2e import (
    SPEC_AB,
    campaign_text,
    journal_events,
    lock_env,
    out,
    procs_of,
    run_cli,
    run_dir_of,
    wait_for,
    write_campaign,
)
from tests.runs import ROOT

__all__ = ["out"]  # the fixture, imported from test_run_e2e


def test_a_secret_reaches_the_server_and_no_file_or_output(tmp_path: Path, out: Path) -> None:
    secret = "hf_" + uuid.uuid4().hex
    port = free_port()
    text = campaign_text(port).replace(
        f'command: [spec-ab, sim, serve, --port, "{port}"]',
        # the server starts only when it got the value (E2E_EXPECT_HF is not secret-named,
        # so nothing redacts it: the test checks it is not written anywhere either)
        f"command: [sh, -c, 'test \"$HF_TOKEN\" = \"$E2E_EXPECT_HF\" && "
        f"exec spec-ab sim serve --port {port}']",
    ).replace("    SPECAB_SIM_MODEL: e2e-model\n",
              "    SPECAB_SIM_MODEL: e2e-model\n    HF_TOKEN: ${HF_TOKEN}\n")
    path = write_campaign(tmp_path, text)
    env = {**lock_env(tmp_path), "HF_TOKEN": secret, "E2E_EXPECT_HF": secret}
    outputs = []
    for args in (["check", str(path), "--no-preflight"], ["run", str(path), "--dry-run"]):
        proc = run_cli(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "HF_TOKEN" in proc.stdout
        outputs.append(proc.stdout + proc.stderr)
    proc = run_cli("run", str(path), "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs.append(proc.stdout + proc.stderr)
    assert all(secret not in o for o in outputs)
    run_dir = run_dir_of(out)
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    launches = [e["launch"] for e in journal_events(run_dir) if e["event"] == "slot_start"]
    assert launches and all('HF_TOKEN="$HF_TOKEN"' in str(x) for x in launches)
    assert "HF_TOKEN: ${HF_TOKEN}" in (run_dir / "campaign.yaml").read_text()
    literal = text.replace("HF_TOKEN: ${HF_TOKEN}", f"HF_TOKEN: {secret}")
    refused = run_cli("check", str(write_campaign(tmp_path, literal)), "--no-preflight", env=env)
    assert refused.returncode == 2 and "HF_TOKEN: ${HF_TOKEN}" in refused.stderr
    assert secret not in refused.stdout + refused.stderr


def test_an_unhealthy_engine_is_a_death_that_counts_against_the_candidate(
        tmp_path: Path, out: Path) -> None:
    """The candidate's engine dies after 5 requests but its API server stays up (/health
    503): the pass is not retried against it, the pair is invalid and, the candidate's own
    failure, never redone (not by pair_retries, not within the night): exit 4, and nothing
    is left running."""
    port = free_port()
    text = campaign_text(port, retries=1, cand_env=(
        '\n      SPECAB_SIM_DIE_AFTER_REQUESTS: "5"\n      SPECAB_SIM_DEATH_MODE: unhealthy'))
    text = text.replace("pair_retries: 0", "pair_retries: 1")
    path = write_campaign(tmp_path, text)
    t0 = time.monotonic()
    proc = run_cli("run", str(path), "--out", str(out), env=lock_env(tmp_path))
    took = time.monotonic() - t0
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert took < 240
    run_dir = run_dir_of(out)
    events = journal_events(run_dir)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert len(invalid) == 1, json.dumps(invalid)
    assert "unhealthy (/health → 503) during knee" in str(invalid[0]["reason"])
    assert invalid[0]["fault"] == "own"
    assert [e["pair_attempt"] for e in events if e["event"] == "pair_start"] == [1]
    assert not [e for e in events if e["event"] == "pair_redo"]
    assert not [e for e in events if e["event"] == "pass" and ".retry" in str(e["name"])]
    assert "campaign incomplete" in proc.stderr
    assert not procs_of(run_dir)


SMALL_DISK = "260k"
"""A results disk that fills during the first pair."""


def test_a_full_results_disk_exits_3_naming_the_file(tmp_path: Path, small_disk: Path) -> None:
    port = free_port()
    path = write_campaign(tmp_path, campaign_text(port, pairs=2))
    t0 = time.monotonic()
    proc = run_cli("run", str(path), "--out", str(small_disk), env=lock_env(tmp_path))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 120
    assert "Traceback" not in proc.stderr
    assert "No space left on device" in proc.stderr and str(small_disk) in proc.stderr
    run_dir = run_dir_of(small_disk)
    assert f"spec-ab run --resume {run_dir}" in proc.stderr
    events = journal_events(run_dir)  # every line parses: none torn
    assert events[0]["event"] == "registered"
    assert not procs_of(run_dir)


def test_a_squatter_on_the_port_is_a_lane_fault_never_measured(tmp_path: Path,
                                                                out: Path) -> None:
    """Another vLLM-like server holds the campaign's port before the boot (the arms' own
    servers bind theirs only after 20 s, as vLLM does after loading its model): readiness
    would succeed against the squatter at once and measure it. The slot is a lane fault
    instead: the pair is invalid, redone within the night's budget, nothing is measured,
    exit 4 — and the squatter is left alone. (The preflight refuses a busy port before
    the night; a squatter arrives between two slots, which the slot's own check guards:
    here with the preflight skipped, so that check meets it on the first slot.)"""
    port = free_port()
    text = campaign_text(port, cand_env='\n      SPECAB_SIM_BOOT_DELAY: "20"').replace(
        "  control: {}\n", "  control:\n    env: {SPECAB_SIM_BOOT_DELAY: '20'}\n")
    path = write_campaign(tmp_path, text)
    squatter = subprocess.Popen(  # the squatter: a simulated lane of its own on the port
        [sys.executable, "-m", "campaign", "sim", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "SPECAB_SIM_MODEL": "e2e-model", "SPECAB_SIM_TIME_SCALE": "40"})
    try:
        wait_port(port)
        proc = run_cli("run", str(path), "--out", str(out), "--skip-preflight",
                       env=lock_env(tmp_path))
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert squatter.poll() is None  # not ours: never stopped
    finally:
        squatter.terminate()
        squatter.wait(timeout=20)
    run_dir = run_dir_of(out)
    events = journal_events(run_dir)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert invalid and all(e["fault"] == "lane" for e in invalid), invalid
    assert all(f"port {port} on 127.0.0.1 was busy before the server's boot" in e["reason"]
               for e in invalid), invalid
    assert len(invalid) > 1  # a lane fault is redone
    assert not [e for e in events if e["event"] in ("pass", "server_ready")]
    assert "campaign incomplete" in proc.stderr
    assert not procs_of(run_dir)


def wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {timeout_s} s")


@pytest.mark.timing  # a loaded host must not stall the retry beyond max_stall_s
def test_a_server_frozen_mid_pass_gives_a_stalled_pass_retried_not_measured(
        tmp_path: Path, out: Path) -> None:
    """SIGSTOP of the candidate's server for 6 s while its knee requests are in flight,
    then SIGCONT: the server recovers and AIPerf finishes, but the pass measured the
    freeze — it is invalid (`stalled`, max_stall_s 3 s here), the lane's fault, and its
    retry measures the server. Before the stall gate the frozen pass was valid."""
    port = free_port()
    text = campaign_text(port, retries=1, cand_env='\n      SPECAB_SIM_TIME_SCALE: "1"')
    text = text.replace("min_output_tokens: 10}", "min_output_tokens: 10, max_stall_s: 3}")
    assert "max_stall_s: 3" in text
    path = write_campaign(tmp_path, text)
    proc = subprocess.Popen([*SPEC_AB, "run", str(path), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **lock_env(tmp_path)}, start_new_session=True)
    try:
        wait_for(lambda: any(out.iterdir()), 60, "the run directory")
        run_dir = run_dir_of(out)
        wait_for(lambda: any(e["event"] == "server_ready" and _after_cand_start(run_dir)
                             for e in journal_events(run_dir)), 120, "the candidate ready")
        wait_for(lambda: _running(port) > 0, 120, "the candidate's requests in flight")
        (pid,) = portguard.listener_pids(port)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(6)
        os.kill(pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stdout + stderr
    passes = [e for e in journal_events(run_dir) if e["event"] == "pass"
              and e["arm"] == "cand" and e["workload"] == "knee"]
    assert len(passes) == 2 and not passes[0]["valid"] and passes[1]["valid"], passes
    assert any("stalled: a request waited" in str(p) for p in passes[0]["problems"]), passes[0]
    assert passes[0]["fault"] == "lane"
    assert not procs_of(run_dir)


def _after_cand_start(run_dir: Path) -> bool:
    """The candidate's slot has started (its server_ready is the one after it)."""
    events = journal_events(run_dir)
    starts = [i for i, e in enumerate(events) if e["event"] == "slot_start" and e["arm"] == "cand"]
    return bool(starts) and any(e["event"] == "server_ready" for e in events[starts[0]:])


def _running(port: int) -> float:
    """vllm:num_requests_running on the simulated lane's /metrics (0 when unreachable)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))
