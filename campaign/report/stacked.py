"""Narrow terminals: a table that cannot fit its words drops to a stacked layout.

A rich table folds a word longer than its column (`request_lat` / `ency_p99`); below the
width its columns need, the rows are laid out one under the other instead, each line
wrapped at word boundaries with a hanging indent, so no word is ever split.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

GAPS = 12
"""What the compact table spends beside its four columns' text: its two edges and three
column rules (blank in its box style, one character each), the padding of 1 on each side
of every inner rule, and one to spare."""


def longest_word(texts: Iterable[str]) -> int:
    """The longest whitespace-free run in `texts` (the narrowest a column can fold to
    without splitting a word), counting a line's leading indent."""
    best = 0
    for text in texts:
        for line in text.splitlines():
            words = line.split()
            if words:
                indent = len(line) - len(line.lstrip())
                best = max(best, indent + len(words[0]), *(len(w) for w in words))
    return best


def compact_fits(width: int, first: Sequence[str], change: Sequence[str],
                 verdict: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether the compact table (cell · CI · pairs | change | verdict | flags) holds every
    word of its rows, and its headers, whole at `width`."""
    need = (max(longest_word(first), len("cell · CI · pairs"))
            + max([len(c) for c in change] + [len("change")])
            + max([len(v) for v in verdict] + [len("verdict")])
            + max([len(f) for f in flags] + [len("flags")]) + GAPS)
    return need <= width


@dataclass(frozen=True)
class StackedRow:
    """One row, stacked: its head line (what, change, verdict, flags) and detail lines."""

    head: str
    details: tuple[str, ...]


def stacked(title: str, rows: Sequence[StackedRow]) -> Group:
    """The title, then each row's head indented 2 and its details 4; wrapped lines keep
    their indent."""
    parts: list[RenderableType] = [Text(title)]
    for row in rows:
        parts.append(Padding(Text(row.head), (0, 0, 0, 2)))
        parts += [Padding(Text(d), (0, 0, 0, 4)) for d in row.details]
    parts.append(Text(""))
    return Group(*parts)
