"""The runner's logic with fake edges: a fake server (a real listening socket so the
readiness port check is real), a scripted pass runner, an httpx MockTransport for
/health, /v1/models, the probe and /metrics. No sleeps, no subprocesses."""

from __future__ import annotations

import dataclasses
import io
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from campaign.campaignfile import Campaign, LaunchModel, load_campaign
from campaign.errors import Interrupted, PreflightError, ServerError
from campaign.results.bootfail import first_error
from campaign.results.store import load_run, rule_hash
from campaign.run import runner
from campaign.run.guards import lanelock
from campaign.run.guards.cleanup import Scan
from campaign.run.measure.loadgen import LevelResult, PassOutcome, PassPlan
from campaign.run.slot.launcherror import LaunchError
from campaign.servers import ArmContext

CAMPAIGN = """
name: fake
hypothesis: h
lane: fake-lane
preregistration:
  pairs: 2
  decision_cells: [{workload: knee, level: c1}]
  gates: {retries: 1, min_completed_requests: 2}
server:
  backend: process
  command: [never-run]
  port: 1
  readiness: {poll_interval_s: 0.001, timeout_s: 5}
arms:
  control: {}
  cand: {env: {X: "1"}}
workloads:
  model: m
  tokenizer: tok
  warmup: [{concurrency: 1, requests: 2}]
  knee: {concurrency: [1, 4], requests_per_level: 8}
  agentfix:
    fixtures: {shell: shell.jsonl}
    requests: 4
log_captures:
  spec: "SpecDecoding metrics:"
"""


def _campaign(tmp_path: Path, text: str) -> Campaign:
    (tmp_path / "tok").mkdir(exist_ok=True)
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    (tmp_path / "shell.jsonl").write_text('{"text": "ls"}\n')
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_campaign(path)


@pytest.fixture()
def campaign(tmp_path: Path) -> Campaign:
    return _campaign(tmp_path, CAMPAIGN)


@pytest.fixture()
def listener() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


@dataclass
class FakeServer:
    port: int
    ctx: ArmContext
    events: list[str]
    die_on_start: bool = False
    alive_flag: bool = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.events.append(f"start {self.ctx.pair}/{self.ctx.arm}")
        self.ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.ctx.log_path.write_text("boot\nSpecDecoding metrics: Mean acceptance length: 2.5\n")
        if self.die_on_start:
            self.alive_flag = False

    def alive(self) -> bool:
        return self.alive_flag

    def exit_status(self) -> str | None:
        return None if self.alive_flag else "exited with code 1"

    def logs(self, tail: int = 40) -> list[str]:
        return ["last line"]

    def stop(self) -> None:
        self.events.append(f"stop {self.ctx.pair}/{self.ctx.arm}")

    def describe(self) -> list[str]:
        return ["fake"]

    def facts(self) -> dict[str, Any]:
        return {"fake": True}


class Metrics:
    """/metrics counters that grow with every scrape (like a serving engine)."""

    def __init__(self) -> None:
        self.n = 0

    def text(self) -> str:
        self.n += 1
        d = 100 * self.n
        return (
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {5 * d}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {2 * d}\n'
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {19 * d}\n'
        )


def transport(metrics: Metrics) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if path == "/v1/chat/completions":
            return httpx.Response(200, json={"choices": []})
        if path == "/metrics":
            return httpx.Response(200, text=metrics.text())
        return httpx.Response(404)

    return httpx.MockTransport(handler)


@dataclass
class Script:
    """The pass runner: throughput by arm, plus scripted faults."""

    gain: float = 1.15
    invalid_first: set[str] = field(default_factory=set)
    interrupt_at: int | None = None
    die_at: int | None = None
    calls: list[str] = field(default_factory=list)
    servers: list[FakeServer] = field(default_factory=list)
    cancel: threading.Event | None = None

    def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> PassOutcome:
        self.calls.append(plan.name)
        n = len(self.calls)
        artifact_dir.mkdir(parents=True, exist_ok=True)
        arm = artifact_dir.parent.parent.name.split(".")[0]
        if self.interrupt_at == n:
            assert cancel is not None
            cancel.set()
        if self.die_at == n:
            self.servers[-1].alive_flag = False
        fail = plan.name in self.invalid_first
        self.invalid_first.discard(plan.name)
        levels = []
        for c in plan.concurrency:
            value = 100.0 * c * (self.gain if arm != "control" else 1.0)
            levels.append(LevelResult(
                concurrency=c,
                metrics={"output_token_throughput": value, "ttft_p99": 50.0, "error_rate": 0.0,
                         "requests_completed": 8.0, "output_tokens": 2048.0},
                requests_completed=1 if fail else 8, requests_errored=0, complete=True,
                cancelled=False, osl_mismatch=0, export_path=artifact_dir / "x.json"))
        return PassOutcome(command=["aiperf", plan.name], returncode=0, timed_out=False,
                           interrupted=bool(cancel and cancel.is_set()), wall_s=1.0,
                           levels=levels, stdout_path=artifact_dir / "o",
                           stderr_path=artifact_dir / "e", problems=[])


