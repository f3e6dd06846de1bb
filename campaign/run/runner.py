"""Executes a campaign: every arm of every pair, in the pre-registered order.

`run_campaign` holds the guards (what cannot run, the lane lock, leftovers, the
preflight), registers the run (`start_run`) or reopens it (`reopen_run`), then `execute`
runs the pairs not yet done. Each slot of a pair (one arm: boot, warm-up passes, measured
passes between /metrics scrapes, stop) is `arm.run_slot`. Every event is appended to the
journal before the next step, so a crash or Ctrl-C loses at most the pass under way;
`--resume` redoes a pair cut in the middle whole (a pair must stay in one window) and
keeps the frozen rule.

Slow edges (server factory, pass runner, HTTP client, clocks) come in a `Runtime`, so
tests can fake them; `spec-ab run` passes the real ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from campaign.campaignfile import Campaign, load_campaign
from campaign.campaignfile.checks import refuse_secret_collisions, refuse_thin_tails
from campaign.campaignfile.schedule import Slot, plan_slots
from campaign.errors import (
    STORAGE_ERRNOS,
    Interrupted,
    PreflightError,
    ResultsError,
    ServerError,
    UsageError,
    storage_error,
)
from campaign.markers import marked_children
from campaign.results import damage, signing
from campaign.results import journal as jr
from campaign.results.registration import registered_levels
from campaign.results.store import RunStore, read_manifest
from campaign.run import sequential
from campaign.run.guards import lanelock
from campaign.run.measure import arrivals, manifest
from campaign.run.measure.passes import Fault, InvalidPass
from campaign.run.runtime import ProgressSink, Runtime, check_cancel
from campaign.run.slot.launcherror import run_slot_guarded
from campaign.run.slot.lifecycle import PairInvalid
from campaign.verdict.aa import checked_drift_band, checked_guardrail_bands

if TYPE_CHECKING:
    from campaign.run.checks.bootcheck import Boot
    from campaign.run.guards.cleanup import Scan

__all__ = ["ProgressSink", "RunOptions", "RunResult", "RunStore", "Runtime", "execute",
           "refuse_leftovers", "refuse_unrunnable", "reopen_run", "run_campaign", "start_run"]


@dataclass
class RunResult:
    run_dir: Path
    pairs_total: int
    pairs_valid: list[int]
    pairs_invalid: dict[int, str]
    stopped_after: int | None = None
    """A sequential design stopped the night after this pair: decided, so complete."""

    @property
    def complete(self) -> bool:
        if self.stopped_after is not None:
            return True
        return not self.pairs_invalid and len(self.pairs_valid) == self.pairs_total


def start_run(campaign: Campaign, campaign_text: bytes, out_root: Path,
              rt: Runtime, sign_key: Path | None = None,
              exploratory: str | None = None) -> RunStore:
    """Create the run directory, freeze and register the rule, write the manifest; with
    `sign_key`, sign the registration before anything boots (`results.signing`);
    `exploratory`: why the run is not pre-registered (`spec-ab try`), on the registered
    line, so every report marks it."""
    band = checked_drift_band(campaign)  # before the folder exists: a refusal leaves none
    guardrail_bands = checked_guardrail_bands(campaign)
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
        # the schedules first: their sha256 are registered with the rule
        schedules = arrivals.write_schedules(store.run_dir, campaign)
        digest = store.register(rule, campaign=campaign.name, arms=campaign.arm_names,
                                drift_band=band, levels=registered_levels(campaign),
                                guardrail_bands=guardrail_bands, schedules=schedules)
        store.write_manifest(facts)
        store.journal_registered(
            sha256=digest, campaign_path=str(campaign.source),
            **({"schedules": schedules} if schedules else {}),
            base_dir=str(campaign.base_dir), lane=campaign.lane,
            **({"lanes": campaign.lane_names} if campaign.sharded else {}),
            **({"exploratory": exploratory} if exploratory else {}))
        store.rebuild_passes_csv()
        if sign_key is not None:
            signing.sign_registration(store.run_dir, sign_key)
    except PreflightError:
        shutil.rmtree(store.run_dir, ignore_errors=True)  # nothing measured: no orphan
        raise
    except OSError as exc:
        # Nothing is measured yet: a half-registered folder would only be an orphan.
        shutil.rmtree(store.run_dir, ignore_errors=True)
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise storage_error(exc, "the run directory", store.run_dir) from exc
    return store


def _signed(run_dir: Path) -> dict[str, str]:
    """`run_start`'s record of the registration's signature: the chain then shows it
    existed before the session's first boot."""
    digest = signing.signature_digest(run_dir)
    return {} if digest is None else {"registration_sig_sha256": digest}


