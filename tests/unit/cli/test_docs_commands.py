"""Every `spec-ab` command and flag the README and docs/ name exists: each command line
they show (a fenced code line or an inline code span starting with `spec-ab`) is walked
through the CLI's own command tree (typer's click group), and each of its flags must be an
option of that command or of the root."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from campaign.cli import app
from tests.runs import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPEC_AB = re.compile(r"(?:^|[\s$(\"'`])(?:\S*/)?spec-ab(\s.*)$")
END = re.compile(r"\s(?:#|\||&&|;|>)\s?|\)|\s—\s")
"""Where a command line ends: a comment, a pipe, `&&`, `;`, a redirection, a closing
parenthesis, or the dash of a report's title line."""
FLAG = re.compile(r"--?[a-z][a-z-]*(=.*)?")


def command_lines(text: str) -> list[str]:
    """What follows `spec-ab` on each command line of a Markdown page."""
    found: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        spans = [line] if fenced else re.findall(r"`([^`]*)`", line)
        for span in spans:
            hit = SPEC_AB.search(span) if fenced else re.match(r"(?:\S*/)?spec-ab(\s.*)$", span)
            if hit:
                found.append(END.split(hit.group(1))[0])
    return found


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def unknown_words(line: str, root: Any) -> list[str]:
    """The command or flags of `spec-ab LINE` that the CLI does not have."""
    words = [w.strip("[]") for w in line.split() if w not in ("…", "...")]
    command, path, i = root, [], 0
    while i < len(words) and hasattr(command, "list_commands"):
        if words[i].startswith("-"):
            i += 1
            continue
        sub = command.commands.get(words[i])
        if sub is None:
            break
        command, path, i = sub, [*path, words[i]], i + 1
    if not path and words and not words[0].startswith("-"):
        return [f"no command {words[0]!r}"]
    known = _options(root) | _options(command) | {"--help"}
    return [f"spec-ab {' '.join(path)}: no option {w.split('=')[0]}" for w in words[i:]
            if FLAG.fullmatch(w) and w.split("=")[0] not in known]


@pytest.fixture(scope="module")
def root() -> Any:
    return typer.main.get_command(app)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_flag_a_page_names_exists(page: Path, root: Any) -> None:
    wrong = [f"`spec-ab{line}`: {w}" for line in command_lines(page.read_text())
             for w in unknown_words(line, root)]
    assert not wrong, f"{page.relative_to(ROOT)} names what the CLI does not have:\n" + \
        "\n".join(wrong)


def test_the_pages_name_commands_at_all() -> None:
    """The check reads what it should: the README's own command lines."""
    lines = command_lines((ROOT / "README.md").read_text())
    assert any(line.split()[:1] == ["run"] for line in lines)
    assert any("--boot" in line for line in lines)


@pytest.mark.parametrize(("line", "wrong"), [
    (" report RUN --fail-on loss", []),
    (" report RUN --no-such-flag", ["spec-ab report: no option --no-such-flag"]),
    (" sim serve --port 8000", []),
    (" sim serve --lane x", ["spec-ab sim serve: no option --lane"]),
    (" frobnicate FILE", ["no command 'frobnicate'"]),
    (" -v run FILE --resume [--redo-invalid]", []),
    (" …", []),  # a placeholder: "`spec-ab …` lines"
])
def test_an_unknown_command_or_flag_is_named(line: str, wrong: list[str], root: Any) -> None:
    assert unknown_words(line, root) == wrong
