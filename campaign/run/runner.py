"""Executes a campaign: every arm of every pair, in the pre-registered order.

For each slot: start the server → wait until ready → warm-up passes (thrown away) →
measured passes, each wrapped in /metrics scrapes → stop the server (always: the slot runs
inside `servers.base.serving`). Every event is appended to the journal before the next
step, so a crash or Ctrl-C loses at most the pass under way; `--resume` redoes a pair cut
in the middle whole (a pair must stay in one window) and keeps the frozen rule.

Slow edges (server factory, pass runner, HTTP client, clocks) are parameters so tests
can fake them; `spec-ab run` passes the real ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from campaign import secrets
from campaign.campaignfile import Campaign, LaunchModel, load_campaign
from campaign.campaignfile.schedule import Slot, plan_slots
from campaign.errors import (
    STORAGE_ERRNOS,
    Interrupted,
    PreflightError,
    ResultsError,
    ServerError,
    storage_error,
)
from campaign.markers import LABEL_LANE, LABEL_PID, LANE_ENV, RUN_ENV, RUNNER_PID_ENV, run_labels
from campaign.results.journal import PassRow, iso, utcnow
from campaign.results.store import RunStore, recorded_lane
from campaign.run import lanelock, loadgen, manifest, metrics
from campaign.run.passes import ArmPass, arm_passes
from campaign.run.readiness import wait_ready
from campaign.run.serverwatch import captures_after, scrape, unhealthy
from campaign.servers import ArmContext, Server, make_server
from campaign.servers.base import serving
from campaign.verdict.aa import checked_drift_band

if TYPE_CHECKING:
    from campaign.run.cleanup import Scan


class ProgressSink(Protocol):
    def __call__(self, event: str, **data: Any) -> None: ...


def _no_progress(event: str, **data: Any) -> None:
    return None


@dataclass
class RunResult:
    run_dir: Path
    pairs_total: int
    pairs_valid: list[int]
    pairs_invalid: dict[int, str]

    @property
    def complete(self) -> bool:
        return not self.pairs_invalid and len(self.pairs_valid) == self.pairs_total


@dataclass
class Runtime:
    """The runner's edges; defaults are the real ones."""

    server_factory: Callable[[LaunchModel, ArmContext], Server] = make_server
    run_pass: Callable[..., loadgen.PassOutcome] = loadgen.run_pass
    http: Callable[[], httpx.Client] = lambda: httpx.Client(timeout=10.0)
    clock: Callable[[], dt.datetime] = utcnow
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: ProgressSink = _no_progress
    lock_dir: Path | None = None
    doing: str = ""
    """What the run waits for now, in words (what a Ctrl-C says it is stopping)."""


class _PairInvalid(Exception):
    """This pair cannot count (server died mid-pass...); go on with the next pair."""


def start_run(campaign: Campaign, campaign_text: bytes, out_root: Path,
              rt: Runtime) -> RunStore:
    """Create the run directory, freeze and register the rule, write the manifest."""
    band = checked_drift_band(campaign)  # before the folder exists: a refusal leaves none
    facts = manifest.collect(campaign)
    try:
        # a shard's folder names its lane: shards of one night gathered in one folder
        name = f"{campaign.name}-{campaign.lane}" if campaign.sharded else campaign.name
        store = RunStore.create(out_root, name, campaign_text, clock=rt.clock)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise storage_error(exc, "the run directory", out_root) from exc
    try:
        rule = campaign.preregistration.model_dump(mode="json", by_alias=True)
        digest = store.register(rule, campaign=campaign.name, arms=campaign.arm_names,
                                drift_band=band)
        store.write_manifest(facts)
        store.journal("registered", sha256=digest, campaign_path=str(campaign.source),
                      base_dir=str(campaign.base_dir), lane=campaign.lane,
                      **({"lanes": campaign.lane_names} if campaign.sharded else {}))
        store.rebuild_passes_csv()
    except OSError as exc:
        # Nothing is measured yet: a half-registered folder would only be an orphan.
        shutil.rmtree(store.run_dir, ignore_errors=True)
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise storage_error(exc, "the run directory", store.run_dir) from exc
    return store


def _no_note(text: str) -> None:
    return None


