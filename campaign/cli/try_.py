"""`spec-ab try`: an afternoon look in one command (the core: `cli.tryout`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from campaign.cli.app import app, err, guarded, out, pct
from campaign.errors import UsageError, storage_error

if TYPE_CHECKING:
    from campaign.campaignfile import Campaign


@app.command(name="try")
@guarded
def try_(
    control: Annotated[str | None, typer.Option(
        "--control", help="The control's command, quoted as one argument "
        "('vllm serve M --port 8000'). Default: the simulated lane.")] = None,
    candidate: Annotated[str | None, typer.Option(
        "--candidate", help="The candidate's command (same port as the control's).")] = None,
    control_env: Annotated[list[str] | None, typer.Option(
        "--control-env", help="NAME=VALUE set for the control (repeatable).")] = None,
    candidate_env: Annotated[list[str] | None, typer.Option(
        "--candidate-env", help="NAME=VALUE set for the candidate (repeatable): alone, the "
        "candidate is the control's launch with it.")] = None,
    control_url: Annotated[str | None, typer.Option(
        "--control-url", help="A running control server (http://host:port), with "
        "--candidate-url.")] = None,
    candidate_url: Annotated[str | None, typer.Option(
        "--candidate-url", help="A running candidate server.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="The served model name (as /v1/models lists it); needed for your "
        "own launches.")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", min=1, max=65535, help="The port the commands listen on (default: their "
        "--port, else vLLM's 8000).")] = None,
    time_limit: Annotated[str | None, typer.Option(
        "--time-limit", help="The most time the look takes (90s, 5m, 1h): the sequential "
        "design's pairs are sized to fit it. Default: 5m on the simulated lane, else "
        "30m.")] = None,
    margin: Annotated[str, typer.Option(
        "--margin", help="The gain to show on decode throughput (10% or 0.10).")] = "10%",
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, max=1024, help="Concurrent streams of the agent-prompt "
        "passes.")] = 4,
    requests: Annotated[int, typer.Option(
        "--requests", min=8, max=100000, help="Requests per content class and pass.")] = 128,
    out_dir: Annotated[Path, typer.Option(
        "--out", help="Folder for the run directory and the file to register.")] = Path(
            "results"),
    lane: Annotated[str | None, typer.Option(
        "--lane", help="Lane label (default: sim-try on the simulated lane, else try).")] = None,
    skip_preflight: Annotated[bool, typer.Option(
        "--skip-preflight", help="Do not run the preflight first.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the campaign file the look would run; start nothing.")] = False,
) -> None:
    """An exploratory A/B look in one command, no campaign file: pairs until decided or the time limit.

    Control → candidate pairs on the demo's agent prompts (prose decides, shell too) until
    a sequential design decides or the time limit ends. With no launch given, the
    simulated lane: its default against adaptive verification. The result is a run
    directory marked exploratory (never pre-registered) and, beside it, the campaign file
    that registers the same campaign for a night. Exit 0 decided, 4 no verdict in time, 2
    bad options, 3 infrastructure, 130 Ctrl-C."""
    from campaign.cli import tryout

    args = tryout.TryArgs(
        control=control, candidate=candidate, control_env=tuple(control_env or ()),
        candidate_env=tuple(candidate_env or ()), control_url=control_url,
        candidate_url=candidate_url, model=model, port=port,
        margin=pct(margin, "--margin", 0.001, 10.0),
        time_limit_s=None if time_limit is None else tryout.parse_duration(time_limit),
        concurrency=concurrency,
        requests=requests, lane=lane)
    if dry_run:
        out.print(tryout.dry_run(args), markup=False, highlight=False, end="")
        return
    _check_out(out_dir)
    hooks = tryout.Hooks(say=lambda line: out.print(line, markup=False, highlight=False),
                         note=lambda line: err.print(f"note: {line}", markup=False),
                         progress=_progress, interrupts=_interrupts)
    tried = tryout.run_try(args, out_dir, hooks, skip_preflight=skip_preflight)
    for line in tried.lines:
        out.print(line, markup=False, highlight=False)
    out.print(f"run_dir={tried.run_dir}", markup=False)
    if tried.code:
        raise typer.Exit(tried.code)


def _check_out(out_dir: Path) -> None:
    try:
        is_file = out_dir.exists() and not out_dir.is_dir()
    except OSError as exc:
        raise storage_error(exc, "the run directory", out_dir) from None
    if is_file:
        raise UsageError(f"--out {out_dir}: is a file, not a folder for run directories")


def _progress(campaign: Campaign, run_dir: Path) -> Any:
    from campaign.run.progress import make_progress

    return make_progress(out, campaign, run_dir)


def _interrupts(cancel: threading.Event, doing: Callable[[], str]) -> Callable[[], None]:
    from campaign.run import interrupt

    handlers = interrupt.install(cancel, doing, lambda text: err.print(
        text, style="yellow", markup=False, highlight=False))
    return lambda: interrupt.restore(handlers)
