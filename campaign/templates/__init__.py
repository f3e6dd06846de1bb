"""The campaign files `spec-ab init` starts from, and the files each one names.

`write_template(name, output, force)` writes `<name>.yaml` to `output` and the files shipped
in `files/<name>/` beside it (e.g. the gb300 candidate's patches), refusing to overwrite
anything that differs unless `force`.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from campaign.errors import UsageError
from campaign.textfiles import check_output_path, write_output

TEMPLATES: dict[str, str] = {
    "sim": "a whole campaign on the simulated lane (runs anywhere, no GPU)",
    "gb300": "one GB300 station, docker, a candidate patched in by bind mounts",
    "gb10-pair": "two GB10 boxes at TP=2 over Ray (second box via ssh://)",
    "aa": "A/A: the control against itself, to measure the lane's noise",
    "load": "offered-rate sweeps, a trace and agent sessions on the simulated lane, "
            "judged on capacity at SLO",
}
"""Template name → what it is for (the choices of `spec-ab init --template`)."""

FILE_MARKER = "CAMPAIGN_FILE"
"""Written as the path of the file `spec-ab init` writes (a template's header names it)."""


def write_template(name: str, output: Path, force: bool = False) -> list[Path]:
    """Write template `name` to `output` and its companion files beside it; returns every
    path written. Raises UsageError (exit 2) for an unknown name or a file in the way."""
    if name not in TEMPLATES:
        raise UsageError(f"--template {name}: not a template",
                         hint=f"one of {', '.join(TEMPLATES)}")
    check_output_path(output, "--output")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", hint="pass --force to overwrite, or -o NEWFILE")
    root = resources.files("campaign").joinpath("templates")
    text = root.joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    text = text.replace(FILE_MARKER, str(output))
    companions = _template_files(root.joinpath("files", name))
    for rel, data in companions:
        target = output.parent / rel
        if target.exists() and not force and not (target.is_file()
                                                  and target.read_bytes() == data):
            raise UsageError(f"{target} exists (the {name} template writes it)",
                             hint="pass --force to overwrite, or -o into another folder")
    write_output(output, text, "--output")
    written = [output]
    for rel, data in companions:
        target = output.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(target)
    return written


def _template_files(folder: Traversable, prefix: str = "") -> list[tuple[str, bytes]]:
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
