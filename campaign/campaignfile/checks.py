"""The campaign file's cross-field checks: what no single field's model can see.

The loader validates each field with its model, merges the arms' and lanes' overrides
into launches, then calls `check_campaign`: the local files it names (relative ones must
exist, existing ones must serve: `files.py`), the ports of the commands, the cells that
must name measured levels, a drift band and a pair count that make sense. Each problem is
one line `yaml.path: what is wrong (line N)`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from campaign.campaignfile.files import YamlPath, content_problems, missing_files
from campaign.campaignfile.launch import DockerLaunch, ExternalLaunch, LaunchModel
from campaign.campaignfile.models import Campaign
from campaign.campaignfile.problems import Lines

Add = Callable[[YamlPath, str], None]


def check_campaign(campaign: Campaign, launches: Mapping[str, LaunchModel], lines: Lines, *,
                   check_files: bool = True) -> list[str]:
    """Every cross-field problem of a validated campaign with its merged launches.
    `check_files=False` leaves out the files (a frozen copy read back for a report)."""
    problems: list[str] = []

    def add(path: YamlPath, msg: str) -> None:
        problems.append(lines.problem(path, msg))

    if check_files:
        # absolute paths belong to the machine: the preflight checks them
        for path, msg in missing_files(campaign, launches, relative_only=True):
            add(path, msg)
        for path, msg in content_problems(campaign, launches):
            add(path, msg)
    _port_problems(campaign, launches, add)
    _cell_problems(campaign, add)
    _rule_problems(campaign, add)
    return problems


def _cell_problems(campaign: Campaign, add: Add) -> None:
    """Decision cells and guardrails must name defined workloads and measured levels."""
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


def _rule_problems(campaign: Campaign, add: Add) -> None:
    """A drift band that is a fraction below the margin; an even pair count for ABBA."""
    pre = campaign.preregistration
    if isinstance(pre.drift_band, float) and not 0 <= pre.drift_band < 1:
        add(("preregistration", "drift_band"), "must be a fraction in [0, 1), e.g. 0.03")
    elif isinstance(pre.drift_band, float) and pre.drift_band > pre.margin:
        add(("preregistration", "drift_band"), band_over_margin(pre.drift_band, pre.margin))
    if pre.order == "ABBA" and pre.pairs % 2:
        add(("preregistration", "pairs"),
            "ABBA needs an even number of pairs so each order is used equally")


def _port_in_argv(argv: list[str]) -> tuple[int, str] | None:
    """(index of the value, value) of the last `--port N` / `--port=N` in an argv."""
    found = None
    for i, a in enumerate(argv):
        if a == "--port" and i + 1 < len(argv):
            found = (i + 1, argv[i + 1])
        elif a.startswith("--port="):
            found = (i, a.split("=", 1)[1])
    return found


def _port_problems(campaign: Campaign, launches: Mapping[str, LaunchModel], add: Add) -> None:
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
