"""The `spec-ab` command: parse, call one core function, render, map errors to exit codes.

Exit codes (every command): 0 done · 1 internal error (a bug: traceback shown) · 2 bad
usage or invalid campaign file · 3 preflight or infrastructure failure · 4 campaign
finished but incomplete (or a `--fail-on` condition met) · 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from campaign import __version__
from campaign.errors import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    CampaignError,
    Interrupted,
    PreflightError,
    UsageError,
)

app = typer.Typer(
    name="spec-ab",
    help="Same-window A/B benchmark campaigns for speculative decoding on vLLM, judged by "
    "a rule fixed before the runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Not a terminal (CI logs, pipes): lines are not wrapped (paths stay copyable) and tables
# get room; on a terminal rich measures it.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 180
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Expected failures → one message on stderr and their exit code (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CampaignError as exc:
            err.print(f"[bold red]error:[/] {exc}" if exc.exit_code != EXIT_INTERRUPTED
                      else f"[yellow]{exc}[/]", markup=True, highlight=False)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"spec-ab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Same-window A/B campaigns for speculative decoding on vLLM."""


# ------------------------------------------------------------------------ check


@app.command()
@guarded
def check(
    campaign_file: Annotated[Path, typer.Argument(help="Campaign YAML file.")],
    preflight: Annotated[bool, typer.Option(help="Also check this machine is ready "
                                            "(starts nothing).")] = True,
) -> None:
    """Validate a campaign file, show every arm's launch, the schedule and the duration estimate, then run the preflight (exit 3 when the machine is not ready)."""
    from campaign import checkview
    from campaign.preflight import preflight as run_preflight
    from campaign.spec import load_campaign

    campaign = load_campaign(campaign_file)
    checkview.print_campaign(out, campaign)
    if not preflight:
        return
    facts, problems = run_preflight(campaign)
    checkview.print_preflight(out, facts, problems)
    if problems:
        raise PreflightError(f"preflight found {len(problems)} problem(s); fix them and run "
                             f"`spec-ab check {campaign_file}` again")


# ------------------------------------------------------------------------ run


@app.command()
@guarded
def run(
    campaign_file: Annotated[Path | None, typer.Argument(help="Campaign YAML file.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for run directories "
                                                 "(default: the file's results_dir).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue this run directory after a "
                                                "crash or Ctrl-C (uses its frozen rule).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the schedule, every launch "
                                          "and AIPerf command line; start nothing.")] = False,
    skip_preflight: Annotated[bool, typer.Option("--skip-preflight",
                                                 help="Do not run the preflight first.")] = False,
) -> None:
    """Boot, measure and stop every arm of every pair; survive faults; resume after a crash. Exit 0 complete, 4 incomplete (invalid pairs), 3 infrastructure, 130 Ctrl-C."""
    from campaign import checkview, runner
    from campaign.preflight import preflight as run_preflight
    from campaign.progress import make_progress
    from campaign.spec import load_campaign

    if resume is None and campaign_file is None:
        raise UsageError("give a campaign file, or --resume RUN_DIR",
                         hint="spec-ab run examples/sim-pair.yaml")
    rt = runner.Runtime()
    if resume is not None:
        store, campaign = runner.reopen_run(resume, rt)
        if campaign_file is not None:
            out.print(f"resuming {resume}: its frozen campaign.yaml is used, not "
                      f"{campaign_file}")
    else:
        assert campaign_file is not None
        campaign = load_campaign(campaign_file)
    if dry_run:
        checkview.print_dry_run(out, campaign)
        return
    _refuse_leftovers(campaign)  # first: a leftover server also explains a busy port
    if not skip_preflight:
        _, problems = run_preflight(campaign)
        if problems:
            raise PreflightError("preflight failed:\n" + "\n".join(f"  - {p}" for p in problems),
                                 hint=f"spec-ab check {campaign_file or resume} shows details")
    if resume is None:
        root = out_dir or campaign.resolve(campaign.results_dir)
        assert campaign_file is not None
        store = runner.start_run(campaign, campaign_file.read_bytes(), root, rt)
    out.print(f"run directory: {store.run_dir}")
    progress = make_progress(out)
    rt.progress = progress
    previous = _install_signal_handlers(rt.cancel)
    try:
        result = runner.execute(campaign, store, rt)
    except Interrupted:
        raise Interrupted(f"interrupted; measurements so far are kept. Continue with:\n  "
                          f"spec-ab run --resume {store.run_dir}") from None
    finally:
        close = getattr(progress, "close", None)
        if close:
            close()
        _restore_signal_handlers(previous)
    _print_summary(store.run_dir)
    if not result.complete:
        bad = ", ".join(f"pair {p}: {r}" for p, r in result.pairs_invalid.items())
        err.print(f"[yellow]campaign incomplete[/] — {bad}")
        raise typer.Exit(EXIT_INCOMPLETE)


