"""`spec-ab check` (validate, show launches, preflight) and `spec-ab clean` (leftovers of dead
runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from campaign.cli.app import app, err, guarded, out
from campaign.errors import Interrupted, PreflightError, UsageError

if TYPE_CHECKING:
    from campaign.campaignfile import Campaign


@app.command()
@guarded
def check(
    campaign_file: Annotated[Path | None, typer.Argument(help="Campaign YAML file.")] = None,
    skip_preflight: Annotated[bool, typer.Option(
        "--skip-preflight", help="Do not check this machine (the preflight starts "
        "nothing; `run --skip-preflight` alike).")] = False,
    no_preflight: Annotated[bool, typer.Option(
        "--no-preflight", hidden=True, help="Deprecated spelling of --skip-preflight (kept "
        "for old scripts).")] = False,
    _preflight: Annotated[bool, typer.Option(
        "--preflight", hidden=True, help="Deprecated: the preflight runs by default.")] = False,
    lane: Annotated[str | None, typer.Option(
        "--lane", help="A sharded campaign: check this lane (its launches and this "
        "machine); without it every lane is shown and no machine is checked.")] = None,
    engine: Annotated[bool, typer.Option(
        help="Check each vLLM launch's flags with vLLM's own parser and its VLLM_* "
        "variables (reads the engine once, ~20 s, then cached; boots nothing).")] = True,
    boot: Annotated[bool, typer.Option(
        "--boot", help="Then boot every distinct launch once, up to ready and a 1-token "
        "request, and stop it (exit 3 when one fails; nothing is registered).")] = False,
    metrics: Annotated[bool, typer.Option(
        "--metrics", help="List the metrics a pass can yield (the names `primary_metric`, "
        "guardrails and `report --metrics` take), with unit and direction; no file "
        "needed.")] = False,
) -> None:
    """Validate a campaign file (with the simulator's knobs and vLLM's own flag parser), show every arm's launch, the schedule and the duration estimate, then run the preflight (exit 3 when the machine is not ready) and, with --boot, boot each launch once."""
    from campaign.campaignfile import load_campaign
    from campaign.campaignfile.checks import refuse_secret_collisions, refuse_thin_tails
    from campaign.run.checks import checkview, launchcheck
    from campaign.run.checks.preflight import preflight as run_preflight
    from campaign.run.checks.vllmengine import Engines
    from campaign.verdict.showable import refuse_unshowable

    preflight = not (skip_preflight or no_preflight)
    if metrics:
        _print_metrics()
        if campaign_file is None:
            return
    if campaign_file is None:
        raise UsageError("give a campaign file (or --metrics for the metric names)",
                         hint="spec-ab check examples/sim-pair.yaml")
    campaign = load_campaign(campaign_file, lane=lane)
    refuse_secret_collisions(campaign)  # exit 2: a secret value that is an arm, a path...
    _warn_unset_references(campaign)
    registered = _check_aa_bands(campaign)
    refuse_thin_tails(campaign)  # exit 2 under gates.tail_requests: refuse; else warned below
    engines = Engines(on_introspect=lambda where: err.print(
        f"reading vLLM's flags from {where} (once per engine, ~20 s; then cached)",
        markup=False)) if engine else None
    found = launchcheck.check_launches(campaign, engines)
    if found.problems:
        for warning in found.warnings:
            err.print(f"warning: {warning}", markup=False)
    launchcheck.refuse(found, str(campaign_file))
    # exit 2: a guardrail the registered design cannot show within its limit would stop
    # every candidate (docs/verdict.md, "Guardrails"); after the launches, whose typos
    # come first
    showable = refuse_unshowable(campaign, registered)
    checkview.print_campaign(out, campaign, showable)
    checkview.print_launch_checks(out, found)
    if not campaign.lane_chosen and (preflight or boot):
        out.print(f"\npreflight: each lane is its own machine; check it there with "
                  f"`spec-ab check {campaign_file} --lane NAME"
                  f"{' --boot' if boot else ''}`" + ("; nothing was booted" if boot else ""),
                  markup=False)
        return
    if preflight:
        facts, problems = run_preflight(campaign)
        checkview.print_preflight(out, facts, problems)
        if problems:
            raise PreflightError(f"preflight found {len(problems)} problem(s); fix them and "
                                 f"run `spec-ab check {campaign_file}` again")
    if boot:
        _boot(campaign, campaign_file)


