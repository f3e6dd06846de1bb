"""`spec-ab try`'s core: an afternoon look in one command, as a real, exploratory run.

From two launches (two commands, or one command and the candidate's env difference), two
running endpoints, or nothing (the embedded simulated lane: the default control against
adaptive verification, as `examples/sim-pair.yaml`), it generates a campaign (the same
`Campaign` model `spec-ab run` reads) with the demo's agent-fixture passes (prose and
shell at 4 streams; the rule decides on prose) and a sequential design sized to the time
limit, runs it through the runner `spec-ab run` uses (`run.runner.run_campaign`: the lane
lock, leftovers, the preflight, the journal), prints the verdict marked exploratory and
writes the campaign file that would register the same campaign for a night beside the
run folder (`<run-id>.registered.yaml`).

The generated campaign: `campaign_doc` (a plain mapping, unit-tested), `night_doc` (the
file to register), `pairs_within` (how many pairs fit in the time limit).
"""

from __future__ import annotations

import copy
import io
import re
import shlex
import socket
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from ruamel.yaml import YAML

from campaign.errors import EXIT_INCOMPLETE, CampaignError, Interrupted, UsageError

if TYPE_CHECKING:
    from campaign.campaignfile import Campaign
    from campaign.results.store import RunStore

SIM_MODEL = "deepseek-v4.1-flash-sim"
SIM_ENV = {
    "SPECAB_SIM_MODEL": SIM_MODEL,
    "SPECAB_SIM_TIME_SCALE": "8",
    "SPECAB_SIM_DEPTH": "5",
    "SPECAB_SIM_BOOT_DELAY": "1.0",
    "SPECAB_SIM_DRIFT_SIGMA": "0.003",
    "SPECAB_SIM_SEED": "7",
}
"""The simulated lane of `examples/sim-pair.yaml` (8× real time, one seed for every boot)."""
SIM_CANDIDATE_ENV = {"SPECAB_SIM_VERIFY": "adaptive"}
"""The candidate `spec-ab try` compares with no launch given: adaptive verification."""
VLLM_PORT = 8000
"""`vllm serve`'s default port: a command that names no `--port` listens there."""
SIM_TIME_LIMIT_S = 300.0
"""The default `--time-limit` on the simulated lane (a verdict in 5 minutes)."""
LAUNCH_TIME_LIMIT_S = 1800.0
"""The default `--time-limit` for your own launches (a real lane boots and decodes slower)."""
NIGHT_MAX_PAIRS = 12
"""The registered file's `max_pairs` (as `examples/sim-sequential.yaml`): a night may
spend more pairs than an afternoon's look."""
PAIR_SAFETY = 1.8
"""The estimate of a pair (`campaignfile.duration`) times this is what `pairs_within`
budgets: on a 2-core host a simulated pair (prose and shell, 128 requests each) took
105 s against an estimate of 61 s (AIPerf's start and end under load)."""
LOOK_S = 3.0
"""A look after a pair (the run judged as its report would), budgeted per pair."""

EXPLORATORY_WHY = "a look by spec-ab try, sized to a time limit; register it for a night"
"""Why a run of `spec-ab try` is not pre-registered: for `run.runner.RunOptions`'s
`exploratory` (journaled on the registered line, read by every report) once it exists."""

Kind = Literal["sim", "command", "url"]


@dataclass(frozen=True)
class TryArgs:
    """What `spec-ab try` was asked (its options, parsed)."""

    control: str | None = None
    candidate: str | None = None
    control_env: Sequence[str] = ()
    candidate_env: Sequence[str] = ()
    control_url: str | None = None
    candidate_url: str | None = None
    model: str | None = None
    port: int | None = None
    margin: float = 0.10
    time_limit_s: float | None = None
    """None: `SIM_TIME_LIMIT_S` on the simulated lane, else `LAUNCH_TIME_LIMIT_S`."""
    concurrency: int = 4
    requests: int = 128
    lane: str | None = None
    name: str = "try"


@dataclass(frozen=True)
class Launches:
    """The control launch and each arm's difference from it."""

    kind: Kind
    server: dict[str, Any]
    control: dict[str, Any] = field(default_factory=dict)
    candidate: dict[str, Any] = field(default_factory=dict)
    control_text: str = ""
    candidate_text: str = ""
    model: str = SIM_MODEL


