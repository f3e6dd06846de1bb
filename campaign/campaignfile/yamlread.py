"""Reading a campaign file's YAML safely: size, encoding, aliases and syntax checked,
line numbers kept (ruamel's round-trip nodes). `read_yaml(path)` raises `SpecError`.

A syntax error is one line (`syntax_problem`): `FILE:LINE:COLUMN`, what is wrong in plain
words (an indentation that lines up with no key above, a key deeper than one that already
holds a value, a tab, a second ': ', a line that is no key) and what to do, then the
parser's own words in brackets."""

from __future__ import annotations

import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.tokens import AliasToken

from campaign.errors import SpecError

MAX_FILE_BYTES = 1 << 20
"""A campaign file is a page of YAML: anything over 1 MiB is a mistake (a log, a dump)."""
MAX_ALIASES = 100
"""YAML aliases (`*name`) a campaign may use: enough to share blocks, too few for a bomb."""
MAX_NODES = 100_000
"""Values in the document once aliases are expanded (an alias bomb expands to billions)."""


def _read_text(path: Path) -> str:
    try:
        st = path.stat()  # follows symlinks: a loop or a dangling link fails here
    except FileNotFoundError:
        if path.is_symlink():
            raise SpecError(str(path), ["a symbolic link to a file that does not exist"]) from None
        raise SpecError(str(path), ["file not found"]) from None
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(str(path), ["is a folder, not a campaign file"])
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(str(path), ["not a regular file (a device, pipe or socket)"])
    if st.st_size > MAX_FILE_BYTES:
        raise SpecError(str(path), [f"the file is {st.st_size / (1 << 20):.1f} MiB; a campaign "
                                    f"file may be at most {MAX_FILE_BYTES >> 20} MiB"])
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(str(path), [f"the file is larger than {MAX_FILE_BYTES >> 20} MiB"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), [f"not UTF-8 text (byte {exc.start})"]) from None


def _count_aliases(yaml: YAML, text: str) -> int:
    return sum(1 for tok in yaml.scan(text) if isinstance(tok, AliasToken))


def _kids(node: Any) -> list[Any]:
    if isinstance(node, Mapping):
        return list(node.values())
    return list(node) if isinstance(node, list) else []


def _expanded_size(root: Any, limit: int) -> int | None:
    """Values in the document with every alias expanded, or None when over `limit` or
    when the document contains itself. Shared (aliased) nodes are sized once."""
    sizes: dict[int, int] = {}
    on_path = {id(root)}
    stack: list[tuple[Any, Any]] = [(root, iter(_kids(root)))]
    while stack:
        node, it = stack[-1]
        for kid in it:
            if not isinstance(kid, Mapping | list) or id(kid) in sizes:
                continue
            if id(kid) in on_path:
                return None
            on_path.add(id(kid))
            stack.append((kid, iter(_kids(kid))))
            break
        else:
            stack.pop()
            on_path.discard(id(node))
            total = 1 + sum(sizes.get(id(k), 1) for k in _kids(node))
            if total > limit:
                return None
            sizes[id(node)] = total
    return sizes[id(root)]


def read_yaml(path: Path) -> Any:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    text = _read_text(path)
    try:
        aliases = _count_aliases(yaml, text)
    except MarkedYAMLError:
        aliases = 0  # the load below reports the syntax error with its line
    except Exception:  # ruamel raises several unrelated types for broken input
        aliases = 0
    if aliases > MAX_ALIASES:
        raise SpecError(str(path), [f"YAML: {aliases} aliases (*name); a campaign file may use "
                                    f"at most {MAX_ALIASES}"])
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        raise SpecError(str(path), [syntax_problem(path, text, exc)]) from None
    except RecursionError:
        raise SpecError(str(path), ["YAML: nested too deeply"]) from None
    except Exception as exc:  # ruamel raises several unrelated types for broken input
        raise SpecError(str(path), [f"YAML: {exc}"]) from None
    if data is None:
        raise SpecError(str(path), ["the file is empty"])
    if not isinstance(data, Mapping):
        raise SpecError(str(path), ["the top level must be a mapping of keys"])
    if aliases and _expanded_size(data, MAX_NODES) is None:
        raise SpecError(str(path), [f"YAML: the aliases expand to more than {MAX_NODES:,} "
                                    "values, or the document contains itself"])
    return data


