"""campaign.run.measure.loadgen: AIPerf command lines, exports, validity, and the process handling.

Export samples in tests/data/aiperf/ are real AIPerf 0.13 outputs captured against a small
OpenAI-compatible server: `sweep_complete` (--concurrency 1,2,4, 4 requests each),
`sweep_cancelled` (1,2,4 with SIGINT during level 2: level 1 complete, level 2 cancelled,
level 4 never started), `errors` (every third request answered HTTP 500, completions,
single level), `nonstream` (chat without streaming: no TTFT/ITL; output lengths off).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from campaign import catalog
from campaign.errors import PassError
from campaign.run.measure import levelchecks, loadgen
from campaign.run.measure.loadgen import LevelResult, PassOutcome, PassPlan
from tests.runs import ROOT, TESTS

DATA = TESTS / "data" / "aiperf"


def make_plan(**changes: Any) -> PassPlan:
    plan = PassPlan(
        name="knee", kind="knee", base_url="http://127.0.0.1:8000", model="sim",
        tokenizer=ROOT / "fixtures" / "tokenizer", endpoint_type="chat", streaming=True,
        concurrency=(1, 2, 4, 8, 16), requests_per_level=40, duration_s=None,
        input_tokens=128, output_tokens=64, input_file=None, seed=17, timeout_s=600.0,
        executable="/opt/aiperf/bin/aiperf",
    )
    return replace(plan, **changes)


def flag(cmd: list[str], name: str) -> list[str]:
    """All values given to `name` in a command line."""
    return [cmd[i + 1] for i, arg in enumerate(cmd[:-1]) if arg == name]


# ---------------------------------------------------------------- command


def test_command_knee_sweep(tmp_path: Path) -> None:
    cmd = loadgen.aiperf_command(make_plan(), tmp_path)
    assert cmd[:2] == ["/opt/aiperf/bin/aiperf", "profile"]
    assert flag(cmd, "--concurrency") == ["1,2,4,8,16"]  # one sweep invocation
    assert flag(cmd, "--request-count") == ["40"]
    assert "--benchmark-duration" not in cmd
    assert flag(cmd, "--isl") == ["128"] and flag(cmd, "--isl-stddev") == ["0"]
    assert flag(cmd, "--osl") == ["64"] and flag(cmd, "--osl-stddev") == ["0"]
    assert flag(cmd, "--extra-inputs") == ["ignore_eos:true", "min_tokens:64"]
    assert flag(cmd, "--random-seed") == ["17"]
    assert flag(cmd, "--ui") == ["none"]
    assert flag(cmd, "--endpoint-type") == ["chat"] and "--streaming" in cmd
    assert flag(cmd, "--artifact-dir") == [str(tmp_path / "aiperf")]
    assert flag(cmd, "--tokenizer") == [str(ROOT / "fixtures" / "tokenizer")]
    assert "--input-file" not in cmd


def test_command_agentfix_duration_and_extra_args(tmp_path: Path) -> None:
    plan = make_plan(kind="agentfix", name="agentfix-shell", concurrency=(4,),
                     requests_per_level=None, duration_s=30.0, duration_grace_s=5.0,
                     input_tokens=None, input_file=Path("fixtures/agent/shell.jsonl"),
                     endpoint_type="completions", streaming=False,
                     extra_args=("--workers-max", "2"))
    cmd = loadgen.aiperf_command(plan, tmp_path)
    assert flag(cmd, "--concurrency") == ["4"]
    assert flag(cmd, "--benchmark-duration") == ["30"]
    assert flag(cmd, "--benchmark-grace-period") == ["5"]
    assert "--request-count" not in cmd and "--isl" not in cmd and "--streaming" not in cmd
    assert flag(cmd, "--input-file") == [str(Path("fixtures/agent/shell.jsonl").absolute())]
    assert flag(cmd, "--custom-dataset-type") == ["single-turn"]
    assert cmd[-2:] == ["--workers-max", "2"]


def test_command_is_pure(tmp_path: Path) -> None:
    plan = make_plan()
    assert loadgen.aiperf_command(plan, tmp_path) == loadgen.aiperf_command(plan, tmp_path)
    assert not (tmp_path / "aiperf").exists()


@pytest.mark.parametrize("changes, message", [
    ({"requests_per_level": None}, "exactly one of requests_per_level"),
    ({"duration_s": 10.0}, "exactly one of requests_per_level"),
    ({"input_file": Path("x.jsonl")}, "exactly one of input_tokens"),
    ({"concurrency": ()}, "concurrency"),
    ({"concurrency": (1, 2, 2)}, "repeat"),
    ({"output_tokens": 0}, "output_tokens"),
    ({"timeout_s": 0.0}, "timeout_s"),
])
def test_plan_validation(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_plan(**changes)


def test_aiperf_accepts_the_command(tmp_path: Path) -> None:
    """AIPerf's own CLI parser and planner turn our command into the intended runs."""
    pytest.importorskip("aiperf")
    from aiperf.cli_commands.profile import app
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan

    cmd = loadgen.aiperf_command(make_plan(concurrency=(1, 2, 4)), tmp_path)
    _, bound, _ = app.parse_args(cmd[2:])
    cli_config = bound.arguments["cli_config"]
    plan = build_benchmark_plan(resolve_config(cli_config, cli_config.config_file))
    assert plan.is_sweep and len(plan.configs) == 3
    dumped = [config.model_dump(mode="json") for config in plan.configs]
    assert [d["phases"][0]["concurrency"] for d in dumped] == [1, 2, 4]
    assert {d["phases"][0]["requests"] for d in dumped} == {40}
    assert dumped[0]["endpoint"]["extra"] == {"ignore_eos": True, "min_tokens": 64}
    assert dumped[0]["datasets"][0]["prompts"]["osl"]["mean"] == 64
    assert dumped[0]["datasets"][0]["prompts"]["osl"]["stddev"] == 0
    assert plan.variation_seeds == [17, 18, 19]  # fixed seeds: both arms get the same prompts


