"""`spec-ab plan`: the campaign's own rule by Monte Carlo, before the night."""

from __future__ import annotations

import enum
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from campaign.campaignfile.models import RULES
from campaign.cli.app import app, guarded, out, pct

PlanFormat = enum.Enum("PlanFormat", {k: k for k in ("table", "json")},  # type: ignore[misc]
                       type=str)
PlanRule = enum.Enum("PlanRule", {k: k for k in RULES}, type=str)  # type: ignore[misc]


@app.command()
@guarded
def plan(
    campaign_file: Annotated[Path, typer.Argument(help="Campaign YAML file.")],
    effect: Annotated[str, typer.Option(help="True effect to size for, e.g. 15%.")] = "15%",
    noise: Annotated[Path | None, typer.Option(help="Take the noise from this run "
                                               "directory (an A/A run, or an earlier run of "
                                               "the lane: its control's passes): the "
                                               "primary's and each guardrail's.")] = None,
    drift: Annotated[str | None, typer.Option(help="Per-boot drift (sd), e.g. 3%.")] = None,
    sims: Annotated[int, typer.Option(help="Monte Carlo campaigns per effect.")] = 4000,
    pairs: Annotated[int | None, typer.Option(
        "--pairs", help="Tabulate 1…N pairs (default: max(8, registered pairs)).")] = None,
    rule: Annotated[PlanRule | None, typer.Option(
        "--rule", help="Plan under another rule than the registered one "
        "(exploratory).")] = None,
    invalid_rate: Annotated[str, typer.Option(
        "--invalid-rate", help="Probability that one pass is invalid (after retries).")] = "2%",
    fmt: Annotated[PlanFormat, typer.Option("--format", help="table or json.")] = PlanFormat(
        "table"),
) -> None:
    """P(adopt) by pairs, the pairs to register, guardrails and flags of the campaign's exact rule, before running it."""
    from campaign import plan as plan_mod
    from campaign.campaignfile import load_campaign

    campaign = load_campaign(campaign_file)
    result = plan_mod.plan_campaign(
        campaign, effect=pct(effect, "--effect"), noise_run=noise,
        drift=pct(drift, "--drift") if drift else None, sims=sims, pairs=pairs,
        rule=None if rule is None else rule.value,
        invalid_rate=pct(invalid_rate, "--invalid-rate"))
    if fmt.value == "json":
        typer.echo(json.dumps(plan_mod.plan_json(result), indent=1))
    else:
        plan_mod.print_plan(_prose_console(), result)


def _prose_console() -> Console:
    """A terminal (or COLUMNS): the prose wraps at its width, at word boundaries. Piped
    without COLUMNS (a log): `out`, whose lines stay whole for grep."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(highlight=False)
    return out
