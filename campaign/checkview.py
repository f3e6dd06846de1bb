"""What `spec-ab check` and `spec-ab run --dry-run` print (pure rendering to a Console)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from campaign import secrets
from campaign.duration import estimate
from campaign.fmt import clock as human
from campaign.loadgen import aiperf_command
from campaign.markers import run_labels
from campaign.passes import arm_passes
from campaign.schedule import plan_slots
from campaign.servers import ArmContext, make_server
from campaign.spec import Campaign


def _ctx(campaign: Campaign, arm: str) -> ArmContext:
    return ArmContext(run_id="<run-id>", pair=1, arm=arm, log_path=Path("/dev/null"),
                      campaign_dir=campaign.base_dir,
                      labels=run_labels("<run-id>", 1, arm))


def launch_lines(campaign: Campaign, arm: str) -> list[str]:
    server = make_server(campaign.launches[arm], _ctx(campaign, arm))
    return [secrets.scrub(line) for line in server.describe()]


def print_campaign(console: Console, campaign: Campaign) -> None:
    pre = campaign.preregistration
    console.print(f"[bold]{escape(campaign.name)}[/] on lane [bold]{escape(campaign.lane)}[/]: "
                  "valid")
    console.print(f"  hypothesis: {campaign.hypothesis.strip()}", markup=False)
    band = pre.drift_band if isinstance(pre.drift_band, float) else f"from {pre.drift_band.from_}"
    cells = ", ".join(f"{c.workload}/{c.level}" for c in pre.decision_cells)
    console.print(f"  rule: {pre.rule}, {pre.primary_metric} ({pre.metric_direction} is better) "
                  f"≥ +{pre.margin:.0%}, drift band {band}, cells {cells}", markup=False)
    for arm in campaign.arm_names:
        desc = campaign.arms[arm].description
        console.print(f"\n[bold]arm {escape(arm)}[/]" + (f" — {escape(desc)}" if desc else ""))
        for line in launch_lines(campaign, arm):
            console.print(f"  {line}", markup=False, soft_wrap=True)
    slots = plan_slots(pre.pairs, campaign.arm_names, pre.order, pre.seed)
    console.print(f"\n[bold]schedule[/] ({pre.order}, {pre.pairs} pairs, {len(slots)} arms):")
    by_pair: dict[int, list[str]] = {}
    for s in slots:
        by_pair.setdefault(s.pair, []).append(s.arm)
    for pair, arms in by_pair.items():
        console.print(f"  pair {pair}: {' → '.join(arms)}", markup=False)
    est = estimate(campaign)
    console.print(f"\n[bold]estimated duration[/] {human(est.total_s)} "
                  f"({', '.join(f'{a} {human(s)}' for a, s in est.per_arm_s.items())} per "
                  f"arm; {est.assumptions})", markup=True)


def print_preflight(console: Console, facts: list[str], problems: list[str]) -> None:
    console.print("\n[bold]preflight[/]")
    for f in facts:
        console.print(f"  ✓ {f}", markup=False)
    for p in problems:
        console.print(f"  ✗ {p}", markup=False, style="red")
    if not problems:
        console.print("  ready to run", style="green")


def print_dry_run(console: Console, campaign: Campaign) -> None:
    print_campaign(console, campaign)
    console.print("\n[bold]passes of every arm[/] (AIPerf command lines)")
    for arm in campaign.arm_names:
        server = make_server(campaign.launches[arm], _ctx(campaign, arm))
        console.print(f"\n  [bold]{escape(arm)}[/]")
        for ap in arm_passes(campaign, arm, server.base_url):
            cmd = aiperf_command(ap.plan, Path(f"<run>/pairs/NN/{arm}/passes/{ap.plan.name}"))
            tag = "warm-up, not measured" if not ap.measured else ap.workload
            console.print(f"  # {ap.plan.name} ({tag})", markup=False)
            console.print(f"  {' '.join(cmd)}", markup=False, soft_wrap=True)
    console.print("\ndry run: nothing was started")
