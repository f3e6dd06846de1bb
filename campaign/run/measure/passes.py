"""The passes of one arm, as load-generator plans (warm-ups, the knee sweep, one
agent-fixture pass per content class, one pass per rate level or trace replaying its
schedule file, one per session class), and whether a pass that ran can be used
(`check_pass`). Pure; shared by the runner and `--dry-run`.

Each plan carries what AIPerf is told for its cells (`Workloads.requests_in`): a class's
own request count; a knee's one count (the largest of its levels, what a sweep sends
every level), and each level's own when they differ (`level_requests`: a one-process
knee's phases)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from campaign.campaignfile import CONTROL, Campaign, Gates, trace
from campaign.results.journal import LevelRows
from campaign.run.measure import arrivals, levelchecks, sending
from campaign.run.measure.loadgen import PassOutcome, PassPlan
from campaign.run.measure.replay import TIMED


@dataclass(frozen=True)
class ArmPass:
    plan: PassPlan
    workload: str
    """`warmup`, `knee`, `agentfix`, `rate`, `trace` or `sessions`."""
    level_labels: tuple[str, ...]
    """Level of each concurrency of the plan (`c1`, `c4`, … or the content class)."""
    spec_level: str
    """Level the pass's spec-decode figures are filed under (`all` for a knee sweep)."""

    @property
    def measured(self) -> bool:
        return self.workload != "warmup"


def arm_passes(campaign: Campaign, arm: str, base_url: str,
               run_dir: Path | None = None) -> list[ArmPass]:
    """The arm's passes in the order they run; a rate level replays its schedule under
    `run_dir` (`arrivals.write_schedules`; None: `<run>`, for a dry run)."""
    wl = campaign.workloads
    gates = campaign.preregistration.gates
    seed = campaign.preregistration.seed
    tokenizer = campaign.resolve(wl.tokenizer)
    common = dict(base_url=base_url, model=wl.model, tokenizer=tokenizer,
                  endpoint_type=wl.endpoint_type, streaming=wl.streaming,
                  timeout_s=gates.pass_timeout_s)
    out: list[ArmPass] = []
    for i, w in enumerate(campaign.warmups(arm), start=1):
        plan = PassPlan(name=f"warmup-{i}", kind="warmup", concurrency=(w.concurrency,),
                        requests_per_level=w.requests, duration_s=None,
                        input_tokens=w.input_tokens, output_tokens=w.output_tokens,
                        input_file=None, seed=seed + 1000 + i, **common)  # type: ignore[arg-type]
        out.append(ArmPass(plan, "warmup", (f"c{w.concurrency}",), "all"))
    if wl.knee:
        k = wl.knee
        plan = PassPlan(name="knee", kind="knee", concurrency=tuple(k.concurrency),
                        requests_per_level=k.requests_each_level, duration_s=k.duration_s,
                        input_tokens=k.input_tokens, output_tokens=k.output_tokens,
                        input_file=None, seed=seed, one_process=k.one_process,
                        level_requests=k.level_requests,
                        **common)  # type: ignore[arg-type]
        out.append(ArmPass(plan, "knee", tuple(k.levels), "all"))
    if wl.agentfix:
        a = wl.agentfix
        for cls, file in a.fixtures.items():
            plan = PassPlan(name=f"agentfix-{cls}", kind="agentfix",
                            concurrency=(a.concurrency,),
                            requests_per_level=a.requests_of(cls),
                            duration_s=None, input_tokens=None, output_tokens=a.output_tokens,
                            input_file=campaign.resolve(file), seed=seed,
                            **common)  # type: ignore[arg-type]
            out.append(ArmPass(plan, "agentfix", (cls,), cls))
    if wl.rate:
        r = wl.rate
        for lvl in r.levels:
            file = arrivals.level_path(run_dir or Path("<run>"), f"rate-{lvl}")
            plan = PassPlan(name=f"rate-{lvl}", kind="rate", concurrency=(r.cap,),
                            requests_per_level=r.requests_at(lvl), duration_s=None,
                            input_tokens=None, output_tokens=r.output_tokens,
                            input_file=file, seed=seed, **common)  # type: ignore[arg-type]
            out.append(ArmPass(plan, "rate", (lvl,), lvl))
    if wl.trace:
        t = wl.trace
        for name, source in t.files.items():
            try:
                n = trace.summary(campaign.resolve(source)).requests
            except trace.TraceProblem:
                n = 1  # the loader refused it already; a dry run still shows the pass
            plan = PassPlan(name=f"trace-{name}", kind="trace", concurrency=(t.cap,),
                            requests_per_level=n, duration_s=None, input_tokens=None,
                            output_tokens=1, seed=seed,
                            input_file=arrivals.level_path(run_dir or Path("<run>"),
                                                           f"trace-{name}"),
                            **common)  # type: ignore[arg-type]
            out.append(ArmPass(plan, "trace", (name,), name))
    if wl.sessions:
        s = wl.sessions
        for cls, file in s.fixtures.items():
            plan = PassPlan(name=f"sessions-{cls}", kind="sessions",
                            concurrency=(s.concurrency,), requests_per_level=s.sessions,
                            duration_s=None, input_tokens=None,
                            output_tokens=s.output_tokens, input_file=campaign.resolve(file),
                            seed=seed, **common)  # type: ignore[arg-type]
            out.append(ArmPass(plan, "sessions", (cls,), cls))
    return out