def _no_note(text: str) -> None:
    return None


def _no_boot(arms: list[str]) -> None:
    return None


def _no_booted(boot: Boot) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How `run_campaign` runs: what `spec-ab run`'s options and guards decide."""

    resume: RunStore | None = None
    """Continue this run (from `reopen_run`) instead of creating one."""
    skip_preflight: bool = False
    shown_as: str | Path | None = None
    """The campaign as the user named it (for hints)."""
    on_note: Callable[[str], None] = _no_note
    """Receives what the leftover scan could not judge."""
    on_start: Callable[[RunStore], None] | None = None
    find_leftovers: Callable[[Campaign], Scan] | None = None
    preflight: Callable[[Campaign], tuple[list[str], list[str]]] | None = None
    redo_invalid: bool = False
    """Measure the pairs an earlier session left invalid again, whole, as a new attempt."""
    lane: str | None = None
    """The lane asked for (`--lane`): a resumed shard must be of that lane."""
    fail_on: Sequence[str] = ()
    """Verdict conditions the caller judges after the run (`--fail-on`): a shard has no
    verdict of its own, so they are refused for one."""
    sign_key: Path | None = None
    """Sign the registration with this ssh key before the first boot (`--sign-key`)."""
    boot_check: bool = True
    """A new run boots each distinct launch once before its first measured pass (not an
    external one) and stops when one does not become ready (`--skip-boot-check`: not)."""
    on_boot: Callable[[list[str]], None] = _no_boot
    """Told before each boot of the boot check (the arms sharing the launch)."""
    on_booted: Callable[[Boot], None] = _no_booted
    """Told after each boot of the boot check (how it went)."""
    exploratory: str | None = None
    """Why a new run is not pre-registered (`spec-ab try`): journaled on its registered
    line, and every report of it is marked exploratory."""


def refuse_unrunnable(campaign: Campaign, opts: RunOptions) -> None:
    """UsageError (exit 2) for a campaign that cannot run as asked: a sharded campaign with
    no lane chosen, a shard with verdict conditions, a resumed shard of another lane; and
    SpecError (exit 2) for a guardrail's quantile its passes are too small for, when the
    campaign registered `gates.tail_requests: refuse`, or for a secret value that is an
    arm's, a metric's or a path's (`secret_collisions`; a resume too: the environment is
    this session's)."""
    refuse_secret_collisions(campaign)
    shown = opts.shown_as or campaign.source
    if opts.resume is not None:
        if opts.lane is not None and opts.lane != campaign.lane:
            raise UsageError(f"--lane {opts.lane}: {opts.resume.run_dir} is the shard of lane "
                             f"'{campaign.lane}'",
                             hint=f"spec-ab run --resume {opts.resume.run_dir}")
        return
    if campaign.sharded and opts.fail_on:
        raise UsageError(
            "--fail-on judges a verdict, and a shard has none: the verdict pools every "
            "lane's shard", hint="spec-ab report SHARD_DIR_A SHARD_DIR_B --fail-on "
            f"{opts.fail_on[0]} (after every lane has run)")
    if not campaign.lane_chosen:
        raise UsageError(
            f"{shown} is sharded over lanes ({', '.join(campaign.lane_names)}): "
            "run one lane's shard per machine with --lane",
            hint=f"spec-ab run {shown} --lane {campaign.lane_names[0]}")
    refuse_thin_tails(campaign)