def test_aiperf_version_is_installed_one() -> None:
    version = loadgen.aiperf_version()
    assert version is not None and version.startswith("0.13")


# ---------------------------------------------------------------- exports


def test_parse_sweep_complete() -> None:
    levels = loadgen.parse_exports(DATA / "sweep_complete")
    assert [level.concurrency for level in levels] == [1, 2, 4]
    first = levels[0]
    assert first.complete and not first.cancelled
    assert (first.requests_completed, first.requests_errored, first.osl_mismatch) == (4, 0, 0)
    # values as written in concurrency_1/profile_export_aiperf.json
    assert first.metrics["output_token_throughput"] == pytest.approx(286.8820802049141)
    assert first.metrics["ttft_p50"] == pytest.approx(
        _raw(DATA / "sweep_complete/concurrency_1")["time_to_first_token"]["p50"])
    assert first.metrics["output_tokens"] == 32  # 4 requests × 8 tokens
    assert first.metrics["error_rate"] == 0.0
    assert first.export_path.parent.name == "concurrency_1"
    expected = {"output_token_throughput", "output_token_throughput_per_user",
                "request_throughput", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99",
                "request_latency_p50", "request_latency_p99", "error_rate",
                "requests_completed", "output_tokens", "osl_mismatch_share"}
    for level in levels:
        assert set(level.metrics) == expected
        assert all(catalog.is_known(name) for name in level.metrics)


