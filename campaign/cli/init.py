"""`spec-ab init`: a commented campaign file to start from (`campaign.templates`)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from campaign.cli.app import app, guarded, out
from campaign.templates import TEMPLATES, write_template

TemplateChoice = enum.Enum("TemplateChoice", {k: k for k in TEMPLATES},  # type: ignore[misc]
                           type=str)


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
    name = template.value
    written = write_template(name, output, force)
    also = f" and {', '.join(str(p) for p in written[1:])}" if written[1:] else ""
    out.print(f"wrote {output}{also} (template {name}); next: spec-ab check {output}",
              markup=False)
