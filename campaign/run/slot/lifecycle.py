"""One slot, an arm's turn in one pair: boot its server, run its passes between /metrics
scrapes, judge and journal each pass (`passes.check_pass`, `journal.pass_rows`), stop the server.

The runner (`runner.py`) orchestrates pairs and sessions; this module measures what one
slot of the schedule holds. A server that fails under a pass raises `PairInvalid`: the
pair cannot count and the runner decides whether to redo it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from campaign import secrets
from campaign.campaignfile import Campaign, DockerLaunch, ExternalLaunch
from campaign.campaignfile.launch import LaunchModel
from campaign.campaignfile.schedule import Slot
from campaign.errors import Interrupted, ServerError
from campaign.markers import LABEL_LANE, LABEL_PID, run_labels
from campaign.results import journal as jr
from campaign.results.journal import iso
from campaign.results.store import RunStore
from campaign.run.guards import portguard
from campaign.run.measure import (
    fidelity,
    levelcut,
    loadgen,
    metrics,
    records,
    sending,
    turns,
)
from campaign.run.measure.passes import (
    ArmPass,
    Fault,
    InvalidPass,
    PassCheck,
    ServerFault,
    arm_passes,
    check_pass,
)
from campaign.run.measure.replay import KINDS as REPLAYED
from campaign.run.measure.replay import TIMED
from campaign.run.runtime import Runtime, cancellable_sleep, check_cancel
from campaign.run.slot.readiness import wait_ready
from campaign.run.slot.serverwatch import captures_after, scrape, unhealthy
from campaign.servers import ArmContext, Server
from campaign.servers.protocol import serving
from campaign.textfiles import atomic_write


class PairInvalid(Exception):
    """This pair cannot count (server died mid-pass...); go on with the next pair."""

    def __init__(self, reason: str, fault: Fault) -> None:
        super().__init__(reason)
        self.fault = fault


def _pid() -> int:
    return os.getpid()


@dataclass(frozen=True)
class LiveSlot:
    """A slot while its server runs: what every pass of it shares."""

    campaign: Campaign
    store: RunStore
    rt: Runtime
    server: Server
    client: httpx.Client
    slot: Slot
    arm_dir: Path
    pair_attempt: int
    started_at: str


def run_slot(campaign: Campaign, store: RunStore, rt: Runtime, slot: Slot,
             pair_attempt: int) -> list[InvalidPass]:
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
    rt.progress("slot_start", pair=slot.pair, arm=slot.arm, phase="boot")
    rt.doing = f"the {slot.arm} server of pair {slot.pair} (booting)"
    t0 = rt.monotonic()
    boot_s = 0.0
    aiperf_s = fidelity_s = 0.0
    invalid: list[InvalidPass] = []
    squatter = portguard.busy_before_boot(launch)
    if squatter is not None:
        raise PairInvalid(squatter, "lane")
    try:
        with captures_after(campaign, ctx.log_path, arm_dir), serving(server), \
                rt.http() as client:
            boot_s = _ready(campaign, store, rt, slot, server, client)
            rt.progress("slot_phase", pair=slot.pair, arm=slot.arm, phase="ready",
                        boot_s=boot_s)
            live = LiveSlot(campaign, store, rt, server, client, slot, arm_dir,
                            pair_attempt, started_at)
            for ap in arm_passes(campaign, slot.arm, server.base_url, store.run_dir):
                check_cancel(rt)
                spent, check = _run_pass(live, ap)
                aiperf_s += spent
                fault = check.fault(slot.arm)
                if fault is not None and ap.measured:
                    invalid.append(InvalidPass(f"{slot.arm}/{ap.plan.name}", fault,
                                               "; ".join(check.all_problems())))
            if campaign.workloads.fidelity is not None:
                f0 = rt.monotonic()
                invalid += _fidelity_pass(live)
                fidelity_s = rt.monotonic() - f0
            facts = server.facts()  # before the stop, like every other look at the server
    except ServerError as exc:
        store.journal("slot_failed", slot=slot.index, pair=slot.pair, arm=slot.arm,
                      reason=str(exc))
        raise
    store.update_manifest("servers", {f"{slot.pair:02d}/{slot.arm}": facts})
    wall = rt.monotonic() - t0
    store.journal("slot_done", slot=slot.index, pair=slot.pair, arm=slot.arm,
                  wall_s=round(wall, 3), boot_s=round(boot_s, 3), aiperf_s=round(aiperf_s, 3),
                  fidelity_s=round(fidelity_s, 3),
                  overhead_s=round(wall - boot_s - aiperf_s - fidelity_s, 3))
    rt.progress("slot_done", pair=slot.pair, arm=slot.arm, wall_s=wall)
    return invalid


def _ready(campaign: Campaign, store: RunStore, rt: Runtime, slot: Slot, server: Server,
           client: httpx.Client) -> float:
    """Wait until the arm's server is ready, check that what answers is that server
    (`portguard`: a mismatch is a lane fault, `PairInvalid`) and journal `server_ready`
    (with an external server's identity the first time its arm is ready). Returns the
    seconds the boot took."""
    launch = campaign.launches[slot.arm]
    external = isinstance(launch, ExternalLaunch)
    recorded = (portguard.recorded_identity(store.read_journal(), slot.arm)
                if external else None)
    try:
        boot_s = wait_ready(
            server, launch.readiness, model=campaign.workloads.model,
            endpoint_type=campaign.workloads.endpoint_type, arm=slot.arm,
            client=client, clock=rt.monotonic, sleep=cancellable_sleep(rt))
    except ServerError:
        if recorded is not None:  # another server behind the URL fails readiness too
            _same_identity(launch, slot, server, client, recorded)
        raise
    squatter = (portguard.foreign_listener(launch, server)
                or (portguard.container_mismatch(launch, server)
                    if isinstance(launch, DockerLaunch) else None))
    if squatter is not None:
        raise PairInvalid(squatter, "lane")
    identity = (_same_identity(launch, slot, server, client, recorded)
                if external else None)
    store.journal("server_ready", slot=slot.index, boot_s=round(boot_s, 3),
                  **({"identity": identity} if identity and recorded is None else {}))
    return boot_s


def _same_identity(launch: LaunchModel, slot: Slot, server: Server, client: httpx.Client,
                   recorded: portguard.Identity | None) -> portguard.Identity | None:
    """The external server's identity now; `PairInvalid` (the lane's) when it is not the
    one recorded for the arm."""
    now = portguard.fetch_identity(client, server.base_url, launch.readiness.models_path)
    changed = portguard.identity_change(slot.arm, recorded, now)
    if changed is not None:
        raise PairInvalid(changed, "lane")
    return now


def _run_pass(live: LiveSlot, ap: ArmPass) -> tuple[float, PassCheck]:
    """One pass with its retries. Returns (AIPerf's wall time, the check of its last
    attempt). Raises PairInvalid when the server failed under it."""
    attempts = 1 + (live.campaign.preregistration.gates.retries if ap.measured else 0)
    aiperf_s = 0.0
    for attempt in range(1, attempts + 1):
        check_cancel(live.rt)
        wall_s, check, died = _pass_attempt(live, ap, attempt)
        aiperf_s += wall_s
        if died is not None:
            raise PairInvalid(died.reason, check.fault(live.slot.arm) or "lane")
        if check.valid or not ap.measured:
            break
    return aiperf_s, check


def _fidelity_pass(live: LiveSlot) -> list[InvalidPass]:
    """The arm's fidelity pass with its retries, between two /metrics scrapes and
    followed by the server's health check, like any measured pass: the pass left invalid
    after its retries, or none. Raises PairInvalid when the server failed under it."""
    attempts = 1 + live.campaign.preregistration.gates.retries
    base = live.server.base_url
    for attempt in range(1, attempts + 1):
        check_cancel(live.rt)
        name = fidelity.pass_name(attempt)
        live.rt.doing = (f"the fidelity pass ({name}, {live.slot.arm}, pair "
                         f"{live.slot.pair}), then the server")
        before = scrape(live.client, base, live.arm_dir / "metrics" / f"{name}-before.prom")
        health = _HealthAfter(live, name, before)
        check = fidelity.run_attempt(live, attempt, health)
        if health.died is not None:
            raise PairInvalid(health.died.reason, check.fault(live.slot.arm) or "lane")
        if check.valid:
            return []
    return [InvalidPass(f"{live.slot.arm}/{fidelity.WORKLOAD}",
                        check.fault(live.slot.arm) or "lane", "; ".join(check.all_problems()))]


@dataclass
class _HealthAfter:
    """What the server did wrong under a pass that is not AIPerf's, found after it: the
    /metrics scrape after it against the one before (`before`), /health."""

    live: LiveSlot
    name: str
    before: metrics.Snapshot | None
    died: ServerFault | None = None

    def __call__(self) -> ServerFault | None:
        after = scrape(self.live.client, self.live.server.base_url,
                       self.live.arm_dir / "metrics" / f"{self.name}-after.prom")
        self.died = _server_fault(self.live, self.name, self.before, after)[0]
        return self.died


def _pass_attempt(live: LiveSlot, ap: ArmPass,
                  attempt: int) -> tuple[float, PassCheck, ServerFault | None]:
    """One AIPerf run of a pass between two /metrics scrapes, judged and journaled.
    Returns (AIPerf's wall time, its check, what the server did wrong under it or None)."""
    rt, slot, server = live.rt, live.slot, live.server
    name = ap.plan.name if attempt == 1 else f"{ap.plan.name}.retry{attempt - 1}"
    mdir = live.arm_dir / "metrics"
    rt.progress("slot_phase", pair=slot.pair, arm=slot.arm, phase=name)
    before = scrape(live.client, server.base_url, mdir / f"{name}-before.prom")
    per_level = ap.plan.requests_per_level
    rt.progress("pass_start", pair=slot.pair, arm=slot.arm, name=name,
                measured=ap.measured, base_url=server.base_url,
                levels=list(ap.level_labels),
                requests=(sum(ap.plan.level_requests) or
                          (per_level * len(ap.plan.concurrency) if per_level else None)))
    rt.doing = (f"AIPerf ({name}, {slot.arm}, pair {slot.pair}; up to "
                f"{loadgen.SIGINT_GRACE_S:g} s to write its partial results), then the "
                "server")
    ticker = (levelcut.Ticker(rt.http, server.base_url)
              if ap.measured and len(ap.plan.concurrency) > 1 and before is not None else None)
    ticking: AbstractContextManager[object] = ticker if ticker is not None else nullcontext()
    with ticking:
        outcome = rt.run_pass(ap.plan, live.arm_dir / "passes" / name, cancel=rt.cancel)
    if outcome.interrupted or rt.cancel.is_set():
        live.store.journal("pass_interrupted", slot=slot.index, name=name)
        raise Interrupted("interrupted during a pass; everything measured so far is kept")
    after = scrape(live.client, server.base_url, mdir / f"{name}-after.prom")
    died, delta = _server_fault(live, name, before, after)
    cuts = (_level_cuts(ap, mdir / name, before, after, ticker.ticks, outcome)
            if ticker is not None and delta is not None and before is not None
            and after is not None else [])
    if delta is not None:  # throughput on the server's token count, where it counts
        server_throughput(outcome.levels, delta, cuts)
    if ap.measured and (slo := live.campaign.preregistration.slo) is not None:
        for lv in outcome.levels:
            lv.metrics.update(records.slo_metrics(lv, slo.bounds()))
    extra = _replayed(ap, outcome) | _turns(ap, outcome, before, after)
    # open loop: a request queued for its first token past capacity is what is measured
    first = ap.plan.kind not in TIMED
    waits = ({lv.concurrency: w for lv in outcome.levels
              if (w := records.longest_wait_s(lv, first_token=first)) is not None}
             if ap.measured else None)
    check = check_pass(ap, outcome, live.campaign.preregistration.gates, died, waits)
    summary = _summary(outcome, ap)
    _journal_pass(live, ap, name, attempt, outcome, check, delta, cuts,
                  scraped=before is not None or after is not None, extra=extra)
    rt.progress("pass_done", pair=slot.pair, arm=slot.arm, name=name, valid=check.valid,
                measured=ap.measured, summary=summary, problems=check.all_problems())
    return outcome.wall_s, check, died


def _replayed(ap: ArmPass, outcome: loadgen.PassOutcome) -> dict[str, Any]:
    """A pass replaying a file (`replay`): `{"schedule_sha256": …}` of the bytes replayed
    (a rate level's or trace's schedule, a session class's file; {}: not one), and for a
    schedule each level's send figures against it (`sending`)."""
    file = ap.plan.input_file
    if ap.plan.kind not in REPLAYED or file is None:
        return {}
    try:
        data = file.read_bytes()
    except OSError:
        return {}
    if ap.plan.kind in TIMED:
        stamps = sending.timestamps_ms(file)
        for lv in outcome.levels:
            lv.metrics.update(sending.send_figures(lv, stamps))
    return {"schedule_sha256": hashlib.sha256(data).hexdigest()}


def _turns(ap: ArmPass, outcome: loadgen.PassOutcome, before: Scrape,
           after: Scrape) -> dict[str, Any]:
    """A sessions pass's per-turn figures (`turns`), `{"turns": {class: [entry per turn
    index]}}`, acceptance by turn where the server counts it ({}: not a sessions pass, or
    no records)."""
    if ap.plan.kind != "sessions" or not outcome.levels:
        return {}
    lv = outcome.levels[0]
    by_turn = turns.turn_records(records.records_path(lv), lv.phase)
    if not by_turn:
        return {}
    try:
        accepted = (turns.turn_acceptance(before, after)
                    if before is not None and after is not None else None)
    except metrics.CounterReset:  # the server restarted: `_server_fault` says so
        accepted = None
    return {"turns": {ap.spec_level: turns.turn_entries(by_turn, accepted)}}


Scrape = metrics.Snapshot | None


def _server_fault(live: LiveSlot, name: str, before: Scrape,
                  after: Scrape) -> tuple[ServerFault | None, metrics.PassDelta | None]:
    """(what the server did wrong under the pass or None, its counters' change over the
    pass or None when they were not read)."""
    server = live.server
    died = None
    if not server.alive():
        died = ServerFault(f"server {server.exit_status()} during {name}")
    elif after is None and before is not None:
        # It answered /metrics before the pass: it stopped answering during it. A
        # server that never answers has no server counters: figures n/a, pair valid.
        died = ServerFault(f"server stopped answering /metrics during {name}", scrape=True)
    else:
        why = unhealthy(live.client, server, live.campaign.launches[live.slot.arm], name)
        died = ServerFault(why) if why else None
    delta = None
    if before is not None and after is not None:
        try:
            delta = metrics.pass_delta(before, after)
        except metrics.CounterReset as exc:
            died = ServerFault(f"server restarted during {name} ({exc})")
    return died, delta


def server_throughput(levels: list[loadgen.LevelResult], delta: metrics.PassDelta,
                      cuts: list[levelcut.LevelCut]) -> None:
    """Each level's throughput on the server's token count: with the level's own ratio
    when the pass was cut exactly at every level, else one ratio for the whole pass."""
    own = {c.concurrency: c for c in cuts if c.exact}
    if levels and all(lv.concurrency in own for lv in levels):
        for lv in levels:
            metrics.add_server_throughput([lv.metrics],
                                          own[lv.concurrency].delta.tokens.generation_tokens)
        return
    metrics.add_server_throughput((lv.metrics for lv in levels), delta.tokens.generation_tokens)


def _level_cuts(ap: ArmPass, prefix: Path, before: metrics.Snapshot,
                after: metrics.Snapshot, ticks: list[levelcut.Tick],
                outcome: loadgen.PassOutcome) -> list[levelcut.LevelCut]:
    """The pass's counters cut at its level boundaries (`levelcut`), when every planned
    level left its request times; the /metrics text of each inner cut taken while nothing
    moved is kept beside the pass's own scrapes (`<pass>-after-<level>.prom`)."""
    windows = {lv.concurrency: w for lv in outcome.levels
               if (w := records.request_window(records.records_path(lv), lv.phase)) is not None}
    if set(windows) != set(ap.plan.concurrency):
        return []
    cuts = levelcut.cut(before, after, ticks, windows)
    labels = dict(zip(ap.plan.concurrency, ap.level_labels, strict=True))
    by_time = {t.received: t for t in ticks}
    for c in cuts[:-1]:
        tick = by_time.get(c.end) if c.end is not None else None
        if tick is not None and tick.snapshot.text:  # an idle tick keeps its text
            atomic_write(prefix.with_name(f"{prefix.name}-after-{labels[c.concurrency]}.prom"),
                         tick.snapshot.text)
    return cuts


def _figure_rows(ap: ArmPass, check: PassCheck,
                 cuts: list[levelcut.LevelCut]) -> list[jr.LevelRows]:
    """Each level's spec-decode figures as rows of that level: invalid with the pass, with
    the level, or when a boundary of it could not be cut exactly."""
    labels = dict(zip(ap.plan.concurrency, ap.level_labels, strict=True))
    return [jr.LevelRows(labels[c.concurrency], c.delta.as_metrics(),
                         [*check.problems, *check.level_problems.get(c.concurrency, []),
                          *c.reasons])
            for c in cuts]


def _journal_pass(live: LiveSlot, ap: ArmPass, name: str, attempt: int,
                  outcome: loadgen.PassOutcome, check: PassCheck,
                  delta: metrics.PassDelta | None, cuts: list[levelcut.LevelCut], *,
                  scraped: bool, extra: Mapping[str, Any] | None = None) -> None:
    """The pass's event, with its tidy rows when it is measured, and `extra`: the sha256
    of the schedule it replayed, a sessions pass's turns; passes.csv follows."""
    figures = delta.as_metrics() if delta is not None else None
    rows: list[jr.PassRow] = []
    if ap.measured:
        place = jr.PassPlace(live.store.run_id, live.slot.pair, live.pair_attempt,
                             live.slot.arm, live.slot.index, live.started_at, ap.workload,
                             attempt)
        errors = {lv.concurrency: records.level_log_se(lv) for lv in outcome.levels}
        rows = jr.pass_rows(place, [*check.level_rows(outcome, errors),
                                    *_figure_rows(ap, check, cuts)], figures,
                            figures_level=ap.spec_level, figures_reasons=check.problems,
                            valid=check.valid)
    live.store.journal(
        "pass", slot=live.slot.index, pair=live.slot.pair, arm=live.slot.arm, name=name,
        workload=ap.workload, attempt=attempt, valid=check.valid,
        problems=check.all_problems(),
        **({"fault": fault} if (fault := check.fault(live.slot.arm)) else {}),
        aiperf_s=round(outcome.wall_s, 3), command=outcome.command,
        returncode=outcome.returncode, summary=_summary(outcome, ap),
        spec_decode=figures or None,
        implied_a_method=(delta.spec.implied_a_method
                          if delta is not None and delta.spec is not None else None),
        server_metrics=scraped,
        level_cuts=[{"level": c.concurrency, "from": c.start, "to": c.end, "exact": c.exact}
                    for c in cuts] or None,
        rows=[dataclasses.asdict(r) for r in rows],
        **(extra or {}),
    )
    live.store.rebuild_passes_csv()


def _summary(outcome: loadgen.PassOutcome, ap: ArmPass) -> dict[str, float]:
    """Throughput per level, for the journal and the progress line (a replayed level by
    its label, `r4`: its concurrency is only AIPerf's cap)."""
    own = dict(zip(ap.plan.concurrency, ap.level_labels, strict=True))
    return {(own[lv.concurrency] if ap.plan.kind in REPLAYED and lv.concurrency in own
             else f"c{lv.concurrency}"):
            round(lv.metrics.get("output_token_throughput", 0.0), 2) for lv in outcome.levels}