def make_rt(tmp_path: Path, port: int, script: Script, events: list[str],
            die_on_start: bool | list[bool] = False) -> runner.Runtime:
    """`die_on_start`: every server exits while booting, or the n-th started one does
    when the list's n-th item is true (servers past the list boot)."""
    metrics = Metrics()
    starts = iter(die_on_start) if isinstance(die_on_start, list) else None

    def factory(launch: LaunchModel, ctx: ArmContext) -> FakeServer:
        dies = die_on_start if starts is None else next(starts, False)
        server = FakeServer(port, ctx, events, die_on_start=bool(dies))
        script.servers.append(server)
        return server

    def client() -> httpx.Client:
        return httpx.Client(transport=transport(metrics))

    return runner.Runtime(server_factory=factory, run_pass=script, http=client,
                          sleep=lambda s: None, lock_dir=tmp_path / "locks")


def start(campaign: Campaign, tmp_path: Path, rt: runner.Runtime) -> runner.RunStore:
    assert campaign.source is not None
    return runner.start_run(campaign, campaign.source.read_bytes(), tmp_path / "results", rt)


def test_normal_campaign_writes_every_file(campaign: Campaign, tmp_path: Path,
                                           listener: int) -> None:
    events: list[str] = []
    script = Script()
    rt = make_rt(tmp_path, listener, script, events)
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete and result.pairs_valid == [1, 2]
    # every arm started and stopped, in AB order
    assert events == ["start 1/control", "stop 1/control", "start 1/cand", "stop 1/cand",
                      "start 2/control", "stop 2/control", "start 2/cand", "stop 2/cand"]
    run = store.run_dir
    assert campaign.source is not None
    assert (run / "campaign.yaml").read_bytes() == campaign.source.read_bytes()
    prereg = json.loads((run / "preregistration.json").read_text())
    assert prereg["sha256"] == rule_hash(prereg["rule"]) and prereg["drift_band"] == 0.03
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["tool"]["name"] == "spec-ab" and "01/control" in manifest["servers"]
    for pair in ("01", "02"):
        for arm in ("control", "cand"):
            d = run / "pairs" / pair / arm
            assert (d / "server.log").is_file()
            assert (d / "metrics" / "knee-before.prom").is_file()
            assert (d / "metrics" / "knee-after.prom").is_file()
            assert "SpecDecoding" in (d / "captures" / "spec.log").read_text()
    data = load_run(run)
    assert data.complete
    knee = data.passes[(data.passes.metric == "output_token_throughput")
                       & (data.passes.workload == "knee")]
    assert len(knee) == 2 * 2 * 2  # pairs × arms × levels
    assert set(knee.level) == {"c1", "c4"}
    acc = data.passes[data.passes.metric == "acceptance_rate"]
    assert len(acc) == 2 * 2 * 2  # knee (level all) + agentfix shell, per arm and pair
    assert acc.value.round(3).eq(0.4).all()  # 200 accepted of 500 drafted per scrape step
    # warm-ups are run but never measured
    assert "warmup-1" in script.calls and not (data.passes.workload == "warmup").any()
    kinds = [e["event"] for e in data.journal]
    assert kinds[0] == "registered" and kinds[-1] == "finished"
    overhead = [e["overhead_s"] for e in data.journal if e["event"] == "slot_done"]
    assert len(overhead) == 4


def test_invalid_pass_is_retried_then_kept(campaign: Campaign, tmp_path: Path,
                                           listener: int) -> None:
    script = Script(invalid_first={"knee"})
    rt = make_rt(tmp_path, listener, script, [])
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete
    assert script.calls.count("knee") == 5  # 4 arms + one retry
    rows = load_run(store.run_dir).passes
    first = rows[(rows.pair == 1) & (rows.arm == "control") & (rows.workload == "knee")
                 & (rows.metric == "output_token_throughput")]
    assert sorted(first.attempt) == [1, 1, 2, 2]
    assert not first[first.attempt == 1].valid.any() and first[first.attempt == 2].valid.all()
    assert "completed" in first[first.attempt == 1].reason.iloc[0]


def test_pass_invalid_after_retries_makes_campaign_incomplete(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    class AlwaysBad(Script):
        def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                     cancel: threading.Event | None = None) -> PassOutcome:
            if plan.name.startswith("agentfix"):
                self.invalid_first.add(plan.name)
            return super().__call__(plan, artifact_dir, cancel=cancel)

    rt = make_rt(tmp_path, listener, AlwaysBad(), [])
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert not result.complete
    assert set(result.pairs_invalid) == {1, 2}
    assert "agentfix-shell" in result.pairs_invalid[1]


