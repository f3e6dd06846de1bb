"""Reading a campaign file: `load_campaign(path)`.

Reads YAML with ruamel (which keeps line numbers), validates, merges each arm's
overrides into the server launch, checks what crosses fields (files, levels, pairs) and
raises one `SpecError` listing every problem as `yaml.path: what is wrong (line N)`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from campaign.errors import SpecError
from campaign.spec.base import CONTROL
from campaign.spec.files import format_yaml_path, missing_files
from campaign.spec.launch import (
    LAUNCH_ADAPTER,
    DockerLaunch,
    ExternalLaunch,
    ExtraContainer,
    LaunchModel,
    ProcessLaunch,
    Readiness,
    ReadyCheck,
)
from campaign.spec.models import (
    ARM_OWN_FIELDS,
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
    merge,
)

# --------------------------------------------------------------------------- loading


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


class _Lines:
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
        KneeWorkload, AgentfixWorkload, WarmupPass, ArmSpec,
    ]
    for m in models:
        for name, f in m.model_fields.items():
            names.add(f.alias or name)
    names.discard("overrides")
    return sorted(names)


_TAGS = {"process", "external", "docker", "function-after", "function-before"}


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
        elif isinstance(part, str) and (part in _TAGS or "[" in part):
            continue
        else:
            out.append(part)
            node = None
    return tuple(out)


def _message(err: Any, loc: tuple[str | int, ...], vocab: list[str]) -> str:
    """A pydantic error in the words of the campaign file."""
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        close = difflib.get_close_matches(key, vocab, n=1, cutoff=0.6)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return "required but missing"
    if kind == "union_tag_invalid":
        return "backend must be one of: process, external, docker"
    if kind == "union_tag_not_found":
        return "missing `backend` (process, external or docker)"
    return str(err["msg"]).removeprefix("Value error, ")


def _problems_from(exc: ValidationError, data: Any, lines: _Lines) -> list[str]:
    vocab = _all_field_names()
    out = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]), data)
        out.append(lines.problem(loc, _message(err, loc, vocab)))
    return out


def _read_yaml(path: Path) -> Any:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), ["file not found"]) from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as exc:
        raise SpecError(str(path), [f"cannot read: {exc}"]) from None
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        ln = f" (line {mark.line + 1})" if mark else ""
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise SpecError(str(path), [f"YAML: {problem}{ln}"]) from None
    except Exception as exc:  # ruamel raises several unrelated types for broken input
        raise SpecError(str(path), [f"YAML: {exc}"]) from None
    if data is None:
        raise SpecError(str(path), ["the file is empty"])
    if not isinstance(data, Mapping):
        raise SpecError(str(path), ["the top level must be a mapping of keys"])
    return data


def load_campaign(path: Path | str, *, base_dir: Path | None = None,
                  check_files: bool = True) -> Campaign:
    """Read, validate and merge a campaign file. Raises `SpecError` with every problem.

    `base_dir` resolves relative paths when the file is a frozen copy (resume) that no
    longer sits beside the fixtures it names. `check_files=False` skips the checks that
    named files and folders exist (reading a frozen copy back for a report, where the
    fixtures may be long gone).
    """
    path = Path(path)
    raw = _read_yaml(path)
    lines = _Lines(raw)
    data = _plain(raw)
    problems: list[str] = []

    # Arms carry server overrides directly under their name; split them off so the arm
    # model stays strict while any server field may be overridden.
    arms_raw = data.get("arms")
    if isinstance(arms_raw, Mapping):
        shaped: dict[str, Any] = {}
        for name, arm in arms_raw.items():
            if arm is None:
                arm = {}
            if isinstance(arm, Mapping):
                own = {k: v for k, v in arm.items() if k in ARM_OWN_FIELDS}
                own["overrides"] = {k: v for k, v in arm.items() if k not in ARM_OWN_FIELDS}
                shaped[name] = own
            else:
                shaped[name] = arm
        data = {**data, "arms": shaped}

    try:
        campaign = Campaign.model_validate(data)
    except ValidationError as exc:
        for p in _problems_from(exc, data, lines):
            problems.append(p.replace(".overrides", ""))
        raise SpecError(str(path), problems) from None
    campaign = campaign.with_source(path, base_dir)

    server_raw = _plain(raw["server"])
    launches: dict[str, LaunchModel] = {}
    backend_fields = set(type(campaign.server).model_fields)
    for arm in campaign.arm_names:
        overrides = campaign.arms[arm].overrides
        bad = [k for k in overrides if k not in backend_fields or k == "backend"]
        for key in bad:
            close = difflib.get_close_matches(key, sorted(backend_fields | ARM_OWN_FIELDS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(lines.problem(
                ("arms", arm, key),
                f"not a field a {campaign.server.backend} arm can override{hint}"))
        if bad:
            continue
        merged = merge(server_raw, overrides)
        try:
            launches[arm] = LAUNCH_ADAPTER.validate_python(merged)
        except ValidationError as exc:
            problems.extend(_arm_problems(exc, merged, server_raw, overrides, arm, lines))
    problems.extend(_semantic_problems(campaign, launches, lines, check_files=check_files))
    if problems:
        raise SpecError(str(path), problems)
    return campaign.with_launches(launches)


def _arm_problems(
    exc: ValidationError,
    merged: dict[str, Any],
    server_raw: dict[str, Any],
    overrides: dict[str, Any],
    arm: str,
    lines: _Lines,
) -> list[str]:
    """Name the arm when the problem comes from its overrides, the server otherwise."""
    vocab = _all_field_names()
    out = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]), merged)
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
        prefix: tuple[str | int, ...] = ("arms", arm) if from_arm else ("server",)
        line = lines.problem(prefix + loc, _message(err, loc, vocab))
        if not from_arm:
            line += f" [after merging arm '{arm}']" if arm != CONTROL else ""
        if line not in out:
            out.append(line)
    return out


def _semantic_problems(
    campaign: Campaign, launches: dict[str, LaunchModel], lines: _Lines, *,
    check_files: bool = True,
) -> list[str]:
    """Cross-field checks: relative files that must exist, cells that must name real
    levels, a drift band and pair count that make sense."""
    problems: list[str] = []

    def add(path: tuple[str | int, ...], msg: str) -> None:
        problems.append(lines.problem(path, msg))

    for path, msg in (missing_files(campaign, launches, relative_only=True)
                      if check_files else []):
        add(path, msg)  # absolute paths belong to the machine: the preflight checks them

    wl = campaign.workloads
    for i, cell in enumerate(campaign.preregistration.decision_cells):
        levels = wl.levels(cell.workload)
        if not levels:
            add(("preregistration", "decision_cells", i, "workload"),
                f"workload '{cell.workload}' is not defined under workloads")
        elif cell.level != "*" and cell.level not in levels:
            close = difflib.get_close_matches(cell.level, levels, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (levels: {', '.join(levels)})"
            add(("preregistration", "decision_cells", i, "level"),
                f"level '{cell.level}' is not measured{hint}")
    for i, g in enumerate(campaign.preregistration.guardrails):
        if g.workload != "*" and not wl.levels(g.workload):
            add(("preregistration", "guardrails", i, "workload"),
                f"workload '{g.workload}' is not defined under workloads")
        elif g.level != "*" and g.workload != "*" and g.level not in wl.levels(g.workload):
            add(("preregistration", "guardrails", i, "level"), f"level '{g.level}' is not measured")
    if isinstance(campaign.preregistration.drift_band, float) and not (
        0 <= campaign.preregistration.drift_band < 1
    ):
        add(("preregistration", "drift_band"), "must be a fraction in [0, 1), e.g. 0.03")
    if campaign.preregistration.order == "ABBA" and campaign.preregistration.pairs % 2:
        add(("preregistration", "pairs"),
            "ABBA needs an even number of pairs so each order is used equally")
    return problems
