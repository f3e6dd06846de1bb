"""A YAML syntax error is one line: file:line:column, what is wrong in plain words, what
to do (issue "The first night, for a newcomer", 12: an indentation error gave only the
parser's words, "expected <block end>, but found '<block mapping start>'")."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.campaignfile import load_campaign
from campaign.errors import SpecError
from tests.cli import invoke


def _problem(tmp_path: Path, text: str) -> tuple[str, str]:
    path = tmp_path / "campaign.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert info.value.exit_code == 2
    (problem,) = info.value.problems
    return str(path), problem


def test_a_key_indented_between_two_levels(tmp_path: Path) -> None:
    path, problem = _problem(tmp_path, 'name: x\narms:\n  control:\n    env:\n      A: "1"\n'
                                       '   cand:\n    env: {}\n')
    assert problem == (
        f"YAML indentation at {path}:6:4: line 6 (`cand:`) is indented 3 spaces, which lines "
        "up with no key above it (those sit at 0, 2, 4 or 6 spaces); indent it as the keys "
        "it belongs beside (2 spaces: beside `control:` on line 3), with spaces only "
        "(the parser: expected <block end>, but found '<block mapping start>')")


def test_a_key_indented_deeper_than_a_key_with_a_value(tmp_path: Path) -> None:
    path, problem = _problem(tmp_path, "name: x\nserver:\n  backend: process\n   port: 8000\n")
    assert problem == (
        f"YAML indentation at {path}:4:4: line 4 (`port: 8000`) is indented 3 spaces, "
        "deeper than line 3 (`backend: process`, 2 spaces), which already holds a value; "
        "indent it 2 spaces to make it a key beside `backend:`, with spaces only "
        "(the parser: mapping values are not allowed here)")


def test_a_tab(tmp_path: Path) -> None:
    path, problem = _problem(tmp_path, "name: x\nserver:\n\tbackend: process\n")
    assert problem == (
        f"YAML indentation at {path}:3:1: line 3 is indented with a tab; YAML indents with "
        "spaces only: replace the tab with spaces, as many as the keys beside it have "
        "(the parser: found character '\\t' that cannot start any token)")


def test_a_value_holding_a_colon(tmp_path: Path) -> None:
    path, problem = _problem(tmp_path, "name: x\nhypothesis: faster: yes\n")
    assert problem == (
        f"YAML at {path}:2:19: line 2 (`hypothesis: faster: yes`) holds a second ': '; "
        "quote the value (\"faster: yes\") or put what follows on a line of its own "
        "(the parser: mapping values are not allowed here)")


def test_a_line_that_is_no_key(tmp_path: Path) -> None:
    path, problem = _problem(tmp_path, "name: x\nfoo\nbar: 1\n")
    assert problem == (
        f"YAML at {path}:2:1: line 2 (`foo`) is neither `key: value` nor a list item "
        "(`- value`): add ': ' after its key, or '- ' before an item, or indent it under "
        "the key whose value it continues (the parser: could not find expected ':')")


def test_check_prints_one_clear_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text("name: x\nworkloads:\n  knee:\n    concurrency: [1]\n model: m\n",
                    encoding="utf-8")
    res = invoke("check", str(path))
    assert res.code == 2
    assert (f"YAML indentation at {path}:5:2: line 5 (`model: m`) is indented 1 space, "
            "which lines up with no key above it") in res.output