def test_server_dying_mid_pass_redoes_the_whole_pair(campaign: Campaign, tmp_path: Path,
                                                    listener: int) -> None:
    events: list[str] = []
    script = Script(die_at=2)  # pair 1 control: warmup ok, dies during the knee
    rt = make_rt(tmp_path, listener, script, events)
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete and result.pairs_valid == [1, 2]
    # the rest of attempt 1 is skipped; pair 1 is redone whole, control first
    assert events[:4] == ["start 1/control", "stop 1/control", "start 1/control",
                          "stop 1/control"]
    data = load_run(store.run_dir)
    assert any(e["event"] == "pair_invalid" and e["pair"] == 1 for e in data.journal)
    assert (store.run_dir / "pairs" / "01" / "cand.redo1").is_dir()
    assert set(data.passes[data.passes.pair == 1].pair_attempt) == {1, 2}
    # every report format says pair 1 was redone, whose server and why
    from campaign import report as rp

    rep = rp.build_report([store.run_dir])
    line = ("redone: pair 1 redone, measured in attempt 2 — attempt 1: control: server "
            "exited with code 1 during knee")
    for fmt in ("table", "markdown", "json", "html"):
        out = rp.render(rep, fmt)
        text = json.loads(out)["notes"] if fmt == "json" else out
        assert line in str(text).replace("&#x27;", "'"), (fmt, str(text)[:2000])


def test_server_dying_again_leaves_the_pair_invalid(tmp_path: Path, listener: int) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN.replace("retries: 1,",
                                                    "retries: 1, pair_retries: 0, redo_budget: 0,"))
    events: list[str] = []
    script = Script(die_at=2)
    rt = make_rt(tmp_path, listener, script, events)
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.pairs_valid == [2] and not result.complete
    assert "server exited with code 1 during knee" in result.pairs_invalid[1]
    assert events[:3] == ["start 1/control", "stop 1/control", "start 2/control"]


def test_the_same_boot_exit_twice_is_a_launch_error_that_stops_the_run(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    """An arm never ready exits while booting, is booted once more, exits the same way: the
    run stops (exit 3) saying to fix the file and start anew, never to resume."""
    events: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), events, die_on_start=True)
    store = start(campaign, tmp_path, rt)
    with pytest.raises(LaunchError) as info:
        runner.execute(campaign, store, rt)
    assert info.value.exit_code == 3
    assert events == ["start 1/control", "stop 1/control"] * 2
    text = str(info.value)
    assert text.startswith("control never became ready (pair 1): server exited with code 1 "
                           "while booting: last line")
    assert "fix the campaign file and start a new run: `spec-ab run" in text
    assert "`--resume` would boot it again" in text
    journal = load_run(store.run_dir).journal
    kinds = [e["event"] for e in journal]
    assert kinds.count("slot_failed") == 2 and "boot_retry" in kinds and "aborted" in kinds
    (launch,) = [e for e in journal if e["event"] == "launch_error"]
    assert (launch["arm"], launch["pair"], launch["error"]) == ("control", 1, "last line")


def test_a_boot_exit_once_is_booted_again_and_the_run_goes_on(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    events: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), events, die_on_start=[True])
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete
    assert events[:3] == ["start 1/control", "stop 1/control", "start 1/control"]


def test_a_boot_exit_of_an_arm_ready_before_stops_the_night_without_a_second_boot(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    events: list[str] = []
    # pair 1: control, cand boot; pair 2's first arm exits while booting
    rt = make_rt(tmp_path, listener, Script(), events, die_on_start=[False, False, True])
    store = start(campaign, tmp_path, rt)
    with pytest.raises(ServerError, match="exited with code 1 while booting") as info:
        runner.execute(campaign, store, rt)
    assert not isinstance(info.value, LaunchError)
    assert len(events) == 6  # three starts, three stops: no second boot
    kinds = [e["event"] for e in load_run(store.run_dir).journal]
    assert "aborted" in kinds and "boot_retry" not in kinds


def test_first_error_reads_the_servers_error_line() -> None:
    box = ["Usage: spec-ab sim serve [OPTIONS]", "╭─ Error ─────╮",
           "│ No such option: -c            │", "╰──────────────╯"]
    assert first_error(box) == "No such option: -c"
    assert first_error(["loading", "error: environment variable SPECAB_SIM_DEPHT: unknown "
                        "knob 'depht'", "exiting"]).startswith("error: environment variable")
    assert first_error(["starting", "bye"]) == "bye"
    assert first_error([]) == ""


def test_interrupt_then_resume_redoes_the_cut_pair(campaign: Campaign, tmp_path: Path,
                                                  listener: int) -> None:
    events: list[str] = []
    script = Script(interrupt_at=6)  # pair 1: control = 4 passes, cand warmup = 5, knee = 6
    rt = make_rt(tmp_path, listener, script, events)
    store = start(campaign, tmp_path, rt)
    with pytest.raises(Interrupted):
        runner.execute(campaign, store, rt)
    assert events[-1] == "stop 1/cand"  # the server is stopped on the way out
    kinds = [e["event"] for e in load_run(store.run_dir).journal]
    assert "interrupted" in kinds and "finished" not in kinds

    events2: list[str] = []
    script2 = Script()
    rt2 = make_rt(tmp_path, listener, script2, events2)
    store2, campaign2 = runner.reopen_run(store.run_dir, rt2)
    result = runner.execute(campaign2, store2, rt2)
    assert result.complete
    assert events2[0] == "start 1/control"  # pair 1 redone whole, control included
    assert (store.run_dir / "pairs" / "01" / "control.redo1" / "server.log").is_file()
    assert (store.run_dir / "pairs" / "01" / "cand" / "server.log").is_file()  # kept, unused
    data = load_run(store.run_dir)
    assert data.complete
    latest = data.passes[data.passes.pair == 1].pair_attempt.max()
    assert latest == 2


def test_an_interrupt_says_which_pair_will_be_measured_again(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(interrupt_at=6), [])
    with pytest.raises(Interrupted) as info:
        runner.run_campaign(campaign, None, tmp_path / "results", rt,
                            opts=runner.RunOptions(skip_preflight=True,
                                                   find_leftovers=lambda c: Scan()))
    text = str(info.value)
    assert "the interrupted pair 1 will be measured again from its start" in text
    assert "spec-ab run --resume" in text


def test_resume_uses_the_frozen_rule(campaign: Campaign, tmp_path: Path, listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(interrupt_at=1), [])
    store = start(campaign, tmp_path, rt)
    with pytest.raises(Interrupted):
        runner.execute(campaign, store, rt)
    # the user edits the campaign file after registration: the frozen copy still rules
    assert campaign.source is not None
    campaign.source.write_text(CAMPAIGN.replace("pairs: 2", "pairs: 4"))
    _, resumed = runner.reopen_run(store.run_dir, make_rt(tmp_path, listener, Script(), []))
    assert resumed.preregistration.pairs == 2


def test_lane_lock_keeps_a_second_campaign_off(campaign: Campaign, tmp_path: Path,
                                              listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(), [])
    store = start(campaign, tmp_path, rt)
    assert rt.lock_dir is not None
    with lanelock.hold("fake-lane", "other-run", lock_dir=rt.lock_dir), \
            pytest.raises(PreflightError, match="lane 'fake-lane' is busy: run other-run"):
        runner.execute(campaign, store, rt)


def test_progress_events(campaign: Campaign, tmp_path: Path, listener: int) -> None:
    seen: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), [])
    rt.progress = lambda event, **d: seen.append(event)
    runner.execute(campaign, start(campaign, tmp_path, rt), rt)
    for kind in ("pair_start", "slot_start", "pass_done", "slot_done", "eta", "pair_done"):
        assert kind in seen


