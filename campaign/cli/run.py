"""`spec-ab run`: one campaign (or one lane's shard), resumed or fresh, with its live status."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from campaign.cli.app import FailOnChoice, app, err, guarded, out
from campaign.errors import EXIT_INCOMPLETE, CampaignError, UsageError, storage_error
from campaign.report.formats import FAIL_ON
from campaign.results import chain
from campaign.textfiles import check_output_path, write_output

if TYPE_CHECKING:
    from collections.abc import Callable

    from campaign.campaignfile import Campaign
    from campaign.results.store import RunStore
    from campaign.run import runner
    from campaign.run.checks.bootcheck import Boot


@app.command()
@guarded
def run(
    campaign_file: Annotated[Path | None, typer.Argument(help="Campaign YAML file.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for run directories "
                                                 "(default: the file's results_dir; not with "
                                                 "--resume: a run's folder is fixed).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue this run directory after a "
                                                "crash or Ctrl-C (uses its frozen rule).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the schedule, every launch "
                                          "and AIPerf command line; start nothing.")] = False,
    skip_preflight: Annotated[bool, typer.Option("--skip-preflight",
                                                 help="Do not run the preflight first.")] = False,
    skip_boot_check: Annotated[bool, typer.Option(
        "--skip-boot-check", help="Do not boot each distinct launch once before the first "
        "measured pass of a new run (a launch that cannot boot is then found when its "
        "first slot starts).")] = False,
    run_dir_file: Annotated[Path | None, typer.Option(
        "--run-dir-file", help="Write the run directory's path to this file as soon as it "
        "exists (for scripts and CI; also `run_dir=` in $GITHUB_OUTPUT when set).")] = None,
    fail_on: Annotated[list[FailOnChoice] | None, typer.Option(
        "--fail-on",
        help="After the run, exit 4 when (repeatable): " + "; ".join(
            f"{k}: {v}" for k, v in FAIL_ON.items()))] = None,
    redo_invalid: Annotated[bool, typer.Option(
        "--redo-invalid", help="With --resume: measure the pairs left invalid again (whole, "
        "both arms, as a new attempt in the same run directory).")] = False,
    lane: Annotated[str | None, typer.Option(
        "--lane", help="Run this lane's shard of a campaign with a `lanes:` table (its "
        "pairs only; `spec-ab report` pools the shards).")] = None,
    sign_key: Annotated[Path | None, typer.Option(
        "--sign-key",
        help="Sign the registration with this ssh key (ssh-keygen -Y sign) before the "
        "first boot; `spec-ab verify --allowed-signers` checks it.")] = None,
) -> None:
    """Boot, measure and stop every arm of every pair; survive faults; resume after a crash. A new run first boots each distinct launch once (exit 3, nothing measured, when one does not become ready). Exit 0 complete, 4 incomplete (invalid pairs) or a --fail-on condition, 3 infrastructure, 130 Ctrl-C. The last line is `run_dir=PATH`."""
    from campaign.run import runner
    from campaign.run.checks import checkview

    _check_options(campaign_file, out_dir, resume, run_dir_file, redo_invalid, sign_key)
    rt = runner.Runtime()
    store, campaign = _campaign(campaign_file, resume, lane, rt)
    asked = [c.value for c in fail_on or []]
    handlers: dict[int, Any] = {}  # the signal handlers Ctrl-C replaced while measuring

    def on_start(run: RunStore) -> None:
        from campaign.run import interrupt
        from campaign.run.progress import make_progress

        if store is None:  # a new run: a guardrail's quantile its passes are too small for,
            # or one the design cannot show within its limit (`check` refuses it)
            from campaign.campaignfile.checks import thin_tails
            from campaign.verdict.showable import assess_campaign

            checkview.print_thin_tails(err, thin_tails(campaign))
            checkview.print_showable(err, [s for s in assess_campaign(campaign) if not s.ok])
        out.print(f"run directory: {run.run_dir}")
        _announce_run_dir(run.run_dir, run_dir_file)
        rt.progress = make_progress(out, campaign, run.run_dir, redo_invalid=redo_invalid)
        handlers.update(interrupt.install(rt.cancel, lambda: rt.doing, _say_interrupted))

    opts = runner.RunOptions(
        resume=store, skip_preflight=skip_preflight, shown_as=campaign_file or resume,
        on_note=lambda note: err.print(f"note: {note}"), on_start=on_start,
        redo_invalid=redo_invalid, lane=lane, fail_on=asked, sign_key=sign_key,
        boot_check=not skip_boot_check, on_boot=_booting(), on_booted=_booted)
    if dry_run:
        runner.refuse_unrunnable(campaign, opts)
        if store is not None:
            _say_torn(store.run_dir)
        checkview.print_dry_run(out, campaign)
        return
    result = _run(campaign, out_dir, rt, opts, handlers)
    code = _print_summary(result.run_dir, asked)
    if not result.complete:
        bad = ", ".join(f"pair {p}: {r}" for p, r in result.pairs_invalid.items())
        err.print(f"[yellow]campaign incomplete[/] — {escape(bad)}")
        code = EXIT_INCOMPLETE
    out.print(f"run_dir={result.run_dir}", markup=False)
    if code:
        raise typer.Exit(code)


def _booting() -> Callable[[list[str]], None]:
    """The boot check's lines before each boot (`check --boot`'s), a header before the
    first."""
    from campaign.run.checks import checkview

    started: list[bool] = []

    def booting(arms: list[str]) -> None:
        if not started:
            started.append(True)
            out.print("boot check before the first pair (each distinct launch once but the "
                      "first slot's, which boots for pair 1 at once: up to ready and a 1-token "
                      "request, then stopped; --skip-boot-check skips it)",
                      markup=False, highlight=False)
        checkview.print_booting(out, arms)

    return booting


def _booted(boot: Boot) -> None:
    from campaign.run.checks import checkview

    checkview.print_boot(out, boot)


def _say_torn(run_dir: Path) -> None:
    """What the resume would do with a torn last journal line (`--dry-run` changes nothing)."""
    from campaign.results import damage

    line = damage.torn_line(run_dir)
    if line is not None:
        err.print(f"note: {run_dir / 'journal.jsonl'}: the last line (line {line}) is torn — "
                  f"the resume sets its bytes aside in journal.jsonl.torn-<n> beside it and "
                  f"goes on from line {line - 1}; --dry-run changes nothing", markup=False)


def _check_options(campaign_file: Path | None, out_dir: Path | None, resume: Path | None,
                   run_dir_file: Path | None, redo_invalid: bool, sign_key: Path | None) -> None:
    """The options that do not go together, before anything is read."""
    if sign_key is not None and resume is not None:
        raise UsageError("--sign-key signs a new registration: a resumed run keeps the "
                         "signature it was started with",
                         hint="drop --sign-key with --resume")
    if resume is None and campaign_file is None:
        raise UsageError("give a campaign file, or --resume RUN_DIR",
                         hint="spec-ab run examples/sim-pair.yaml")
    if redo_invalid and resume is None:
        raise UsageError("--redo-invalid goes with --resume RUN_DIR",
                         hint="spec-ab run --resume RUN_DIR --redo-invalid")
    if resume is not None and out_dir is not None:
        raise UsageError(f"--out {out_dir}: --out cannot apply to a resume: the run's folder "
                         f"is fixed, and {resume} goes on where it is",
                         hint=f"drop --out: spec-ab run --resume {resume}")
    try:
        out_is_file = out_dir is not None and out_dir.exists() and not out_dir.is_dir()
    except OSError as exc:  # a name too long for the system (ELOOP is left to mkdir)
        raise storage_error(exc, "the run directory", out_dir) from None
    if out_is_file:
        raise UsageError(f"--out {out_dir}: is a file, not a folder for run directories")
    if run_dir_file is not None:
        check_output_path(run_dir_file, "--run-dir-file")


def _campaign(campaign_file: Path | None, resume: Path | None, lane: str | None,
              rt: runner.Runtime) -> tuple[RunStore | None, Campaign]:
    """The run to resume (its frozen campaign) or the campaign file, on `lane`."""
    from campaign.campaignfile import load_campaign
    from campaign.run import runner
    from campaign.run.checks import launchcheck

    if resume is not None:
        store, campaign = runner.reopen_run(resume, rt)
        if campaign_file is not None and (lane is None or lane == campaign.lane):
            out.print(f"resuming {resume}: its frozen campaign.yaml is used, not "
                      f"{campaign_file}")
        return store, campaign
    assert campaign_file is not None
    campaign = load_campaign(campaign_file, lane=lane)
    # what `spec-ab sim serve` would refuse at boot, refused before anything is registered
    launchcheck.refuse(launchcheck.check_launches(campaign, None), str(campaign_file))
    return None, campaign


def _run(campaign: Campaign, out_dir: Path | None, rt: runner.Runtime,
         opts: runner.RunOptions, handlers: dict[int, Any]) -> runner.RunResult:
    """The run's first line (what it runs: the campaign, its lane, its pairs), once
    nothing refuses it as asked; `run_campaign`, then the live status closed and the
    Ctrl-C handlers `opts.on_start` installed put back."""
    from campaign.run import interrupt, runner
    from campaign.run.progress import run_line

    runner.refuse_unrunnable(campaign, opts)
    out.print(run_line(campaign, resumed=opts.resume is not None), markup=False,
              highlight=False)
    try:
        return runner.run_campaign(campaign, None, out_dir, rt, opts)
    finally:
        close = getattr(rt.progress, "close", None)
        if close:
            close()
        interrupt.restore(handlers)


def _announce_run_dir(run_dir: Path, run_dir_file: Path | None) -> None:
    """The run directory, machine-readably, the moment it exists (a crash later still
    leaves the right path for the upload and the report)."""
    if run_dir_file is not None:
        write_output(run_dir_file, f"{run_dir}\n", "--run-dir-file")
    gh = os.environ.get("GITHUB_OUTPUT")
    if gh:
        try:
            with open(gh, "a", encoding="utf-8") as f:
                f.write(f"run_dir={run_dir}\n")
        except OSError as exc:
            err.print(f"note: cannot append to $GITHUB_OUTPUT ({exc.strerror or exc})")


def _say_interrupted(text: str) -> None:
    err.print(text, style="yellow", markup=False, highlight=False)


def _print_summary(run_dir: Path, fail_on: list[str]) -> int:
    """The verdict lines; the exit code of `--fail-on` (0 when nothing is asked)."""
    from campaign import report as report_mod

    code = 0
    try:
        rep = report_mod.build_report([run_dir])
        for line in report_mod.summary_lines(rep):
            out.print(line, markup=False)
        held = report_mod.fail_on_held(rep, fail_on) if fail_on else []
        for line in held:
            err.print(line, markup=False)
        code = EXIT_INCOMPLETE if held else 0
    except CampaignError as exc:
        err.print(f"[yellow]no verdict yet:[/] {escape(str(exc))}")
        code = EXIT_INCOMPLETE if fail_on else 0
    out.print(f"\nresults: {run_dir}\nreport:  spec-ab report {run_dir}")
    head = chain.head(run_dir / "journal.jsonl")
    # the run's digest vouches for every journal line: kept in the CI log, it is an
    # anchor outside the folder (`spec-ab verify RUN --digest D`)
    out.print(f"verify:  spec-ab verify {run_dir} --digest {head}\n"
              f"digest=sha256:{head}", markup=False)
    return code
