"""A campaign's wall-clock estimate, before anything runs.

Deliberately simple and stated: boot time (the launch's `readiness.expected_boot_s`, else
by backend), AIPerf's start-up per invocation,
and decode at an assumed per-stream speed (100 tok/s on a lab lane, the sim's time scale
applied on the simulated lane). `spec-ab check` prints it with these assumptions. A
sequential design (`preregistration.sequential`) is a range: from its first look (it may
stop there) to its max_pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from campaign.campaignfile import (
    Campaign,
    DockerLaunch,
    ExternalLaunch,
    LaunchModel,
    sessions,
    trace,
)
from campaign.fmt import clock

AIPERF_STARTUP_S = 9.0
"""Measured with AIPerf 0.13 on 2 cores: 6–7 s idle, 8.5–11 s under load. A concurrency
sweep restarts AIPerf for every level, so the knee pays it once per level (once in all
with `one_process`)."""
PAUSE_S = 2.0
"""`run.phases.PAUSE_S`: a one-process knee's idle pause between two levels."""
STREAM_TOK_S = 100.0
TRACE_TAIL_S = 5.0
"""A trace's last responses after its last arrival (its output lengths vary)."""
BOOT_S = {"docker": 420.0, "process": 5.0, "external": 0.0}


@dataclass(frozen=True)
class Estimate:
    per_arm_s: dict[str, float]
    total_s: float
    """At the most pairs the night may spend (a sequential design's max_pairs)."""
    assumptions: str
    pairs: int = 0
    """The most pairs (the campaign's `pairs`)."""
    min_pairs: int = 0
    """The fewest pairs the night may stop at: a sequential design's first look, else
    `pairs`."""

    @property
    def min_total_s(self) -> float:
        return self.total_s * self.min_pairs / self.pairs if self.pairs else self.total_s

    def length(self, total_s: float | None = None) -> str:
        """The night's length in words: one duration, or a sequential design's range
        (`total_s`: another estimate of the whole night, e.g. learned from earlier runs)."""
        most = self.total_s if total_s is None else total_s
        if self.min_pairs >= self.pairs:
            return clock(most)
        least = most * self.min_pairs / self.pairs
        return (f"{clock(least)} to {clock(most)} (at least {self.min_pairs} pairs, at most "
                f"{self.pairs}: a sequential design, may stop early at a look)")


def pairs_said(campaign: Campaign) -> str:
    """The pairs a campaign runs, in words: "12 pairs", or for a sequential design "up to
    12 pairs, looks from pair 2, may stop early" (every second pair: "looks from pair 2,
    every 2nd pair")."""
    pre = campaign.preregistration
    design = pre.sequential
    if design is None:
        return f"{pre.pairs} pairs"
    every = ", every 2nd pair" if design.step == 2 else ""
    return (f"up to {design.max_pairs} pairs, looks from pair {design.schedule()[0]}{every}, "
            "may stop early")


def _speedup(launch: LaunchModel) -> float:
    env = launch.env if not isinstance(launch, ExternalLaunch) else {}
    try:
        return max(1.0, float(env.get("SPECAB_SIM_TIME_SCALE", "1")))
    except ValueError:
        return 1.0


def boot_s(launch: LaunchModel) -> float:
    """The boot time the estimate assumes: the launch's `readiness.expected_boot_s`, else
    the backend's usual one."""
    stated = launch.readiness.expected_boot_s
    if stated is not None:
        return stated
    return BOOT_S["docker" if isinstance(launch, DockerLaunch) else launch.backend]


def _decode_s(requests: int, concurrency: int, out_tokens: int, speed: float) -> float:
    waves = -(-requests // concurrency)
    return waves * out_tokens / speed


def _open_loop_s(campaign: Campaign, speed: float) -> float:
    """The rate levels' and traces' passes: each its AIPerf start-up, its schedule's span
    (the requests arrive at the offered rate, however fast the server is) and the last
    one's decode (a trace: `TRACE_TAIL_S`). A trace that cannot be read adds its start-up
    only (`check` says what is wrong with it)."""
    wl = campaign.workloads
    t = 0.0
    if wl.rate is not None:
        r = wl.rate
        t += sum(AIPERF_STARTUP_S + (r.requests_at(lvl) - 1) / r.rate_of(lvl)
                 + r.output_tokens / speed for lvl in r.levels)
    if wl.trace is not None:
        for file in wl.trace.files.values():
            try:
                span = trace.summary(campaign.resolve(file)).span_s * wl.trace.time_scale
            except trace.TraceProblem:
                span = 0.0
            t += AIPERF_STARTUP_S + span + TRACE_TAIL_S
    if wl.sessions is not None:
        s = wl.sessions
        for file in s.fixtures.values():
            try:
                turns = sessions.read(campaign.resolve(file)).turns_per_session
            except sessions.SessionsProblem:
                turns = 1.0
            t += AIPERF_STARTUP_S + _decode_s(round(s.sessions * turns), s.concurrency,
                                              s.output_tokens, speed)
    return t


def estimate(campaign: Campaign) -> Estimate:
    wl = campaign.workloads
    per_arm: dict[str, float] = {}
    for arm, launch in campaign.launches.items():
        speed = STREAM_TOK_S * _speedup(launch)
        t = boot_s(launch) + launch.readiness.poll_interval_s
        for w in campaign.warmups(arm):
            t += AIPERF_STARTUP_S + _decode_s(w.requests, w.concurrency, w.output_tokens, speed)
        if wl.knee:
            one = wl.knee.one_process and len(wl.knee.concurrency) > 1
            if one:  # one start-up, a pause between two levels (run.phases)
                t += AIPERF_STARTUP_S + PAUSE_S * (len(wl.knee.concurrency) - 1)
            for c in wl.knee.concurrency:
                t += 0.0 if one else AIPERF_STARTUP_S
                if wl.knee.duration_s:
                    t += wl.knee.duration_s
                else:
                    # what AIPerf is told at the level (a sweep: the largest, every level)
                    t += _decode_s(wl.requests_in("knee", f"c{c}") or 0, c,
                                   wl.knee.output_tokens, speed)
        if wl.agentfix:
            a = wl.agentfix
            t += sum(AIPERF_STARTUP_S + _decode_s(a.requests_of(cls), a.concurrency,
                                                  a.output_tokens, speed)
                     for cls in a.fixtures)
        t += _open_loop_s(campaign, speed)
        per_arm[arm] = t
    pairs = campaign.preregistration.pairs
    design = campaign.preregistration.sequential
    total = sum(per_arm.values()) * pairs
    # the boots of the backends this campaign launches, not every backend's
    used = {("docker" if isinstance(launch, DockerLaunch) else launch.backend): boot_s(launch)
            for launch in campaign.launches.values()}
    boots = ", ".join(f"{v:.0f} s ({k})" for k, v in sorted(used.items())) or "none"
    return Estimate(per_arm, total,
                    f"boot {boots}; AIPerf start-up {AIPERF_STARTUP_S:.0f} s per invocation "
                    f"(a knee sweep: per level; one_process: once, {PAUSE_S:.0f} s between "
                    f"two levels); a rate level or a trace: its schedule's span; "
                    f"{STREAM_TOK_S:.0f} tok/s per stream (× SPECAB_SIM_TIME_SCALE on the "
                    "sim)",
                    pairs, pairs if design is None else min(pairs, design.schedule()[0]))