def run_campaign(
    campaign: Campaign,
    campaign_text: bytes | None,
    out_root: Path | None,
    rt: Runtime,
    *,
    resume: RunStore | None = None,
    skip_preflight: bool = False,
    shown_as: str | Path | None = None,
    on_note: Callable[[str], None] = _no_note,
    on_start: Callable[[RunStore], None] | None = None,
    find_leftovers: Callable[[Campaign], Scan] | None = None,
    preflight: Callable[[Campaign], tuple[list[str], list[str]]] | None = None,
    redo_invalid: bool = False,
) -> RunResult:
    """Run a campaign behind every guard `spec-ab run` has, in its order:

    1. refuse leftovers of earlier runs (first: a leftover server also explains a busy
       port the preflight would report);
    2. the preflight, unless `skip_preflight` (any problem: PreflightError, exit 3);
    3. create the run directory (freeze the rule, write the manifest) under `out_root`
       (default: the campaign's results_dir), or continue `resume` (from `reopen_run`);
    4. `on_start(store)`, then `execute`.

    The lane lock is taken first and held to the end, so a run refused because another
    holds the lane leaves nothing behind. A results folder that cannot be written (disk
    full, read-only, not a folder) raises `StorageError` (exit 3) naming the file; what was
    measured is in the journal (`--resume` continues; `redo_invalid` also re-measures the
    pairs left invalid, whole, as a new attempt).

    `campaign_text` is the campaign file as registered (default: its source file's bytes).
    `shown_as` names the campaign in hints (the path the user gave); `on_note` receives
    what the leftover scan could not judge. An interrupt raises `Interrupted` saying how to
    resume. `find_leftovers` and `preflight` default to the real ones.
    """
    holder = resume.run_id if resume is not None else "(starting)"
    with lanelock.hold(campaign.lane, holder, lock_dir=rt.lock_dir) as name_holder:
        created: list[RunStore] = []
        try:
            return _run_locked(campaign, campaign_text, out_root, rt, resume, skip_preflight,
                               shown_as, on_note, on_start, find_leftovers, preflight,
                               redo_invalid, name_holder, created)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            run_dir = (resume or (created[0] if created else None))
            raise storage_error(exc, "the results",
                                run_dir=run_dir.run_dir if run_dir else None) from exc


def _run_locked(campaign: Campaign, campaign_text: bytes | None, out_root: Path | None,
                rt: Runtime, resume: RunStore | None, skip_preflight: bool,
                shown_as: str | Path | None, on_note: Callable[[str], None],
                on_start: Callable[[RunStore], None] | None,
                find_leftovers: Callable[[Campaign], Scan] | None,
                preflight: Callable[[Campaign], tuple[list[str], list[str]]] | None,
                redo_invalid: bool, name_holder: Callable[[str], None],
                created: list[RunStore]) -> RunResult:
    refuse_leftovers(campaign, on_note=on_note, find=find_leftovers)
    if not skip_preflight:
        if preflight is None:
            from campaign.run.preflight import preflight as real_preflight

            preflight = real_preflight
        _, problems = preflight(campaign)
        if problems:
            raise PreflightError("preflight failed:\n" + "\n".join(f"  - {p}" for p in problems),
                                 hint=f"spec-ab check {shown_as or campaign.source} shows "
                                 "details")
    if resume is None:
        root = out_root or campaign.resolve(campaign.results_dir)
        if campaign_text is None:
            if campaign.source is None:
                raise ValueError("campaign_text is needed for a campaign without a file")
            campaign_text = campaign.source.read_bytes()
        store = start_run(campaign, campaign_text, root, rt)
        created.append(store)
    else:
        store = resume
    name_holder(store.run_id)
    if on_start is not None:
        on_start(store)
    try:
        return execute(campaign, store, rt, locked=True, redo_invalid=redo_invalid)
    except Interrupted:
        raise Interrupted(f"interrupted; measurements so far are kept. Continue with:\n  "
                          f"spec-ab run --resume {store.run_dir}") from None


def refuse_leftovers(campaign: Campaign, *, on_note: Callable[[str], None] = _no_note,
                     find: Callable[[Campaign], Scan] | None = None) -> None:
    """PreflightError when containers or processes of dead runs are still around
    (`cleanup.refuse_leftovers`; imported here late, with docker)."""
    from campaign.run import cleanup

    cleanup.refuse_leftovers(campaign, on_note=on_note, find=find)