Factory = Callable[[LaunchModel, ArmContext], FakeServer]


def test_multi_candidate_abba_blocks(tmp_path: Path, listener: int) -> None:
    text = CAMPAIGN.replace('  cand: {env: {X: "1"}}',
                            '  cand: {env: {X: "1"}}\n  cand2: {env: {X: "2"}}')
    text = text.replace("  pairs: 2\n", "  pairs: 2\n  order: ABBA\n")
    campaign = _campaign(tmp_path, text)
    events: list[str] = []
    rt = make_rt(tmp_path, listener, Script(), events)
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete
    starts = [e.split()[1] for e in events if e.startswith("start")]
    # every candidate measured in the same window as its control; ABBA reverses pair 2
    assert starts == ["1/control", "1/cand", "1/cand2", "2/cand2", "2/cand", "2/control"]
    from campaign.report import build_report, to_dict

    doc = to_dict(build_report([store.run_dir]))
    assert {c["arm"] for c in doc["cells"]} == {"cand", "cand2"}
    assert [r["arm"] for r in doc["ranking"]][:2] in (["cand", "cand2"], ["cand2", "cand"])


# ------------------------------------------------------------------ run_campaign: the guards


def _scan(items: list[Any] | None = None, notes: list[str] | None = None) -> Any:
    from campaign.run.guards.cleanup import Scan

    scan = Scan(items or [])
    scan.notes.extend(notes or [])
    return scan


def test_run_campaign_refuses_leftovers_before_anything(campaign: Campaign, tmp_path: Path,
                                                        listener: int) -> None:
    from campaign.run.guards.cleanup import Leftover

    leftover = Leftover(kind="process", ident="4242", name="vllm serve", run_id="old",
                        why="runner pid 1 is not running", lane="fake-lane")
    notes: list[str] = []
    preflights: list[Campaign] = []
    rt = make_rt(tmp_path, listener, Script(), [])
    with pytest.raises(PreflightError,
                       match=r"1 leftover\(s\) of earlier runs hold lane 'fake-lane'"):
        runner.run_campaign(
            campaign, None, tmp_path / "results", rt, opts=runner.RunOptions(
                on_note=notes.append,
                find_leftovers=lambda c: _scan([leftover], ["engine ssh://x unreachable"]),
                preflight=lambda c: (preflights.append(c), ([], []))[1]))
    assert notes == ["engine ssh://x unreachable"]
    assert preflights == []  # leftovers first: they also explain a busy port
    assert not (tmp_path / "results").exists()  # no run directory


def test_run_campaign_stops_on_preflight_problems(campaign: Campaign, tmp_path: Path,
                                                  listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(), [])
    with pytest.raises(PreflightError, match="preflight failed:\n  - port 1 busy") as info:
        runner.run_campaign(campaign, None, tmp_path / "results", rt, opts=runner.RunOptions(
            shown_as="c.yaml", find_leftovers=lambda c: _scan(),
            preflight=lambda c: ([], ["port 1 busy"])))
    assert info.value.hint == "spec-ab check c.yaml shows details"
    assert not (tmp_path / "results").exists()


