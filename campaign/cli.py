"""The `spec-ab` command: parse, call one core function, render, map errors to exit codes.

Exit codes (every command): 0 done · 1 internal error (a bug: traceback shown) · 2 bad
usage or invalid campaign file · 3 preflight or infrastructure failure · 4 campaign
finished but incomplete (or a `--fail-on` condition met) · 130 interrupted.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from campaign import __version__, secrets
from campaign.errors import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    CampaignError,
    PreflightError,
    UsageError,
)
from campaign.report.formats import FAIL_ON, FORMATS

TEMPLATES: dict[str, str] = {
    "sim": "a whole campaign on the simulated lane (runs anywhere, no GPU)",
    "gb300": "one GB300 station, docker, a candidate patched in by bind mounts",
    "gb10-pair": "two GB10 boxes at TP=2 over Ray (second box via ssh://)",
    "aa": "A/A: the control against itself, to measure the lane's noise",
}

# Choices from the registries, so help, completion and validation list the same values.
FormatChoice = enum.Enum("FormatChoice", {k: k for k in FORMATS}, type=str)  # type: ignore[misc]
FailOnChoice = enum.Enum("FailOnChoice", {k: k for k in FAIL_ON}, type=str)  # type: ignore[misc]
TemplateChoice = enum.Enum("TemplateChoice", {k: k for k in TEMPLATES},  # type: ignore[misc]
                           type=str)


def _plain_flags() -> None:
    """On/off options show no `<bool>` type in help: `--force` is a flag, not a value."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_plain_flags()

COMMAND_ORDER = ("init", "check", "plan", "run", "report", "clean")
"""`spec-ab --help` lists the commands in workflow order (then `sim`)."""

app = typer.Typer(
    name="spec-ab",
    help="Same-window A/B benchmark campaigns for speculative decoding on vLLM, judged by "
    "a rule fixed before the runs.",
    epilog="Workflow: init → check → plan → run → report (clean after a crash). Words "
    "(lane, shard, cell, knee, agentfix, `all`, implied_a): docs/glossary.md. Nightly CI: "
    "docs/nightly-ci.md.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion: choices (--template, --format, ...) complete
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
            # `[after merging arm 'x']`, `[a-z0-9]` are text; a secret never is
            text = escape(secrets.scrub(str(exc)))
            err.print(f"[bold red]error:[/] {text}" if exc.exit_code != EXIT_INTERRUPTED
                      else f"[yellow]{text}[/]", markup=True, highlight=False)
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
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, show_default=False,
                                         help="Log to stderr: -v the steps of a run (boot, "
                                         "ready, passes, stop), -vv debug.")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Log errors only.")] = False,
) -> None:
    """Same-window A/B campaigns for speculative decoding on vLLM."""
    setup_logging(verbose, quiet)


def setup_logging(verbose: int, quiet: bool) -> None:
    """Python logging to stderr: WARNING by default, -v INFO, -vv DEBUG, -q ERROR."""
    level = (logging.ERROR if quiet else logging.DEBUG if verbose >= 2
             else logging.INFO if verbose == 1 else logging.WARNING)
    root = logging.getLogger("campaign")
    for h in list(root.handlers):
        if getattr(h, "_spec_ab", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._spec_ab = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                           "%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


# ------------------------------------------------------------------------ check


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
    from campaign import checkview
    from campaign.aa import checked_drift_band
    from campaign.preflight import preflight as run_preflight
    from campaign.spec import load_campaign

    campaign = load_campaign(campaign_file, lane=lane)
    checked_drift_band(campaign)
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
) -> None:
    """Boot, measure and stop every arm of every pair; survive faults; resume after a crash. Exit 0 complete, 4 incomplete (invalid pairs) or a --fail-on condition, 3 infrastructure, 130 Ctrl-C. The last line is `run_dir=PATH`."""
    from campaign import checkview, runner, stopping
    from campaign.progress import make_progress
    from campaign.spec import load_campaign
    from campaign.store import RunStore

    if resume is None and campaign_file is None:
        raise UsageError("give a campaign file, or --resume RUN_DIR",
                         hint="spec-ab run examples/sim-pair.yaml")
    if redo_invalid and resume is None:
        raise UsageError("--redo-invalid goes with --resume RUN_DIR",
                         hint="spec-ab run --resume RUN_DIR --redo-invalid")
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: is a file, not a folder for run directories")
    if run_dir_file is not None:
        _check_output(run_dir_file, "--run-dir-file")
    rt = runner.Runtime()
    store: RunStore | None = None
    if resume is not None:
        store, campaign = runner.reopen_run(resume, rt)
        if lane is not None and lane != campaign.lane:
            raise UsageError(f"--lane {lane}: {resume} is the shard of lane "
                             f"'{campaign.lane}'", hint=f"spec-ab run --resume {resume}")
        if campaign_file is not None:
            out.print(f"resuming {resume}: its frozen campaign.yaml is used, not "
                      f"{campaign_file}")
    else:
        assert campaign_file is not None
        campaign = load_campaign(campaign_file, lane=lane)
        if campaign.sharded and fail_on:
            raise UsageError(
                "--fail-on judges a verdict, and a shard has none: the verdict pools every "
                "lane's shard", hint="spec-ab report SHARD_DIR_A SHARD_DIR_B --fail-on "
                f"{fail_on[0].value} (after every lane has run)")
        if not campaign.lane_chosen:
            raise UsageError(
                f"{campaign_file} is sharded over lanes ({', '.join(campaign.lane_names)}): "
                "run one lane's shard per machine with --lane",
                hint=f"spec-ab run {campaign_file} --lane {campaign.lane_names[0]}")
    if dry_run:
        checkview.print_dry_run(out, campaign)
        return
    previous: dict[int, Any] = {}

    def on_start(run: RunStore) -> None:
        out.print(f"run directory: {run.run_dir}")
        _announce_run_dir(run.run_dir, run_dir_file)
        rt.progress = make_progress(out, campaign, run.run_dir)
        previous.update(stopping.install(rt.cancel, lambda: rt.doing, _say_stopping))

    try:
        result = runner.run_campaign(
            campaign, None, out_dir, rt, resume=store, skip_preflight=skip_preflight,
            shown_as=campaign_file or resume, on_note=lambda note: err.print(f"note: {note}"),
            on_start=on_start, redo_invalid=redo_invalid)
    finally:
        close = getattr(rt.progress, "close", None)
        if close:
            close()
        stopping.restore(previous)
    code = _print_summary(result.run_dir, [c.value for c in fail_on or []])
    if not result.complete:
        bad = ", ".join(f"pair {p}: {r}" for p, r in result.pairs_invalid.items())
        err.print(f"[yellow]campaign incomplete[/] — {escape(bad)}")
        code = EXIT_INCOMPLETE
    out.print(f"run_dir={result.run_dir}", markup=False)
    if code:
        raise typer.Exit(code)