# --------------------------------------------------------------------------- options


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str, flag: str = "--time-limit") -> float:
    """`90s`, `5m`, `1h30m` or a number of seconds → seconds; UsageError (exit 2) else."""
    t = text.strip().lower().replace(" ", "")
    m = _DURATION.match(t)
    if not t or m is None or not any(m.groups()):
        raise UsageError(f"{flag} {text}: not a duration; write e.g. 5m, 90s or 1h30m")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + s
    if seconds <= 0:
        raise UsageError(f"{flag} {text}: give a duration above zero, e.g. 5m")
    return seconds


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_env(items: Sequence[str], flag: str) -> dict[str, str]:
    """`NAME=VALUE` options → a mapping; UsageError naming the option and the item."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UsageError(f"{flag} {item}: write NAME=VALUE, e.g. {flag} "
                             "SPECAB_SIM_VERIFY=adaptive")
        if name in out and out[name] != value:
            raise UsageError(f"{flag}: {name} is given twice ({out[name]!r} and {value!r})",
                             hint=f"give {flag} {name}=… once")
        out[name] = value
    return out


def _argv(text: str, flag: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r}: not a command line ({exc})",
                         hint=f"quote it as one argument: {flag} 'vllm serve MODEL …'") from None
    if not argv:
        raise UsageError(f"{flag}: the command is empty",
                         hint=f"e.g. {flag} 'vllm serve MODEL --port 8000'")
    return argv


def _port_of(argv: list[str]) -> int | None:
    for i, word in enumerate(argv):
        value = (argv[i + 1] if word == "--port" and i + 1 < len(argv)
                 else word.split("=", 1)[1] if word.startswith("--port=") else None)
        if value is not None:
            return int(value) if value.isdigit() else None
    return None


def _url(text: str, flag: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{flag} {text}: not an http(s) URL of a server",
                         hint=f"e.g. {flag} http://127.0.0.1:8000")
    return text.strip().rstrip("/")


# --------------------------------------------------------------------------- launches


def launches(args: TryArgs, free_port: Callable[[], int]) -> Launches:
    """The control launch and the candidate's difference, from the options; UsageError
    (exit 2) for options that do not go together, naming them and what to give."""
    c_env = parse_env(args.control_env, "--control-env")
    k_env = parse_env(args.candidate_env, "--candidate-env")
    urls = args.control_url is not None or args.candidate_url is not None
    commands = args.control is not None or args.candidate is not None
    if urls and (commands or c_env or k_env):
        raise UsageError("--control-url/--candidate-url compare two running servers: they "
                         "do not go with --control/--candidate commands or --*-env",
                         hint="give two URLs, or two launches")
    if urls:
        return _url_launches(args)
    if args.candidate is not None and args.control is None:
        raise UsageError("--candidate needs --control: the candidate is compared with it",
                         hint="spec-ab try --control 'vllm serve M' --candidate 'vllm serve "
                         "M --speculative-config …'")
    if args.control is None:
        return _sim_launches(args, c_env, k_env, free_port)
    return _command_launches(args, c_env, k_env)


def _sim_launches(args: TryArgs, c_env: dict[str, str], k_env: dict[str, str],
                  free_port: Callable[[], int]) -> Launches:
    if args.model is not None:
        raise UsageError(f"--model {args.model}: the simulated lane serves {SIM_MODEL}; "
                         "--model names the model of your own launches",
                         hint="drop --model, or give --control 'COMMAND'")
    port = args.port or free_port()
    k_env = k_env or dict(SIM_CANDIDATE_ENV)
    if k_env == c_env:
        raise UsageError("the candidate's environment is the control's: nothing would be "
                         "compared", hint="--candidate-env SPECAB_SIM_VERIFY=adaptive")
    server = {"backend": "process",
              "command": ["spec-ab", "sim", "serve", "--host", "127.0.0.1", "--port",
                          str(port)],
              "host": "127.0.0.1", "port": port, "env": dict(SIM_ENV),
              "readiness": {"timeout_s": 60}}
    return Launches("sim", server, {"env": c_env} if c_env else {}, {"env": k_env},
                    _env_text("the simulated lane (k = 5, every draft verified)", c_env),
                    _env_text("the simulated lane", k_env), SIM_MODEL)


def _env_text(base: str, env: Mapping[str, str]) -> str:
    return base + "".join(f" {k}={v}" for k, v in env.items())


def _command_launches(args: TryArgs, c_env: dict[str, str], k_env: dict[str, str]
                      ) -> Launches:
    assert args.control is not None
    control = _argv(args.control, "--control")
    candidate = _argv(args.candidate, "--candidate") if args.candidate is not None else None
    if candidate is None and not k_env:
        raise UsageError("--control alone compares nothing: give --candidate 'COMMAND' or "
                         "--candidate-env NAME=VALUE", hint="spec-ab try --control 'vllm "
                         "serve M' --candidate-env VLLM_USE_X=1")
    if candidate == control and k_env == c_env:
        raise UsageError("--control and --candidate are the same launch: nothing would be "
                         "compared", hint="give the candidate its change")
    if args.model is None:
        raise UsageError("--model: name the model your launches serve (as /v1/models "
                         "lists it); the load generator asks for it",
                         hint="e.g. --model Qwen/Qwen3-0.6B")
    ports = {p for p in (_port_of(control), _port_of(candidate or [])) if p is not None}
    if args.port is not None:
        ports.add(args.port)
    if len(ports) > 1:
        raise UsageError(f"the launches listen on different ports ({', '.join(map(str, sorted(ports)))}); "
                         "they run one after the other on one port",
                         hint="give both commands the same --port")
    port = ports.pop() if ports else VLLM_PORT
    common = _common_prefix(control, candidate or control)
    base = common if common else ["env", "--"]
    server = {"backend": "process", "command": base, "host": "127.0.0.1", "port": port,
              "cwd": str(Path.cwd())}
    c_args, k_args = control[len(common):], (candidate or control)[len(common):]
    return Launches("command", server, _arm(c_args, c_env), _arm(k_args, k_env),
                    " ".join([*control, *_env_words(c_env)]),
                    " ".join([*(candidate or control), *_env_words(k_env)]),
                    args.model)


def _env_words(env: Mapping[str, str]) -> list[str]:
    return [f"(env {k}={v})" for k, v in env.items()]


def _arm(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    return {**({"args": args} if args else {}), **({"env": env} if env else {})}


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    """The words both commands start with (the program, usually `vllm serve MODEL`); an
    arm's own words are appended to them (the campaign file appends lists)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n] and not a[n].startswith("-"):
        n += 1
    return a[:n]