def test_run_campaign_runs_and_resumes(campaign: Campaign, tmp_path: Path,
                                       listener: int) -> None:
    events: list[str] = []
    script = Script(interrupt_at=3)
    rt = make_rt(tmp_path, listener, script, events)
    script.cancel = rt.cancel
    seen: list[Path] = []
    guards = {"find_leftovers": lambda c: _scan(),
              "preflight": lambda c: ([], []), "on_start": lambda s: seen.append(s.run_dir)}
    with pytest.raises(Interrupted, match="spec-ab run --resume") as info:
        runner.run_campaign(campaign, None, tmp_path / "results", rt,
                            opts=runner.RunOptions(**guards))
    assert len(seen) == 1 and str(seen[0]) in str(info.value)
    assert events[-1].startswith("stop")  # the server was stopped on the way out
    rt2 = make_rt(tmp_path, listener, Script(), [])
    store, frozen = runner.reopen_run(seen[0], rt2)
    result = runner.run_campaign(frozen, None, None, rt2,
                                 opts=runner.RunOptions(resume=store, **guards))
    assert result.complete and result.run_dir == seen[0] and seen[1] == seen[0]


def test_run_campaign_skip_preflight(campaign: Campaign, tmp_path: Path, listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(), [])

    def no_preflight(c: Campaign) -> tuple[list[str], list[str]]:
        raise AssertionError("skipped")

    result = runner.run_campaign(campaign, b"registered text", tmp_path / "results", rt,
                                 opts=runner.RunOptions(skip_preflight=True,
                                                        find_leftovers=lambda c: _scan(),
                                                        preflight=no_preflight))
    assert result.complete
    assert (result.run_dir / "campaign.yaml").read_bytes() == b"registered text"


def test_warmups_are_not_judged_by_the_measured_gate(campaign: Campaign, tmp_path: Path,
                                                     listener: int) -> None:
    # A warm-up of 2 requests with 1 completed fails min_completed_requests = 2, the gate
    # of measured passes; it used to be journaled invalid every time.
    script = Script(invalid_first={"warmup-1"})
    rt = make_rt(tmp_path, listener, script, [])
    store = start(campaign, tmp_path, rt)
    assert runner.execute(campaign, store, rt).complete
    warm = [e for e in load_run(store.run_dir).journal
            if e["event"] == "pass" and e["workload"] == "warmup"]
    assert warm and all(e["valid"] for e in warm), warm