Fault = Literal["lane", "own"]
"""Whose failure an invalid pass is: the lane's (AIPerf crashing or timing out while the
server stays healthy, a /metrics scrape failure, any invalid pass of the control) or the
candidate's own (its requests failing beyond the gates, its server dying)."""


@dataclass(frozen=True)
class ServerFault:
    """What went wrong with the server under a pass (it died, restarted, turned unhealthy
    or stopped answering /metrics): the pair cannot count."""

    reason: str
    scrape: bool = False
    """Only /metrics stopped answering (the server itself still up): the lane's fault."""


@dataclass(frozen=True)
class PassCheck:
    """Why a pass that ran cannot be used, as a whole and level by level."""

    problems: list[str]
    """The whole pass's: AIPerf's, the server's, levels without results."""
    level_problems: dict[int, list[str]]
    """concurrency → why that level's numbers cannot be used ([] : valid)."""
    labels: dict[int, str]
    """concurrency → the level's label (`c4`, a content class)."""
    own: tuple[str, ...] = ()
    """The problems that are the server's own: its answers against the gates, its death."""

    @property
    def valid(self) -> bool:
        return not self.problems and not any(self.level_problems.values())

    def fault(self, arm: str) -> Fault | None:
        """Whose failure the pass is (None when valid): the control's is always the
        lane's; a candidate's is its own when any of its problems is the server's."""
        if self.valid:
            return None
        if arm == CONTROL or not self.own:
            return "lane"
        return "own"

    def all_problems(self) -> list[str]:
        """Every problem, those of a level prefixed with its label (for the journal)."""
        return self.problems + [f"{self.labels.get(c, c)}: {p}"
                                for c, ps in self.level_problems.items() for p in ps]

    def level_rows(self, outcome: PassOutcome,
                   log_se: Mapping[int, Mapping[str, float]] | None = None) -> list[LevelRows]:
        """Each measured level as the rows it gives, with the reasons against it and its
        statistics' sampling errors (`log_se`: concurrency → metric → error)."""
        return [LevelRows(self.labels.get(lv.concurrency, f"c{lv.concurrency}"), lv.metrics,
                          self.problems + self.level_problems.get(lv.concurrency, []),
                          (log_se or {}).get(lv.concurrency, {}))
                for lv in outcome.levels]


def check_pass(ap: ArmPass, outcome: PassOutcome, gates: Gates,
               server_fault: ServerFault | None = None,
               waits: Mapping[int, float] | None = None) -> PassCheck:
    """Whether a pass can be used: AIPerf's own problems, the server's fault (it died,
    restarted or stopped answering under the pass), every planned level present, and each
    level against the registered gates (`waits`: concurrency → the longest wait for a
    token, against `max_stall_s`). A warm-up is thrown away: only "did it run" matters for
    it, not the measured-pass gates."""
    problems = list(outcome.problems)
    own: list[str] = []
    if server_fault is not None:
        problems.append(server_fault.reason)
        if not server_fault.scrape:
            own.append(server_fault.reason)
    level_problems: dict[int, list[str]] = {}
    for lv in outcome.levels:
        answers = levelchecks.answer_problems(
            lv, max_error_rate=gates.max_error_rate if ap.measured else 1.0,
            min_completed_requests=gates.min_completed_requests if ap.measured else 1,
            max_osl_mismatch_share=gates.max_osl_mismatch if ap.measured else None)
        level_problems[lv.concurrency] = levelchecks.run_problems(lv, outcome) + answers
        own += answers
        if ap.measured and ap.plan.kind in TIMED:  # the load generator's: the lane's
            level_problems[lv.concurrency] += sending.send_problems(lv, gates.max_send_lag_ms)
        wait = (waits or {}).get(lv.concurrency)
        if ap.measured and wait is not None and wait > gates.max_stall_s:
            level_problems[lv.concurrency].append(
                f"stalled: a request waited {wait:.1f} s for a token (max_stall_s "
                f"{gates.max_stall_s:g} s): the server froze or the host stalled, so the "
                "pass measured the stall, not the server")
    labels = dict(zip(ap.plan.concurrency, ap.level_labels, strict=True))
    found = {lv.concurrency for lv in outcome.levels}
    missing = [labels[c] for c in ap.plan.concurrency if c not in found]
    if missing:
        problems.append(f"no results for level(s) {', '.join(missing)}")
    return PassCheck(problems, level_problems, labels, tuple(own))


@dataclass(frozen=True)
class InvalidPass:
    """A measured pass left invalid after its retries, and whose failure it is."""

    name: str
    """`arm/pass`, as `pair_done` lists it."""
    fault: Fault
    cause: str
