"""The campaign file's cross-field checks: what no single field's model can see.

The loader validates each field with its model, merges the arms' and lanes' overrides
into launches, then calls `check_campaign`: the local files it names (relative ones must
exist, existing ones must serve: `files.py`), the ports of the commands, the cells that
must name measured levels, a drift band and a pair count that make sense. Each problem is
one line `yaml.path: what is wrong (line N)`.

`thin_tails` is asked by `check` and `run`, not by the loader: a guardrail on a quantile
(`ttft_p99`) whose passes have too few requests per level for the quantile to be one. It
warns, or refuses (exit 2) when the campaign registered `gates.tail_requests: refuse`
(`refuse_thin_tails`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from campaign import catalog
from campaign.campaignfile.base import ZERO_ON_CONTROL, close_hint, shown
from campaign.campaignfile.files import (
    YamlPath,
    content_problems,
    format_yaml_path,
    missing_files,
)
from campaign.campaignfile.launch import DockerLaunch, ExternalLaunch, LaunchModel
from campaign.campaignfile.models import Campaign
from campaign.campaignfile.problems import Lines
from campaign.errors import SpecError

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
                f"workload '{shown(cell.workload)}' is not defined under workloads")
        elif cell.level != "*" and cell.level not in levels:
            hint = close_hint(cell.level, levels) or f" (levels: {', '.join(levels)})"
            add(("preregistration", "decision_cells", i, "level"),
                f"level '{shown(cell.level)}' is not measured{hint}")
    for i, g in enumerate(campaign.preregistration.guardrails):
        if g.workload != "*" and not wl.levels(g.workload):
            add(("preregistration", "guardrails", i, "workload"),
                f"workload '{shown(g.workload)}' is not defined under workloads")
        elif g.level != "*" and g.workload != "*" and g.level not in wl.levels(g.workload):
            add(("preregistration", "guardrails", i, "level"),
                f"level '{shown(g.level)}' is not measured")


def _rule_problems(campaign: Campaign, add: Add) -> None:
    """A drift band that is a fraction below the margin; an even pair count for ABBA; a
    sequential block design on whole blocks; a primary metric a relative bar can be put
    on."""
    pre = campaign.preregistration
    if pre.primary_metric in ZERO_ON_CONTROL:
        m = pre.primary_metric
        add(("preregistration", "primary_metric"),
            f"{m} is normally 0 on the control, so a relative bar ({pre.margin:.0%} of 0) "
            "cannot be measured: decide on the metric the change should move (e.g. "
            f"output_token_throughput) and keep {m} as an absolute guardrail ({{metric: {m}, "
            "max_worsening: 0.0, absolute: true})")
    if isinstance(pre.drift_band, float) and not 0 <= pre.drift_band < 1:
        add(("preregistration", "drift_band"), "must be a fraction in [0, 1), e.g. 0.03")
    elif isinstance(pre.drift_band, float) and pre.drift_band > pre.margin:
        add(("preregistration", "drift_band"), band_over_margin(pre.drift_band, pre.margin))
    if pre.order == "ABBA" and pre.pairs % 2 and pre.sequential is None:
        add(("preregistration", "pairs"),
            "ABBA needs an even number of pairs so each order is used equally")
    if pre.sequential is not None:
        for key, problem in pre.sequential.block_problems().items():
            add(("preregistration", "sequential", key), problem)
        if pre.order == "ABBA" and pre.pairs % 2 and "max_pairs" not in \
                pre.sequential.block_problems():
            add(("preregistration", "sequential", "max_pairs"),
                f"ABBA needs an even number of pairs so each order is used equally: write "
                f"max_pairs: {pre.pairs + 1}")


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


# --------------------------------------------------------------------------- thin tails

BEYOND_TO_RESOLVE = 3
"""Requests beyond a quantile that let a pass measure the quantile's own sampling error
(the bootstrap needs no inflation from 3 on: `verdict/sampling.inflation`)."""


@dataclass(frozen=True)
class ThinTail:
    """A guardrail on a quantile, at a workload whose passes are too small to give it."""

    path: YamlPath
    """The guardrail's place in the file (`preregistration.guardrails[0]`)."""
    metric: str
    workload: str
    limit: float
    requests: int
    """Requests per level the workload's passes have."""
    quantile: float
    unit: str = ""
    """The limit's unit when absolute (`ms`); "" when it is a fraction of the control's."""

    @property
    def meaningful(self) -> int:
        """Fewest requests per level with one request beyond the quantile: 1 ÷ (1 − q)."""
        return math.ceil(round(1 / (1 - self.quantile), 9))

    @property
    def resolving(self) -> int:
        """Requests per level with `BEYOND_TO_RESOLVE` requests beyond the quantile."""
        return BEYOND_TO_RESOLVE * self.meaningful

    def text(self) -> str:
        stat = self.metric.rsplit("_", 1)[-1]
        beyond = self.requests * (1 - self.quantile)
        return (f"guardrail {self.metric} at {self.workload}: {self.requests} requests per "
                f"level cannot give a {stat} of their own ({self.requests} × "
                f"{1 - self.quantile:.0%} = {beyond:.2g} requests beyond it, fewer than 1: "
                "it is the slowest request or two); at least "
                f"{self.meaningful} requests per level make the guardrail meaningful, "
                f"{self.resolving} ({BEYOND_TO_RESOLVE} beyond it) let each pass measure its "
                f"sampling error, as resolving a {self._limit_text()} limit needs "
                f"({_where(self.workload)})")


    def _limit_text(self) -> str:
        return f"{self.limit:g} {self.unit}" if self.unit else f"{self.limit:.0%}"


