"""One flag, one name: a concept shared by two commands is spelled the same in both, and
an old spelling kept for old scripts is hidden and still works."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer.main

from campaign.cli import app
from tests.cli import invoke
from tests.runs import ROOT

PREFIXES = ("no-", "skip-", "with-", "without-")
"""`--no-preflight` and `--skip-preflight` are one concept (a preflight not run)."""


def _concepts(option: Any) -> set[str]:
    """What an option is about: its parameter's name and each spelling without dashes or a
    negating prefix."""
    keys = {str(option.name).replace("_", "-")}
    for spelling in [*option.opts, *option.secondary_opts]:
        word = spelling.lstrip("-")
        for prefix in PREFIXES:
            word = word.removeprefix(prefix)
        if len(word) > 1:  # a short flag (-f) is a spelling, not a concept
            keys.add(word)
    return {k.removeprefix("skip-").removeprefix("no-") for k in keys}


def _options(command: Any, path: str = "") -> list[tuple[str, Any]]:
    """(command path, option) for every visible option of every command."""
    if hasattr(command, "commands"):
        return [x for name, sub in command.commands.items()
                for x in _options(sub, f"{path} {name}".strip())]
    return [(path, p) for p in command.params
            if getattr(p, "param_type_name", "") == "option" and not p.hidden]


def test_a_concept_shared_by_commands_has_one_spelling() -> None:
    """Issue "The first night, for a newcomer", 6: `check --no-preflight` against `run
    --skip-preflight` (and `plan --format` without the `-f` of report and watch)."""
    spelled: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
    for command, option in _options(typer.main.get_command(app)):
        spelling = tuple(sorted([*option.opts, *option.secondary_opts]))
        for concept in _concepts(option):
            spelled[concept][command] = spelling
    two_ways = {concept: by_command for concept, by_command in spelled.items()
                if len(set(by_command.values())) > 1}
    assert two_ways == {}, two_ways
    assert len(spelled["preflight"]) >= 2  # the audit sees the shared flag at all


def test_the_old_preflight_spelling_still_works_and_is_hidden() -> None:
    example = str(ROOT / "examples" / "sim-pair.yaml")
    new = invoke("check", example, "--skip-preflight", "--no-engine")
    old = invoke("check", example, "--no-preflight", "--no-engine")
    assert new.code == old.code == 0, (new.stderr, old.stderr)
    assert new.stdout == old.stdout and "\npreflight\n" not in new.stdout
    help_text = invoke("check", "--help", env={"COLUMNS": "200"}).stdout
    assert "--skip-preflight" in help_text and "--no-preflight" not in help_text
