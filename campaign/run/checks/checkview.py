"""What `spec-ab check` and `spec-ab run --dry-run` print (pure rendering to a Console)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from campaign import secrets
from campaign.campaignfile import CONTROL, Campaign, format_yaml_path, sessions, trace
from campaign.campaignfile.checks import ThinTail, thin_tails
from campaign.campaignfile.duration import estimate, pairs_said
from campaign.campaignfile.schedule import Slot, plan_slots
from campaign.fmt import clock as human
from campaign.markers import run_labels
from campaign.run.checks.bootcheck import Boot
from campaign.run.checks.launchcheck import Findings
from campaign.run.measure.loadgen import aiperf_command
from campaign.run.measure.passes import arm_passes
from campaign.run.progress import Eta
from campaign.servers import ArmContext, make_server
from campaign.verdict.showable import Assessed


def _ctx(campaign: Campaign, arm: str) -> ArmContext:
    return ArmContext(run_id="<run-id>", pair=1, arm=arm, log_path=Path("/dev/null"),
                      campaign_dir=campaign.base_dir,
                      labels=run_labels("<run-id>", 1, arm))


def launch_lines(campaign: Campaign, arm: str) -> list[str]:
    server = make_server(campaign.launches[arm], _ctx(campaign, arm))
    return [secrets.scrub(line) for line in server.describe()]


def _blocks(slots: list[Slot]) -> dict[int, list[str]]:
    """pair → its arms in the order they run."""
    by_pair: dict[int, list[str]] = {}
    for s in slots:
        by_pair.setdefault(s.pair, []).append(s.arm)
    return by_pair


def print_campaign(console: Console, campaign: Campaign,
                   showable: Sequence[Assessed] = ()) -> None:
    pre = campaign.preregistration
    if campaign.lane_chosen:
        where = f"on lane [bold]{escape(campaign.lane)}[/]"
    else:
        where = (f"sharded over {len(campaign.lane_names)} lanes "
                 f"([bold]{escape(', '.join(campaign.lane_names))}[/]), "
                 f"{escape(pairs_said(campaign))} each, pooled into one verdict")
    console.print(f"[bold]{escape(campaign.name)}[/] {where}: valid")
    console.print(f"  hypothesis: {campaign.hypothesis.strip()}", markup=False)
    band = pre.drift_band if isinstance(pre.drift_band, float) else f"from {pre.drift_band.from_}"
    cells = ", ".join(f"{c.workload}/{c.level}" for c in pre.decision_cells)
    console.print(f"  rule: {pre.rule}, {pre.primary_metric} ({pre.metric_direction} is better) "
                  f"≥ +{pre.margin:.0%}, drift band {band}, cells {cells}", markup=False)
    print_thin_tails(console, thin_tails(campaign))
    print_showable(console, showable)
    print_load_shapes(console, campaign)
    lanes = ([campaign] if campaign.lane_chosen
             else [campaign.for_lane(name) for name in campaign.lane_names])
    for view in lanes:
        if len(lanes) > 1:
            desc = view.lanes[view.lane].description
            console.print(f"\n[bold]lane {escape(view.lane)}[/]"
                          + (f" — {escape(desc)}" if desc else "")
                          + f" (spec-ab run FILE --lane {escape(view.lane)})")
        for arm in campaign.arm_names:
            desc = campaign.arms[arm].description
            console.print(f"\n[bold]arm {escape(arm)}[/]" + (f" — {escape(desc)}" if desc else "")
                          + (f" on lane {escape(view.lane)}" if len(lanes) > 1 else ""))
            for line in launch_lines(view, arm):
                console.print(f"  {line}", markup=False, soft_wrap=True)
    print_differences(console, campaign)
    each = " on each lane" if len(lanes) > 1 else ""
    arms = pre.pairs * len(campaign.arm_names)
    # a sequential design is said to be one before `plan` (it may stop at a look)
    said = (f"{pre.pairs} pairs, {arms} arms" if pre.sequential is None
            else f"{pairs_said(campaign)}; at most {arms} arms")
    console.print(f"\n[bold]schedule[/] ({pre.order}, {said}{each}):", markup=True)
    schedules = {view.lane: [f"pair {pair}: {' → '.join(arms)}" for pair, arms in
                             _blocks(plan_slots(pre.pairs, campaign.arm_names, pre.order,
                                                pre.seed, view.lane_index)).items()]
                 for view in lanes}
    if len({tuple(lines) for lines in schedules.values()}) == 1:  # every lane alike
        schedules = {"": next(iter(schedules.values()))}
    for lane, lines in schedules.items():
        if lane:
            console.print(f"  lane {lane}:", markup=False)
        for line in lines:
            console.print(("    " if lane else "  ") + line, markup=False)
    est = estimate(campaign)
    learned = Eta(campaign, campaign.resolve(campaign.results_dir) / "-")
    if learned.learned:  # the lane's earlier runs in this results folder say better
        per_arm = {a: learned.per_arm[a] for a in est.per_arm_s}
        console.print(f"\n[bold]estimated duration[/] {est.length(learned.total())}{each} "
                      f"({', '.join(f'{a} {human(s)}' for a, s in per_arm.items())} per "
                      "arm; learned from this lane's earlier runs in "
                      f"{campaign.results_dir})", markup=True)
        return
    console.print(f"\n[bold]estimated duration[/] {est.length()}{each} "
                  f"({', '.join(f'{a} {human(s)}' for a, s in est.per_arm_s.items())} per "
                  f"arm; {est.assumptions})", markup=True)


def print_load_shapes(console: Console, campaign: Campaign) -> None:
    """The rate levels, traces and session classes: what every arm of every pair is sent
    (and when)."""
    wl = campaign.workloads
    if wl.rate is not None:
        r = wl.rate
        shape = f" (smoothness {r.smoothness:g})" if r.smoothness is not None else ""
        counts = ", ".join(f"{lvl}: {r.requests_at(lvl)}" for lvl in r.levels)
        console.print(f"  rate: {r.arrival}{shape} arrivals, requests {counts}; each level's "
                      f"schedule drawn from seed {campaign.preregistration.seed}, written "
                      "once per run and replayed on every arm", markup=False)
    if wl.trace is not None:
        for name, file in wl.trace.files.items():
            try:
                said = trace.summary(campaign.resolve(file)).said(name, wl.trace.time_scale)
            except trace.TraceProblem as exc:
                said = f"trace {name}: {exc}"
            console.print(f"  {said}", markup=False)
    if wl.sessions is not None:
        s = wl.sessions
        for cls, file in s.fixtures.items():
            try:
                info = sessions.read(campaign.resolve(file))
                said = (f"{info.sessions} sessions in the file, {info.turns_per_session:.1f} "
                        f"turns each; {s.sessions} per pass, {s.concurrency} in flight")
            except sessions.SessionsProblem as exc:
                said = str(exc)
            console.print(f"  sessions {cls}: {said}", markup=False)


def print_showable(console: Console, showable: Sequence[Assessed]) -> None:
    """Each relative guardrail under the registered design: how often it is shown within
    its limit at no change, the smallest limit it shows, the worsening it resolves."""
    for s in showable:
        console.print(f"  {s.text()}", markup=False, soft_wrap=True,
                      style=None if s.ok else "yellow")


def print_thin_tails(console: Console, thin: list[ThinTail]) -> None:
    """One warning per guardrail × workload whose quantile the passes are too small for."""
    for t in thin:
        console.print(f"  ! {format_yaml_path(t.path)}: {t.text()}", markup=False,
                      style="yellow", soft_wrap=True)


_SKIP = {"readiness", "backend"}
"""Launch fields not compared between arms (the same for every arm by construction)."""


def _words(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _field_changes(key: str, base: Any, other: Any) -> list[str]:
    """What `other` changes in one launch field against `base`, in words."""
    if base == other:
        return []
    if isinstance(base, dict) and isinstance(other, dict):
        out = [f"{key} +{k}={_words(other[k])}" for k in other if k not in base]
        out += [f"{key} {k}: {_words(base[k])} → {_words(other[k])}"
                for k in other if k in base and base[k] != other[k]]
        out += [f"{key} -{k}" for k in base if k not in other]
        return out
    if isinstance(base, list) and isinstance(other, list):
        if all(isinstance(v, str) for v in base + other):
            if other[:len(base)] == base:
                added = other[len(base):]
                return ([f"{key} + {v}" for v in added] if key == "mounts"
                        else [f"{key} + {' '.join(added)}"])
            i = 0
            while i < min(len(base), len(other)) and base[i] == other[i]:
                i += 1
            j = 0
            while (j < min(len(base), len(other)) - i
                   and base[len(base) - 1 - j] == other[len(other) - 1 - j]):
                j += 1
            ctx = f"{base[i - 1]} " if i else ""
            was = " ".join(base[i:len(base) - j]) or "(nothing)"
            now = " ".join(other[i:len(other) - j]) or "(nothing)"
            return [f"{key}: {ctx}{was} → {ctx}{now}"]
        return [f"{key}: {len(base)} → {len(other)} entries" if len(base) != len(other)
                else f"{key}: changed"]
    return [f"{key}: {_words(base)} → {_words(other)}"]


def arm_differences(campaign: Campaign, arm: str) -> list[str]:
    """Everything that differs between the control's launch and warm-up and `arm`'s:
    env, flags, mounts, image and any other server field, then the warm-up."""
    base = campaign.launches["control"].model_dump(mode="json")
    mine = campaign.launches[arm].model_dump(mode="json")
    out: list[str] = []
    for key in dict.fromkeys([*base, *mine]):
        if key in _SKIP:
            continue
        label = {"volumes": "mounts", "args": "flags", "command": "command"}.get(key, key)
        out += _field_changes(label, base.get(key), mine.get(key))
    wb = [w.model_dump() for w in campaign.warmups("control")]
    wa = [w.model_dump() for w in campaign.warmups(arm)]
    if wb != wa:
        def show(ws: list[dict[str, Any]]) -> str:
            return ", ".join(f"{w['requests']}×{w['output_tokens']} tok at c{w['concurrency']}"
                             for w in ws) or "none"
        out.append(f"warm-up: {show(wb)} → {show(wa)} (an unmeasured difference: warm both "
                   "arms alike unless the warm-up is the change)")
    return out


def print_differences(console: Console, campaign: Campaign) -> None:
    console.print("\n[bold]differences[/] (each candidate against control)")
    for arm in campaign.candidates:
        diffs = arm_differences(campaign, arm)
        if not diffs:
            console.print(f"  {arm}: none — the same launch and warm-up (an A/A campaign)",
                          markup=False)
            continue
        console.print(f"  {arm}:", markup=False)
        for d in diffs:
            console.print(f"    {d}", markup=False, soft_wrap=True)


def print_preflight(console: Console, facts: list[str], problems: list[str]) -> None:
    from campaign.run.checks.preflight import Caution

    console.print("\n[bold]preflight[/]")
    for f in facts:
        if isinstance(f, Caution):
            console.print(f"  ! {f}", markup=False, style="yellow")
        else:
            console.print(f"  ✓ {f}", markup=False)
    for p in problems:
        console.print(f"  ✗ {p}", markup=False, style="red")
    if not problems:
        console.print("  ready to run", style="green")


def print_launch_checks(console: Console, found: Findings) -> None:
    """What the launch checks saw (`launchcheck`): facts with ✓, warnings with `!`; nothing
    when no launch runs vLLM and none has a warning."""
    if not found.facts and not found.warnings:
        return
    console.print("\n[bold]engines[/] (flags and variables, checked without booting)")
    for f in found.facts:
        console.print(f"  ✓ {f}", markup=False, soft_wrap=True)
    for w in found.warnings:
        console.print(f"  ! {w}", markup=False, style="yellow", soft_wrap=True)


def print_boot_header(console: Console) -> None:
    console.print("\n[bold]boot check[/] (each distinct launch once: up to ready and a "
                  "1-token request, then stopped)")


def print_booting(console: Console, arms: list[str]) -> None:
    console.print(f"  booting {', '.join(arms)} …", markup=False)


def print_boot(console: Console, boot: Boot) -> None:
    """One boot's outcome: its time, or its first error with the server's log lines."""
    arms = ", ".join(boot.arms)
    if boot.ok:
        console.print(f"  ✓ {arms}: ready in {boot.seconds:.1f} s, then stopped",
                      markup=False)
        return
    console.print(f"  ✗ {arms}: failed after {boot.seconds:.1f} s: {boot.error}",
                  markup=False, style="red", soft_wrap=True)


def print_dry_run(console: Console, campaign: Campaign) -> None:
    print_campaign(console, campaign)
    console.print("\n[bold]passes of every arm[/] (AIPerf command lines)")
    for arm in campaign.arm_names:
        console.print(f"\n  [bold]{escape(arm)}[/]")
        # the launch's URL: a `${NAME}` in it shown as the reference, never expanded
        for ap in arm_passes(campaign, arm, campaign.launches[arm].base_url):
            cmd = aiperf_command(ap.plan, Path(f"<run>/pairs/NN/{arm}/passes/{ap.plan.name}"))
            tag = "warm-up, not measured" if not ap.measured else ap.workload
            console.print(f"  # {ap.plan.name} ({tag})", markup=False)
            console.print(f"  {' '.join(cmd)}", markup=False, soft_wrap=True)
        if (fid := campaign.workloads.fidelity) is not None:
            from campaign.run.measure import (
                fidelity,  # httpx and the results stack: a dry run's only
            )

            console.print(f"  # fidelity (the lossless check, not AIPerf): "
                          f"{len(fidelity.prompts(campaign))} prompts × {fid.output_tokens} "
                          "tokens, temperature 0, one at a time, not streamed"
                          + ("; twice on the first pair's boot (its own reference)"
                             if arm == CONTROL else ""), markup=False)
    console.print("\ndry run: nothing was started")