def _raw(level_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((level_dir / loadgen.EXPORT_NAME).read_text())
    return data


def test_parse_errors_single_level_layout() -> None:
    [level] = loadgen.parse_exports(DATA / "errors")
    assert level.concurrency == 2  # single level: export at the top, no concurrency_N dir
    assert (level.requests_completed, level.requests_errored) == (6, 3)
    assert level.metrics["error_rate"] == pytest.approx(3 / 9)
    assert level.complete and not level.cancelled
    assert level.error_summary and "500" in level.error_summary[0]


def test_parse_nonstream_has_no_ttft() -> None:
    [level] = loadgen.parse_exports(DATA / "nonstream")
    assert "ttft_p50" not in level.metrics and "itl_p99" not in level.metrics
    assert "output_token_throughput" in level.metrics
    assert level.osl_mismatch == 6


def test_parse_skips_and_reports_unreadable_export(tmp_path: Path) -> None:
    shutil.copytree(DATA / "sweep_complete", tmp_path / "aiperf")
    (tmp_path / "aiperf" / "concurrency_2" / loadgen.EXPORT_NAME).write_text('{"truncated')
    problems: list[str] = []
    levels = loadgen.parse_exports(tmp_path, problems)
    assert [level.concurrency for level in levels] == [1, 4]
    assert len(problems) == 1 and "unreadable" in problems[0]


def test_outcome_to_dict_is_json(tmp_path: Path) -> None:
    levels = loadgen.parse_exports(DATA / "errors")
    outcome = outcome_for(levels, problems=["x"], missing_levels=[4])
    data = json.loads(json.dumps(outcome.to_dict()))
    assert data["levels"][0]["requests_errored"] == 3
    assert data["levels"][0]["export_path"].endswith(loadgen.EXPORT_NAME)
    assert data["missing_levels"] == [4] and data["problems"] == ["x"]


def outcome_for(levels: list[LevelResult], **changes: Any) -> PassOutcome:
    base = PassOutcome(command=["aiperf"], returncode=0, timed_out=False, interrupted=False,
                       wall_s=10.0, levels=levels, stdout_path=Path("o"),
                       stderr_path=Path("e"), problems=[])
    return replace(base, **changes)


def test_level_problems_valid_and_gates() -> None:
    levels = loadgen.parse_exports(DATA / "sweep_complete")
    outcome = outcome_for(levels)
    assert levelchecks.level_problems(levels[0], outcome, max_error_rate=0.0,
                                  min_completed_requests=4) == []
    [reason] = levelchecks.level_problems(levels[0], outcome, max_error_rate=0.0,
                                      min_completed_requests=5)
    assert "4 requests completed < 5" in reason


def test_level_problems_errors() -> None:
    [level] = loadgen.parse_exports(DATA / "errors")
    reasons = levelchecks.level_problems(level, outcome_for([level]), max_error_rate=0.05,
                                     min_completed_requests=1)
    assert reasons == ["error rate 33.3% > 5.0% (3 failed)"]
    assert levelchecks.level_problems(level, outcome_for([level]), max_error_rate=0.5,
                                  min_completed_requests=1) == []


def test_level_problems_cancelled_sweep() -> None:
    first, second = loadgen.parse_exports(DATA / "sweep_cancelled")
    # the real run exited 130 after our SIGINT (timeout) during level 2
    outcome = outcome_for([first, second], returncode=130, timed_out=True)
    assert levelchecks.level_problems(first, outcome, max_error_rate=0.0,
                                  min_completed_requests=10) == []
    reasons = levelchecks.level_problems(second, outcome, max_error_rate=0.0,
                                     min_completed_requests=10)
    assert "export says incomplete (is_complete=false)" in reasons
    assert "export says cancelled (was_cancelled=true)" in reasons


def test_level_problems_exit_code_and_interrupt() -> None:
    levels = loadgen.parse_exports(DATA / "sweep_complete")
    failed = outcome_for(levels, returncode=1)
    assert "aiperf exit 1" in levelchecks.level_problems(
        levels[0], failed, max_error_rate=0.0, min_completed_requests=1)
    stopped = outcome_for(levels, interrupted=True, returncode=0)
    assert any("interrupted" in r for r in levelchecks.level_problems(
        levels[0], stopped, max_error_rate=0.0, min_completed_requests=1))


def test_level_problems_output_length_gate_is_optional() -> None:
    [level] = loadgen.parse_exports(DATA / "nonstream")
    outcome = outcome_for([level])
    assert levelchecks.level_problems(level, outcome, max_error_rate=0.0,
                                  min_completed_requests=1) == []
    [reason] = levelchecks.level_problems(level, outcome, max_error_rate=0.0,
                                      min_completed_requests=1, max_osl_mismatch=0)
    assert "6 requests with another output length" in reason


# ---------------------------------------------------------------- process handling (fakes)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeProc:
    """A stand-in for AIPerf: 'runs' on the fake clock, reacts to group signals."""

    def __init__(self, clock: FakeClock, artifact_dir: Path, *, runs_s: float | None,
                 export: str | None, on_sigint: str | None = "sweep_cancelled",
                 ignore_sigint: bool = False, exit_code: int = 0,
                 leaves_orphans: bool = False) -> None:
        self.pid = 999_999_001
        self.returncode: int | None = None
        self.clock = clock
        self.aiperf_dir = artifact_dir / "aiperf"
        self.end = None if runs_s is None else clock.now + runs_s
        self.export = export
        self.on_sigint = on_sigint
        self.ignore_sigint = ignore_sigint
        self.exit_code = exit_code
        self.group_alive = True
        self.leaves_orphans = leaves_orphans

    def _exit(self, code: int, export: str | None) -> None:
        if export is not None:
            shutil.copytree(DATA / export, self.aiperf_dir, dirs_exist_ok=True)
        self.returncode = code
        self.group_alive = self.leaves_orphans

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if timeout is None:
            raise AssertionError("unbounded wait on a running process")
        self.clock.now += timeout
        if self.end is not None and self.clock.now >= self.end:
            self._exit(self.exit_code, self.export)
            return self.exit_code
        raise subprocess.TimeoutExpired("aiperf", timeout)

    def signal_group(self, sig: int) -> None:
        if not self.group_alive:
            raise ProcessLookupError
        if sig == signal.SIGKILL:
            self.group_alive = False
            if self.returncode is None:
                self.returncode = -signal.SIGKILL
        elif sig == signal.SIGINT and not self.ignore_sigint and self.returncode is None:
            self._exit(130, self.on_sigint)


class Harness:
    def __init__(self, tmp_path: Path, stdout: bytes = b"", **proc_args: Any) -> None:
        self.stdout = stdout
        self.clock = FakeClock()
        self.artifact_dir = tmp_path / "pass"
        self.proc_args = proc_args
        self.proc: FakeProc | None = None
        self.popen_kwargs: dict[str, Any] = {}
        self.signals: list[int] = []
        self.tmpdir_seen: str | None = None

    def popen(self, cmd: list[str], **kwargs: Any) -> FakeProc:
        self.popen_kwargs = kwargs
        self.tmpdir_seen = kwargs["env"]["TMPDIR"]
        assert Path(self.tmpdir_seen).is_dir()
        kwargs["stdout"].write(self.stdout)
        self.proc = FakeProc(self.clock, self.artifact_dir, **self.proc_args)
        return self.proc

    def killpg(self, pid: int, sig: int) -> None:
        assert self.proc is not None and pid == self.proc.pid
        self.signals.append(sig)
        self.proc.signal_group(sig)

    def run(self, plan: PassPlan | None = None, **kwargs: Any) -> PassOutcome:
        return loadgen.run_pass(plan or make_plan(concurrency=(1, 2, 4)), self.artifact_dir,
                                popen=self.popen, clock=self.clock, killpg=self.killpg,
                                **kwargs)


def test_run_pass_normal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    h = Harness(tmp_path, runs_s=30.0, export="sweep_complete")
    started: list[int] = []
    outcome = h.run(on_start=started.append)
    assert started == [999_999_001]  # the process group id, for a runner's journal
    assert outcome.returncode == 0 and not outcome.timed_out and not outcome.interrupted
    assert [level.concurrency for level in outcome.levels] == [1, 2, 4]
    assert outcome.problems == [] and outcome.missing_levels == []
    assert not outcome.stragglers_signalled
    assert outcome.wall_s == pytest.approx(30.0, abs=0.2)
    assert h.popen_kwargs["start_new_session"] is True
    assert h.popen_kwargs["cwd"] == h.artifact_dir
    # either one makes AIPerf 0.13 fail on a local tokenizer path
    assert "HF_HUB_OFFLINE" not in h.popen_kwargs["env"]
    assert "TRANSFORMERS_OFFLINE" not in h.popen_kwargs["env"]
    assert h.tmpdir_seen is not None and not Path(h.tmpdir_seen).exists()  # removed after
    assert h.signals == [signal.SIGKILL]  # the final sweep of the (already empty) group
    assert outcome.stdout_path == h.artifact_dir / loadgen.STDOUT_NAME
    assert outcome.stdout_path.exists() and outcome.stderr_path.exists()
    assert (h.artifact_dir / loadgen.COMMAND_NAME).read_text().startswith(
        "/opt/aiperf/bin/aiperf profile")


def test_run_pass_timeout_sends_sigint_and_keeps_partial(tmp_path: Path) -> None:
    h = Harness(tmp_path, runs_s=None, export=None, on_sigint="sweep_cancelled")
    outcome = h.run(make_plan(concurrency=(1, 2, 4), timeout_s=60.0))
    assert outcome.timed_out and not outcome.interrupted
    assert h.signals[0] == signal.SIGINT
    assert outcome.wall_s == pytest.approx(60.0, abs=0.2)
    assert outcome.returncode == 130
    assert [(lv.concurrency, lv.complete) for lv in outcome.levels] == [(1, True), (2, False)]
    assert outcome.missing_levels == [4]
    assert outcome.problems[0].startswith("timed out after 60 s")
    assert "aiperf exit 130" in outcome.problems
    assert any("export missing for concurrency 4" in p for p in outcome.problems)


def test_run_pass_sigkill_when_sigint_ignored(tmp_path: Path) -> None:
    h = Harness(tmp_path, runs_s=None, export=None, ignore_sigint=True)
    outcome = h.run(make_plan(concurrency=(1,), timeout_s=5.0), grace_s=15.0)
    assert h.signals[:2] == [signal.SIGINT, signal.SIGKILL]
    assert outcome.timed_out and outcome.returncode == -signal.SIGKILL
    assert outcome.wall_s == pytest.approx(5.0 + 15.0, abs=0.3)
    assert any("ignored SIGINT for 15 s" in p for p in outcome.problems)
    assert outcome.levels == [] and outcome.missing_levels == [1]


def test_run_pass_cancel_event(tmp_path: Path) -> None:
    cancel = threading.Event()
    h = Harness(tmp_path, runs_s=None, export=None, on_sigint="sweep_cancelled")
    real_wait = FakeProc.wait

    def wait_then_cancel(self: FakeProc, timeout: float | None = None) -> int:
        if self.clock.now >= 1003.0:  # Ctrl-C in the runner after ~3 s
            cancel.set()
        return real_wait(self, timeout)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FakeProc, "wait", wait_then_cancel)
        outcome = h.run(cancel=cancel)
    assert outcome.interrupted and not outcome.timed_out
    assert h.signals[0] == signal.SIGINT
    assert outcome.wall_s < 4.0
    assert outcome.problems[0] == "interrupted (stopped with SIGINT)"
    first = outcome.levels[0]
    assert any("interrupted" in r for r in levelchecks.level_problems(
        first, outcome, max_error_rate=0.0, min_completed_requests=1))