def run_campaign(
    campaign: Campaign,
    campaign_text: bytes | None,
    out_root: Path | None,
    rt: Runtime,
    opts: RunOptions | None = None,
) -> RunResult:
    """Run a campaign behind every guard `spec-ab run` has, in its order:

    0. refuse a campaign that cannot run as asked (`refuse_unrunnable`, exit 2);
    1. refuse leftovers of earlier runs (first: a leftover server also explains a busy
       port the preflight would report);
    2. the preflight, unless `skip_preflight` (any problem: PreflightError, exit 3);
    3. create the run directory (freeze the rule, write the manifest) under `out_root`
       (default: the campaign's results_dir), or continue `resume` (from `reopen_run`);
    4. a new run: boot each distinct launch once, up to ready (`boot_check`; not an
       external launch): one that does not become ready raises PreflightError (exit 3),
       the folder just registered removed, nothing measured;
    5. `on_start(store)`, then `execute`.

    `opts` (`RunOptions`, keyword-only fields, each said there) is built once by the
    caller and passed on as it is. The lane lock is taken first and held to the end, so
    a run refused because another holds the lane leaves nothing behind. A results folder
    that cannot be written (disk full, read-only, not a folder) raises `StorageError`
    (exit 3) naming the file; what was measured is in the journal (`--resume` continues;
    `redo_invalid` also re-measures the pairs left invalid, whole, as a new attempt).

    `campaign_text` is the campaign file as registered (default: its source file's bytes).
    An interrupt raises `Interrupted` saying how to resume. `find_leftovers` and
    `preflight` default to the real ones.
    """
    opts = opts or RunOptions()
    refuse_unrunnable(campaign, opts)
    resume = opts.resume
    holder = resume.run_id if resume is not None else "(starting)"
    with lanelock.hold(campaign.lane, holder, lock_dir=rt.lock_dir) as name_holder:
        created: list[RunStore] = []
        try:
            return _run_locked(campaign, campaign_text, out_root, rt, opts, name_holder,
                               created)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            run_dir = (resume or (created[0] if created else None))
            raise storage_error(exc, "the results",
                                run_dir=run_dir.run_dir if run_dir else None) from exc


def _guards(campaign: Campaign, opts: RunOptions) -> None:
    """Leftovers first, then the preflight (unless skipped)."""
    refuse_leftovers(campaign, on_note=opts.on_note, find=opts.find_leftovers)
    if opts.skip_preflight:
        return
    preflight = opts.preflight
    if preflight is None:
        from campaign.run.checks.preflight import preflight as real_preflight

        preflight = real_preflight
    _, problems = preflight(campaign)
    if problems:
        raise PreflightError("preflight failed:\n" + "\n".join(f"  - {p}" for p in problems),
                             hint=f"spec-ab check {opts.shown_as or campaign.source} shows "
                             "details")


def _run_locked(campaign: Campaign, campaign_text: bytes | None, out_root: Path | None,
                rt: Runtime, opts: RunOptions, name_holder: Callable[[str], None],
                created: list[RunStore]) -> RunResult:
    _guards(campaign, opts)
    if opts.resume is None:
        root = out_root or campaign.resolve(campaign.results_dir)
        if campaign_text is None:
            if campaign.source is None:
                raise ValueError("campaign_text is needed for a campaign without a file")
            campaign_text = campaign.source.read_bytes()
        store = start_run(campaign, campaign_text, root, rt, opts.sign_key, opts.exploratory)
        created.append(store)
    else:
        store = opts.resume
    # under the lane lock, so no session of this run is writing its journal: a line a
    # crash tore is set aside (its bytes kept beside the journal), and said
    torn = None if opts.resume is None else damage.set_aside_torn(store.run_dir)
    if torn is not None:
        opts.on_note(torn.note(store.journal_path))
    name_holder(store.run_id)
    if opts.resume is None and opts.boot_check:
        _boot_check(campaign, store, rt, opts)
    if opts.on_start is not None:
        opts.on_start(store)
    try:
        return execute(campaign, store, rt, locked=True, redo_invalid=opts.redo_invalid,
                       set_aside=None if torn is None else torn.kept.name)
    except Interrupted as exc:
        cut = ("" if exc.pair is None else f"; the interrupted pair {exc.pair} will be "
               "measured again from its start")
        raise Interrupted(f"interrupted; measurements so far are kept{cut}. Continue with:\n"
                          f"  spec-ab run --resume {store.run_dir}") from None