def reopen_run(run_dir: Path, rt: Runtime) -> tuple[RunStore, Campaign]:
    """Reopen a run for `--resume`: the frozen campaign file, never the edited one."""
    store = RunStore.open(run_dir, clock=rt.clock)
    events = store.read_journal()
    registered = next((e for e in events if e.get("event") == "registered"), {})
    base = Path(registered["base_dir"]) if registered.get("base_dir") else None
    lane = recorded_lane(events, _manifest(run_dir))
    campaign = load_campaign(run_dir / "campaign.yaml", base_dir=base, lane=lane)
    if any(e.get("event") == "finished" and e.get("complete") for e in events):
        raise ResultsError(f"{run_dir} is already complete; nothing to resume",
                           hint=f"spec-ab report {run_dir}")
    return store, campaign


def _manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest, or {} when it is missing or damaged (it only describes the
    machine; resuming does not need it)."""
    try:
        doc = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def pair_status(events: list[dict[str, Any]]) -> dict[int, tuple[int, str]]:
    """pair → (latest attempt, state: started | done | invalid) from the journal."""
    status: dict[int, tuple[int, str]] = {}
    for ev in events:
        kind = ev.get("event")
        if kind == "pair_start":
            status[ev["pair"]] = (ev["pair_attempt"], "started")
        elif kind == "pair_done":
            status[ev["pair"]] = (ev["pair_attempt"], "done")
        elif kind == "pair_invalid":
            status[ev["pair"]] = (ev["pair_attempt"], "invalid")
    return status


def execute(campaign: Campaign, store: RunStore, rt: Runtime, *, locked: bool = False,
            redo_invalid: bool = False) -> RunResult:
    """Run every pair not yet done. Holds the lane lock for the whole run (unless the
    caller holds it: `locked`). `redo_invalid`: pairs left invalid by an earlier session
    (a dead server, invalid passes) are measured again, whole, as a new pair attempt."""
    pre = campaign.preregistration
    slots = plan_slots(pre.pairs, campaign.arm_names, pre.order, pre.seed,
                       campaign.lane_index)
    by_pair: dict[int, list[Slot]] = {}
    for s in slots:
        by_pair.setdefault(s.pair, []).append(s)
    result = RunResult(store.run_dir, pre.pairs, [], {})
    events = store.read_journal()
    status = pair_status(events)
    lock = (contextlib.nullcontext() if locked
            else lanelock.hold(campaign.lane, store.run_id, lock_dir=rt.lock_dir))
    with lock, _marked_children(store.run_id, campaign.lane):
        # passes.csv follows the journal: a session stopped between the two (a full disk,
        # a kill) left it behind, and it is rebuilt before anything else is measured.
        store.rebuild_passes_csv()
        store.journal("run_start", pid=_pid(), resumed=bool(status), lane=campaign.lane,
                      **({"redo_invalid": True} if redo_invalid else {}))
        started = rt.monotonic()
        done_slots = 0
        if redo_invalid:  # an invalid pair is measured again like one cut in the middle
            status = {p: (a, "started" if st == "invalid"
                          or (st == "done" and _invalid_passes_of(events, p, a)) else st)
                      for p, (a, st) in status.items()}
        already = sum(len(by_pair[p]) for p, (_, st) in status.items() if st != "started")
        for pair, pair_slots in by_pair.items():
            attempt, state = status.get(pair, (0, "new"))
            if state == "done":
                bad = _invalid_passes_of(events, pair, attempt)
                if bad:
                    result.pairs_invalid[pair] = "invalid pass(es): " + ", ".join(bad)
                else:
                    result.pairs_valid.append(pair)
                continue
            if state == "invalid":
                result.pairs_invalid[pair] = "invalid in an earlier session"
                continue
            tries_left = pre.gates.pair_retries
            while True:
                attempt += 1
                outcome = _run_pair(campaign, store, rt, pair, attempt, pair_slots,
                                    redo=state == "started")
                done_slots += len(pair_slots)
                elapsed = rt.monotonic() - started
                remaining = max(0, len(slots) - already - done_slots)
                rt.progress("eta", elapsed_s=elapsed, eta_s=elapsed / done_slots * remaining)
                if outcome.died is None or tries_left == 0:
                    break
                tries_left -= 1
                state = "started"  # the redo of a pair cut by a fault
                rt.progress("pair_redo", pair=pair, reason=outcome.died)
            if outcome.died is not None:
                result.pairs_invalid[pair] = outcome.died
            elif outcome.invalid_passes:
                # Measured to the end, but some cells lose this pair: the campaign is
                # incomplete (exit 4) and the report counts the pair as left out there.
                result.pairs_invalid[pair] = ("invalid pass(es): "
                                              + ", ".join(outcome.invalid_passes))
            else:
                result.pairs_valid.append(pair)
        store.journal("finished", complete=result.complete,
                      pairs_valid=result.pairs_valid, pairs_invalid=result.pairs_invalid)
    return result


@dataclass
class _PairOutcome:
    died: str | None = None
    """Why the pair is invalid (server died / restarted mid-pass), else None."""
    invalid_passes: list[str] = field(default_factory=list)


def _run_pair(campaign: Campaign, store: RunStore, rt: Runtime, pair: int, pair_attempt: int,
              pair_slots: list[Slot], *, redo: bool) -> _PairOutcome:
    """Every arm of one pair, back to back, journaled as one attempt."""
    store.journal("pair_start", pair=pair, pair_attempt=pair_attempt, redo=redo)
    rt.progress("pair_start", pair=pair, pairs=campaign.preregistration.pairs,
                pair_attempt=pair_attempt)
    outcome = _PairOutcome()
    try:
        for slot in pair_slots:
            _check_cancel(rt)
            outcome.invalid_passes += _run_slot(campaign, store, rt, slot, pair_attempt)
    except _PairInvalid as exc:
        outcome.died = str(exc)
        store.journal("pair_invalid", pair=pair, pair_attempt=pair_attempt, reason=outcome.died)
        rt.progress("pair_invalid", pair=pair, reason=outcome.died)
        return outcome
    except Interrupted:
        store.journal("interrupted", pair=pair, pair_attempt=pair_attempt)
        raise
    except ServerError as exc:
        # Infrastructure, not measurement: stop the night here (exit 3). The pair stays
        # "started", so `--resume` redoes it once the launch is fixed.
        store.journal("aborted", pair=pair, pair_attempt=pair_attempt, reason=str(exc))
        raise
    store.journal("pair_done", pair=pair, pair_attempt=pair_attempt,
                  invalid_passes=outcome.invalid_passes)
    rt.progress("pair_done", pair=pair, pairs=campaign.preregistration.pairs)
    return outcome


def _invalid_passes_of(events: list[dict[str, Any]], pair: int, attempt: int) -> list[str]:
    for ev in events:
        if (ev.get("event") == "pair_done" and ev.get("pair") == pair
                and ev.get("pair_attempt") == attempt):
            return list(ev.get("invalid_passes", []))
    return []


def _pid() -> int:
    return os.getpid()


@contextmanager
def _marked_children(run_id: str, lane: str) -> Iterator[None]:
    """Every child (servers, AIPerf and its workers) inherits the run id, the lane and this
    pid, so `spec-ab clean` can find what a crashed runner (SIGKILL, power loss) left
    behind, and say whose it is."""
    saved = {k: os.environ.get(k) for k in (RUN_ENV, RUNNER_PID_ENV, LANE_ENV)}
    os.environ[RUN_ENV] = run_id
    os.environ[RUNNER_PID_ENV] = str(os.getpid())
    os.environ[LANE_ENV] = lane
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _check_cancel(rt: Runtime) -> None:
    if rt.cancel.is_set():
        raise Interrupted("interrupted; everything measured so far is kept")


def _cancellable_sleep(rt: Runtime) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        _check_cancel(rt)
        rt.sleep(seconds)
        _check_cancel(rt)

    return sleep


def _run_slot(campaign: Campaign, store: RunStore, rt: Runtime, slot: Slot,
              pair_attempt: int) -> list[str]:
    """Boot, measure and stop one arm. Returns the measured passes left invalid."""
    launch = campaign.launches[slot.arm]
    arm_dir = store.arm_dir(slot.pair, slot.arm, pair_attempt)
    ctx = ArmContext(
        run_id=store.run_id, pair=slot.pair, arm=slot.arm, log_path=arm_dir / "server.log",
        campaign_dir=campaign.base_dir,
        labels={**run_labels(store.run_id, slot.pair, slot.arm), LABEL_PID: str(_pid()),
                LABEL_LANE: campaign.lane},
    )
    server = rt.server_factory(launch, ctx)
    started_at = iso(rt.clock())
    store.journal("slot_start", slot=slot.index, pair=slot.pair, arm=slot.arm,
                  pair_attempt=pair_attempt, started_at=started_at,
                  launch=[secrets.scrub(line) for line in server.describe()])
    rt.progress("arm_start", pair=slot.pair, arm=slot.arm, phase="boot")
    rt.doing = f"the {slot.arm} server of pair {slot.pair} (booting)"
    t0 = rt.monotonic()
    boot_s = 0.0
    aiperf_s = 0.0
    invalid: list[str] = []
    try:
        with captures_after(campaign, ctx.log_path, arm_dir), serving(server), \
                rt.http() as client:
            boot_s = wait_ready(
                server, launch.readiness, model=campaign.workloads.model,
                endpoint_type=campaign.workloads.endpoint_type, arm=slot.arm,
                client=client, clock=rt.monotonic, sleep=_cancellable_sleep(rt))
            store.journal("server_ready", slot=slot.index, boot_s=round(boot_s, 3))
            rt.progress("arm_phase", pair=slot.pair, arm=slot.arm, phase="ready",
                        boot_s=boot_s)
            for ap in arm_passes(campaign, slot.arm, server.base_url):
                _check_cancel(rt)
                spent, valid = _run_pass(campaign, store, rt, server, client, slot, ap,
                                         arm_dir, pair_attempt, started_at)
                aiperf_s += spent
                if not valid and ap.measured:
                    invalid.append(f"{slot.arm}/{ap.plan.name}")
            facts = server.facts()  # before the stop, like every other look at the server
    except ServerError as exc:
        store.journal("slot_failed", slot=slot.index, pair=slot.pair, arm=slot.arm,
                      reason=str(exc))
        raise
    store.update_manifest("servers", {f"{slot.pair:02d}/{slot.arm}": facts})
    wall = rt.monotonic() - t0
    store.journal("slot_done", slot=slot.index, pair=slot.pair, arm=slot.arm,
                  wall_s=round(wall, 3), boot_s=round(boot_s, 3), aiperf_s=round(aiperf_s, 3),
                  overhead_s=round(wall - boot_s - aiperf_s, 3))
    rt.progress("arm_done", pair=slot.pair, arm=slot.arm, wall_s=wall)
    return invalid


def _run_pass(campaign: Campaign, store: RunStore, rt: Runtime, server: Server,
              client: httpx.Client, slot: Slot, ap: ArmPass, arm_dir: Path,
              pair_attempt: int, started_at: str) -> tuple[float, bool]:
    """One pass with its retries. Returns (AIPerf's wall time, valid in the end). Raises
    _PairInvalid when the server died under it."""
    gates = campaign.preregistration.gates
    attempts = 1 + (gates.retries if ap.measured else 0)
    aiperf_s = 0.0
    for attempt in range(1, attempts + 1):
        _check_cancel(rt)
        name = ap.plan.name if attempt == 1 else f"{ap.plan.name}.retry{attempt - 1}"
        pass_dir = arm_dir / "passes" / name
        mdir = arm_dir / "metrics"
        rt.progress("arm_phase", pair=slot.pair, arm=slot.arm, phase=name)
        before = scrape(client, server.base_url, mdir / f"{name}-before.prom")
        per_level = ap.plan.requests_per_level
        rt.progress("pass_start", pair=slot.pair, arm=slot.arm, name=name,
                    measured=ap.measured, base_url=server.base_url,
                    levels=list(ap.level_labels),
                    requests=per_level * len(ap.plan.concurrency) if per_level else None)
        rt.doing = (f"AIPerf ({name}, {slot.arm}, pair {slot.pair}; up to "
                    f"{loadgen.SIGINT_GRACE_S:g} s to write its partial results), then the "
                    "server")
        outcome = rt.run_pass(ap.plan, pass_dir, cancel=rt.cancel)
        aiperf_s += outcome.wall_s
        if outcome.interrupted or rt.cancel.is_set():
            store.journal("pass_interrupted", slot=slot.index, name=name)
            raise Interrupted("interrupted during a pass; everything measured so far is kept")
        after = scrape(client, server.base_url, mdir / f"{name}-after.prom")
        problems = list(outcome.problems)
        died = None
        if not server.alive():
            died = f"server {server.exit_status()} during {name}"
        elif after is None and before is not None:
            # It answered /metrics before the pass: it stopped answering during it. A
            # server that never answers has no server counters: figures n/a, pair valid.
            died = f"server stopped answering /metrics during {name}"
        else:
            died = unhealthy(client, server, campaign.launches[slot.arm], name)
        delta = None
        if before is not None and after is not None:
            try:
                delta = metrics.pass_delta(before, after)
            except metrics.CounterReset as exc:
                died = f"server restarted during {name} ({exc})"
        figures = delta.as_metrics() if delta is not None else None
        if delta is not None:  # throughput on the server's token count, where it counts
            metrics.add_server_throughput((lv.metrics for lv in outcome.levels),
                                          delta.tokens.generation_tokens)
        if died:
            problems.append(died)
        # A warm-up is thrown away: only "did it run" matters, not the measured-pass gate.
        level_problems = {
            lv.concurrency: loadgen.level_problems(
                lv, outcome,
                max_error_rate=gates.max_error_rate if ap.measured else 1.0,
                min_completed_requests=gates.min_completed_requests if ap.measured else 1,
                max_osl_mismatch_share=gates.max_osl_mismatch if ap.measured else None)
            for lv in outcome.levels
        }
        labels = dict(zip(ap.plan.concurrency, ap.level_labels, strict=True))
        missing = [labels[c] for c in ap.plan.concurrency
                   if c not in {lv.concurrency for lv in outcome.levels}]
        if missing:
            problems.append(f"no results for level(s) {', '.join(missing)}")
        valid = not problems and not any(level_problems.values())
        rows: list[PassRow] = []
        if ap.measured:
            for lv in outcome.levels:
                level = labels.get(lv.concurrency, f"c{lv.concurrency}")
                reasons = problems + level_problems.get(lv.concurrency, [])
                for metric_name, value in lv.metrics.items():
                    rows.append(PassRow(store.run_id, slot.pair, pair_attempt, slot.arm,
                                        slot.index, started_at, ap.workload, level,
                                        metric_name, float(value), not reasons, attempt,
                                        "; ".join(reasons)))
            if figures is not None:
                for metric_name, value in figures.items():
                    rows.append(PassRow(store.run_id, slot.pair, pair_attempt, slot.arm,
                                        slot.index, started_at, ap.workload, ap.spec_level,
                                        metric_name, float(value), valid, attempt,
                                        "; ".join(problems)))
        summary = _summary(outcome)
        all_problems = problems + [f"{labels.get(c, c)}: {p}"
                                   for c, ps in level_problems.items() for p in ps]
        store.journal(
            "pass", slot=slot.index, pair=slot.pair, arm=slot.arm, name=name,
            workload=ap.workload, attempt=attempt, valid=valid,
            problems=all_problems,
            aiperf_s=round(outcome.wall_s, 3), command=outcome.command,
            returncode=outcome.returncode, summary=summary,
            spec_decode=figures or None,
            implied_a_method=(delta.spec.implied_a_method
                              if delta is not None and delta.spec is not None else None),
            server_metrics=before is not None or after is not None,
            rows=[dataclasses.asdict(r) for r in rows],
        )
        store.rebuild_passes_csv()
        rt.progress("pass_done", pair=slot.pair, arm=slot.arm, name=name, valid=valid,
                    measured=ap.measured, summary=summary, problems=all_problems)
        if died:
            raise _PairInvalid(died)
        if valid or not ap.measured:
            break
    return aiperf_s, valid


def _summary(outcome: loadgen.PassOutcome) -> dict[str, float]:
    """Throughput per level, for the journal and the progress line."""
    return {f"c{lv.concurrency}": round(lv.metrics.get("output_token_throughput", 0.0), 2)
            for lv in outcome.levels}