def _url_launches(args: TryArgs) -> Launches:
    if args.control_url is None or args.candidate_url is None:
        raise UsageError("give both --control-url and --candidate-url",
                         hint="spec-ab try --control-url http://127.0.0.1:8000 "
                         "--candidate-url http://127.0.0.1:8001 --model M")
    control = _url(args.control_url, "--control-url")
    candidate = _url(args.candidate_url, "--candidate-url")
    if control == candidate:
        raise UsageError(f"--control-url and --candidate-url are the same server ({control})")
    if args.model is None:
        raise UsageError("--model: name the model the servers serve (as /v1/models lists "
                         "it); the load generator asks for it", hint="e.g. --model M")
    return Launches("url", {"backend": "external", "base_url": control}, {},
                    {"base_url": candidate}, control, candidate, args.model)


# --------------------------------------------------------------------------- campaign


def campaign_doc(args: TryArgs, launch: Launches, max_pairs: int) -> dict[str, Any]:
    """The campaign `spec-ab try` runs, as the campaign file's mapping: the demo's agent
    prompts (prose decides), the median TTFT within +25% and no errors, a sequential
    design of up to `max_pairs` pairs that looks from the 2nd. The TTFT guardrail is the
    median's, not the demo's p99: two or three pairs of 128 requests cannot show a p99
    within +25% (measured: "would resolve with 8 pairs"), and a guardrail not shown stops
    adoption."""
    margin = f"{args.margin * 100:g}%"
    hypothesis = (f"The candidate ({launch.candidate_text}) raises decode throughput on "
                  f"prose agent prompts at {args.concurrency} streams by at least {margin} "
                  f"over the control ({launch.control_text}), without worsening the median "
                  "TTFT by more than 25%.")
    warmup = ([] if launch.kind == "sim" else
              [{"concurrency": 2, "requests": 4, "input_tokens": 128, "output_tokens": 32}])
    return {
        "name": args.name,
        "hypothesis": hypothesis,
        "lane": args.lane or ("sim-try" if launch.kind == "sim" else "try"),
        "preregistration": {
            "primary_metric": "output_token_throughput",
            "margin": round(args.margin, 6),
            "drift_band": 0.03,
            "rule": "bound",
            "sequential": {"max_pairs": max_pairs, "min_pairs": 2, "look": "pair"},
            "order": "AB",
            "seed": 7,
            "decision_cells": [{"workload": "agentfix", "level": "prose"}],
            "guardrails": [
                {"metric": "ttft_p50", "max_worsening": 0.25},
                {"metric": "error_rate", "max_worsening": 0.0, "absolute": True},
            ],
            "gates": {"max_error_rate": 0.0, "min_completed_requests": 4,
                      "pass_timeout_s": 240, "retries": 1, "min_output_tokens": 1000},
        },
        "server": copy.deepcopy(launch.server),
        "arms": {
            "control": {"description": launch.control_text, **copy.deepcopy(launch.control)},
            "candidate": {"description": launch.candidate_text,
                          **copy.deepcopy(launch.candidate)},
        },
        "workloads": {
            "model": launch.model,
            "tokenizer": "builtin:tokenizer",
            "endpoint_type": "chat",
            "streaming": True,
            "warmup": warmup,
            "agentfix": {"fixtures": {"prose": "builtin:agentfix/prose",
                                      "shell": "builtin:agentfix/shell"},
                         "concurrency": args.concurrency, "requests": args.requests,
                         "output_tokens": 96},
        },
    }