def _boot_check(campaign: Campaign, store: RunStore, rt: Runtime, opts: RunOptions) -> None:
    """Each distinct launch booted once before anything is measured (`check --boot`'s
    machinery, under the run's lane lock): a launch that cannot boot is found in minutes,
    not after a whole control arm. The launch of the first slot is not: it boots at once
    for its pair, before anything is measured, and a boot of a large model is minutes of
    the night. On a failure or an interrupt the folder just registered is removed (nothing
    in it was measured)."""
    from campaign.run.checks import bootcheck

    shown = opts.shown_as or campaign.source
    pre = campaign.preregistration
    first = plan_slots(pre.pairs, campaign.arm_names, pre.order, pre.seed,
                       campaign.lane_index)[0].arm
    try:
        boots = bootcheck.boot_all(campaign, server_factory=rt.server_factory, http=rt.http,
                                   clock=rt.monotonic, sleep=rt.sleep, on_boot=opts.on_boot,
                                   on_done=opts.on_booted, locked=True, skip_external=True,
                                   skip_arms=(first,))
    except KeyboardInterrupt:
        shutil.rmtree(store.run_dir, ignore_errors=True)
        raise Interrupted("boot check interrupted: every server it started is stopped; "
                          "nothing was measured and the run's folder is removed") from None
    except BaseException:
        shutil.rmtree(store.run_dir, ignore_errors=True)
        raise
    failed = [b for b in boots if not b.ok]
    if failed:
        shutil.rmtree(store.run_dir, ignore_errors=True)
        arms = ", ".join(", ".join(b.arms) for b in failed)
        raise PreflightError(
            f"boot check: {len(failed)} of {len(boots)} launch(es) did not become ready "
            f"({arms}); nothing was measured and the run's folder is removed",
            hint=f"fix the launch (the log lines above), then `spec-ab run {shown}` again "
            f"(`spec-ab check {shown} --boot` boots each launch alone; --skip-boot-check "
            "starts measuring without this check)")


def refuse_leftovers(campaign: Campaign, *, on_note: Callable[[str], None] = _no_note,
                     find: Callable[[Campaign], Scan] | None = None) -> None:
    """PreflightError when containers or processes of dead runs are still around
    (`cleanup.refuse_leftovers`; imported here late, with docker)."""
    from campaign.run.guards import cleanup

    cleanup.refuse_leftovers(campaign, on_note=on_note, find=find)


def reopen_run(run_dir: Path, rt: Runtime) -> tuple[RunStore, Campaign]:
    """Reopen a run for `--resume`: the frozen campaign file, never the edited one. A
    journal damaged past a torn last line is refused (`damage.refuse_damage`, exit 2)."""
    store = RunStore.open(run_dir, clock=rt.clock)  # its journal and registered line
    reading = jr.read(run_dir)
    events = reading.events
    try:
        manifest = read_manifest(run_dir / "manifest.json")
    except ResultsError:
        manifest = {}  # it only describes the machine; resuming does not need it
    lane = jr.recorded_lane(events, manifest)
    campaign = load_campaign(run_dir / "campaign.yaml", base_dir=jr.base_dir_of(events),
                             lane=lane)
    if jr.finished(events):
        raise ResultsError(f"{run_dir} is already complete; nothing to resume",
                           hint=f"spec-ab report {run_dir}")
    damage.refuse_damage(run_dir, reading)
    return store, campaign


