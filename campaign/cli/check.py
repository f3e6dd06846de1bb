"""`spec-ab check` (validate, show launches, preflight) and `spec-ab clean` (leftovers of dead
runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from campaign.cli.app import app, err, guarded, out
from campaign.errors import PreflightError


@app.command()
@guarded
def check(
    campaign_file: Annotated[Path, typer.Argument(help="Campaign YAML file.")],
    preflight: Annotated[bool, typer.Option(help="Also check this machine is ready "
                                            "(starts nothing).")] = True,
    lane: Annotated[str | None, typer.Option(
        "--lane", help="A sharded campaign: check this lane (its launches and this "
        "machine); without it every lane is shown and no machine is checked.")] = None,
) -> None:
    """Validate a campaign file, show every arm's launch, the schedule and the duration estimate, then run the preflight (exit 3 when the machine is not ready)."""
    from campaign.campaignfile import load_campaign
    from campaign.campaignfile.checks import refuse_thin_tails
    from campaign.run import checkview
    from campaign.run.preflight import preflight as run_preflight
    from campaign.verdict.aa import checked_drift_band

    campaign = load_campaign(campaign_file, lane=lane)
    checked_drift_band(campaign)
    refuse_thin_tails(campaign)  # exit 2 under gates.tail_requests: refuse; else warned below
    checkview.print_campaign(out, campaign)
    if not campaign.lane_chosen and preflight:
        out.print(f"\npreflight: each lane is its own machine; check it there with "
                  f"`spec-ab check {campaign_file} --lane NAME`", markup=False)
        return
    if not preflight:
        return
    facts, problems = run_preflight(campaign)
    checkview.print_preflight(out, facts, problems)
    if problems:
        raise PreflightError(f"preflight found {len(problems)} problem(s); fix them and run "
                             f"`spec-ab check {campaign_file}` again")


@app.command()
@guarded
def clean(
    campaign_file: Annotated[Path | None, typer.Argument(
        help="Also look at the docker hosts this campaign uses (e.g. ssh://spark2).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List leftovers, remove "
                                          "nothing.")] = False,
) -> None:
    """Remove containers and processes left by runs that are no longer alive."""
    from campaign.run import cleanup

    hosts: list[str | None] = [None]
    if campaign_file is not None:
        from campaign.campaignfile import load_campaign

        hosts = cleanup.campaign_docker_hosts(load_campaign(campaign_file))
    leftovers = cleanup.find_leftovers(docker_hosts=hosts, include_tmpdirs=True)
    for note in leftovers.notes:
        err.print(f"note: {note}", markup=False)
    if not leftovers:
        out.print("no leftovers")
        return
    for item in leftovers:
        # markup=False: "[pid 4242]" is not a style tag
        out.print(f"{'would remove' if dry_run else 'removing'} {item}", markup=False)
    if not dry_run:
        cleanup.remove_leftovers(leftovers)
        out.print(f"removed {len(leftovers)} leftover(s)")
