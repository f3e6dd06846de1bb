"""Reading a campaign file: `load_campaign(path)`.

Reads YAML with ruamel (which keeps line numbers), validates, merges each arm's
overrides into the server launch, checks what crosses fields (files, levels, pairs) and
raises one `SpecError` listing every problem as `yaml.path: what is wrong (line N)`.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from campaign.campaignfile.base import CONTROL
from campaign.campaignfile.files import (
    fixture_problem,
    format_yaml_path,
    local_files,
    missing_files,
)
from campaign.campaignfile.launch import (
    LAUNCH_ADAPTER,
    READ_BACK,
    DockerLaunch,
    ExternalLaunch,
    ExtraContainer,
    Launch,
    LaunchModel,
    ProcessLaunch,
    Readiness,
    ReadyCheck,
)
from campaign.campaignfile.models import (
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
from campaign.campaignfile.yamlread import read_yaml
from campaign.errors import SpecError

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
        close = difflib.get_close_matches(key, vocab, n=1, cutoff=0.6)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return "required but missing"
    if kind == "union_tag_invalid":
        return "backend must be one of: process, external, docker"
    if kind == "union_tag_not_found":
        return "missing `backend` (process, external or docker)"
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
        if part in _SCALAR_BRANCHES and isinstance(value, Mapping):
            return True
    return False


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


def _problems_from(exc: ValidationError, data: Any, lines: _Lines) -> list[str]:
    return _problem_lines(exc, data, lines, Campaign, ())


def _problem_lines(exc: ValidationError, data: Any, lines: _Lines, root: Any,
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


MAX_FILE_BYTES = 1 << 20
"""A campaign file is a page of YAML: anything over 1 MiB is a mistake (a log, a dump)."""
def load_campaign(path: Path | str, *, base_dir: Path | None = None,
                  check_files: bool = True, lane: str | None = None) -> Campaign:
    """Read, validate and merge a campaign file. Raises `SpecError` with every problem.

    `base_dir` resolves relative paths when the file is a frozen copy (resume) that no
    longer sits beside the fixtures it names. `check_files=False` skips the checks that
    named files and folders exist (reading a frozen copy back for a report, where the
    fixtures may be long gone).

    A campaign with a `lanes:` table is checked on every lane; `lane` picks the one it is
    run on (`Campaign.for_lane`), else it is returned as written (`lane_chosen` False).
    """
    path = Path(path)
    context = {READ_BACK: not check_files}  # an old run's literal secret stays readable
    raw = read_yaml(path)
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
        campaign = Campaign.model_validate(data, context=context)
    except ValidationError as exc:
        for p in _problems_from(exc, data, lines):
            problems.append(p.replace(".overrides", ""))
        raise SpecError(str(path), list(dict.fromkeys(problems))) from None
    campaign = campaign.with_source(path, base_dir)

    server_raw = _plain(raw["server"])
    if not campaign.lanes:
        launches = _arm_launches(campaign, server_raw, lines, context, problems)
        problems.extend(_semantic_problems(campaign, launches, lines, check_files=check_files))
        if problems:
            raise SpecError(str(path), list(dict.fromkeys(problems)))  # each problem once
        return _chosen(campaign.with_launches(launches), lane, path)
    views: dict[str, Campaign] = {}
    for name, spec in campaign.lanes.items():
        lane_raw = _lane_server(campaign, name, spec.server, server_raw, lines, context,
                                problems)
        if lane_raw is None:
            continue
        view = campaign.model_copy(update={
            "lane": name, "server": LAUNCH_ADAPTER.validate_python(lane_raw, context=context)})
        launches = _arm_launches(view, lane_raw, lines, context, problems, lane=name)
        problems.extend(_semantic_problems(view, launches, lines, check_files=check_files))
        views[name] = view.with_launches(launches)
    if problems:
        raise SpecError(str(path), list(dict.fromkeys(problems)))
    return _chosen(campaign.with_lane_views(views), lane, path)


def _chosen(campaign: Campaign, lane: str | None, path: Path) -> Campaign:
    """The campaign as run on `lane` (None: as written)."""
    if lane is None:
        return campaign
    try:
        return campaign.for_lane(lane)
    except KeyError:
        if campaign.sharded:
            raise SpecError(str(path), [f"--lane {lane}: not a lane of this campaign (lanes: "
                                        f"{', '.join(campaign.lane_names)})"]) from None
        raise SpecError(str(path), [f"--lane {lane}: this campaign has no `lanes:` table; it "
                                    f"runs on its one lane '{campaign.lane}' (leave out "
                                    "--lane)"]) from None


def _unknown_overrides(overrides: Mapping[str, Any], fields: set[str], suggest: set[str],
                       where: tuple[str | int, ...], who: str, lines: _Lines) -> list[str]:
    """A problem for each key of `overrides` that is not a server field `who` (an arm, a
    lane) can override, with the closest of `suggest` as a hint."""
    out = []
    for key in overrides:
        if key in fields and key != "backend":
            continue
        close = difflib.get_close_matches(key, sorted(suggest), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        out.append(lines.problem((*where, key), f"not a field {who} can override{hint}"))
    return out


def _restated_command(overrides: Mapping[str, Any], server_raw: Mapping[str, Any],
                      where: tuple[str | int, ...], lines: _Lines) -> list[str]:
    """A problem when an override's `command` starts with the server command's own
    program: lists are appended, so the whole command would run twice in one argv."""
    base, extra = server_raw.get("command"), overrides.get("command")
    if not (isinstance(base, list) and base and isinstance(extra, list) and extra):
        return []
    if str(extra[0]) != str(base[0]):
        return []
    return [lines.problem((*where, "command"),
                          f"starts with server.command's own program ({base[0]}): lists are "
                          "appended to the server's, so the command would run twice in one "
                          "argv; give only the arguments to add, under `args:`")]


def _lane_server(campaign: Campaign, name: str, overrides: dict[str, Any],
                 server_raw: dict[str, Any], lines: _Lines, context: dict[str, Any],
                 problems: list[str]) -> dict[str, Any] | None:
    """`server` with lane `name`'s overrides merged, validated (None, with problems, when
    it is not a valid launch)."""
    backend_fields = set(type(campaign.server).model_fields)
    bad = _unknown_overrides(overrides, backend_fields, backend_fields,
                             ("lanes", name, "server"),
                             f"a lane of a {campaign.server.backend} server", lines)
    bad += _restated_command(overrides, server_raw, ("lanes", name, "server"), lines)
    if bad:
        problems.extend(bad)
        return None
    merged: dict[str, Any] = merge(server_raw, overrides)
    try:
        LAUNCH_ADAPTER.validate_python(merged, context=context)
    except ValidationError as exc:
        problems.extend(_arm_problems(exc, merged, server_raw, overrides,
                                      ("lanes", name, "server"), "", lines))
        return None
    return merged


def _arm_launches(campaign: Campaign, server_raw: dict[str, Any], lines: _Lines,
                  context: dict[str, Any], problems: list[str], *,
                  lane: str = "") -> dict[str, LaunchModel]:
    """Each arm's merged launch (`server_raw` plus its overrides), validated; problems
    are appended to `problems`."""
    launches: dict[str, LaunchModel] = {}
    backend_fields = set(type(campaign.server).model_fields)
    on_lane = f" on lane '{lane}'" if lane else ""
    for arm in campaign.arm_names:
        overrides = campaign.arms[arm].overrides
        bad = _unknown_overrides(overrides, backend_fields, backend_fields | ARM_OWN_FIELDS,
                                 ("arms", arm), f"a {campaign.server.backend} arm", lines)
        bad += _restated_command(overrides, server_raw, ("arms", arm), lines)
        if bad:
            problems.extend(bad)
            continue
        merged = merge(server_raw, overrides)
        try:
            launches[arm] = LAUNCH_ADAPTER.validate_python(merged, context=context)
        except ValidationError as exc:
            after = f" [after merging arm '{arm}'{on_lane}]" if arm != CONTROL or lane else ""
            problems.extend(_arm_problems(exc, merged, server_raw, overrides,
                                          ("arms", arm), after, lines))
    return launches


def _arm_problems(
    exc: ValidationError,
    merged: dict[str, Any],
    server_raw: dict[str, Any],
    overrides: dict[str, Any],
    prefix: tuple[str | int, ...],
    after: str,
    lines: _Lines,
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
        where: tuple[str | int, ...] = prefix if from_arm else ("server",)
        line = lines.problem(where + loc, _message(err, loc, vocab))
        if not from_arm:
            line += after
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
    if check_files:
        _file_content_problems(campaign, launches, add)
    _port_problems(campaign, launches, add)

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
    pre = campaign.preregistration
    if isinstance(pre.drift_band, float) and not 0 <= pre.drift_band < 1:
        add(("preregistration", "drift_band"), "must be a fraction in [0, 1), e.g. 0.03")
    elif isinstance(pre.drift_band, float) and pre.drift_band > pre.margin:
        add(("preregistration", "drift_band"), band_over_margin(pre.drift_band, pre.margin))
    if campaign.preregistration.order == "ABBA" and campaign.preregistration.pairs % 2:
        add(("preregistration", "pairs"),
            "ABBA needs an even number of pairs so each order is used equally")
    return problems


def _port_in_argv(argv: list[str]) -> tuple[int, str] | None:
    """(index of the value, value) of the last `--port N` / `--port=N` in an argv."""
    found = None
    for i, a in enumerate(argv):
        if a == "--port" and i + 1 < len(argv):
            found = (i + 1, argv[i + 1])
        elif a.startswith("--port="):
            found = (i, a.split("=", 1)[1])
    return found


def _port_problems(campaign: Campaign, launches: dict[str, LaunchModel],
                   add: Callable[[tuple[str | int, ...], str], None]) -> None:
    """A `--port N` in the server command must be `server.port`, where the runner waits
    (a process server, or a container on the host network)."""
    server = campaign.server
    seen: set[tuple[str | int, ...]] = set()
    for arm, launch in launches.items():
        if isinstance(launch, ExternalLaunch):
            continue
        if isinstance(launch, DockerLaunch) and launch.network != "host":
            continue  # published ports map it; the container's own port may differ
        for key in ("command", "args"):
            values: list[str] = getattr(launch, key)
            hit = _port_in_argv(values)
            if hit is None:
                continue
            i, value = hit
            n_base = len(getattr(server, key, None) or [])
            path: tuple[str | int, ...] = (("server", key, i) if i < n_base
                                           else ("arms", arm, key, i - n_base))
            if path in seen or value == str(launch.port):
                continue
            seen.add(path)
            on_lane = f" on lane '{campaign.lane}'" if campaign.sharded else ""
            add(path, f"--port {value} in the command, but the runner waits on port "
                      f"{launch.port} (server.port){on_lane}: make them the same")


def band_over_margin(band: float, margin: float) -> str:
    return (f"the drift band {band:g} is larger than the margin {margin:g}: a gain that "
            "clears the margin could still be the lane's noise, so the rule could never "
            "tell a gain from noise; make the margin at least the band")


def _file_content_problems(
    campaign: Campaign, launches: dict[str, LaunchModel],
    add: Callable[[tuple[str | int, ...], str], None],
) -> None:
    """Files that exist but cannot serve: fixtures that are not AIPerf JSONL, an A/A run
    folder that is not one, a results folder that is a file."""
    for f in local_files(campaign, launches):
        if f.kind == "fixture" and f.resolved.is_file():
            msg = fixture_problem(f.resolved)
            if msg:
                add(f.yaml_path, f"fixture file {f.declared} {msg}")
    results = campaign.resolve(campaign.results_dir)
    if results.exists() and not results.is_dir():
        add(("results_dir",), f"{campaign.results_dir} is a file, not a folder")
    band = campaign.preregistration.drift_band
    if isinstance(band, DriftFrom):
        _drift_from_problems(campaign, band, add)


def _drift_from_problems(campaign: Campaign, band: DriftFrom,
                         add: Callable[[tuple[str | int, ...], str], None]) -> None:
    where = ("preregistration", "drift_band", "from")
    run = campaign.resolve(band.from_)
    if not run.exists():
        add(where, f"results folder {band.from_} does not exist")
        return
    if not run.is_dir():
        add(where, f"{band.from_} is a file, not a results folder of an A/A run")
        return
    if not (run / "preregistration.json").is_file():
        add(where, f"{band.from_} is not a spec-ab results folder (no preregistration.json)")
        return
    # the band itself is measured by `aa.checked_drift_band` (check and run, before
    # anything is registered): measuring needs the verdict, a layer above this one
