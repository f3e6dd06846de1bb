"""A vLLM launch's flags and environment checked against the engine's own parser, as
dumped once per engine (`vllmdump`, cached by `vllmengine`): nothing is booted and vLLM
is not imported here.

The dump's arguments are rebuilt as a standard `argparse` parser (same option strings,
value counts, and the choices vLLM compares as written), so the parser's own behaviours
hold: abbreviations (`--max-model 2048`), `--flag=value`, `--no-x` of a boolean, the
optional positional `model_tag`. vLLM's own rewriting comes first, as its
`FlexibleArgumentParser.parse_args` does it: `_` for `-` in a flag's name, `-O3` / `-O 3`
for `--optimization-level 3`, dotted keys (`--speculative-config.method ngram`) folded
into their JSON flag. Value types are not checked (no model, no conversion).
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

ENV_PREFIX = "VLLM_"
Entry = Literal["api_server", "serve"]
"""How vLLM is started: `python -m vllm.entrypoints.openai.api_server` (its positional
`model_tag` is ignored) or `vllm serve MODEL` (the positional is the model)."""


class ParseRefused(Exception):
    """The parser refused the flags; the message is argparse's own."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ParseRefused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ParseRefused(message or f"the parser exited ({status})")


@dataclass
class ArgvCheck:
    """What the parser says of one launch's flags."""

    refused: str | None = None
    """argparse's own message ("unrecognized arguments: --max-modle-len"), or None."""
    word: str | None = None
    """The flag the message is about, as written in the launch (for its YAML line)."""
    notes: list[str] = field(default_factory=list)
    """What parses but is likely a mistake (a stray value the server ignores)."""


def rebuild(dump: Mapping[str, Any]) -> argparse.ArgumentParser:
    """The engine's parser from its dump: every argument, no types, no help."""
    parser = _Parser(prog=str(dump.get("prog", "vllm serve")), add_help=False,
                     allow_abbrev=True)
    for i, action in enumerate(dump["actions"]):
        options, nargs = list(action["options"]), action["nargs"]
        if not options:
            parser.add_argument(str(action["dest"]), nargs=nargs)
        elif nargs == 0:
            parser.add_argument(*options, dest=f"_{i}", action="store_true")
        else:
            parser.add_argument(*options, dest=f"_{i}", nargs=nargs,
                                choices=action.get("choices"))
    return parser


_NAME = re.compile(r"(?<=--)[^.]*")


def _dashes(match: re.Match[str]) -> str:
    return match.group(0).replace("_", "-")


def rewrite(argv: list[str]) -> list[str]:
    """vLLM's own rewriting of its command line before argparse sees it (module doc)."""
    words: list[str] = []
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            words.append(_NAME.sub(_dashes, key, count=1) + eq + value)
        elif arg.startswith("-O") and arg != "-O":
            words += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(argv) and argv[i + 1] in {"0", "1", "2", "3"}:
            words.append("--optimization-level")
        else:
            words.append(arg)
    out: list[str] = []
    dotted: dict[str, None] = {}
    skip = False
    for i, arg in enumerate(words):
        if skip:
            skip = False
            continue
        key = arg.split("=", 1)[0]
        if not arg.startswith("-") or "." not in key:
            out.append(arg)  # a value, a positional, a flag (a `.` only in its value)
            continue
        if "=" not in arg:
            skip = i + 1 < len(words)  # `--x.key value`: the value is part of the key
        dotted[key.split(".")[0].removesuffix("+")] = None
    for key in dotted:
        out += [key, "{}"]  # one JSON flag per dotted key, as vLLM adds them back
    return out


def _word_of(message: str, argv: list[str]) -> str | None:
    """The launch's own word a parser message is about (for its place in the file)."""
    hit = re.match(r"(?:unrecognized arguments|ambiguous option): (\S+)", message)
    hit = hit or re.match(r"argument ([^:/\s]+)", message)
    if not hit:
        return None
    token = hit.group(1).split("=")[0]
    for word in argv:
        if word == token or word.split("=")[0].replace("_", "-") == token:
            return word
    return next((w for w in argv if w.startswith(token)), None)


def check_argv(dump: Mapping[str, Any], argv: list[str], entry: Entry) -> ArgvCheck:
    """The engine's parser on `argv` (the words after `api_server` / `serve`)."""
    for word in argv:
        if word in ("-h", "--help") or word.startswith("--help="):
            return ArgvCheck(refused=f"{word} prints vLLM's help and exits: the server would "
                             "never start", word=word)
    try:
        parsed = rebuild(dump).parse_args(rewrite(argv))
    except ParseRefused as exc:
        message = str(exc)
        return ArgvCheck(refused=message, word=_word_of(message, argv))
    stray = getattr(parsed, "model_tag", None)
    if entry == "api_server" and stray is not None:
        at = argv.index(stray) if stray in argv else -1
        after = f" (after {argv[at - 1]}: a flag that takes no value?)" if at > 0 else ""
        return ArgvCheck(word=stray, notes=[
            f"the value '{stray}'{after} is a positional argument, which vLLM's OpenAI "
            "server ignores"])
    return ArgvCheck()


def unknown_env(dump: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str | None]:
    """Each `VLLM_*` name of `env` this vLLM does not read → its closest known name (None
    when nothing is close). A patched file may read a name of its own: a warning only."""
    known = [str(n) for n in dump["env_vars"]]
    names = set(known)
    out: dict[str, str | None] = {}
    for name in env:
        if name.startswith(ENV_PREFIX) and name not in names:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            out[name] = close[0] if close else None
    return out