def test_server_without_metrics_has_no_counters_not_an_invalid_pair(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        return transport(Metrics()).handler(request)  # type: ignore[attr-defined,no-any-return]

    script = Script()
    rt = make_rt(tmp_path, listener, script, [])
    rt.http = lambda: httpx.Client(transport=httpx.MockTransport(handler))
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert result.complete and result.pairs_valid == [1, 2] and not result.pairs_invalid
    data = load_run(store.run_dir)
    assert not (data.passes.metric == "acceptance_rate").any()
    assert (data.passes.metric == "output_token_throughput").any()
    assert not [e for e in data.journal if e["event"] == "pair_invalid"]


def test_throughput_on_the_servers_token_count(campaign: Campaign, tmp_path: Path,
                                               listener: int) -> None:
    """AIPerf re-tokenizes what it receives; where the server counts its generated tokens
    each level also gets its throughput on that count (one ratio per pass)."""
    rt = make_rt(tmp_path, listener, Script(), [])
    store = start(campaign, tmp_path, rt)
    runner.execute(campaign, store, rt)
    arm_dir = store.run_dir / "pairs" / "01" / "control"
    from campaign.run.measure import metrics as m
    before = m.parse((arm_dir / "metrics" / "knee-before.prom").read_text())
    after = m.parse((arm_dir / "metrics" / "knee-after.prom").read_text())
    generated = m.token_delta(before, after).generation_tokens
    assert generated
    passes = load_run(store.run_dir).passes
    rows = passes[(passes.pair == 1) & (passes.arm == "control")
                  & (passes.workload == "knee")].to_dict("records")
    aiperf = {r["level"]: r["value"] for r in rows if r["metric"] == "output_token_throughput"}
    server = {r["level"]: r["value"] for r in rows
              if r["metric"] == "output_token_throughput_server"}
    counted = sum(r["value"] for r in rows if r["metric"] == "output_tokens")
    assert set(server) == set(aiperf) and len(server) > 1
    for level, value in aiperf.items():
        assert server[level] == pytest.approx(value * generated / counted)


def test_a_second_lane_runs_its_own_abba_order(tmp_path: Path, listener: int) -> None:
    """ABBA with two pairs a lane: the first lane runs AB, BA; the second BA, AB."""
    text = CAMPAIGN.replace("lane: fake-lane\n", "lanes:\n  east: {}\n  west: {}\n")
    text = text.replace("  pairs: 2\n", "  pairs: 2\n  order: ABBA\n")
    orders = {}
    for lane in ("east", "west"):
        (tmp_path / lane).mkdir()
        campaign = _campaign(tmp_path / lane, text).for_lane(lane)
        rt = make_rt(tmp_path / lane, listener, Script(), [])
        store = start(campaign, tmp_path / lane, rt)
        assert runner.execute(campaign, store, rt).complete
        orders[lane] = [(e["pair"], e["arm"]) for e in load_run(store.run_dir).journal
                        if e["event"] == "slot_start"]
    assert orders["east"] == [(1, "control"), (1, "cand"), (2, "cand"), (2, "control")]
    assert orders["west"] == [(1, "cand"), (1, "control"), (2, "control"), (2, "cand")]


def test_a_shard_records_its_lane_and_resumes_on_it(tmp_path: Path, listener: int) -> None:
    text = CAMPAIGN.replace("lane: fake-lane\n", "lanes:\n  east: {server: {env: {L: e}}}\n"
                            "  west: {server: {env: {L: w}}}\n")
    campaign = _campaign(tmp_path, text).for_lane("west")
    rt = make_rt(tmp_path, listener, Script(interrupt_at=6), [])
    store = start(campaign, tmp_path, rt)
    assert store.run_id.split("-")[3:5] == ["fake", "west"]  # <date>-fake-west-<id>
    with pytest.raises(Interrupted):
        runner.execute(campaign, store, rt)
    store2, resumed = runner.reopen_run(store.run_dir, make_rt(tmp_path, listener, Script(), []))
    assert resumed.lane == "west" and resumed.launches["cand"].env == {"L": "w", "X": "1"}
    assert runner.execute(resumed, store2, make_rt(tmp_path, listener, Script(), [])).complete
    events = load_run(store.run_dir).journal
    assert next(e for e in events if e["event"] == "registered")["lane"] == "west"
    assert [e["lane"] for e in events if e["event"] == "run_start"] == ["west", "west"]
    manifest = json.loads((store.run_dir / "manifest.json").read_text())
    assert manifest["campaign"]["lane"] == "west"
    assert manifest["campaign"]["lanes"] == ["east", "west"]


def test_run_campaign_refuses_what_cannot_run_as_asked(tmp_path: Path, listener: int) -> None:
    """The lane and shard refusals of `spec-ab run` hold for Python callers too (exit 2),
    before the lane lock, the leftovers or a run directory."""
    from campaign.errors import UsageError

    text = CAMPAIGN.replace("lane: fake-lane\n", "lanes:\n  east: {}\n  west: {}\n")
    sharded = _campaign(tmp_path, text)
    rt = make_rt(tmp_path, listener, Script(), [])
    guards: dict[str, Any] = {"find_leftovers": lambda c: pytest.fail("scanned"),
                              "preflight": lambda c: pytest.fail("preflighted")}
    with pytest.raises(UsageError, match=r"sharded over lanes \(east, west\)") as info:
        runner.run_campaign(sharded, None, tmp_path / "results", rt,
                            opts=runner.RunOptions(**guards))
    assert info.value.exit_code == 2 and "--lane east" in (info.value.hint or "")
    with pytest.raises(UsageError, match="--fail-on judges a verdict, and a shard has none"):
        runner.run_campaign(sharded.for_lane("west"), None, tmp_path / "results", rt,
                            opts=runner.RunOptions(fail_on=["loss"], **guards))
    west = sharded.for_lane("west")
    store = start(west, tmp_path, rt)
    with pytest.raises(UsageError, match="is the shard of lane 'west'"):
        runner.run_campaign(west, None, None, rt,
                            opts=runner.RunOptions(resume=store, lane="east", **guards))
    assert [p.name for p in (tmp_path / "results").iterdir()] == [store.run_id]  # no other


def test_a_pass_row_carries_its_sampling_error_from_the_records(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    """Each level's per-request records (AIPerf's profile_export.jsonl beside its export)
    give its latency statistics their sampling error, once, in passes.csv."""
    from campaign.run.measure import records
    from tests.runs import TESTS

    source = TESTS / "data" / "aiperf" / "records_errors" / records.RECORDS_NAME

    class WithRecords(Script):
        def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                     cancel: threading.Event | None = None) -> PassOutcome:
            outcome = super().__call__(plan, artifact_dir, cancel=cancel)
            (artifact_dir / records.RECORDS_NAME).write_bytes(source.read_bytes())
            return outcome

    rt = make_rt(tmp_path, listener, WithRecords(), [])
    store = start(campaign, tmp_path, rt)
    assert runner.execute(campaign, store, rt).complete
    rows = load_run(store.run_dir).passes
    ttft = rows[rows.metric == "ttft_p99"]
    assert len(ttft) and ttft.log_se.notna().all() and (ttft.log_se > 0).all()
    assert ttft.log_se.nunique() == 1  # the same records everywhere: the same error
    assert rows[rows.metric == "output_token_throughput"].log_se.isna().all()


def test_a_server_that_froze_mid_pass_is_a_stalled_pass_retried_never_measured(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    """The candidate's server freezes for 61 s under its first knee pass and recovers (a
    request's stream waits 61 s between two chunks): that pass is invalid, `stalled`, the
    lane's fault; its retry measures the server."""
    import json

    from campaign.run.measure import records

    def write(artifact_dir: Path, gap_ms: float) -> None:
        rec = {"metrics": {"time_to_first_token": {"value": 20.0},
                           "inter_chunk_latency": {"value": [10.0, gap_ms, 11.0]}}}
        (artifact_dir / records.RECORDS_NAME).write_text(json.dumps(rec) + "\n")

    class Freezes(Script):
        def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                     cancel: threading.Event | None = None) -> PassOutcome:
            outcome = super().__call__(plan, artifact_dir, cancel=cancel)
            frozen = artifact_dir.name == "knee" and "cand" in str(artifact_dir)
            write(artifact_dir, 61000.0 if frozen else 12.0)
            return outcome

    rt = make_rt(tmp_path, listener, Freezes(), [])
    store = start(campaign, tmp_path, rt)
    assert runner.execute(campaign, store, rt).complete
    passes = [e for e in store.read_journal()
              if e["event"] == "pass" and e["arm"] == "cand" and e["workload"] == "knee"]
    first, retry = passes[0], passes[1]
    assert not first["valid"] and retry["valid"], passes
    assert any("stalled: a request waited 61.0 s for a token (max_stall_s 10 s)" in p
               for p in first["problems"]), first["problems"]
    assert first["fault"] == "lane"


def test_a_zero_latency_makes_the_pass_invalid(campaign: Campaign, tmp_path: Path,
                                               listener: int) -> None:
    """A candidate measuring p99 TTFT 0 at a level: its rows are invalid (retried, then
    kept invalid), so the pair cannot adopt on it."""
    class ZeroTtft(Script):
        def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                     cancel: threading.Event | None = None) -> PassOutcome:
            outcome = super().__call__(plan, artifact_dir, cancel=cancel)
            if plan.name.startswith("knee") and "cand" in str(artifact_dir):
                outcome.levels[0].metrics["ttft_p99"] = 0.0
            return outcome

    rt = make_rt(tmp_path, listener, ZeroTtft(), [])
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    assert not result.complete and "cand/knee" in result.pairs_invalid[1]
    rows = load_run(store.run_dir).passes
    bad = rows[(rows.arm == "cand") & (rows.level == "c1") & (rows.workload == "knee")]
    assert not bad.valid.any()
    assert "ttft_p99 = 0 ms: a latency of 0 over a pass is no measurement" in bad.reason.iloc[0]


