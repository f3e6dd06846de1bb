"""AIPerf 0.13 as a subprocess: command lines, a bounded run, and its exports.

Why a subprocess and not AIPerf's Python API: AIPerf spawns its own services (ZMQ, worker
processes); in a child process group it can be stopped as a whole, and a hung run cannot
take the runner down with it.

What AIPerf 0.13 does, measured here (see tests/data/aiperf/ for the captured exports):

- `--concurrency 1,2,4` sweeps in one invocation, but every level boots AIPerf's whole
  system again (~9-17 s each on this shared 2-core box; docs/plan.md, benchmarks).
  Per-level exports land in `<artifact-dir>/concurrency_<N>/profile_export_aiperf.json`,
  plus `aggregate/` and `sweep_aggregate/` summaries we ignore. A single level writes its
  export directly into `<artifact-dir>/`.
- The exit code is no validity signal: a run stopped with SIGINT exits 0 with
  `was_cancelled: true, is_complete: false`; an interrupted sweep exits 130 with the
  finished levels complete and the current one cancelled; a run with no finished
  request writes no export at all (exit 1).
- `request_count` counts successful requests only; `error_request_count` (absent when
  zero) the failed ones; `completed_request_count` both.
- After SIGINT to its group AIPerf writes its exports and exits within 0.4-1.5 s here;
  once a SIGINT during a sweep's switch of level was lost: a grace period, then SIGKILL.
- `--osl` becomes `max_completion_tokens` (chat) or `max_tokens` (completions);
  `--extra-inputs ignore_eos:true min_tokens:N` are sent as JSON true / integer.
- Every run leaves `aiperf_mmap_*` directories in TMPDIR; we give it a private one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Literal

from campaign import secrets
from campaign.errors import PassError
from campaign.markers import TMPDIR_PREFIX
from campaign.procgroup import signal_group, stop_group
from campaign.run.measure import pacing, phases, replay

EXPORT_NAME = "profile_export_aiperf.json"
AIPERF_SUBDIR = "aiperf"
STDOUT_NAME = "aiperf.stdout.log"
STDERR_NAME = "aiperf.stderr.log"
COMMAND_NAME = "aiperf.command"

SIGINT_GRACE_S = 15.0  # then SIGKILL of the group (see the module docstring)
POLL_S = 0.1

PassKind = Literal["warmup", "knee", "agentfix", "rate", "trace", "sessions"]
EndpointType = Literal["chat", "completions"]


@dataclass(frozen=True)
class PassPlan:
    """One AIPerf invocation, fully specified so that two arms run the very same load."""

    name: str
    kind: PassKind
    base_url: str
    model: str
    tokenizer: Path
    endpoint_type: EndpointType
    streaming: bool
    concurrency: tuple[int, ...]
    requests_per_level: int | None
    duration_s: float | None
    input_tokens: int | None
    output_tokens: int
    input_file: Path | None
    seed: int
    timeout_s: float
    extra_args: tuple[str, ...] = ()
    # Responses still in flight when a duration-bound level ends are waited for this long
    # (AIPerf's own default is 30 s); None keeps AIPerf's default.
    duration_grace_s: float | None = None
    # The aiperf executable; None: the one next to this Python, else `aiperf` on PATH.
    executable: str | None = None
    # Every level in one AIPerf process (`run.phases`) where `phases.applies`, else a sweep.
    one_process: bool = False
    # Each level's own request count, in `concurrency` order, when they differ (() : every
    # level `requests_per_level`, which is then their largest). A one-process knee gives
    # each level's phase its own; a sweep cannot (one `--request-count` for every level),
    # so a knee that cannot run as one process sends every level the largest.
    level_requests: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            problems.append(f"concurrency must be ≥ 1 levels, got {self.concurrency}")
        if len(set(self.concurrency)) != len(self.concurrency):
            problems.append(f"concurrency levels repeat: {self.concurrency}")
        if (self.requests_per_level is None) == (self.duration_s is None):
            problems.append("set exactly one of requests_per_level and duration_s")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            problems.append("requests_per_level must be ≥ 1")
        if self.level_requests:
            if len(self.level_requests) != len(self.concurrency):
                problems.append(f"level_requests {self.level_requests}: one per level of "
                                f"{self.concurrency}")
            elif any(n < 1 for n in self.level_requests):
                problems.append(f"level_requests {self.level_requests}: each must be ≥ 1")
            elif self.requests_per_level != max(self.level_requests):
                problems.append(f"requests_per_level {self.requests_per_level}: with "
                                "level_requests it must be the largest of them (what a "
                                "sweep sends every level)")
        if self.duration_s is not None and self.duration_s <= 0:
            problems.append("duration_s must be > 0")
        if (self.input_tokens is None) == (self.input_file is None):
            problems.append("set exactly one of input_tokens (synthetic) and input_file")
        if self.input_tokens is not None and self.input_tokens < 1:
            problems.append("input_tokens must be ≥ 1")
        if self.output_tokens < 1:
            problems.append("output_tokens must be ≥ 1")
        if self.timeout_s <= 0:
            problems.append("timeout_s must be > 0")
        if problems:
            raise ValueError(f"pass {self.name!r}: " + "; ".join(problems))


@dataclass
class LevelResult:
    """One concurrency level of a pass, read from its AIPerf export."""

    concurrency: int
    metrics: dict[str, float]
    requests_completed: int
    requests_errored: int
    complete: bool
    cancelled: bool
    osl_mismatch: int | None
    export_path: Path
    error_summary: list[str] = field(default_factory=list)
    phase: str | None = None
    """Its AIPerf phase when the levels ran in one process (`run.phases`): its requests'
    records are then in the run's one records file, named by this phase."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the journal)."""
        out = dataclasses.asdict(self)
        out["export_path"] = str(self.export_path)
        return out