def syntax_problem(path: Path, text: str, exc: MarkedYAMLError) -> str:
    """A YAML syntax error in plain words (module docstring)."""
    problem = (exc.problem or exc.context or "invalid YAML").strip()
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return f"YAML in {path}: {problem}"
    lines = text.splitlines()
    parser = f"(the parser: {problem})"
    if problem.startswith("could not find expected ':'") and exc.context_mark is not None:
        mark = exc.context_mark
    ln = mark.line + 1
    line = lines[mark.line] if mark.line < len(lines) else ""
    indent = len(line) - len(line.lstrip(" "))
    shown = f"line {ln} (`{line.strip()}`)"
    at = f"{path}:{ln}"
    if "'\\t'" in problem or (line[indent:indent + 1] == "\t"):
        return (f"YAML indentation at {at}:{mark.column + 1}: line {ln} is indented with a tab; "
                "YAML indents with spaces only: replace the tab with spaces, as many as the "
                f"keys beside it have {parser}")
    above = _lines_above(lines, mark.line)
    if problem.startswith("expected <block end>") and above:
        return _matches_no_level(at, shown, indent, above, parser)
    if problem.startswith("mapping values are not allowed"):
        if above and indent > above[0][1] and _holds_value(above[0][2]):
            pl, pi, prev = above[0]
            key = prev.strip().split(":", 1)[0]
            return (f"YAML indentation at {at}:{indent + 1}: {shown} is indented "
                    f"{_spaces(indent)}, deeper than line {pl} (`{prev.strip()}`, "
                    f"{_spaces(pi)}), which already holds a value; indent it "
                    f"{_spaces(pi)} to make it a key beside `{key}:`, with spaces only "
                    f"{parser}")
        value = line.strip().split(": ", 1)[-1].split(" #", 1)[0]
        return (f"YAML at {at}:{mark.column + 1}: {shown} holds a second ': '; quote the "
                f"value (\"{value}\") or put what follows on a line of its own {parser}")
    if problem.startswith("could not find expected ':'"):
        return (f"YAML at {at}:{indent + 1}: {shown} is neither `key: value` nor a list item "
                "(`- value`): add ': ' after its key, or '- ' before an item, or indent it "
                f"under the key whose value it continues {parser}")
    return f"YAML at {at}:{mark.column + 1}: {problem} (line {ln})"


def _spaces(n: int) -> str:
    return f"{n} space{'' if n == 1 else 's'}"


def _lines_above(lines: list[str], index: int) -> list[tuple[int, int, str]]:
    """(line number, indentation, text) of the content lines above `index`, nearest
    first (blank and comment lines skipped)."""
    out = []
    for i in range(min(index, len(lines)) - 1, -1, -1):
        body = lines[i].strip()
        if body and not body.startswith("#"):
            out.append((i + 1, len(lines[i]) - len(lines[i].lstrip(" ")), lines[i]))
    return out


def _holds_value(line: str) -> bool:
    """Whether a `key: value` line's value is on the line itself (not a block below)."""
    body = line.strip()
    if body.startswith("- "):
        body = body[2:]
    if ": " not in body:
        return False
    value = body.split(": ", 1)[1].strip()
    return bool(value) and not value.startswith(("#", "|", ">", "&"))


def _matches_no_level(at: str, shown: str, indent: int,
                      above: list[tuple[int, int, str]], parser: str) -> str:
    """A line whose indentation is none of the open blocks' above it."""
    levels: list[tuple[int, int, str]] = []
    for ln, ind, text in above:
        if not levels or ind < levels[-1][1]:
            levels.append((ln, ind, text))
    sits = sorted({ind for _, ind, _ in levels})
    listed = (", ".join(str(i) for i in sits[:-1]) + f" or {sits[-1]}" if len(sits) > 1
              else str(sits[0]))
    below = [lv for lv in levels if lv[1] < indent]
    hint = ""
    if below:
        ln, ind, text = below[0]
        hint = f" ({_spaces(ind)}: beside `{text.strip().split(' #', 1)[0]}` on line {ln})"
    return (f"YAML indentation at {at}:{indent + 1}: {shown} is indented {_spaces(indent)}, "
            f"which lines up with no key above it (those sit at {listed} spaces); indent it "
            f"as the keys it belongs beside{hint}, with spaces only {parser}")


def line_of(root: Any, path: tuple[str | int, ...]) -> int | None:
    """The 1-based line of the deepest part of `path` found in a tree `read_yaml` returned
    (None when not even its first key is there)."""
    node, best = root, None
    for part in path:
        if isinstance(node, CommentedMap) and part in node:
            pos = node.lc.key(part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            pos = node.lc.item(part)
        else:
            break
        if pos is not None:
            best = pos[0] + 1
        node = node[part]
    return best
