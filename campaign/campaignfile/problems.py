"""Pydantic's validation errors in the words of the campaign file.

A campaign file is validated by pydantic models; their errors name model fields, union
members (`float`, `DriftFrom`, `function-after[...]`) and indices of merged lists. Here
they become one line per problem as the user wrote the file: `yaml.path: what is wrong
(line N)`, with union noise dropped, messages of one place joined, a close key suggested
for an unknown one (an invisible character in it shown escaped: `close_hint`), and a
problem of a merged launch blamed on the arm or lane whose override caused it
(`override_problems`).
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from campaign.campaignfile.base import close_hint, shown, yaml_float
from campaign.campaignfile.fidelity import FidelityWorkload
from campaign.campaignfile.files import format_yaml_path
from campaign.campaignfile.launch import (
    DockerLaunch,
    ExternalLaunch,
    ExtraContainer,
    Launch,
    ProcessLaunch,
    Readiness,
    ReadyCheck,
)
from campaign.campaignfile.models import (
    AgentfixWorkload,
    ArmSpec,
    Campaign,
    DecisionCell,
    DriftFrom,
    Gates,
    Guardrail,
    KneeWorkload,
    Preregistration,
    WarmupPass,
    Workloads,
)


class Lines:
    """Line numbers of YAML paths in the ruamel tree."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def line(self, path: tuple[str | int, ...]) -> int | None:
        node = self.root
        best: int | None = None
        for part in path:
            if isinstance(node, CommentedMap) and part in node:
                try:
                    best = node.lc.key(part)[0] + 1
                except (KeyError, TypeError):
                    pass
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                try:
                    best = node.lc.item(part)[0] + 1
                except (KeyError, TypeError, IndexError):
                    pass
                node = node[part]
        return best

    def problem(self, path: tuple[str | int, ...], msg: str) -> str:
        """One problem line: `yaml.path: what is wrong (line N)`."""
        ln = self.line(path)
        return f"{format_yaml_path(path)}: {msg}" + (f" (line {ln})" if ln else "")


def _all_field_names() -> list[str]:
    names: set[str] = set()
    models: list[type[BaseModel]] = [
        Campaign, Preregistration, Gates, Guardrail, DecisionCell, DriftFrom, Readiness,
        ProcessLaunch, ExternalLaunch, DockerLaunch, ExtraContainer, ReadyCheck, Workloads,
        KneeWorkload, AgentfixWorkload, FidelityWorkload, WarmupPass, ArmSpec,
    ]
    for m in models:
        for name, f in m.model_fields.items():
            names.add(f.alias or name)
    names.discard("overrides")
    return sorted(names)


_TAGS = {"process", "external", "docker", "function-after", "function-before"}
_SCALAR_BRANCHES = {"float", "int", "str", "bool", "none"}


def _is_branch(part: Any) -> bool:
    """A pydantic union member in an error location (`float`, `DriftFrom`,
    `function-after[...]`, `tagged-union[...]`), not a YAML key."""
    return isinstance(part, str) and (
        part in _TAGS or part in _SCALAR_BRANCHES or "[" in part or part[:1].isupper())


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[str | int, ...]:
    """Drop pydantic's union tags from a location, keeping real YAML keys."""
    out: list[str | int] = []
    node = data
    for part in loc:
        in_map = isinstance(node, Mapping) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_map or in_list:
            out.append(part)
            node = node[part]
        elif _is_branch(part):
            continue
        else:
            out.append(part)
            node = None
    return tuple(out)


def _value_at(data: Any, loc: tuple[str | int, ...]) -> Any:
    node = data
    for part in loc:
        if isinstance(node, Mapping):
            if part not in node:
                return None
            node = node[part]
            continue
        if not isinstance(node, list) or not isinstance(part, int) or part >= len(node):
            return None
        node = node[part]
    return node