def test_run_pass_reports_nonzero_exit_without_exports(tmp_path: Path) -> None:
    log = (b"15:56:47.001 INFO     Configuring dataset (dataset_manager.py:281)\n"
           b"15:56:48.455 ERROR    Dataset configuration failed: TokenizerError(\"Failed to "
           b"load tokenizer '/x'\") (dataset_manager.py:300)\n"
           b"15:56:48.460 ERROR    Failed to handle command profile_configure\n")
    h = Harness(tmp_path, stdout=log, runs_s=2.0, export=None, exit_code=1)
    outcome = h.run(make_plan(concurrency=(1,)))
    assert outcome.returncode == 1 and outcome.levels == []
    assert "aiperf exit 1" in outcome.problems
    assert outcome.missing_levels == [1]
    assert outcome.problems[-1].startswith("aiperf: Dataset configuration failed")


def test_run_pass_kills_leftover_group_members(tmp_path: Path) -> None:
    h = Harness(tmp_path, runs_s=1.0, export="errors", leaves_orphans=True)
    outcome = h.run(make_plan(concurrency=(2,)))
    # FakeProc's group stays alive after the leader exits, like an orphaned AIPerf worker
    assert h.signals == [signal.SIGKILL]
    assert outcome.stragglers_signalled and outcome.problems == []
    assert [level.concurrency for level in outcome.levels] == [2]


