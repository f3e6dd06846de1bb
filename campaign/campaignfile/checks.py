"""The campaign file's cross-field checks: what no single field's model can see.

The loader validates each field with its model, merges the arms' and lanes' overrides
into launches, then calls `check_campaign`: the local files it names (relative ones must
exist, existing ones must serve: `files.py`), the ports of the commands, the cells that
must name measured levels, a drift band and a pair count that make sense. Each problem is
one line `yaml.path: what is wrong (line N)`.

Secrets (`campaign.secrets`): a well-known token shape (`hf_…`, `sk-…`) is refused in
every field, name and comment of the file (`token_problems`), which is frozen byte for
byte into every results folder. `secret_collisions` is asked by `check` and `run` (it
depends on the runner's environment): a secret value that is an arm's, a metric's or a
workload's name, or a path the run uses, would turn it into `<redacted>` in every log
line and message; it is refused (exit 2) with the fix.

`thin_tails` is asked by `check` and `run`, not by the loader: a guardrail on a quantile
(`ttft_p99`) whose passes have too few requests per level for the quantile to be one. It
warns, or refuses (exit 2) when the campaign registered `gates.tail_requests: refuse`
(`refuse_thin_tails`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign import catalog, secrets
from campaign.campaignfile import trace
from campaign.campaignfile.base import ZERO_ON_CONTROL, close_hint, shown
from campaign.campaignfile.files import (
    YamlPath,
    content_problems,
    format_yaml_path,
    local_files,
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
        # a frozen copy read back (check_files False) keeps what it was registered with
        problems.extend(token_problems(lines, campaign.source))
    _port_problems(campaign, launches, add)
    _cell_problems(campaign, add)
    _rule_problems(campaign, add)
    _timeout_problems(campaign, add)
    return problems


def _cell_problems(campaign: Campaign, add: Add) -> None:
    """Decision cells and guardrails must name defined workloads and measured levels."""
    wl = campaign.workloads
    pre = campaign.preregistration
    for i, cell in enumerate(pre.decision_cells):
        levels = wl.levels(cell.workload)
        capacity = (cell.workload, cell.level) == ("rate", CAPACITY)
        if capacity or pre.primary_metric == CAPACITY_METRIC:
            why = _capacity_problem(capacity, len(levels), pre.primary_metric)
            if why:
                add(("preregistration", "decision_cells", i, "level"), why)
            continue
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


CAPACITY = "capacity"
"""The rate workload's capacity-at-SLO cell (`verdict.capacity`): no pass of its own."""
CAPACITY_METRIC = "capacity_at_slo"


def _capacity_problem(capacity: bool, rates: int, primary: str) -> str | None:
    """Why a decision cell and the primary metric do not make a capacity decision."""
    if capacity and primary != CAPACITY_METRIC:
        return (f"level capacity holds only {CAPACITY_METRIC}: make it the primary_metric, "
                "or decide on a rate level (r<rate>)")
    if not capacity:
        return (f"{CAPACITY_METRIC} is measured once per sweep, at `{{workload: rate, level: "
                "capacity}}`: decide there")
    if rates < 2:
        return ("capacity at SLO is read between rate levels: give workloads.rate at least "
                "two rates")
    return None


def _timeout_problems(campaign: Campaign, add: Add) -> None:
    """A rate level's schedule or a trace that alone outlasts `gates.pass_timeout_s`:
    every attempt would be cut."""
    rate, replayed = campaign.workloads.rate, campaign.workloads.trace
    limit = campaign.preregistration.gates.pass_timeout_s
    if replayed is not None:
        for name, file in replayed.files.items():
            try:
                span = trace.summary(campaign.resolve(file)).span_s * replayed.time_scale
            except trace.TraceProblem:
                continue  # said by the file's own check
            if span >= limit:
                add(("workloads", "trace", "files", name),
                    f"trace {name} spans {span:.0f} s, at least gates.pass_timeout_s "
                    f"{limit:g} s: every attempt would be cut; raise gates.pass_timeout_s "
                    "or replay a shorter window (or a smaller time_scale)")
    if rate is None:
        return
    long = [(lvl, (rate.requests_at(lvl) - 1) / rate.rate_of(lvl)) for lvl in rate.levels]
    long = [(lvl, span) for lvl, span in long if span >= limit]
    if long:
        said = ", ".join(f"{lvl} {span:.0f} s" for lvl, span in long)
        add(("workloads", "rate"),
            f"the schedule of {said} outlasts gates.pass_timeout_s {limit:g} s (requests ÷ "
            "rate), so every attempt would be cut: give that level fewer requests or a "
            "higher rate, or raise gates.pass_timeout_s")


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


# --------------------------------------------------------------------------- secrets

TOKEN_FIX = ("a credential does not belong in the campaign file (it is frozen, byte for "
             "byte, into every results folder): remove it; a server is given a secret only "
             "as a reference read from the runner's environment at launch, e.g. "
             "${HF_TOKEN} in its env, args or URL")


