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
from campaign.cli.app import app, err, guarded, out, pct
from campaign.errors import UsageError

PlanFormat = enum.Enum("PlanFormat", {k: k for k in ("table", "json")},  # type: ignore[misc]
                       type=str)
PlanRule = enum.Enum("PlanRule", {k: k for k in RULES}, type=str)  # type: ignore[misc]

SIMS_RANGE = (100, 100_000)
"""--sims: under 100 P(adopt) is noise; 100,000 (25 times the default) puts its Monte Carlo
error under ±0.2% and takes ~0.4 GB and ~25 s at the default pairs (measured); more only
costs memory and time (a billion would need ~4 TB)."""
EFFECT_RANGE = (-0.9, 9.0)
"""--effect: a change of -90% to +900% (a tenfold speed-up); -100% or less is no throughput
at all, and a huge or non-finite effect makes no simulated value (it was a traceback)."""
DRIFT_RANGE = (0.0, 0.5)
"""--drift: a per-boot sd of 0 to 50% (a lane drifting more than that is not benchmarkable)."""


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
    fmt: Annotated[PlanFormat, typer.Option("--format", "-f", help="table or json.")] = PlanFormat(
        "table"),
    full: Annotated[bool, typer.Option(
        "--all", help="Also P(adopt) by pairs, the guardrails, flags and candidates by "
        "pairs, AB vs ABBA and the lanes (the JSON always holds all of it).")] = False,
) -> None:
    """The design the campaign registers, by Monte Carlo of its exact rule: P(adopt) by true effect and the verdict on it (--all: by pairs, guardrails and flags, AB vs ABBA, lanes)."""
    from campaign import plan as plan_mod
    from campaign.campaignfile import load_campaign

    lo, hi = SIMS_RANGE
    if not lo <= sims <= hi:
        raise UsageError(f"--sims {sims}: out of range; give {lo} to {hi:,} simulated "
                         "campaigns per effect", hint="the default, 4000, is enough to plan")
    size = pct(effect, "--effect", *EFFECT_RANGE)
    sd = pct(drift, "--drift", *DRIFT_RANGE) if drift else None
    p_invalid = pct(invalid_rate, "--invalid-rate", 0.0, 1.0, hi_open=True)
    campaign = load_campaign(campaign_file)
    result = plan_mod.plan_campaign(
        campaign, effect=size, noise_run=noise, drift=sd, sims=sims, pairs=pairs,
        rule=None if rule is None else rule.value, invalid_rate=p_invalid,
        progress=lambda text: err.print(f"plan: {text}…", markup=False))
    if fmt.value == "json":
        sys.stdout.write(json.dumps(plan_mod.plan_json(result), indent=1) + "\n")
    else:
        plan_mod.print_plan(_prose_console(), result, full=full)


def _prose_console() -> Console:
    """A terminal (or COLUMNS): the prose wraps at its width, at word boundaries. Piped
    without COLUMNS (a log): `out`, whose lines stay whole for grep."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console(highlight=False)
    return out