def night_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The same campaign registered for a night: up to `NIGHT_MAX_PAIRS` pairs (or the
    look's own, if more), named `<name>-night` (its run folders are not the look's)."""
    out = copy.deepcopy(dict(doc))
    out["name"] = f"{out['name']}-night"
    design = out["preregistration"]["sequential"]
    design["max_pairs"] = max(NIGHT_MAX_PAIRS, int(design["max_pairs"]))
    return out


def dump(doc: Mapping[str, Any], header: str) -> str:
    """The campaign file's text: `header` as comment lines, then the mapping."""
    yaml = YAML()
    yaml.default_flow_style = None
    yaml.width = 100
    buf = io.StringIO()
    yaml.dump(dict(doc), buf)
    lines = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return lines + buf.getvalue()


def pairs_within(time_limit_s: float, pair_s: float) -> int:
    """The most pairs (at most 64, the design's own limit) that fit in the time limit at
    `pair_s` each (`PAIR_SAFETY` and `LOOK_S` included); UsageError when not two, the
    fewest a verdict needs."""
    each = pair_budget(pair_s)
    n = int(time_limit_s // each)
    if n < 2:
        need = _minutes(2 * each)
        raise UsageError(f"--time-limit {_minutes(time_limit_s)}: a pair takes about "
                         f"{each:.0f} s on this lane and a verdict needs at least 2 pairs",
                         hint=f"give --time-limit {need} or more")
    return min(n, 64)


def pair_budget(pair_s: float) -> float:
    """The seconds budgeted for a pair estimated at `pair_s` (`PAIR_SAFETY`, `LOOK_S`)."""
    return pair_s * PAIR_SAFETY + LOOK_S


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it): the simulated lane's."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _minutes(seconds: float) -> str:
    """90s, 5m, 3m20s (whole seconds, rounded up)."""
    s = -int(-seconds // 1)
    if s < 120:
        return f"{s}s"
    return f"{s // 60}m" + (f"{s % 60:02d}s" if s % 60 else "")


# --------------------------------------------------------------------------- running


TRY_HEADER = ("Generated by `spec-ab try`: an EXPLORATORY look, not pre-registered.\n"
              "Its verdict is a first look; register a campaign (the file printed at the "
              "end) for a night.")


def night_header(run_dir: Path, shown: Path) -> str:
    return ("The campaign `spec-ab try` ran (an exploratory look, "
            f"{run_dir.name}), to register for a night.\n"
            "Read the hypothesis and the rule (docs/campaign-file.md), then:\n"
            f"  spec-ab check {shown}\n  spec-ab plan {shown}\n  spec-ab run {shown}")


@dataclass(frozen=True)
class Prepared:
    campaign: Campaign
    doc: dict[str, Any]
    text: str
    pair_s: float
    time_limit_s: float


def prepare(args: TryArgs, workdir: Path, free_port: Callable[[], int]) -> Prepared:
    """The campaign `spec-ab try` runs: generated, validated as `spec-ab run` validates a
    file (`load_campaign`, the launch checks), sized to the time limit."""
    from campaign.campaignfile.duration import estimate

    launch = launches(args, free_port)
    probe = campaign_doc(args, launch, 2)
    per_arm = estimate(_load(dump(probe, TRY_HEADER), workdir)).per_arm_s
    pair_s = sum(per_arm.values())
    limit = time_limit(args, launch)
    doc = campaign_doc(args, launch, pairs_within(limit, pair_s))
    text = dump(doc, TRY_HEADER)
    return Prepared(_load(text, workdir), doc, text, pair_s, limit)


def time_limit(args: TryArgs, launch: Launches) -> float:
    """`--time-limit`, or the lane's default, in seconds."""
    if args.time_limit_s is not None:
        return args.time_limit_s
    return SIM_TIME_LIMIT_S if launch.kind == "sim" else LAUNCH_TIME_LIMIT_S


def dry_run(args: TryArgs, free_port: Callable[[], int] | None = None) -> str:
    """The campaign file the look would run (validated and sized as `run_try` does)."""
    with tempfile.TemporaryDirectory(prefix="spec-ab-try-") as tmp:
        return prepare(args, Path(tmp), free_port or _free_port).text


def _load(text: str, workdir: Path) -> Campaign:
    from campaign.campaignfile import load_campaign
    from campaign.run.checks import launchcheck

    path = workdir / "try.yaml"
    path.write_text(text, encoding="utf-8")
    campaign = load_campaign(path)
    launchcheck.refuse(launchcheck.check_launches(campaign, None), "spec-ab try")
    return campaign


@dataclass
class Tried:
    """What a try ended with."""

    run_dir: Path
    registered: Path
    code: int
    lines: list[str]


@dataclass
class Hooks:
    """The CLI's edges: where lines go, the live status, Ctrl-C."""

    say: Callable[[str], None]
    note: Callable[[str], None]
    progress: Callable[[Campaign, Path], Any] | None = None
    interrupts: Callable[[threading.Event, Callable[[], str]], Callable[[], None]] | None = None


def run_try(args: TryArgs, out_root: Path, hooks: Hooks, *, skip_preflight: bool = False,
            free_port: Callable[[], int] | None = None) -> Tried:
    """Generate, run and judge the campaign; write the file to register beside the run."""
    from campaign.run import runner

    with tempfile.TemporaryDirectory(prefix="spec-ab-try-") as tmp:
        prep = prepare(args, Path(tmp), free_port or _free_port)
        design = prep.doc["preregistration"]["sequential"]
        hooks.say(f"spec-ab try: {design['max_pairs']} pairs at most "
                  f"({pair_budget(prep.pair_s):.0f} s budgeted for each), looks from pair 2, stops when "
                  f"decided or after {_minutes(prep.time_limit_s)}; exploratory, not "
                  "pre-registered")
        rt = runner.Runtime()
        started: list[RunStore] = []
        undo: list[Callable[[], None]] = []

        def on_start(store: RunStore) -> None:
            started.append(store)
            hooks.say(f"run directory: {store.run_dir}")
            if hooks.progress is not None:
                rt.progress = hooks.progress(prep.campaign, store.run_dir)
            if hooks.interrupts is not None:
                undo.append(hooks.interrupts(rt.cancel, lambda: rt.doing))

        late = threading.Event()

        def time_up() -> None:
            late.set()
            rt.cancel.set()

        timer = threading.Timer(prep.time_limit_s, time_up)
        timer.daemon = True
        opts = runner.RunOptions(skip_preflight=skip_preflight, shown_as="spec-ab try",
                                 on_note=hooks.note, on_start=on_start,
                                 exploratory=EXPLORATORY_WHY)
        timer.start()
        try:
            result = runner.run_campaign(prep.campaign, prep.text.encode("utf-8"), out_root,
                                         rt, opts)
            complete, run_dir = result.complete, result.run_dir
        except Interrupted:
            if not late.is_set() or not started:
                raise
            complete, run_dir = False, started[0].run_dir
        finally:
            timer.cancel()
            close = getattr(rt.progress, "close", None)
            if close:
                close()
            for u in undo:
                u()
    return _finish(prep, run_dir, complete, late.is_set())


def _finish(prep: Prepared, run_dir: Path, complete: bool, late: bool) -> Tried:
    from campaign import report as report_mod
    from campaign.report.model import EXPLORATORY
    from campaign.textfiles import atomic_write

    lines = [f"*** {EXPLORATORY}: spec-ab try, an afternoon look ***"]
    if late:
        lines.append(f"the time limit ({_minutes(prep.time_limit_s)}) ended the look "
                     "before the design decided: the verdict so far")
    try:
        rep = report_mod.build_report([run_dir])
        lines += report_mod.summary_lines(rep)
    except CampaignError as exc:
        lines.append(f"no verdict: {exc}")
        complete = False
    registered = run_dir.parent / f"{run_dir.name}.registered.yaml"
    atomic_write(registered, dump(night_doc(prep.doc), night_header(run_dir, registered)))
    lines += ["", f"results:  {run_dir}", f"report:   spec-ab report {run_dir}",
              f"register: {registered} (this campaign, for a night)",
              f"          spec-ab check {registered}",
              f"          spec-ab run {registered}"]
    return Tried(run_dir, registered, 0 if complete else EXIT_INCOMPLETE, lines)