def _announce_run_dir(run_dir: Path, run_dir_file: Path | None) -> None:
    """The run directory, machine-readably, the moment it exists (a crash later still
    leaves the right path for the upload and the report)."""
    if run_dir_file is not None:
        _write(run_dir_file, f"{run_dir}\n", "--run-dir-file")
    gh = os.environ.get("GITHUB_OUTPUT")
    if gh:
        try:
            with open(gh, "a", encoding="utf-8") as f:
                f.write(f"run_dir={run_dir}\n")
        except OSError as exc:
            err.print(f"note: cannot append to $GITHUB_OUTPUT ({exc.strerror or exc})")


def _say_stopping(text: str) -> None:
    err.print(text, style="yellow", markup=False, highlight=False)


def _print_summary(run_dir: Path, fail_on: list[str]) -> int:
    """The verdict lines; the exit code of `--fail-on` (0 when nothing is asked)."""
    from campaign import report as report_mod

    code = 0
    try:
        rep = report_mod.build_report([run_dir])
        for line in report_mod.summary_lines(rep):
            out.print(line, markup=False)
        code = report_mod.exit_code_for(rep, fail_on) if fail_on else 0
    except CampaignError as exc:
        err.print(f"[yellow]no verdict yet:[/] {escape(str(exc))}")
        code = EXIT_INCOMPLETE if fail_on else 0
    out.print(f"\nresults: {run_dir}\nreport:  spec-ab report {run_dir}")
    return code


# ------------------------------------------------------------------------ report


@app.command()
@guarded
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories "
                                                   "(several: a history side by side).")],
    fmt: Annotated[FormatChoice, typer.Option(
        "--format", "-f",
        help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()))] = FormatChoice("table"),
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file "
                                                "instead of stdout.")] = None,
    rule: Annotated[list[str] | None, typer.Option(
        "--rule", help="Exploratory override of the registered rule, e.g. margin=0.05 or "
        "rule=ci; every output is then marked not pre-registered.")] = None,
    fail_on: Annotated[list[FailOnChoice] | None, typer.Option(
        "--fail-on",
        help="Exit 4 when (repeatable): " + "; ".join(
            f"{k}: {v}" for k, v in FAIL_ON.items()))] = None,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="Metrics to show, comma-separated, e.g. ttft_p99,itl_p99 (the "
        "decision and guardrail metrics are always shown).")] = None,
) -> None:
    """Per-cell and overall adopt / keep-default verdicts under the pre-registered rule.

    With `--format html -o DIR/report.html` the plots are also written as PNG and SVG to
    DIR/plots/."""
    from campaign import report as report_mod

    conditions = [c.value for c in fail_on or []]
    if output is not None:
        _check_output(output, "--output")
    overrides: dict[str, str] = {}
    for item in rule or []:
        if "=" not in item:
            raise UsageError(f"--rule {item}: write KEY=VALUE, e.g. margin=0.05")
        k, v = item.split("=", 1)
        overrides[k.strip()] = v.strip()
    rep = report_mod.build_report(run_dirs, rule_overrides=overrides or None,
                                  metrics=None if metrics is None else [metrics])
    code = report_mod.exit_code_for(rep, conditions)
    try:
        _show_report(rep, fmt.value, output)
    except BrokenPipeError:
        # `spec-ab report RUN | head -1`: the reader has what it wanted; not an error.
        # Point stdout at /dev/null so the interpreter's last flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if code:
        raise typer.Exit(code)