# ------------------------------------------------------------------ the night's redos


@dataclass
class Faulty(Script):
    """Scripted faults by (pair, pair attempt, arm, pass): `crash` (AIPerf exits 1 and
    writes nothing, while the server stays healthy) or `errors` (half the requests fail)."""

    faults: dict[tuple[int, int, str, str], str] = field(default_factory=dict)

    def __call__(self, plan: PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> PassOutcome:
        outcome = super().__call__(plan, artifact_dir, cancel=cancel)
        arm_dir = artifact_dir.parent.parent
        arm, _, redo = arm_dir.name.partition(".redo")
        key = (int(arm_dir.parent.name), 1 + int(redo or 0), arm, plan.name.split(".")[0])
        kind = self.faults.get(key)
        if kind == "crash":
            return dataclasses.replace(outcome, returncode=1, levels=[], problems=[
                "aiperf exit 1", "export missing for concurrency 1,4 (see o)"])
        if kind == "errors":
            for lv in outcome.levels:
                lv.metrics["error_rate"] = 0.5
                lv.requests_errored = 8
        return outcome


def _redo_campaign(tmp_path: Path, budget: int | None = None) -> Campaign:
    extra = "" if budget is None else f", redo_budget: {budget}"
    return _campaign(tmp_path, CAMPAIGN.replace("min_completed_requests: 2}",
                                                f"min_completed_requests: 2{extra}}}"))


def _run_faulty(tmp_path: Path, listener: int, campaign: Campaign,
                faults: dict[tuple[int, int, str, str], str]
                ) -> tuple[runner.RunResult, list[dict[str, Any]], list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    rt = make_rt(tmp_path, listener, Faulty(faults=faults), [])
    rt.progress = lambda event, **d: seen.append({"event": event, **d})
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    return result, load_run(store.run_dir).journal, seen


def test_a_pass_made_invalid_by_the_lane_is_redone_within_the_night(
        tmp_path: Path, listener: int) -> None:
    """AIPerf crashes on the candidate's knee in pair 1, and again on its retry, while the
    server stays healthy: at the end of the slots pair 1 is measured again, whole, as a new
    attempt, and the campaign is complete."""
    crash = {(1, 1, "cand", "knee"): "crash"}
    result, journal, seen = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path), crash)
    assert result.complete and result.pairs_valid == [1, 2]
    starts = [(e["pair"], e["pair_attempt"]) for e in journal if e["event"] == "pair_start"]
    assert starts == [(1, 1), (2, 1), (1, 2)]  # the redo comes after the last slot
    (redo,) = [e for e in journal if e["event"] == "pair_redo"]
    assert redo["pair"] == 1 and redo["pair_attempt"] == 2 and redo["budget_left"] == 1
    assert redo["cause"].startswith("cand/knee: aiperf exit 1")
    bad = [e for e in journal if e["event"] == "pass" and not e["valid"]]
    assert bad and all(e["fault"] == "lane" for e in bad)
    (shown,) = [e for e in seen if e["event"] == "pair_redo"]
    assert shown["budget_left"] == 1 and shown["budget"] == 2 and "aiperf exit 1" in shown["reason"]
    text = io.StringIO()
    from rich.console import Console

    from campaign.run.progress import PlainProgress

    PlainProgress(Console(file=text, width=400))("pair_redo", **{
        k: v for k, v in shown.items() if k != "event"})
    assert ("pair 1: redoing the whole pair within the night, invalid by the lane "
            "(cand/knee: aiperf exit 1") in text.getvalue()
    assert "1 of 2 redos left (gates.redo_budget)" in text.getvalue()


