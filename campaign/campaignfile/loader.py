"""Reading a campaign file: `load_campaign(path)`, as load → merge → check.

- **load**: YAML read with ruamel (which keeps line numbers, `yamlread`), the arms' server
  overrides split off, every field validated by its model (`models`); pydantic's errors
  are put in the file's words by `problems`;
- **merge**: each arm's (and each lane's) overrides merged into the server launch, and the
  merged launch validated, a problem blamed on the override that caused it;
- **check**: what crosses fields (`checks.check_campaign`: files, ports, levels, pairs).

Every problem found is raised at once, in one `SpecError`, one line each:
`yaml.path: what is wrong (line N)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from campaign.campaignfile.base import CONTROL, READ_BACK, close_hint
from campaign.campaignfile.checks import band_over_margin as band_over_margin  # verdict/aa
from campaign.campaignfile.checks import check_campaign
from campaign.campaignfile.launch import LAUNCH_ADAPTER, LaunchModel
from campaign.campaignfile.models import ARM_OWN_FIELDS, Campaign, merge
from campaign.campaignfile.problems import Lines, campaign_problems, override_problems
from campaign.campaignfile.yamlread import read_yaml
from campaign.errors import SpecError

# --------------------------------------------------------------------------- load


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node




def _shaped(data: dict[str, Any]) -> dict[str, Any]:
    """Arms carry server overrides directly under their name; split them off (under
    `overrides`) so the arm model stays strict while any server field may be overridden."""
    arms_raw = data.get("arms")
    if not isinstance(arms_raw, Mapping):
        return data
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
    return {**data, "arms": shaped}


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
    lines = Lines(raw)
    data = _shaped(_plain(raw))
    try:
        campaign = Campaign.model_validate(data, context=context)
    except ValidationError as exc:
        found = [p.replace(".overrides", "") for p in campaign_problems(exc, data, lines)]
        raise SpecError(str(path), list(dict.fromkeys(found))) from None
    campaign = campaign.with_source(path, base_dir)
    problems: list[str] = []
    server_raw = _plain(raw["server"])
    if not campaign.lanes:
        launches = _arm_launches(campaign, server_raw, lines, context, problems)
        problems.extend(check_campaign(campaign, launches, lines, check_files=check_files))
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
        problems.extend(check_campaign(view, launches, lines, check_files=check_files))
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


# --------------------------------------------------------------------------- merge


def _unknown_overrides(overrides: Mapping[str, Any], fields: set[str], suggest: set[str],
                       where: tuple[str | int, ...], who: str, lines: Lines) -> list[str]:
    """A problem for each key of `overrides` that is not a server field `who` (an arm, a
    lane) can override, with the closest of `suggest` as a hint."""
    out = []
    for key in overrides:
        if key in fields and key != "backend":
            continue
        hint = close_hint(key, sorted(suggest))
        out.append(lines.problem((*where, key), f"not a field {who} can override{hint}"))
    return out


def _restated_command(overrides: Mapping[str, Any], server_raw: Mapping[str, Any],
                      where: tuple[str | int, ...], lines: Lines) -> list[str]:
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
                 server_raw: dict[str, Any], lines: Lines, context: dict[str, Any],
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
        problems.extend(override_problems(exc, merged, server_raw, overrides,
                                      ("lanes", name, "server"), "", lines))
        return None
    return merged


def _arm_launches(campaign: Campaign, server_raw: dict[str, Any], lines: Lines,
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
            problems.extend(override_problems(exc, merged, server_raw, overrides,
                                          ("arms", arm), after, lines))
    return launches