def test_run_pass_refuses_to_overwrite(tmp_path: Path) -> None:
    h = Harness(tmp_path, runs_s=1.0, export="errors")
    shutil.copytree(DATA / "errors", h.artifact_dir / "aiperf")
    with pytest.raises(PassError, match="already holds AIPerf results"):
        h.run()


def test_run_pass_aiperf_missing(tmp_path: Path) -> None:
    def missing(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    with pytest.raises(PassError, match="cannot start AIPerf"):
        loadgen.run_pass(make_plan(), tmp_path / "p", popen=missing)


# ---------------------------------------------------------------- a tiny real child

FAKE_AIPERF = textwrap.dedent("""\
    import os, shutil, signal, subprocess, sys, time
    args = sys.argv[1:]
    out = args[args.index("--artifact-dir") + 1]
    # a grandchild in the same process group, like AIPerf's services
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    def stop(signum, frame):
        shutil.copytree(os.environ["FAKE_EXPORT"], out)
        sys.exit(0)
    signal.signal(signal.SIGINT, stop)
    print("fake aiperf running", flush=True)
    for _ in range(600):
        time.sleep(0.1)
""")


def _group_gone(pgid: int) -> bool:
    """True once no process of the group exists (SIGKILLed members vanish when reaped)."""
    for _ in range(100):  # bounded: ≤ 5 s
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_real_child_timeout_stops_whole_group(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "fake_aiperf.py"
    script.write_text(FAKE_AIPERF)
    wrapper = tmp_path / "fake-aiperf"  # a stand-in, not AIPerf: no profiling, no server
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("FAKE_EXPORT", str(DATA / "sweep_cancelled"))
    pids: list[int] = []

    def recording_popen(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, **kwargs)
        pids.append(proc.pid)
        return proc

    plan = make_plan(concurrency=(1, 2), timeout_s=1.0, executable=str(wrapper))
    outcome = loadgen.run_pass(plan, tmp_path / "pass", popen=recording_popen, grace_s=10.0)
    assert outcome.timed_out and outcome.returncode == 0
    assert [level.concurrency for level in outcome.levels] == [1, 2]
    assert b"fake aiperf running" in outcome.stdout_path.read_bytes()
    # the grandchild (sleep 60) was killed with the group: nothing left behind
    assert _group_gone(pids[0])
    assert outcome.stragglers_signalled


def test_output_length_mismatch_is_measured_and_can_be_gated() -> None:
    # a real vLLM generated 1,024 tokens and AIPerf re-tokenized them as 1,102: 6 of 16
    # requests "mismatched", inflating AIPerf's throughput in both arms; the share is a row
    # of every pass, and a pre-registered gate can refuse it
    [level] = loadgen.parse_exports(DATA / "errors")
    level = replace(level, osl_mismatch=6, requests_completed=16,
                    metrics={**level.metrics, "osl_mismatch_share": 6 / 16, "error_rate": 0.0})
    out = outcome_for([level])
    assert levelchecks.level_problems(level, out, max_error_rate=0.0,
                                      min_completed_requests=1) == []
    [reason] = levelchecks.level_problems(level, out, max_error_rate=0.0, min_completed_requests=1,
                                      max_osl_mismatch_share=0.1)
    assert "38% of requests with another output length" in reason


def test_parsed_exports_carry_the_mismatch_share(tmp_path: Path) -> None:
    import json

    src = DATA / "sweep_complete" / "concurrency_1" / "profile_export_aiperf.json"
    data = json.loads(src.read_text())
    data["osl_mismatch_count"] = {"avg": 2, "unit": "requests"}
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps(data))
    level = loadgen.parse_export(path)
    assert level.metrics["osl_mismatch_share"] == pytest.approx(2 / level.requests_completed)


@pytest.mark.parametrize("metric", ["ttft_p99", "ttft_p50", "request_latency_p99"])
def test_a_latency_of_zero_is_no_measurement(metric: str) -> None:
    """A measured p99 TTFT of 0 used to read as "100% better" and adopt: the level is
    invalid, and the reason says why."""
    levels = loadgen.parse_exports(DATA / "sweep_complete")
    level = replace(levels[0], metrics={**levels[0].metrics, metric: 0.0})
    [reason] = levelchecks.level_problems(level, outcome_for([level]), max_error_rate=0.0,
                                      min_completed_requests=1)
    assert reason.startswith(f"{metric} = 0 ms: a latency of 0 over a pass is no measurement")
    fine = replace(levels[0], metrics={**levels[0].metrics, "itl_p50": 0.0})  # one token
    assert levelchecks.level_problems(fine, outcome_for([fine]), max_error_rate=0.0,
                                  min_completed_requests=1) == []