@dataclass
class PassOutcome:
    command: list[str]
    returncode: int | None
    timed_out: bool
    interrupted: bool
    wall_s: float
    levels: list[LevelResult]
    stdout_path: Path
    stderr_path: Path
    problems: list[str]
    missing_levels: list[int] = field(default_factory=list)
    # True when AIPerf's process group still existed after AIPerf exited (then SIGKILLed)
    stragglers_signalled: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for debugging and tests: the journal keeps a summary of the
        outcome, not this); levels via LevelResult.to_dict."""
        return {**dataclasses.asdict(self), "levels": [lv.to_dict() for lv in self.levels],
                "stdout_path": str(self.stdout_path), "stderr_path": str(self.stderr_path)}


def default_executable() -> str:
    """The aiperf of this environment: next to sys.executable (a venv), else on PATH."""
    beside = Path(sys.executable).parent / "aiperf"
    if beside.exists():
        return str(beside)
    return shutil.which("aiperf") or "aiperf"


def aiperf_version() -> str | None:
    """Installed AIPerf version (the package run_pass starts), None when not installed."""
    try:
        return metadata.version("aiperf")
    except metadata.PackageNotFoundError:
        return None


def _num(value: float) -> str:
    """Format a number for the command line without a spurious `.0`."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def corpus_unused_or_unmeasured(plan: PassPlan) -> bool:
    """Whether AIPerf's prompt corpus shapes no measured request: a file pass (its requests
    are the file's, inputs.json byte-identical either way) or a warm-up. AIPerf 0.13
    tokenizes the corpus (~1.8 M tokens, 5-9 s here) at every level's start unless
    `--prompt-corpus random`; the knee's synthetic prompts are cut from it, so it keeps it."""
    return plan.input_file is not None or plan.kind == "warmup"