def _members(tp: Any) -> list[Any]:
    """A type with Annotated, Optional and unions flattened."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _members(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for a in get_args(tp) for m in _members(a)]
    return [tp]


def _step(tp: Any, part: str | int) -> list[Any]:
    out: list[Any] = []
    for m in _members(tp):
        origin = get_origin(m)
        if isinstance(m, type) and issubclass(m, BaseModel):
            for name, f in m.model_fields.items():
                if part in (name, f.alias):
                    out.append(f.annotation)
        elif origin is dict and isinstance(part, str):
            out.append(get_args(m)[1])
        elif origin is list and isinstance(part, int):
            out.append(get_args(m)[0])
    return out


def _valid_keys(root: Any, path: tuple[str | int, ...], data: Any) -> list[str] | None:
    """The keys allowed at `path` of the document (models of a tagged union filtered by
    the mapping's `backend`), or None when they cannot be told."""
    types_ = [root]
    for part in path:
        types_ = [t for tp in types_ for t in _step(tp, part)]
    node = _value_at(data, path)
    models = [m for tp in types_ for m in _members(tp)
              if isinstance(m, type) and issubclass(m, BaseModel)]
    if isinstance(node, Mapping) and "backend" in node:
        tagged = [m for m in models if "backend" in m.model_fields
                  and node["backend"] in get_args(m.model_fields["backend"].annotation)]
        models = tagged or models
    if not models:
        return None
    return sorted({f.alias or n for m in models for n, f in m.model_fields.items()}
                  - {"overrides"})


def _message(err: Any, loc: tuple[str | int, ...], vocab: list[str]) -> str:
    """A pydantic error in the words of the campaign file."""
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        return f"unknown key '{shown(key)}'" + close_hint(key, vocab)
    if kind == "missing":
        return "required but missing"
    if kind == "union_tag_invalid":
        return "backend must be one of: process, external, docker"
    if kind == "union_tag_not_found":
        return "missing `backend` (process, external or docker)"
    if kind == "finite_number" and isinstance(err.get("input"), float):
        return (f"{yaml_float(err['input'])} is not a finite number: give a number (.inf and "
                ".nan are not numbers here)")
    msg = str(err["msg"]).removeprefix("Value error, ")
    return re.sub(r"a valid dictionary or instance of \w+", "a mapping", msg)


def _union_noise(err: Any, data: Any) -> bool:
    """An error of the union member the value is plainly not (a number's error for a
    mapping, a mapping's error for a number): the other member's errors say it all."""
    raw = tuple(err["loc"])
    for i, part in enumerate(raw):
        if not _is_branch(part) or part in _TAGS:
            continue
        value = _value_at(data, _clean_loc(raw[:i], data))
        if _scalar_branch(part) and isinstance(value, Mapping):
            return True
        number = (isinstance(value, int | float) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.strip().endswith("%"))
        if part[:1].isupper() and number:
            return True  # a number for `Fraction | DriftFrom`: the number's error says it
    return False


def _scalar_branch(part: str) -> bool:
    """A union member that takes a scalar: `float`, or a validated one
    (`function-before[FractionOf()(), float]`)."""
    if part in _SCALAR_BRANCHES:
        return True
    inner = re.fullmatch(r"function-(?:before|after|wrap|plain)\[.*, (\w+)\]", part)
    return inner is not None and inner.group(1) in _SCALAR_BRANCHES


def _merge_same_place(items: list[tuple[tuple[str | int, ...], str]]
                      ) -> list[tuple[tuple[str | int, ...], str]]:
    """Messages of one place joined (`should be a valid number or a mapping`)."""
    out: dict[tuple[str | int, ...], list[str]] = {}
    for loc, msg in items:
        msgs = out.setdefault(loc, [])
        if msg not in msgs:
            msgs.append(msg)
    merged: list[tuple[tuple[str | int, ...], str]] = []
    for loc, msgs in out.items():
        should = [m.removeprefix("Input should be ").split(",")[0] for m in msgs
                  if m.startswith("Input should be ")]
        if len(should) > 1:
            rest = [m for m in msgs if not m.startswith("Input should be ")]
            msgs = [f"should be {' or '.join(should)}", *rest]
        merged.extend((loc, m) for m in msgs)
    return merged


def campaign_problems(exc: ValidationError, data: Any, lines: Lines) -> list[str]:
    """The campaign model's validation errors as problem lines of the file."""
    return _problem_lines(exc, data, lines, Campaign, ())


def _problem_lines(exc: ValidationError, data: Any, lines: Lines, root: Any,
                   prefix: tuple[str | int, ...]) -> list[str]:
    errors = exc.errors()
    kept = [e for e in errors if not _union_noise(e, data)] or errors
    items = []
    for err in kept:
        loc = _clean_loc(tuple(err["loc"]), data)
        vocab = _valid_keys(root, loc[:-1], data) if err["type"] == "extra_forbidden" else None
        items.append((loc, _message(err, loc, vocab if vocab is not None
                                    else _all_field_names())))
    return [lines.problem(prefix + loc, msg) for loc, msg in _merge_same_place(items)]


def override_problems(
    exc: ValidationError,
    merged: dict[str, Any],
    server_raw: dict[str, Any],
    overrides: dict[str, Any],
    prefix: tuple[str | int, ...],
    after: str,
    lines: Lines,
) -> list[str]:
    """Name the arm (or lane: `prefix`) when the problem comes from its overrides, the
    server otherwise (with `after`, e.g. " [after merging arm 'x']")."""
    out = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]), merged)
        vocab = (_valid_keys(Launch, loc[:-1], merged) if err["type"] == "extra_forbidden"
                 else None) or _all_field_names()
        key = loc[0] if loc else None
        from_arm = key in overrides
        if from_arm and len(loc) >= 2 and isinstance(loc[1], int) and isinstance(
            server_raw.get(str(key)), list
        ):
            # appended list: index inside the arm's own list
            base_len = len(server_raw[str(key)])
            if loc[1] < base_len:
                from_arm = False
            else:
                loc = (loc[0], loc[1] - base_len, *loc[2:])
        own = overrides.get(str(key))
        if from_arm and len(loc) >= 2 and isinstance(own, Mapping) and loc[1] not in own:
            from_arm = False  # a merged map's key the override does not set
        where: tuple[str | int, ...] = prefix if from_arm else ("server",)
        line = lines.problem(where + loc, _message(err, loc, vocab))
        if not from_arm:
            line += after
        if line not in out:
            out.append(line)
    return out
