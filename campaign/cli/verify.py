"""`spec-ab verify`: is a run folder what was measured? Every copy checked against the others."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from campaign.cli.app import app, guarded, out
from campaign.errors import EXIT_USAGE

if TYPE_CHECKING:
    from campaign.results.integrity import Verification


@app.command()
@guarded
def verify(
    run_dir: Annotated[Path, typer.Argument(help="A run directory made by `spec-ab run`.")],
    digest: Annotated[str | None, typer.Option(
        "--digest", help="The run's digest as kept outside the folder (the `digest=` line "
        "`spec-ab run` printed, or `integrity.journal_sha256` of a report's JSON); at "
        "least 12 hex digits, else exit 2. Fails on a run whose chain was not walked.")] = None,
    allowed_signers: Annotated[Path | None, typer.Option(
        "--allowed-signers", help="Check registration.sig against this OpenSSH "
        "allowed_signers file (`spec-ab run --sign-key` made it).")] = None,
    signer: Annotated[str | None, typer.Option(
        "--signer", help="The identity that must have signed (default: any in "
        "--allowed-signers; needs --allowed-signers).")] = None,
) -> None:
    """Check a run folder against itself and an outside copy: the journal's hash chain line by line, preregistration.json and campaign.yaml against what the journal registered before the first boot, the registration's own hashes, every row of passes.csv against the journal, and the run's digest against --digest, and the registration's signature (--allowed-signers). Exit 0 when every check holds, 2 when one fails (each failing check is named)."""
    from campaign.results.integrity import verify_run  # the results stack: not for --help

    result = _with_looks(verify_run(run_dir, digest, allowed_signers=allowed_signers,
                                    signer=signer))
    for c in result.checks:
        mark = "[green]ok[/]  " if c.ok else "[bold red]FAIL[/]"
        out.print(f"{mark} {c.name:<12} {escape(c.text)}")
    out.print(f"digest=sha256:{result.digest or 'none'}", markup=False)
    if not result.ok:
        failed = ", ".join(c.name for c in result.checks if not c.ok)
        out.print(f"[bold red]{escape(str(run_dir))}: not verified ({failed})[/]")
        raise typer.Exit(EXIT_USAGE)
    if digest is None:
        out.print("verified within the folder; give --digest (kept outside it, e.g. in the "
                  "CI log) to rule out a consistent rewrite of the whole folder")


def _with_looks(result: Verification) -> Verification:
    """A sequential design's journaled looks compared with the looks its registered rows
    give (`report`'s judgement): a look that disagrees fails the `structure` check. A run
    the report cannot judge is left to the checks that name its damage."""
    from campaign.errors import ResultsError
    from campaign.report.build import build_report, recomputed_looks
    from campaign.results import structure
    from campaign.results.integrity import Check
    from campaign.results.journal import read_journal
    from campaign.results.registration import Registration

    run_dir = result.run_dir
    if not Registration.load(run_dir / "preregistration.json").rule.get("sequential"):
        return result
    try:
        verdict = build_report([run_dir]).latest.verdict
    except ResultsError:
        return result
    found = structure.look_problems(read_journal(run_dir), recomputed_looks(verdict),
                                    run_dir)
    if not found:
        return result
    checks = []
    for c in result.checks:
        if c.name == "structure":
            text = "; ".join(found) if c.ok else c.text + "; " + "; ".join(found)
            c = Check("structure", False, text)
        checks.append(c)
    return dataclasses.replace(result, checks=tuple(checks))