def _check_aa_bands(campaign: Campaign) -> list[float | None]:
    """A band measured on an A/A run (`drift_band: {from: RUN}`, the run's or a
    guardrail's) must come out of that run; a band written as a number needs nothing, so
    the results stack (pandas, scipy) loads only for a campaign that names an A/A run.
    Returns each guardrail's own band (None: it has none)."""
    from campaign.campaignfile import DriftFrom

    rule = campaign.preregistration
    own = [float(g.drift_band) if isinstance(g.drift_band, float | int) else None
           for g in rule.guardrails]
    if not any(isinstance(band, DriftFrom)
               for band in [rule.drift_band, *(g.drift_band for g in rule.guardrails)]):
        return own
    from campaign.verdict.aa import checked_drift_band, checked_guardrail_bands

    checked_drift_band(campaign)
    bands = checked_guardrail_bands(campaign)  # a guardrail's {from: A/A run} gives a band
    return [b if g.drift_band is not None else None
            for g, b in zip(rule.guardrails, bands, strict=True)]


def _warn_unset_references(campaign: Campaign) -> None:
    """A `${NAME}` whose variable this environment does not set: a warning (the server
    would get an empty value), not a refusal: `run` may happen in another shell."""
    from campaign import secrets

    for arm, launch in campaign.launches.items():
        for field, name in secrets.unset_references(launch.model_dump(mode="json")):
            err.print(f"warning: arm {arm}: {field} references ${{{name}}}, which is not set "
                      f"in this environment (the server would get an empty value); export "
                      f"{name} before `spec-ab run`", markup=False)


def _print_metrics() -> None:
    """`check --metrics`: every metric name, its unit, which way is better, what it is."""
    from campaign.catalog import METRICS

    for m in METRICS.values():
        if m.name.startswith("acceptance_pos") and m.name != "acceptance_pos0":
            continue
        name = "acceptance_pos0 … 15" if m.name == "acceptance_pos0" else m.name
        out.print(f"{name}  ({m.unit}, {m.direction} is better, from {m.source}): "
                  f"{m.description}", markup=False)


def _boot(campaign: Campaign, campaign_file: Path) -> None:
    """`check --boot`: every distinct launch booted once; exit 3 when one fails."""
    from campaign.run.checks import bootcheck, checkview

    checkview.print_boot_header(out)
    try:
        boots = bootcheck.boot_all(
            campaign, on_boot=lambda arms: checkview.print_booting(out, arms),
            on_done=lambda b: checkview.print_boot(out, b))
    except KeyboardInterrupt:
        raise Interrupted("boot check interrupted: every server it started is stopped; "
                          "nothing was registered") from None
    failed = [b for b in boots if not b.ok]
    if failed:
        arms = ", ".join(", ".join(b.arms) for b in failed)
        raise PreflightError(
            f"boot check: {len(failed)} of {len(boots)} launch(es) did not become ready "
            f"({arms}); nothing was registered",
            hint=f"fix the launch (the log lines above), then `spec-ab check {campaign_file} "
            "--boot` again")


@app.command()
@guarded
def clean(
    campaign_file: Annotated[Path | None, typer.Argument(
        help="Also look at the docker hosts this campaign uses (e.g. ssh://spark2).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List leftovers, remove "
                                          "nothing.")] = False,
) -> None:
    """Remove containers and processes left by runs that are no longer alive (exit 3 when a docker engine the campaign uses does not answer)."""
    from campaign.run.guards import cleanup

    hosts: list[str | None] = [None]
    docker = False  # no campaign, or one without Docker: a missing engine is only a note
    if campaign_file is not None:
        from campaign.campaignfile import load_campaign

        campaign = load_campaign(campaign_file)
        hosts = cleanup.campaign_docker_hosts(campaign)
        docker = cleanup.uses_docker(campaign)
    leftovers = cleanup.find_leftovers(
        docker_hosts=hosts, include_tmpdirs=True,
        quiet_hosts=() if docker or campaign_file is None else (None,))
    # a docker campaign's engine that does not answer is the error below, said once
    unreachable = leftovers.unreachable if docker else []
    said = {u.note for u in unreachable}
    for note in leftovers.notes:
        if note not in said:
            err.print(f"note: {note}", markup=False)
    if not leftovers and not unreachable:
        out.print("no leftovers")
        return
    for item in leftovers:
        # markup=False: "[pid 4242]" is not a style tag
        out.print(f"{'would remove' if dry_run else 'removing'} {item}", markup=False)
    if leftovers and not dry_run:
        cleanup.remove_leftovers(leftovers)
        out.print(f"removed {len(leftovers)} leftover(s)")
    if unreachable:
        again = f"spec-ab clean {campaign_file}" + (" --dry-run" if dry_run else "")
        raise PreflightError("; ".join(u.line(again) for u in unreachable))