def aiperf_command(plan: PassPlan, artifact_dir: Path, *, lean: bool = True,
                   one_process: bool = True) -> list[str]:
    """The AIPerf command line of `plan`, writing into `artifact_dir/aiperf`. Pure. `lean`
    spares AIPerf work that changes nothing measured (start-up; a core spun by a closed
    loop, `pacing`); `one_process` runs a knee that asks
    for it as one AIPerf process (`phases`). Both False: the command lines of earlier
    versions, the "before" of `scripts/bench-runner --compare`."""
    if one_process and phases.applies(plan):
        return phases.command(artifact_dir, plan.executable or default_executable())
    if plan.kind in replay.KINDS:  # a file replayed: a schedule, a session class (`replay`)
        return replay.command(plan, artifact_dir / AIPERF_SUBDIR,
                              plan.executable or default_executable())
    cmd = [
        plan.executable or default_executable(),
        "profile",
        "--model", plan.model,
        "--url", plan.base_url,
        "--endpoint-type", plan.endpoint_type,
    ]
    if plan.streaming:
        cmd.append("--streaming")
    # Absolute: AIPerf treats a relative name as a Hugging Face hub id.
    cmd += ["--tokenizer", str(Path(plan.tokenizer).absolute())]
    cmd += ["--concurrency", ",".join(str(c) for c in plan.concurrency)]
    if lean:  # a closed loop that does not spin a core (`pacing`)
        cmd += pacing.flags(plan.concurrency)
    if plan.requests_per_level is not None:
        cmd += ["--request-count", str(plan.requests_per_level)]
    else:
        assert plan.duration_s is not None
        cmd += ["--benchmark-duration", _num(plan.duration_s)]
        if plan.duration_grace_s is not None:
            cmd += ["--benchmark-grace-period", _num(plan.duration_grace_s)]
    if plan.input_file is not None:
        cmd += ["--input-file", str(Path(plan.input_file).absolute()),
                "--custom-dataset-type", "single-turn"]
    else:
        assert plan.input_tokens is not None
        cmd += ["--isl", str(plan.input_tokens), "--isl-stddev", "0"]
    if lean and corpus_unused_or_unmeasured(plan):
        cmd += ["--prompt-corpus", "random"]
    # Exact output length: the cap (--osl → max_tokens / max_completion_tokens) plus a
    # floor and no early stop, so both arms generate the same number of tokens.
    cmd += [
        "--osl", str(plan.output_tokens), "--osl-stddev", "0",
        "--extra-inputs", "ignore_eos:true",
        "--extra-inputs", f"min_tokens:{plan.output_tokens}",
        "--random-seed", str(plan.seed),
        "--ui", "none",
        # We scrape /metrics ourselves before and after; AIPerf's own poller would add
        # load, and its GPU telemetry probes DCGM ports that do not exist here.
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--artifact-dir", str((artifact_dir / AIPERF_SUBDIR).absolute()),
    ]
    cmd += list(plan.extra_args)
    return cmd


# ---------------------------------------------------------------- exports


def _stat(data: Mapping[str, Any], metric: str, stat: str) -> float | None:
    entry = data.get(metric)
    if not isinstance(entry, Mapping):
        return None
    value = entry.get(stat)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


# catalog name → (AIPerf metric tag, statistic)
EXPORT_METRICS: dict[str, tuple[str, str]] = {
    "output_token_throughput": ("output_token_throughput", "avg"),
    "output_token_throughput_per_user": ("output_token_throughput_per_user", "avg"),
    "request_throughput": ("request_throughput", "avg"),
    "ttft_p50": ("time_to_first_token", "p50"),
    "ttft_p99": ("time_to_first_token", "p99"),
    "itl_p50": ("inter_token_latency", "p50"),
    "itl_p99": ("inter_token_latency", "p99"),
    "request_latency_p50": ("request_latency", "p50"),
    "request_latency_p99": ("request_latency", "p99"),
    "output_tokens": ("total_output_tokens", "avg"),
}


def _level_concurrency(data: Mapping[str, Any], path: Path, name: str | None) -> int | None:
    """The level's concurrency: its phase's (by `name` when the run had several phases,
    whose exports each list all of them), the sweep's variation, or its folder's name."""
    config = data.get("input_config")
    if isinstance(config, Mapping):
        for phase in config.get("phases") or []:
            if (isinstance(phase, Mapping) and isinstance(phase.get("concurrency"), int)
                    and (phase.get("name") == name if name is not None
                         else phase.get("kind") == "profiling")):
                return int(phase["concurrency"])
        if name is not None:
            return None
    run_info = data.get("run_info")
    if isinstance(run_info, Mapping):
        values = run_info.get("variation_values") or {}
        value = values.get("phases.profiling.concurrency") if isinstance(values, Mapping) else None
        if isinstance(value, int):
            return value
    name = path.parent.name
    if name.startswith("concurrency_") and name[len("concurrency_"):].isdigit():
        return int(name[len("concurrency_"):])
    return None