def test_any_invalid_pass_of_the_control_is_the_lanes(tmp_path: Path, listener: int) -> None:
    faults = {(2, 1, "control", "agentfix-shell"): "errors"}
    result, journal, _ = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path), faults)
    assert result.complete
    assert [e["pair"] for e in journal if e["event"] == "pair_redo"] == [2]


def test_a_candidates_own_failure_is_never_redone(tmp_path: Path, listener: int) -> None:
    """Its requests failing beyond the gate count against it: the pair stays invalid and
    the campaign is short, with the budget unspent."""
    faults = {(1, 1, "cand", "knee"): "errors"}
    result, journal, _ = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path), faults)
    assert not result.complete and set(result.pairs_invalid) == {1}
    assert not [e for e in journal if e["event"] == "pair_redo"]
    (bad,) = {e["fault"] for e in journal if e["event"] == "pass" and not e["valid"]}
    assert bad == "own"


def test_a_candidates_own_failure_beside_a_lane_fault_is_not_redone(
        tmp_path: Path, listener: int) -> None:
    faults = {(1, 1, "control", "knee"): "crash", (1, 1, "cand", "knee"): "errors"}
    result, journal, _ = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path), faults)
    assert set(result.pairs_invalid) == {1}
    assert not [e for e in journal if e["event"] == "pair_redo"]


def test_redos_stop_when_the_budget_is_spent(tmp_path: Path, listener: int) -> None:
    """Both pairs invalid by the lane, a budget of one pair: pair 1 is redone, pair 2 is
    left invalid and the campaign is called short."""
    faults = {(1, 1, "cand", "knee"): "crash", (2, 1, "control", "knee"): "crash"}
    result, journal, _ = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path, 1), faults)
    assert result.pairs_valid == [1] and set(result.pairs_invalid) == {2}
    assert [e["pair"] for e in journal if e["event"] == "pair_redo"] == [1]
    finished = journal[-1]
    assert finished["event"] == "finished" and not finished["complete"]


def test_a_redo_invalid_again_may_be_redone_while_budget_lasts(
        tmp_path: Path, listener: int) -> None:
    faults = {(1, 1, "cand", "knee"): "crash", (1, 2, "cand", "knee"): "crash"}
    result, journal, _ = _run_faulty(tmp_path, listener, _redo_campaign(tmp_path), faults)
    assert result.complete
    assert [(e["pair"], e["pair_attempt"]) for e in journal if e["event"] == "pair_redo"] == [
        (1, 2), (1, 3)]


def test_a_scrape_failure_is_the_lanes_a_dead_candidate_its_own(
        tmp_path: Path, listener: int) -> None:
    """/metrics stops answering under the candidate's pass (the server itself up): the
    lane's, redone; the candidate's server dying: its own, never redone."""
    campaign = _campaign(tmp_path, CAMPAIGN.replace("retries: 1,", "retries: 1, pair_retries: 0,"))
    rt = make_rt(tmp_path, listener, Script(die_at=5), [])  # pair 1 cand's knee
    store = start(campaign, tmp_path, rt)
    result = runner.execute(campaign, store, rt)
    events = load_run(store.run_dir).journal
    assert set(result.pairs_invalid) == {1} and not [e for e in events
                                                     if e["event"] == "pair_redo"]
    assert next(e for e in events if e["event"] == "pair_invalid")["fault"] == "own"

    metrics, calls = Metrics(), {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            calls["n"] += 1
            if calls["n"] == 10:  # the after-scrape of pair 1's candidate knee
                return httpx.Response(503)
        return transport(metrics).handler(request)  # type: ignore[attr-defined,no-any-return]

    other = tmp_path / "scrape"
    other.mkdir()
    campaign = _campaign(other, CAMPAIGN.replace("retries: 1,", "retries: 1, pair_retries: 0,"))
    rt = make_rt(other, listener, Script(), [])
    rt.http = lambda: httpx.Client(transport=httpx.MockTransport(handler))
    store = start(campaign, other, rt)
    result = runner.execute(campaign, store, rt)
    events = load_run(store.run_dir).journal
    invalid = next(e for e in events if e["event"] == "pair_invalid")
    assert invalid["reason"] == "server stopped answering /metrics during knee"
    assert invalid["fault"] == "lane"
    cut = [e for e in events[:events.index(invalid)] if e["event"] == "pass"][-1]
    assert (cut["pair"], cut["arm"], cut["name"]) == (1, "cand", "knee")
    assert [e["pair"] for e in events if e["event"] == "pair_redo"] == [1]
    assert result.complete