def execute(campaign: Campaign, store: RunStore, rt: Runtime, *, locked: bool = False,
            redo_invalid: bool = False, set_aside: str | None = None) -> RunResult:
    """Run every pair not yet done. Holds the lane lock for the whole run (unless the
    caller holds it: `locked`). `redo_invalid`: pairs left invalid by an earlier session
    (a dead server, invalid passes) are measured again, whole, as a new pair attempt.
    `set_aside`: the file a torn last line was moved to (`run_start` records it)."""
    pre = campaign.preregistration
    slots = plan_slots(pre.pairs, campaign.arm_names, pre.order, pre.seed,
                       campaign.lane_index)
    by_pair: dict[int, list[Slot]] = {}
    for s in slots:
        by_pair.setdefault(s.pair, []).append(s)
    result = RunResult(store.run_dir, pre.pairs, [], {})
    events = store.read_journal()
    status = jr.pair_status(events)
    lock = (contextlib.nullcontext() if locked
            else lanelock.hold(campaign.lane, store.run_id, lock_dir=rt.lock_dir))
    with lock, marked_children(store.run_id, campaign.lane):
        # passes.csv follows the journal: a session stopped between the two (a full disk,
        # a kill) left it behind, and it is rebuilt before anything else is measured.
        store.rebuild_passes_csv()
        arrivals.write_schedules(store.run_dir, campaign)  # a resume: the same bytes, or exit 2
        store.journal("run_start", pid=os.getpid(), host=socket.gethostname(),
                      resumed=bool(status), lane=campaign.lane,
                      **_signed(store.run_dir),
                      **({"redo_invalid": True} if redo_invalid else {}),
                      **({"torn_set_aside": set_aside} if set_aside else {}))
        if redo_invalid:
            status = _reopened_invalid(events, status)
        eta = _Eta(rt, len(slots), sum(len(by_pair[p]) for p, (_, st) in status.items()
                                       if st != "started"))
        measured: dict[int, _PairOutcome] = {}
        looked = jr.looks_of(events)
        result.stopped_after = sequential.decided_before(events)
        for pair, pair_slots in by_pair.items():
            if result.stopped_after is not None and pair > result.stopped_after:
                break
            attempt, state = status.get(pair, (0, "new"))
            if state == "done":
                bad = jr.invalid_passes_of(events, pair, attempt)
                if bad:
                    result.pairs_invalid[pair] = "invalid pass(es): " + ", ".join(bad)
                else:
                    result.pairs_valid.append(pair)
            elif state == "invalid":
                result.pairs_invalid[pair] = "invalid in an earlier session"
            else:
                measured[pair] = _measure_pair(campaign, store, rt, pair, attempt,
                                               pair_slots, redo=state == "started", eta=eta)
                _settle(result, pair, measured[pair])
            # a look due after this pair and not yet taken (a session may have stopped
            # between the pair and its look) is taken now, in order
            if pair not in looked and sequential.take_look(campaign, store, rt, pair):
                result.stopped_after = pair
        budget = pre.gates.redo_budget - len(jr.of_kind(events, "pair_redo"))
        if result.stopped_after is None:
            _redo_lane_faults(campaign, store, rt, by_pair, measured, result, budget, eta)
        result.pairs_valid.sort()
        store.finish(complete=result.complete, pairs_valid=result.pairs_valid,
                     pairs_invalid=result.pairs_invalid,
                     **({"stopped_after": result.stopped_after}
                        if result.stopped_after is not None else {}))
    return result


def _reopened_invalid(events: jr.Events, status: dict[int, tuple[int, jr.PairState]]
                      ) -> dict[int, tuple[int, jr.PairState]]:
    """`--redo-invalid`: a pair left invalid (whole, or by an invalid pass) is measured
    again like one cut in the middle."""
    return {p: (a, "started" if st == "invalid"
                or (st == "done" and jr.invalid_passes_of(events, p, a)) else st)
            for p, (a, st) in status.items()}


@dataclass
class _Eta:
    """The campaign's time left, from the slots measured in this session."""

    rt: Runtime
    total: int
    already: int
    """Slots settled by earlier sessions."""
    done: int = 0
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.rt.monotonic()

    def slots_done(self, n: int) -> None:
        self.done += n
        elapsed = self.rt.monotonic() - self.started
        remaining = max(0, self.total - self.already - self.done)
        self.rt.progress("eta", elapsed_s=elapsed, eta_s=elapsed / self.done * remaining)