class _PipeConsole(Console):
    """A console that lets a closed pipe reach `report` (rich's default exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _show_report(rep: Any, fmt: str, output: Path | None) -> None:
    """Print or write the report; html to a file also writes its plots beside it."""
    from campaign import report as report_mod

    if fmt == "table" and output is None:
        # the terminal's width, or COLUMNS (rich's default: 80 when neither is known)
        report_mod.print_table(rep, _PipeConsole(highlight=False))
        return
    if fmt == "html" and output is not None:
        from campaign.report import as_html, plots

        figs = plots.write_files(rep, output.parent / "plots")
        text = as_html.render_html(rep, plots.pngs(rep))
        _write(output, text, "--output")
        err.print(f"wrote {output} and {len(figs)} plot files in {output.parent / 'plots'}",
                  markup=False)
        return
    text = report_mod.render(rep, fmt)
    if output is not None:
        _write(output, text, "--output")
        err.print(f"wrote {output}", markup=False)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def _check_output(path: Path, flag: str) -> None:
    """An output file's folder must exist and the path must not be a folder (exit 2)."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        what = "is a file" if path.parent.exists() else "does not exist"
        raise UsageError(f"{flag} {path}: the folder {path.parent} {what}",
                         hint=f"create it first (mkdir -p {path.parent}) or pick another path")


def _write(path: Path, text: str, flag: str) -> None:
    _check_output(path, flag)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


# ------------------------------------------------------------------------ init


@app.command()
@guarded
def init(
    template: Annotated[TemplateChoice, typer.Option(
        help="; ".join(f"{k}: {v}" for k, v in TEMPLATES.items()))] = TemplateChoice("sim"),
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write.")] = Path(
        "campaign.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented campaign file to start from (and the files it names, e.g. the gb300 candidate's patches, beside it)."""
    from importlib import resources

    name = template.value
    _check_output(output, "--output")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", hint="pass --force to overwrite, or -o NEWFILE")
    root = resources.files("campaign").joinpath("templates")
    text = root.joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    companions = _template_files(root.joinpath("files", name))
    for rel, data in companions:
        target = output.parent / rel
        if target.exists() and not force and not (target.is_file()
                                                  and target.read_bytes() == data):
            raise UsageError(f"{target} exists (the {name} template writes it)",
                             hint="pass --force to overwrite, or -o into another folder")
    _write(output, text, "--output")
    for rel, data in companions:
        target = output.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    also = f" and {', '.join(str(output.parent / r) for r, _ in companions)}" if companions else ""
    out.print(f"wrote {output}{also} (template {name}); next: spec-ab check {output}",
              markup=False)


def _template_files(folder: Any, prefix: str = "") -> list[tuple[str, bytes]]:
    """(relative path, content) of the files shipped beside a template."""
    if not folder.is_dir():
        return []
    found: list[tuple[str, bytes]] = []
    for item in sorted(folder.iterdir(), key=lambda i: i.name):
        rel = f"{prefix}{item.name}"
        if item.is_dir():
            found += _template_files(item, rel + "/")
        elif not item.name.endswith(".pyc"):
            found.append((rel, item.read_bytes()))
    return found


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
    pairs: Annotated[int | None, typer.Option(
        "--pairs", help="Tabulate 1…N pairs (default: max(8, registered pairs)).")] = None,
    rule: Annotated[str | None, typer.Option(
        "--rule", help="Plan under `point` or `ci` instead of the registered rule "
        "(exploratory).")] = None,
    invalid_rate: Annotated[str, typer.Option(
        "--invalid-rate", help="Probability that one pass is invalid (after retries).")] = "2%",
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """P(adopt) by pairs, the pairs to register, guardrails and flags of the campaign's
    exact rule, before running it."""
    try:
        from campaign import plan as plan_mod
    except ImportError:
        raise UsageError("`spec-ab plan` is not built yet in this version",
                         hint="see the README's status section") from None
    from campaign.spec import load_campaign

    if rule not in (None, "point", "ci"):
        raise UsageError(f"--rule {rule}: point or ci")
    if fmt not in ("table", "json"):
        raise UsageError(f"--format {fmt}: table or json")
    campaign = load_campaign(campaign_file)
    result = plan_mod.plan_campaign(
        campaign, effect=_pct(effect, "--effect"), noise_run=noise,
        drift=_pct(drift, "--drift") if drift else None, sims=sims, pairs=pairs,
        rule="ci" if rule == "ci" else ("point" if rule == "point" else None),
        invalid_rate=_pct(invalid_rate, "--invalid-rate"))
    if fmt == "json":
        import json

        typer.echo(json.dumps(plan_mod.plan_json(result), indent=1))
    else:
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


def _workflow_order() -> None:
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    def key(c: Any) -> int:
        return rank.get(str(c.name or getattr(c.callback, "__name__", "")), len(rank))

    app.registered_commands.sort(key=key)


_workflow_order()


def main() -> None:
    app()