def token_problems(lines: Lines, source: Path | None = None) -> list[str]:
    """A well-known token shape (`secrets.TOKEN_SHAPES`) in any string of the file (the
    hypothesis, a description, a capture's name or regex, any value) or in a name, named
    by its place, never quoted; one in a comment by its line (`source`, when the walk found
    none)."""
    found: list[str] = []

    def walk(node: Any, path: YamlPath) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                shapes = list(secrets.token_shapes(str(key)))
                for what in shapes:
                    found.append(lines.problem(path, f"a name holds {what}: {TOKEN_FIX}"))
                if not shapes:  # below a name that is a token, its path would quote it
                    walk(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*path, i))
        elif isinstance(node, str):
            found.extend(lines.problem(path, f"holds {what}: {TOKEN_FIX}")
                         for what in secrets.token_shapes(node))

    walk(lines.root, ())
    if not found and source is not None:
        try:
            text = source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for n, line in enumerate(text.splitlines(), start=1):
            found += [f"line {n}: holds {what} outside any field (a comment): {TOKEN_FIX}"
                      for what in secrets.token_shapes(line)]
    return found


def _used_names(campaign: Campaign) -> list[tuple[str, str, str]]:
    """(name, what it is, how to rename it) of every name a record keys on."""
    rule = campaign.preregistration
    metrics = dict.fromkeys([*catalog.METRICS, rule.primary_metric,
                             *(g.metric for g in rule.guardrails)])
    workloads = [w for w in ("knee", "agentfix", "rate", "trace", "sessions", "fidelity")
                 if getattr(campaign.workloads, w, None) is not None]
    arms, lanes = campaign.arm_names, campaign.lane_names
    # said by its place, not its name: a message naming it would be scrubbed to <redacted>
    return ([(a, f"the name of arm {i} of {len(arms)} under `arms:`", " (or rename the arm)")
             for i, a in enumerate(arms, start=1)]
            + [(m, "a metric's name (`spec-ab check --metrics`)", "") for m in metrics]
            + [(w, "a workload's name", "") for w in workloads]
            + [(campaign.name, "the campaign's name", " (or rename the campaign)")]
            + [(lane, f"the name of lane {i} of {len(lanes)}", " (or rename the lane)")
               for i, lane in enumerate(lanes, start=1)])


def _used_paths(campaign: Campaign) -> list[tuple[Path, str]]:
    """(path, what it is) of every path the run reads or writes."""
    out = [(campaign.base_dir, "the campaign's folder"),
           (campaign.resolve(campaign.results_dir), "the results folder")]
    if campaign.source is not None:
        out.append((campaign.source, "the campaign file"))
    out += [(f.resolved, f"{format_yaml_path(f.yaml_path)}'s path") for f in local_files(campaign)]
    return out


def _path_collision(value: str, path: Path, what: str) -> str | None:
    if value == str(path):
        return f"is {what}"
    if value.startswith("/") and Path(value) in path.parents:
        return f"is a folder above {what}"
    if value in path.parts[1:]:
        return f"is the name of a folder on {what}"
    return None


def secret_collisions(campaign: Campaign, environ: Mapping[str, str] | None = None
                      ) -> list[str]:
    """Each secret value (`secrets.secret_variables`: what a launch reads in a secret
    position, and the runner's secret-looking variables) that is an arm's, a metric's, a
    workload's, the campaign's or a lane's name, or a path the run uses (equal, a folder
    above it, a folder name on it): scrubbed from every log line and message, it would
    hide that name or path there. One problem per variable, with the fix; the value is
    never shown."""
    views = ([campaign] if campaign.lane_chosen
             else [campaign.for_lane(n) for n in campaign.lane_names])
    dumps = [launch.model_dump(mode="json") for v in views for launch in v.launches.values()]
    referenced = {n for d in dumps for n in secrets.secret_references(d)}
    found = []
    for name, value in sorted(secrets.secret_variables(dumps, environ).items()):
        hit = next(((f"is {what}", rename) for used, what, rename in _used_names(campaign)
                    if value == used), None)
        if hit is None:
            hit = next(((said, "") for path, what in _used_paths(campaign)
                        if (said := _path_collision(value, path, what)) is not None), None)
        if hit is None:
            continue
        said, rename = hit
        how, fix = ((f"read by the campaign as ${{{name}}}", f"give {name} another value")
                    if name in referenced else
                    ("a secret-looking variable of this environment",
                     f"unset {name} before spec-ab runs"))
        found.append(f"{name} ({how}) {said}: a secret's value is replaced by "
                     f"{secrets.REDACTED} in every log line and message, so it would be "
                     f"hidden there too; {fix}{rename}")
    return found


def refuse_secret_collisions(campaign: Campaign,
                             environ: Mapping[str, str] | None = None) -> None:
    """`secret_collisions`, raised as `SpecError` (exit 2): `check` and `run` (a resume
    too) refuse to start."""
    found = secret_collisions(campaign, environ)
    if found:
        where = str(campaign.source) if campaign.source is not None else campaign.name
        raise SpecError(where, found)


# --------------------------------------------------------------------------- thin tails

BEYOND_TO_RESOLVE = 3
"""Requests beyond a quantile that let a pass measure the quantile's own sampling error
(the bootstrap needs no inflation from 3 on: `verdict/sampling.inflation`)."""