def _docker_hosts(campaign: Any) -> list[str | None]:
    """Every docker engine a campaign uses (None = the local one)."""
    from campaign.servers.docker import docker_hosts
    from campaign.spec import DockerLaunch

    hosts: list[str | None] = [None]
    for launch in campaign.launches.values():
        if isinstance(launch, DockerLaunch):
            hosts += [h for h in docker_hosts(launch) if h not in hosts]
    return hosts


def _refuse_leftovers(campaign: Any) -> None:
    from campaign import cleanup

    leftovers = cleanup.find_leftovers(docker_hosts=_docker_hosts(campaign))
    for note in leftovers.notes:
        err.print(f"note: {note}")
    if leftovers:
        raise PreflightError(
            f"{len(leftovers)} leftover(s) of earlier runs hold the lane: "
            + ", ".join(str(x) for x in leftovers[:5]),
            hint="remove them with `spec-ab clean`",
        )


def _install_signal_handlers(cancel: Any) -> dict[int, Any]:
    """First Ctrl-C/SIGTERM: stop gracefully (AIPerf, server, journal). Second: at once."""
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        err.print("\n[yellow]stopping: AIPerf and the server are being stopped; press Ctrl-C "
                  "again to stop at once[/]")

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, h in previous.items():
        signal.signal(sig, h)


def _print_summary(run_dir: Path) -> None:
    try:
        from campaign import report as report_mod

        rep = report_mod.build_report([run_dir])
        for line in report_mod.summary_lines(rep):
            out.print(line, markup=False)
    except ImportError:
        pass
    except CampaignError as exc:
        err.print(f"[yellow]no verdict yet:[/] {exc}")
    out.print(f"\nresults: {run_dir}\nreport:  spec-ab report {run_dir}")


# ------------------------------------------------------------------------ report


@app.command()
@guarded
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories "
                                                   "(several: a history side by side).")],
    fmt: Annotated[str, typer.Option("--format", "-f",
                                     help="table | markdown | json | html")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file "
                                                "instead of stdout.")] = None,
    rule: Annotated[list[str] | None, typer.Option(
        "--rule", help="Exploratory override of the registered rule, e.g. margin=0.05 or "
        "rule=ci; every output is then marked not pre-registered.")] = None,
    fail_on: Annotated[list[str] | None, typer.Option(
        "--fail-on", help="Exit 4 when: loss | keep-default | incomplete (repeatable).")] = None,
) -> None:
    """Per-cell and overall adopt / keep-default verdicts under the pre-registered rule."""
    try:
        from campaign import report as report_mod
    except ImportError:
        raise UsageError("`spec-ab report` is not built yet in this version") from None
    if fmt not in ("table", "markdown", "json", "html"):
        raise UsageError(f"--format {fmt}: choose table, markdown, json or html")
    for cond in fail_on or []:
        if cond not in ("loss", "keep-default", "incomplete"):
            raise UsageError(f"--fail-on {cond}: choose loss, keep-default or incomplete")
    overrides: dict[str, str] = {}
    for item in rule or []:
        if "=" not in item:
            raise UsageError(f"--rule {item}: write KEY=VALUE, e.g. margin=0.05")
        k, v = item.split("=", 1)
        overrides[k.strip()] = v.strip()
    rep = report_mod.build_report(run_dirs, rule_overrides=overrides or None)
    if fmt == "table" and output is None:
        report_mod.print_table(rep, out)
    else:
        text = report_mod.render(rep, fmt)  # type: ignore[arg-type]
        if output is not None:
            output.write_text(text, encoding="utf-8")
            err.print(f"wrote {output}")
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    code = report_mod.exit_code_for(rep, list(fail_on or []))
    if code:
        raise typer.Exit(code)


