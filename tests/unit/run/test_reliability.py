"""Nothing lost, nothing leaked — the runner's side, with fake edges (no real server):
secrets in no file and no output, an unhealthy engine counted as a death, a full or
read-only results disk (exit 3, nothing measured lost), the lane lock before the run
folder, AIPerf temp folders of killed runners, Ctrl-C saying what it waits for,
`--redo-invalid`, and leftovers saying whose they are."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from campaign import secrets
from campaign.campaignfile import Campaign, DockerLaunch, LaunchModel, ProcessLaunch, load_campaign
from campaign.cli import app
from campaign.errors import PreflightError, SpecError, StorageError
from campaign.results.journal import read_journal
from campaign.results.store import load_run
from campaign.run import interrupt, runner
from campaign.run.guards import cleanup, lanelock
from campaign.run.measure import loadgen
from campaign.servers import ArmContext
from campaign.servers.docker.launchplan import docker_run_line, plan_containers
from campaign.servers.process import ProcessServer, child_env
from tests.unit.run.test_runner import (
    CAMPAIGN,
    FakeServer,
    Metrics,
    Script,
    _campaign,
    listener,
    make_rt,
)

__all__ = ["listener"]  # the fixture, imported from test_runner

SECRET = "hf_" + uuid.uuid4().hex  # unique: found only where it leaked

UNGUARDED = runner.RunOptions(skip_preflight=True, find_leftovers=lambda c: cleanup.Scan())
"""A run without the preflight and with no leftovers found (the fakes start nothing)."""


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def _ctx(tmp_path: Path, arm: str = "cand") -> ArmContext:
    return ArmContext(run_id="r", pair=1, arm=arm, log_path=tmp_path / "s.log",
                      campaign_dir=tmp_path)


# ------------------------------------------------------------------ 1. secrets


def test_a_literal_secret_in_the_campaign_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    text = CAMPAIGN.replace('cand: {env: {X: "1"}}', f'cand: {{env: {{HF_TOKEN: "{SECRET}"}}}}')
    with pytest.raises(SpecError) as info:
        _campaign(tmp_path, text)
    assert "HF_TOKEN: ${HF_TOKEN}" in str(info.value) and SECRET not in str(info.value)
    for name in ("hf_token", "OPENAI_API_KEY", "MY_SECRET", "DB_PASSWORD", "GH_TOKEN_RW"):
        with pytest.raises(SpecError):
            _campaign(tmp_path, CAMPAIGN.replace('X: "1"', f'{name}: "v"'))
    # references, empty values and count-like names (TOKENIZERS_*, *_TOKENS, a per-token
    # delay) are fine; a token that is a credential is not, whatever follows
    ok = CAMPAIGN.replace('X: "1"', 'HF_TOKEN: "${HF_TOKEN}", A_KEY: "", '
                          'TOKENIZERS_PARALLELISM: "false", MAX_TOKENS: "9", '
                          'XPYD_SIM_DECODE_DELAY_PER_TOKEN_MS: "7", TOKEN_BUDGET: "64"')
    assert _campaign(tmp_path, ok).launches["cand"].env["HF_TOKEN"] == "${HF_TOKEN}"


def test_launch_lines_reference_secrets_and_the_server_gets_the_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    launch = ProcessLaunch(backend="process", command=["vllm", "serve"], port=8000,
                           env={"HF_TOKEN": "${HF_TOKEN}", "A": "1"})
    launch.env["MY_API_KEY"] = "leaked-literal"  # past validation: still never printed
    line = ProcessServer(launch, _ctx(tmp_path)).describe()[0]
    assert 'HF_TOKEN="$HF_TOKEN"' in line and 'MY_API_KEY="$MY_API_KEY"' in line
    assert SECRET not in line and "leaked-literal" not in line and "A=1" in line
    env = child_env(launch.env, None)
    assert env["HF_TOKEN"] == SECRET and env["A"] == "1"
    docker = DockerLaunch(backend="docker", image="vllm/vllm-openai", port=8000,
                          env={"HF_TOKEN": "${HF_TOKEN}", "B": "2"})
    plan = plan_containers(docker, _ctx(tmp_path), runner={})[-1]
    run_line = docker_run_line(plan)
    assert " -e HF_TOKEN " in run_line and "-e B=2" in run_line and SECRET not in run_line
    from campaign.servers.docker.launchplan import create_kwargs

    assert create_kwargs(plan)["environment"]["HF_TOKEN"] == SECRET
    assert secrets.scrub(f"x {SECRET} y") == "x <redacted> y"


def test_check_and_dry_run_print_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    text = CAMPAIGN.replace('X: "1"', 'X: "1", HF_TOKEN: "${HF_TOKEN}"')
    # 2 pairs of 8 requests per pass show no relative guardrail within its limit (`check`
    # refuses the default p99 one): the absolute error-rate guardrail alone
    assert text.count("  gates: ") == 1
    text = text.replace("  gates: ", "  guardrails: [{metric: error_rate, max_worsening: 0.0, "
                        "absolute: true}]\n  gates: ")
    campaign = _campaign(tmp_path, text)
    assert campaign.source is not None
    for args in (["check", str(campaign.source), "--no-preflight"],
                 ["run", str(campaign.source), "--dry-run"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "HF_TOKEN" in result.output and SECRET not in result.output


def test_a_run_writes_no_secret(tmp_path: Path, listener: int,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Even where a server describes its launch with the value, the journal, the manifest
    and the captures hold `<redacted>`."""
    monkeypatch.setenv("HF_TOKEN", SECRET)
    campaign = _campaign(tmp_path, CAMPAIGN.replace('X: "1"', 'HF_TOKEN: "${HF_TOKEN}"'))

    class Leaky(FakeServer):
        def describe(self) -> list[str]:
            return [f"HF_TOKEN={SECRET} vllm serve"]

        def start(self) -> None:
            super().start()
            with open(self.ctx.log_path, "a") as f:
                f.write(f"SpecDecoding metrics: token {SECRET}\n")

    script = Script()
    rt = make_rt(tmp_path, listener, script, [])

    def factory(launch: LaunchModel, ctx: ArmContext) -> FakeServer:
        server = Leaky(listener, ctx, [])
        script.servers.append(server)
        return server

    rt.server_factory = factory
    result = runner.run_campaign(campaign, None, tmp_path / "results", rt,
                                 opts=UNGUARDED)
    assert result.complete
    run_dir = result.run_dir
    leaked = [p for p in _files_holding(run_dir, SECRET) if p.name != "server.log"]
    assert leaked == []  # server.log is the server's own output, written by the server
    assert "<redacted>" in (run_dir / "journal.jsonl").read_text()


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("LAB_SECRET", "control", "is the name of arm 1 of 2 under `arms:`"),
    ("LAB_SECRET", "ttft_p99", "is a metric's name"),
    ("LAB_PASSWORD", None, "is the campaign's folder"),
])
def test_a_secret_that_is_an_arm_a_metric_or_a_path_is_refused_at_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str | None,
        says: str) -> None:
    """Scrubbed from every log and message, its value would hide the arm, the metric or
    the folder there: `check`, `run` and `--dry-run` refuse it (exit 2), with the fix."""
    campaign = _campaign(tmp_path, CAMPAIGN)
    assert campaign.source is not None
    monkeypatch.setenv(variable, value or str(campaign.base_dir))
    for args in (["check", str(campaign.source), "--no-preflight", "--no-engine"],
                 ["run", str(campaign.source), "--dry-run"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert says in result.output and f"unset {variable}" in result.output, result.output
        assert "Traceback" not in result.output
    with pytest.raises(SpecError, match=f"unset {variable}"):
        runner.run_campaign(campaign, None, tmp_path / "results", make_rt(
            tmp_path, 1, Script(), []), opts=UNGUARDED)
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------ 2. unhealthy engine


@pytest.mark.parametrize("arm", ["control", "cand"])
def test_an_unhealthy_engine_is_a_server_death_and_the_pair_is_redone(
        campaign: Campaign, tmp_path: Path, listener: int, arm: str) -> None:
    """The process stays up but /health says 503 (vLLM's EngineDeadError): no retry of the
    pass against a dead server; the pair is invalid. The control's death is the lane's:
    the pair is redone whole. The candidate's is its own: it counts, never redone."""
    script = Script()
    rt = make_rt(tmp_path, listener, script, [])
    metrics = Metrics()
    sick = {"on": False}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(503 if sick["on"] else 200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if path == "/metrics":
            return httpx.Response(200, text=metrics.text())
        return httpx.Response(200, json={"choices": []})

    rt.http = lambda: httpx.Client(transport=httpx.MockTransport(handler))
    inner = script.__call__

    def run_pass(plan: loadgen.PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> loadgen.PassOutcome:
        out = inner(plan, artifact_dir, cancel=cancel)
        # the engine dies in the first knee pass of `arm`, the first time only
        if plan.name == "knee" and artifact_dir.parent.parent.name == arm \
                and not sick.get("done"):
            sick["on"] = sick["done"] = True
        return out

    rt.run_pass = run_pass
    runner_store = runner.start_run(campaign, campaign.source.read_bytes(),  # type: ignore[union-attr]
                                    tmp_path / "results", rt)

    def healthy_again(event: str, **data: Any) -> None:
        if event == "slot_start":
            sick["on"] = False  # a fresh server

    rt.progress = healthy_again
    result = runner.execute(campaign, runner_store, rt)
    events = read_journal(runner_store.run_dir)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert invalid and "unhealthy (/health → 503) during knee" in invalid[0]["reason"]
    assert not any(e["event"] == "pass" and ".retry" in e["name"] for e in events)
    starts = [e["pair_attempt"] for e in events if e["event"] == "pair_start"]
    if arm == "control":
        assert invalid[0]["fault"] == "lane"
        assert starts.count(2) == 1  # the pair was redone
        assert result.complete
    else:
        assert invalid[0]["fault"] == "own"
        assert starts == [1, 1] and not result.complete  # it counts against the candidate
        assert not any(e["event"] == "pair_redo" for e in events)


@pytest.fixture()
def campaign(tmp_path: Path) -> Campaign:
    return _campaign(tmp_path, CAMPAIGN.replace("retries: 1,", "retries: 1, pair_retries: 1,"))


# ------------------------------------------------------------------ 3. filesystem failures



def test_full_disk_exit_3_nothing_lost_then_resume(campaign: Campaign, tmp_path: Path,
                                                   listener: int, small_disk: Path) -> None:
    """The disk fills in the middle of the run: StorageError naming the file, every
    journal line whole, and `--resume` (once there is room) keeps what was measured."""
    rt = make_rt(tmp_path, listener, Script(), [])
    filler = small_disk / "filler"
    calls = {"n": 0}
    inner = rt.run_pass

    def run_pass(plan: loadgen.PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> loadgen.PassOutcome:
        calls["n"] += 1
        if calls["n"] == 3:  # fill the disk: only a few KiB left
            free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
            filler.write_bytes(b"x" * max(0, free - 6000))
        return inner(plan, artifact_dir, cancel=cancel)

    rt.run_pass = run_pass
    with pytest.raises(StorageError) as info:
        runner.run_campaign(campaign, None, small_disk, rt, opts=UNGUARDED)
    assert info.value.exit_code == 3
    message = str(info.value)
    assert "No space left on device" in message and str(small_disk) in message
    run_dir = next(p for p in small_disk.iterdir() if p.is_dir())
    assert "spec-ab run --resume" in message
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # no torn or glued line
    measured = [e for e in map(json.loads, lines) if e["event"] == "pass"]
    assert measured
    filler.unlink()
    store, frozen = runner.reopen_run(run_dir, rt)
    result = runner.run_campaign(frozen, None, None, rt,
                                 opts=replace(UNGUARDED, resume=store))
    assert result.complete
    after = [e for e in read_journal(run_dir) if e["event"] == "pass"]
    assert after[:len(measured)] == measured  # nothing measured was lost
    assert len(load_run(run_dir).passes) == sum(len(e["rows"]) for e in after)


def test_enospc_on_passes_csv_keeps_the_journal_line_and_resume_rebuilds_it(
        campaign: Campaign, tmp_path: Path, listener: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a tmpfs: the store's passes.csv writer raises ENOSPC after the 3rd pass."""
    from campaign.results import store as store_mod
    from campaign.textfiles import atomic_write as real

    rt = make_rt(tmp_path, listener, Script(), [])
    count = {"n": 0}

    def failing(path: Path, data: str | bytes, **kw: Any) -> None:
        if path.name == "passes.csv":
            count["n"] += 1
            if count["n"] == 5:  # at registration, at the start, then after each pass
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data, **kw)

    monkeypatch.setattr(store_mod, "atomic_write", failing)
    with pytest.raises(StorageError, match=r"passes\.csv: No space left on device"):
        runner.run_campaign(campaign, None, tmp_path / "results", rt, opts=UNGUARDED)
    run_dir = next((tmp_path / "results").iterdir())
    passes = [e for e in read_journal(run_dir) if e["event"] == "pass"]
    assert len(passes) == 3  # the journal line of the 3rd pass is there
    monkeypatch.setattr(store_mod, "atomic_write", real)
    store, frozen = runner.reopen_run(run_dir, rt)
    runner.execute(frozen, store, rt)
    data = load_run(run_dir)
    assert not data.notes  # passes.csv agrees with the journal again
    for ev in passes:
        for row in ev["rows"]:
            assert ((data.passes.arm == row["arm"]) & (data.passes.metric == row["metric"])
                    & (data.passes.pair_attempt == row["pair_attempt"])).any()


def test_read_only_out_and_out_under_a_file_exit_3_without_a_folder(
        campaign: Campaign, tmp_path: Path, listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(), [])
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(StorageError, match=r"cannot write the run directory at .*a-file"):
        runner.run_campaign(campaign, None, a_file / "results", rt, opts=UNGUARDED)
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        with pytest.raises(StorageError, match="Read-only file system") as info:
            runner.run_campaign(campaign, None, ro, rt, opts=UNGUARDED)
        assert info.value.exit_code == 3 and str(ro) in str(info.value)
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)


def test_cli_storage_failure_is_exit_3_without_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN)
    monkeypatch.setattr(cleanup, "find_leftovers", lambda **kw: cleanup.Scan())
    monkeypatch.setenv("SPECAB_LOCK_DIR", str(tmp_path / "locks"))
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    result = CliRunner().invoke(app, ["run", str(campaign.source), "--out",
                                      str(a_file / "sub"), "--skip-preflight"])
    assert result.exit_code == 3, result.output
    assert "cannot write the run directory" in result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------ 4. lane lock first


def test_a_refused_second_run_leaves_no_folder(campaign: Campaign, tmp_path: Path,
                                               listener: int) -> None:
    rt = make_rt(tmp_path, listener, Script(), [])
    assert rt.lock_dir is not None
    with lanelock.hold("fake-lane", "other-run", lock_dir=rt.lock_dir), \
            pytest.raises(PreflightError, match="lane 'fake-lane' is busy: run other-run"):
        runner.run_campaign(campaign, None, tmp_path / "results", rt, opts=UNGUARDED)
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------ 5. smaller


def test_aiperf_tmpdir_names_the_runner_and_clean_removes_a_dead_runners(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str] = {}

    def popen(cmd: list[str], **kw: Any) -> Any:
        seen["tmp"] = kw["env"]["TMPDIR"]
        raise FileNotFoundError("aiperf")

    plan = loadgen.PassPlan(name="p", kind="knee", base_url="http://x", model="m",
                            tokenizer=tmp_path, endpoint_type="chat", streaming=True,
                            concurrency=(1,), requests_per_level=2, duration_s=None,
                            input_tokens=8, output_tokens=8, input_file=None, seed=1,
                            timeout_s=10)
    with pytest.raises(Exception, match="cannot start AIPerf"):
        loadgen.run_pass(plan, tmp_path / "a", popen=popen)
    assert Path(seen["tmp"]).name.startswith(f"spec-ab-aiperf-{os.getpid()}-")
    dead = tmp_path / "spec-ab-aiperf-999999-abc"
    live = tmp_path / f"spec-ab-aiperf-{os.getpid()}-def"
    for d in (dead, live):
        (d / "aiperf_mmap_x").mkdir(parents=True)
    scan = cleanup.find_leftovers(docker_hosts=[], include_processes=False,
                                  include_tmpdirs=True, tmp_root=tmp_path,
                                  alive=lambda pid, started: pid == os.getpid())
    assert [x.ident for x in scan] == [str(dead)]
    assert "AIPerf temp folder" in str(scan[0])
    cleanup.remove_leftovers(scan)
    assert not dead.exists() and live.exists()
    # `spec-ab run` does not refuse to start because of a temp folder
    runner.refuse_leftovers(_campaign(tmp_path, CAMPAIGN), find=lambda c: scan)


def test_ctrl_c_says_at_once_what_it_waits_for(campaign: Campaign, tmp_path: Path,
                                               listener: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from campaign.cli import run as cli

    script = Script()
    rt = make_rt(tmp_path, listener, script, [])
    doing: list[str] = []
    inner = rt.run_pass

    def run_pass(plan: loadgen.PassPlan, artifact_dir: Path, *,
                 cancel: threading.Event | None = None) -> loadgen.PassOutcome:
        doing.append(rt.doing)
        return inner(plan, artifact_dir, cancel=cancel)

    rt.run_pass = run_pass
    runner.execute(campaign, runner.start_run(
        campaign, campaign.source.read_bytes(), tmp_path / "r", rt), rt)  # type: ignore[union-attr]
    assert doing[0].startswith("AIPerf (warmup-1, control, pair 1; up to 15 s")
    cancel = threading.Event()
    previous = interrupt.install(cancel, lambda: doing[0], cli._say_interrupted)
    try:
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)
    finally:
        interrupt.restore(previous)
    assert cancel.is_set()
    err = capsys.readouterr().err
    assert "stopping: waiting for AIPerf (warmup-1, control, pair 1" in err
    assert "Ctrl-C again" in err


def test_redo_invalid_measures_invalid_pairs_again(tmp_path: Path, listener: int) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN.replace("retries: 1,", "retries: 1, pair_retries: 0,"))
    script = Script(die_at=4)  # the server dies in pair 1
    rt = make_rt(tmp_path, listener, script, [])
    store = runner.start_run(campaign, campaign.source.read_bytes(),  # type: ignore[union-attr]
                             tmp_path / "results", rt)
    first = runner.execute(campaign, store, rt)
    assert list(first.pairs_invalid) == [1]
    rt.run_pass = Script()
    again = runner.execute(campaign, store, rt)  # a plain resume leaves it invalid
    assert list(again.pairs_invalid) == [1]
    redone = runner.execute(campaign, store, rt, redo_invalid=True)
    assert redone.complete and sorted(redone.pairs_valid) == [1, 2]
    events = read_journal(store.run_dir)
    starts = [(e["pair"], e["pair_attempt"]) for e in events if e["event"] == "pair_start"]
    assert starts[-1] == (1, 2)
    assert (store.run_dir / "pairs" / "01" / "control.redo1").is_dir()
    data = load_run(store.run_dir)
    assert set(data.passes[data.passes.pair == 1].pair_attempt) == {1, 2}


def test_redo_invalid_needs_resume() -> None:
    result = CliRunner().invoke(app, ["run", "c.yaml", "--redo-invalid"])
    assert result.exit_code == 2 and "--redo-invalid goes with --resume" in result.output


def _finding(*items: cleanup.Leftover) -> Callable[[Campaign], cleanup.Scan]:
    scan = cleanup.Scan(items)
    return lambda c: scan


def test_leftovers_say_whose_they_are(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, CAMPAIGN)  # lane fake-lane, port 1
    other = cleanup.Leftover(kind="process", ident="4242", name="vllm serve", run_id="old",
                             why="runner pid 7 is not running", lane="gb300", ports=(8000,))
    with pytest.raises(PreflightError) as info:
        runner.refuse_leftovers(campaign, find=lambda c: cleanup.Scan([other]))
    text = str(info.value)
    assert "hold lane" not in text and "still running on this machine" in text
    assert "of run old, lane gb300" in text and "port 8000" in text
    for mine in (cleanup.Leftover(kind="process", ident="1", name="x", run_id="r", why="w",
                                  lane="fake-lane"),
                 cleanup.Leftover(kind="process", ident="1", name="x", run_id="r", why="w",
                                  lane="gb300", ports=(1,))):
        with pytest.raises(PreflightError, match="hold lane 'fake-lane'"):
            runner.refuse_leftovers(campaign, find=_finding(mine))


def test_load_campaign_keeps_a_reference_in_the_frozen_copy(tmp_path: Path) -> None:
    text = CAMPAIGN.replace('X: "1"', 'HF_TOKEN: "${HF_TOKEN}"')
    campaign = _campaign(tmp_path, text)
    assert campaign.source is not None
    assert load_campaign(campaign.source).launches["cand"].env["HF_TOKEN"] == "${HF_TOKEN}"


def test_an_old_frozen_copy_with_a_literal_secret_still_reads_back(tmp_path: Path) -> None:
    """Runs registered before the refusal keep their reports: only a campaign about to run
    (check, run, resume) is refused."""
    text = CAMPAIGN.replace('X: "1"', f'HF_TOKEN: "{SECRET}"')
    _campaign(tmp_path, CAMPAIGN)  # the files it names
    path = tmp_path / "old.yaml"
    path.write_text(text)
    with pytest.raises(SpecError):
        load_campaign(path)
    assert load_campaign(path, check_files=False).launches["cand"].env["HF_TOKEN"] == SECRET