def _where(workload: str) -> str:
    return ("raise workloads.knee.requests_per_level" if workload == "knee"
            else f"raise workloads.{workload}.requests")


def _requests_per_level(campaign: Campaign, workload: str) -> int | None:
    wl = campaign.workloads
    if workload == "knee" and wl.knee:
        return wl.knee.requests_each_level  # None: duration-bound, not known beforehand
    if workload == "agentfix" and wl.agentfix:
        return wl.agentfix.requests
    return None


def thin_tails(campaign: Campaign) -> list[ThinTail]:
    """Each guardrail × workload whose quantile its passes' requests per level cannot give
    (N(1 − q) < 1: a p99 from fewer than 100 requests). Duration-bound passes are not
    judged (their request count is known only once measured)."""
    out = []
    for i, g in enumerate(campaign.preregistration.guardrails):
        q = catalog.quantile_of(g.metric)
        if q is None:
            continue
        for workload in _guarded_workloads(campaign, g.workload, g.at):
            n = _requests_per_level(campaign, workload)
            if n is not None and n * (1 - q) < 1 - 1e-9:
                unit = catalog.METRICS[g.metric].unit if g.absolute else ""
                out.append(ThinTail(("preregistration", "guardrails", i), g.metric, workload,
                                    g.max_worsening, n, q, unit))
    return out


def _guarded_workloads(campaign: Campaign, workload: str, at: str) -> tuple[str, ...]:
    """The workloads a guardrail is checked in: the one it names; else, `at: decision`,
    those of the decision cells; else both."""
    if workload != "*":
        return (workload,)
    if at == "decision":
        return tuple(dict.fromkeys(dc.workload for dc in
                                   campaign.preregistration.decision_cells))
    return ("knee", "agentfix")


def refuse_thin_tails(campaign: Campaign) -> list[ThinTail]:
    """`thin_tails`, raising `SpecError` (exit 2) instead when the campaign registered
    `gates.tail_requests: refuse`."""
    thin = thin_tails(campaign)
    if thin and campaign.preregistration.gates.tail_requests == "refuse":
        where = str(campaign.source) if campaign.source is not None else campaign.name
        raise SpecError(where, [f"{format_yaml_path(t.path)}: {t.text()} "
                                "(gates.tail_requests: refuse)" for t in thin])
    return thin