def _redo_lane_faults(campaign: Campaign, store: RunStore, rt: Runtime,
                      by_pair: dict[int, list[Slot]], measured: dict[int, _PairOutcome],
                      result: RunResult, budget: int, eta: _Eta) -> None:
    """The night's redos: at the end of the slots, each pair this session left invalid by
    the lane alone (`_PairOutcome.lane_only`) is measured again whole (a new pair attempt,
    both arms), lowest pair first, until `budget` pairs are spent, before the campaign is
    called short. A pair with a failure of the candidate's own is never redone: it counts
    against the candidate. Each redo is journaled (`pair_redo`) with its cause."""
    while budget > 0:
        pair = next((p for p in sorted(result.pairs_invalid)
                     if p in measured and measured[p].lane_only), None)
        if pair is None:
            return
        budget -= 1
        done = measured.pop(pair)
        store.journal("pair_redo", pair=pair, pair_attempt=done.attempt + 1,
                      cause=done.cause, budget_left=budget)
        rt.progress("pair_redo", pair=pair, reason=done.cause, budget_left=budget,
                    budget=campaign.preregistration.gates.redo_budget)
        del result.pairs_invalid[pair]
        measured[pair] = _measure_pair(campaign, store, rt, pair, done.attempt, by_pair[pair],
                                       redo=True, eta=eta)
        _settle(result, pair, measured[pair])


def _measure_pair(campaign: Campaign, store: RunStore, rt: Runtime, pair: int, attempt: int,
                  pair_slots: list[Slot], *, redo: bool, eta: _Eta) -> _PairOutcome:
    """One pair, redone at once (up to `gates.pair_retries` times) when the lane's fault
    cut it (the control's server failed, /metrics stopped answering). The candidate's
    server failing is its own failure: the pair is invalid, never redone."""
    tries_left = campaign.preregistration.gates.pair_retries
    while True:
        attempt += 1
        outcome = _run_pair(campaign, store, rt, pair, attempt, pair_slots, redo=redo)
        eta.slots_done(len(pair_slots))
        if outcome.died is None or outcome.died_fault == "own" or tries_left == 0:
            return outcome
        tries_left -= 1
        redo = True  # the redo of a pair cut by a fault
        rt.progress("pair_redo", pair=pair, reason=outcome.died)


def _settle(result: RunResult, pair: int, outcome: _PairOutcome) -> None:
    if outcome.died is not None:
        result.pairs_invalid[pair] = outcome.died
    elif outcome.invalid_passes:
        # Measured to the end, but some cells lose this pair: the campaign is
        # incomplete (exit 4) and the report counts the pair as left out there.
        result.pairs_invalid[pair] = "invalid pass(es): " + ", ".join(outcome.invalid_passes)
    else:
        result.pairs_valid.append(pair)


@dataclass
class _PairOutcome:
    attempt: int
    died: str | None = None
    """Why the pair is invalid (server died / restarted mid-pass), else None."""
    died_fault: Fault | None = None
    invalid: list[InvalidPass] = field(default_factory=list)
    """Measured passes left invalid after their retries."""

    @property
    def invalid_passes(self) -> list[str]:
        return [p.name for p in self.invalid]

    @property
    def lane_only(self) -> bool:
        """Invalid, and only by the lane: no failure is the candidate's own."""
        faults = [p.fault for p in self.invalid] + ([self.died_fault] if self.died else [])
        return bool(faults) and all(f == "lane" for f in faults)

    @property
    def cause(self) -> str:
        """Why the pair is invalid, in words (for the journal and the live display)."""
        if self.died is not None:
            return self.died
        return "; ".join(f"{p.name}: {p.cause}" for p in self.invalid)


def _run_pair(campaign: Campaign, store: RunStore, rt: Runtime, pair: int, pair_attempt: int,
              pair_slots: list[Slot], *, redo: bool) -> _PairOutcome:
    """Every arm of one pair, back to back, journaled as one attempt."""
    store.journal("pair_start", pair=pair, pair_attempt=pair_attempt, redo=redo)
    rt.progress("pair_start", pair=pair, pairs=campaign.preregistration.pairs,
                pair_attempt=pair_attempt)
    outcome = _PairOutcome(pair_attempt)
    try:
        for slot in pair_slots:
            check_cancel(rt)
            outcome.invalid += run_slot_guarded(campaign, store, rt, slot, pair_attempt)
    except PairInvalid as exc:
        outcome.died, outcome.died_fault = str(exc), exc.fault
        store.journal("pair_invalid", pair=pair, pair_attempt=pair_attempt, reason=outcome.died,
                      fault=exc.fault)
        rt.progress("pair_invalid", pair=pair, reason=outcome.died)
        return outcome
    except Interrupted as exc:
        store.journal("interrupted", pair=pair, pair_attempt=pair_attempt)
        exc.pair = pair
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