def _profiling_phases(data: Mapping[str, Any]) -> int:
    config = data.get("input_config")
    listed = config.get("phases") if isinstance(config, Mapping) else None
    return sum(isinstance(p, Mapping) and p.get("kind") == "profiling"
               for p in (listed if isinstance(listed, list) else []))


def parse_export(path: Path, phase: str | None = None) -> LevelResult:
    """One `profile_export_aiperf.json` (of the AIPerf `phase` when the run had several) →
    a level. Raises ValueError when unusable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable AIPerf export ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: AIPerf export is not a JSON object")
    if phase is None and _profiling_phases(data) > 1:
        raise ValueError(f"{path}: the combined export of a run of several phases (stopped "
                         "before AIPerf exported each phase): no level is read from it")
    concurrency = _level_concurrency(data, path, phase)
    if concurrency is None:
        raise ValueError(f"{path}: no profiling concurrency in the export")
    completed = int(_stat(data, "request_count", "avg") or 0)
    errored = int(_stat(data, "error_request_count", "avg") or 0)
    metrics = {
        name: value
        for name, (tag, stat) in EXPORT_METRICS.items()
        if (value := _stat(data, tag, stat)) is not None
    }
    total = completed + errored
    metrics["error_rate"] = errored / total if total else 0.0
    metrics["requests_completed"] = float(completed)
    mismatch = _stat(data, "osl_mismatch_count", "avg")
    if mismatch is not None and completed:
        # AIPerf re-tokenizes the output: a share of requests whose length differs from
        # what was asked means its token counts (and throughput) are not the server's
        metrics["osl_mismatch_share"] = float(mismatch) / completed
    errors = []
    for item in data.get("error_summary") or []:
        if isinstance(item, Mapping):
            details = item.get("error_details") or {}
            if not isinstance(details, Mapping):
                details = {}
            # HTTP errors carry a status code; connection errors only a type.
            kind = details.get("code") or details.get("type") or "error"
            errors.append(f"{item.get('count', '?')}× {kind}: {details.get('message')}")
    return LevelResult(
        concurrency=concurrency,
        metrics=metrics,
        requests_completed=completed,
        requests_errored=errored,
        complete=data.get("is_complete") is True,
        cancelled=data.get("was_cancelled") is True,
        osl_mismatch=None if mismatch is None else int(mismatch),
        export_path=path,
        error_summary=errors,
        phase=phase,
    )


def parse_exports(artifact_dir: Path, problems: list[str] | None = None) -> list[LevelResult]:
    """Every per-level export under `artifact_dir`, sorted by concurrency.

    Works on a pass directory or on AIPerf's own artifact dir, single level, sweep or one
    process of several phases (`run.phases`: through its manifest). Unreadable exports are
    skipped; their reasons are appended to `problems` if given.
    """
    for folder in (artifact_dir, artifact_dir / AIPERF_SUBDIR):
        if (folder / phases.MANIFEST_NAME).is_file():
            return _parse_phases(folder, [] if problems is None else problems)
    levels: list[LevelResult] = []
    for path in sorted(artifact_dir.rglob(EXPORT_NAME)):
        try:
            levels.append(parse_export(path))
        except ValueError as exc:
            if problems is not None:
                problems.append(str(exc))
    levels.sort(key=lambda level: level.concurrency)
    return levels


def _parse_phases(aiperf_dir: Path, problems: list[str]) -> list[LevelResult]:
    """The levels of a one-process run (`run.phases`), through its phase manifest."""
    levels: list[LevelResult] = []
    for path, name in phases.exports(aiperf_dir, problems):
        try:
            levels.append(parse_export(path, name))
        except ValueError as exc:
            problems.append(str(exc))
    levels.sort(key=lambda level: level.concurrency)
    return levels


# ---------------------------------------------------------------- running


def _child_env(tmpdir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = tmpdir
    # With either set, AIPerf 0.13 fails to load a tokenizer from a local path
    # (HFValidationError: "Repo id must be in the form ...").
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    env.setdefault("NO_COLOR", "1")
    return env


def run_pass(
    plan: PassPlan,
    artifact_dir: Path,
    *,
    cancel: threading.Event | None = None,
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    clock: Callable[[], float] = time.monotonic,
    killpg: Callable[[int, int], None] = os.killpg,
    grace_s: float = SIGINT_GRACE_S,
    poll_s: float = POLL_S,
    on_start: Callable[[int], None] | None = None,
    lean: bool = True,
    one_process: bool = True,
) -> PassOutcome:
    """Run one AIPerf pass to its end, its timeout, or `cancel`; then read its exports.

    AIPerf gets its own process group (so one signal reaches all its services), a private
    TMPDIR (removed afterwards) and `artifact_dir/aiperf` as its artifact dir, which must
    not exist yet: a retry gets a fresh directory, nothing is overwritten. On timeout or
    cancel the group gets SIGINT (AIPerf then writes partial exports), then SIGKILL after
    `grace_s`. Raises PassError only when AIPerf cannot be started at all.

    `on_start(pgid)` is called once AIPerf runs: a runner that may itself be killed can
    journal the group id and kill a stale group on resume (AIPerf, in its own session,
    outlives a SIGKILLed parent). `lean` and `one_process`: as `aiperf_command`'s.
    """
    aiperf_dir = artifact_dir / AIPERF_SUBDIR
    command = _prepare(plan, artifact_dir, lean=lean, one_process=one_process)
    stdout_path = artifact_dir / STDOUT_NAME
    stderr_path = artifact_dir / STDERR_NAME
    problems: list[str] = []
    tmpdir = tempfile.mkdtemp(prefix=f"{TMPDIR_PREFIX}{os.getpid()}-")
    start = clock()
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = _start(popen, command, out, err, artifact_dir, tmpdir)
            try:
                if on_start is not None:
                    on_start(proc.pid)
                timed_out, interrupted = _wait(proc, deadline=start + plan.timeout_s,
                                               cancel=cancel, clock=clock, killpg=killpg,
                                               grace_s=grace_s, poll_s=poll_s,
                                               problems=problems)
            finally:
                if proc.poll() is None:  # an exception above: never leave AIPerf running
                    signal_group(proc.pid, signal.SIGKILL, killpg=killpg)
                    proc.wait()
                # AIPerf's services share its group; one left behind is killed here. Not a
                # problem of the pass: the measurement is over, and a member that exited
                # but is not yet reaped also answers the signal.
                stragglers = signal_group(proc.pid, signal.SIGKILL, killpg=killpg)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    wall_s = clock() - start
    returncode = proc.returncode
    if timed_out:
        problems.insert(0, f"timed out after {plan.timeout_s:g} s (stopped with SIGINT)")
    if interrupted:
        problems.insert(0, "interrupted (stopped with SIGINT)")
    if returncode != 0:
        problems.append(f"aiperf exit {returncode}")
    levels, missing = _read_levels(plan, aiperf_dir, stdout_path, problems)
    return PassOutcome(
        command=command, returncode=returncode, timed_out=timed_out,
        interrupted=interrupted, wall_s=wall_s, levels=levels, stdout_path=stdout_path,
        stderr_path=stderr_path, problems=problems, missing_levels=missing,
        stragglers_signalled=stragglers)


def _prepare(plan: PassPlan, artifact_dir: Path, *, lean: bool = True,
             one_process: bool = True) -> list[str]:
    """The pass's folder, checked empty of AIPerf results, with its command line written
    beside them; the command."""
    artifact_dir.mkdir(parents=True, exist_ok=True)
    aiperf_dir = artifact_dir / AIPERF_SUBDIR
    if aiperf_dir.exists() and any(aiperf_dir.iterdir()):
        raise PassError(
            f"{aiperf_dir} already holds AIPerf results",
            hint="give every pass attempt its own artifact directory")
    command = aiperf_command(plan, artifact_dir, lean=lean, one_process=one_process)
    if one_process and phases.applies(plan):
        (artifact_dir / phases.CONFIG_NAME).write_text(
            phase_config_text(plan, artifact_dir / AIPERF_SUBDIR), encoding="utf-8")
    (artifact_dir / COMMAND_NAME).write_text(secrets.scrub(shlex.join(command)) + "\n",
                                             encoding="utf-8")  # a URL's password redacted
    return command


def phase_config_text(plan: PassPlan, aiperf_dir: Path) -> str:
    """The one-process config of `plan` (`phases.config`), each level's phase given its
    own request count when they differ (`level_requests`), and one prompt entry per request
    of every level and per pause, so each level still draws prompts of its own."""
    doc = phases.config(plan, aiperf_dir)
    if plan.level_requests:
        own = {phases.phase_name(c): n
               for c, n in zip(plan.concurrency, plan.level_requests, strict=True)}
        bench = doc["benchmark"]
        for phase in bench["phases"]:
            if phase["kind"] == "profiling":
                phase["requests"] = own[phase["name"]]
        bench["dataset"]["entries"] = sum(plan.level_requests) + len(plan.concurrency) - 1
    return json.dumps(doc, indent=1) + "\n"


def _wait(proc: subprocess.Popen[bytes], *, deadline: float,
          cancel: threading.Event | None, clock: Callable[[], float],
          killpg: Callable[[int, int], None], grace_s: float, poll_s: float,
          problems: list[str]) -> tuple[bool, bool]:
    """Wait for AIPerf to end; stop its group at the deadline or on `cancel`. Returns
    (timed out, interrupted)."""
    timed_out = interrupted = False
    while True:
        try:
            proc.wait(timeout=poll_s)
            return timed_out, interrupted
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            interrupted = True
        elif clock() >= deadline:
            timed_out = True
        if interrupted or timed_out:
            _stop(proc, killpg, grace_s, problems)
            return timed_out, interrupted


def _read_levels(plan: PassPlan, aiperf_dir: Path, stdout_path: Path,
                 problems: list[str]) -> tuple[list[LevelResult], list[int]]:
    """The levels AIPerf exported, and the planned ones it did not (with AIPerf's first
    error line added to `problems`)."""
    levels = parse_exports(aiperf_dir, problems) if aiperf_dir.exists() else []
    found = {level.concurrency for level in levels}
    missing = [c for c in plan.concurrency if c not in found]
    if missing:
        problems.append("export missing for concurrency " + ",".join(map(str, missing))
                        + f" (see {stdout_path.name})")
        first_error = _first_error_line(stdout_path)
        if first_error:
            problems.append(f"aiperf: {first_error}")
    return levels, missing


def _first_error_line(log: Path, limit: int = 300) -> str | None:
    """AIPerf's first ERROR log line (why a run produced nothing), shortened."""
    try:
        with open(log, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if " ERROR " in line:
                    text = line.split(" ERROR ", 1)[1].strip()
                    return text if len(text) <= limit else text[: limit - 1] + "…"
    except OSError:
        return None
    return None


def _start(popen: Callable[..., subprocess.Popen[bytes]], command: list[str], out: IO[bytes],
           err: IO[bytes], cwd: Path, tmpdir: str) -> subprocess.Popen[bytes]:
    try:
        return popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd,
                     env=_child_env(tmpdir), start_new_session=True)
    except (FileNotFoundError, PermissionError) as exc:
        raise PassError(f"cannot start AIPerf: {exc}",
                        hint="install it into this environment: pip install 'aiperf>=0.13,<0.14'"
                        ) from exc


def _stop(proc: subprocess.Popen[bytes], killpg: Callable[[int, int], None], grace_s: float,
          problems: list[str]) -> None:
    """SIGINT to the group (partial exports get written), SIGKILL after `grace_s`."""
    result = stop_group(proc.pid, first=signal.SIGINT, grace_s=grace_s, wait=proc,
                        killpg=killpg)
    if result.killed:
        problems.append(f"aiperf ignored SIGINT for {grace_s:g} s: killed (SIGKILL)")