# ------------------------------------------------------------------------ init


TEMPLATES = ("sim", "gb300", "gb10-pair", "aa")


@app.command()
@guarded
def init(
    template: Annotated[str, typer.Option(help="sim | gb300 | gb10-pair | aa")] = "sim",
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write.")] = Path(
        "campaign.yaml"),
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented campaign file to start from."""
    from importlib import resources

    if template not in TEMPLATES:
        raise UsageError(f"--template {template}: choose one of {', '.join(TEMPLATES)}")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", hint="pass --force to overwrite, or -o NEWFILE")
    text = resources.files("campaign").joinpath(f"templates/{template}.yaml").read_text()
    output.write_text(text, encoding="utf-8")
    out.print(f"wrote {output} (template {template}); next: spec-ab check {output}")


# ------------------------------------------------------------------------ plan


@app.command()
@guarded
def plan(
    campaign_file: Annotated[Path, typer.Argument(help="Campaign YAML file.")],
    effect: Annotated[str, typer.Option(help="True effect to size for, e.g. 15%.")] = "15%",
    noise: Annotated[Path | None, typer.Option(help="Take the noise from this A/A run "
                                               "directory.")] = None,
    drift: Annotated[str | None, typer.Option(help="Per-boot drift (sd), e.g. 3%.")] = None,
    sims: Annotated[int, typer.Option(help="Monte Carlo campaigns per effect.")] = 4000,
) -> None:
    """Power and false-adopt rate of the campaign's exact rule, before running it."""
    try:
        from campaign import plan as plan_mod
    except ImportError:
        raise UsageError("`spec-ab plan` is not built yet in this version",
                         hint="see the README's status section") from None
    from campaign.spec import load_campaign

    campaign = load_campaign(campaign_file)
    result = plan_mod.plan_campaign(campaign, effect=_pct(effect, "--effect"),
                                    noise_run=noise,
                                    drift=_pct(drift, "--drift") if drift else None, sims=sims)
    plan_mod.print_plan(out, result)


def _pct(text: str, flag: str) -> float:
    try:
        t = text.strip()
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"{flag} {text}: write a percentage like 15% or a fraction 0.15") from None


# ------------------------------------------------------------------------ clean


@app.command()
@guarded
def clean(
    campaign_file: Annotated[Path | None, typer.Argument(
        help="Also look at the docker hosts this campaign uses (e.g. ssh://spark2).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List leftovers, remove "
                                          "nothing.")] = False,
) -> None:
    """Remove containers and processes left by runs that are no longer alive."""
    from campaign import cleanup

    hosts: list[str | None] = [None]
    if campaign_file is not None:
        from campaign.spec import load_campaign

        hosts = _docker_hosts(load_campaign(campaign_file))
    leftovers = cleanup.find_leftovers(docker_hosts=hosts)
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


# ------------------------------------------------------------------------ sim


def _mount_sim() -> None:
    try:
        from campaign.sim.cli import sim_app
    except ImportError:
        sim_app = typer.Typer(help="The simulated speculative-decoding lane (not built yet).")

        @sim_app.command()
        def serve() -> None:
            """Not built yet."""
            err.print("spec-ab sim is not built yet in this version")
            raise typer.Exit(2)

    app.add_typer(sim_app, name="sim",
                  help="The simulated speculative-decoding lane (vLLM-compatible, no GPU).")


_mount_sim()


def main() -> None:
    app()