@dataclass(frozen=True)
class ThinTail:
    """A guardrail on a quantile, at cells whose passes are too small to give it."""

    path: YamlPath
    """The guardrail's place in the file (`preregistration.guardrails[0]`)."""
    metric: str
    workload: str
    limit: float
    requests: int
    """Requests per pass these cells have."""
    quantile: float
    unit: str = ""
    """The limit's unit when absolute (`ms`); "" when it is a fraction of the control's."""
    levels: tuple[str, ...] = ()
    """The cells' levels when not every level of the workload is thin ((): all of them)."""
    fields: str = ""
    """Where the cells get their requests (`workloads.agentfix.requests.prose`)."""

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
        at = f"{self.workload} {', '.join(self.levels)}" if self.levels else self.workload
        where = self.fields or _where(self.workload)
        return (f"guardrail {self.metric} at {at}: {self.requests} requests per "
                f"level cannot give a {stat} of their own ({self.requests} × "
                f"{1 - self.quantile:.0%} = {beyond:.2g} requests beyond it, fewer than 1: "
                "it is the slowest request or two); at least "
                f"{self.meaningful} requests per level make the guardrail meaningful, "
                f"{self.resolving} ({BEYOND_TO_RESOLVE} beyond it) let each pass measure its "
                f"sampling error, as resolving a {self._limit_text()} limit needs "
                f"(raise {where})")


    def _limit_text(self) -> str:
        return f"{self.limit:g} {self.unit}" if self.unit else f"{self.limit:.0%}"


def _where(workload: str) -> str:
    return (f"workloads.{workload}.requests_per_level" if workload in ("knee", "rate")
            else f"workloads.{workload}.requests")


def thin_tails(campaign: Campaign) -> list[ThinTail]:
    """Each guardrail × workload whose quantile some of its cells' passes cannot give
    (N(1 − q) < 1: a p99 from fewer than 100 requests), one per request count, each cell
    at its own (`Workloads.requests_in`). Duration-bound passes are not judged (their
    request count is known only once measured)."""
    wl = campaign.workloads
    out = []
    for i, g in enumerate(campaign.preregistration.guardrails):
        q = catalog.quantile_of(g.metric)
        if q is None:
            continue
        cells = _guarded_cells(campaign, g.workload, g.level, g.at)
        for workload in dict.fromkeys(w for w, _ in cells):
            thin: dict[int, list[str]] = {}
            for w, lvl in cells:
                n = campaign.requests_in(w, lvl)
                if w == workload and n is not None and n * (1 - q) < 1 - 1e-9:
                    thin.setdefault(n, []).append(lvl)
            for n, levels in sorted(thin.items()):
                unit = catalog.METRICS[g.metric].unit if g.absolute else ""
                # one count for every cell (not a mapping): said of the workload, as its field
                per_cell = isinstance(_raw(campaign, workload), dict)
                fields = wl.requests_fields([(workload, lvl) for lvl in levels])
                out.append(ThinTail(("preregistration", "guardrails", i), g.metric, workload,
                                    g.max_worsening, n, q, unit,
                                    tuple(levels) if per_cell else (),
                                    fields if per_cell else ""))
    return out


def _raw(campaign: Campaign, workload: str) -> int | dict[str, int] | None:
    """The workload's request field as written (an int for every cell, or a mapping)."""
    wl = campaign.workloads
    if workload == "knee" and wl.knee:
        return wl.knee.requests_per_level
    if workload == "rate" and wl.rate:
        return wl.rate.requests_per_level
    return wl.agentfix.requests if workload == "agentfix" and wl.agentfix else None


def _guarded_cells(campaign: Campaign, workload: str, level: str,
                   at: str) -> list[tuple[str, str]]:
    """The request-bound cells a guardrail is checked in: those it names; with `at:
    decision`, the decision cells among them (when it names none of them and a workload
    or level of its own: its own cells)."""
    wl = campaign.workloads
    cells: list[tuple[str, str]] = [(w, lvl) for w in ("knee", "agentfix", "rate")
                                     for lvl in wl.levels(w)
                                     if workload in ("*", w) and level in ("*", lvl)]
    if at != "decision":
        return cells
    decided = {(dc.workload, lvl) for dc in campaign.preregistration.decision_cells
               for lvl in (wl.levels(dc.workload) if dc.level == "*" else [dc.level])}
    named: list[tuple[str, str]] = [c for c in cells if c in decided]
    return named if named or (workload == "*" and level == "*") else cells


def refuse_thin_tails(campaign: Campaign) -> list[ThinTail]:
    """`thin_tails`, raising `SpecError` (exit 2) instead when the campaign registered
    `gates.tail_requests: refuse`."""
    thin = thin_tails(campaign)
    if thin and campaign.preregistration.gates.tail_requests == "refuse":
        where = str(campaign.source) if campaign.source is not None else campaign.name
        raise SpecError(where, [f"{format_yaml_path(t.path)}: {t.text()} "
                                "(gates.tail_requests: refuse)" for t in thin])
    return thin
