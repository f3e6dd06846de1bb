"""The campaign file's models: rule, workloads, arms and the campaign itself.

Every model forbids unknown keys and describes every field (docs/campaign-file.md is
generated from these descriptions, and a test checks it is current). The server launch
models live in `campaign.campaignfile.launch`.

Merge rule for arms (`merge`): lists are appended, maps merged key by key, scalars
replaced. The merged launch of each arm (`Campaign.launches[arm]`) is what the runner
starts and what `spec-ab check` prints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from campaign import catalog
from campaign.campaignfile import sessions, trace
from campaign.campaignfile.base import (
    CONTROL,
    NAME_RE,
    CaptureName,
    Fraction,
    FractionBelowOne,
    Int,
    Limit,
    Model,
    Seed,
    check_metric,
    check_regex,
    limit_with_unit,
)
from campaign.campaignfile.builtin import builtin_path
from campaign.campaignfile.gates import Gates as Gates  # re-exported: the models of one file
from campaign.campaignfile.launch import Launch, LaunchModel
from campaign.campaignfile.sequential import Sequential
from campaign.campaignfile.slo import Slo, missing_bound
from campaign.campaignfile.workloads import (  # re-exported: the models of one file
    FIXTURE_CLASSES as FIXTURE_CLASSES,
)
from campaign.campaignfile.workloads import AgentfixWorkload as AgentfixWorkload
from campaign.campaignfile.workloads import KneeWorkload as KneeWorkload
from campaign.campaignfile.workloads import WarmupPass as WarmupPass
from campaign.campaignfile.workloads import Workloads as Workloads

# --------------------------------------------------------------------------- rule

RuleName = Literal["bound", "point", "ci"]
"""The adoption rules a campaign can register (see docs/verdict.md)."""
RULES: tuple[str, ...] = get_args(RuleName)


class DriftFrom(Model):
    """Take the drift band from the spread of an A/A campaign on the same lane."""

    from_: Path = Field(alias="from", description="Results directory of an A/A campaign.")


class DecisionCell(Model):
    """A workload × level whose primary metric must adopt for the campaign to adopt."""

    workload: Literal["knee", "agentfix", "rate", "trace", "sessions"] = Field(
        description="Workload of the cell.")
    level: str = Field(
        "*",
        description="Knee level `c<N>` (concurrency N), an agentfix class, a rate level "
        "`r<rate>` (`r4`), a trace's name, a session class, or `*` for all.",
    )


class Guardrail(Model):
    """A metric the candidate may not worsen by more than a pre-registered amount."""

    metric: str = Field(description="Metric name (see `spec-ab check --metrics`).")
    max_worsening: Limit = Field(
        0.05,
        ge=0,
        description="Largest allowed worsening: a fraction of the control's value (0.05 or "
        "`5%`; at most 1), or an absolute difference when `absolute` is true (in the "
        "metric's unit; a fraction for a share such as error_rate).",
    )
    absolute: bool = Field(
        False, description="Compare absolute differences (for rates that are often 0)."
    )
    workload: Literal["knee", "agentfix", "rate", "trace", "sessions", "fidelity", "*"] = Field(
        "*", description="Where it applies (narrows `at`; `fidelity`: the fidelity pass's "
        "figures, level `c1`).")
    level: str = Field("*", description="Level where it applies, or `*` (narrows `at`).")
    at: Literal["decision", "all"] = Field(
        "decision",
        description="`decision`: checked where the decision is made (the decision cells' "
        "workloads and levels, `*` expanded as theirs); `all`: at every measured cell of "
        "its metric. A registration made before `at` existed is read as `all`.",
    )
    drift_band: FractionBelowOne | DriftFrom | None = Field(
        None,
        description="The metric's pass-to-pass noise beyond its requests' sampling, per pass "
        "(a fraction below 1, or `{from: RUN_DIR}` of an A/A campaign, whose report "
        "recommends it): the prior of the noise the guardrail is judged against, which the "
        "campaign's own pairs then refine; default: the statistic's measured default (±10% "
        "per pass for a p99, ±5% for a median), never the campaign's drift band.",
    )
    unclear_stops: bool | None = Field(
        None,
        description="Kept so older registrations still read. A guardrail that is not shown "
        "within its limit (`unclear`) always stops adoption now: `false` no longer lets "
        "a candidate through on a maybe.",
    )
    deterioration: bool = Field(
        True,
        description="Also check every other measured cell of this (relative) metric: a "
        "worsening shown beyond the limit there stops adoption too (corrected over the "
        "cells); an unclear one there does not.",
    )

    @model_validator(mode="before")
    @classmethod
    def _limit_unit(cls, data: Any) -> Any:
        return limit_with_unit(data)

    @property
    def stops_when_unclear(self) -> bool:
        """Whether `unclear` stops adoption: always (a guardrail must be shown within its
        limit; `unclear_stops: false` of an older registration no longer lets it through)."""
        return True

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        return check_metric(v)

    @model_validator(mode="before")
    @classmethod
    def _share_in_points(cls, data: Any) -> Any:
        """A share of requests (the SLO attainments) is limited in points: `absolute`."""
        if isinstance(data, Mapping) and data.get("metric") in catalog.SLO_SHARES:
            if data.get("absolute") is False:
                raise ValueError(f"{data['metric']} is a share of requests, limited in points "
                                 "(max_worsening 0.02 = 2 points): drop `absolute: false`")
            data = {**data, "absolute": True}
        return data


class Preregistration(Model):
    """The adoption rule, fixed (frozen and hashed) before the first arm boots."""

    primary_metric: str = Field(
        "output_token_throughput", description="The metric the rule decides on."
    )
    direction: Literal["higher", "lower"] | None = Field(
        None, description="Which way is better; default: the metric's own direction."
    )
    margin: Fraction = Field(
        0.10, ge=0, description="Bar the change must clear to adopt (0.10 or `10%` = +10%; "
        "for a lower-is-better metric, a 10% reduction; at most 1)."
    )
    drift_band: FractionBelowOne | DriftFrom = Field(
        0.03,
        description="Changes inside ±band are noise: a fraction below 1 (0.03 or `3%`), or "
        "`{from: RUN_DIR}` of an A/A campaign.",
    )
    rule: RuleName = Field(
        "bound",
        description="`bound`: adopt when the change is better by the margin and its one-sided "
        "lower confidence bound is better by max(margin/2, band) (more pairs lower both "
        "errors); `point`: adopt when the change is better by the margin and every pair is "
        "better by the band; `ci`: adopt when the CI's worse end is better by the margin.",
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence level of the CIs.")
    pairs: Int = Field(2, ge=1, le=200, description="Number of control → candidate pairs "
                       "(on each lane, with `lanes:`).")
    order: Literal["AB", "ABBA", "random"] = Field(
        "AB", description="Order of arms within pairs: AB, ABBA (alternating; every other "
        "lane starts with BA), random (seeded; each lane its own stream)."
    )
    seed: Seed = Field(0, description="Seed of the `random` order and of the load generator "
                       "(0 to 2**32 − 1).")
    decision_cells: list[DecisionCell] = Field(
        default_factory=lambda: [DecisionCell(workload="knee", level="*")],
        min_length=1,
        description="Cells whose primary metric must adopt (default: every knee level).",
    )
    guardrails: list[Guardrail] = Field(
        default_factory=lambda: [
            # +25%: what a campaign of a night can show on a p99 (docs/verdict.md)
            Guardrail(metric="ttft_p99", max_worsening=0.25),
            Guardrail(metric="error_rate", max_worsening=0.0, absolute=True),
        ],
        description="Metrics the candidate may not worsen, each a test on the metric's own "
        "noise (where: `at`, default the decision cells).",
    )
    gates: Gates = Field(default_factory=Gates, description="Validity gates of a pass.")
    sequential: Sequential | None = Field(
        None, description="A sequential design: look after each pair (or block) and stop "
        "when decided (`max_pairs`, `min_pairs`, `look`, `power`); needs rule `bound`.")
    slo: Slo | None = Field(
        None, description="Per-request latency bounds (`ttft_ms`, `itl_ms`, "
        "`request_latency_ms`) that `slo_attainment`, `ttft_slo_attainment`, "
        "`itl_slo_attainment` and `goodput` count requests against.")
    multiple_candidates: Literal["correct", "none"] = Field(
        "correct",
        description="With several candidates, `correct` keeps the campaign's false-adopt "
        "rate at a single candidate's when the best is picked (`bound`: the lower bound at "
        "α/k; `point`: a higher margin; `ci`: Bonferroni); `none` judges each as if alone.",
    )

    @field_validator("primary_metric")
    @classmethod
    def _known_primary(cls, v: str) -> str:
        return check_metric(v)

    @property
    def metric_direction(self) -> Literal["higher", "lower"]:
        return self.direction or catalog.direction(self.primary_metric)

    @model_validator(mode="after")
    def _slo_given(self) -> Preregistration:
        named = [("primary_metric", self.primary_metric),
                 *((f"guardrails[{i}]", g.metric) for i, g in enumerate(self.guardrails))]
        for where, metric in named:
            if (why := missing_bound(metric, self.slo)) is not None:
                raise ValueError(f"{where}: {why}")
        return self

    @model_validator(mode="after")
    def _sequential_pairs(self) -> Preregistration:
        if self.sequential is not None:  # pairs follows max_pairs
            pairs = self.pairs if "pairs" in self.model_fields_set else None
            object.__setattr__(self, "pairs", self.sequential.pairs_for(self.rule, pairs))
        return self


# --------------------------------------------------------------------------- workloads
# (their models are `workloads`', re-exported here: the models of one file)

# --------------------------------------------------------------------------- arms


ARM_OWN_FIELDS = {"description", "warmup"}
REDO_SUFFIX = r"\.redo\d+$"
"""Reserved at the end of arm names: `<arm>.redo<N>/` holds a redone pair's attempt."""


class ArmSpec(Model):
    """An arm: the server launch plus overrides (lists appended, maps merged, scalars
    replaced). Validated again after merging, against the backend's own fields."""

    raw_fields = frozenset({"overrides"})

    description: str = Field("", description="What this arm changes.")
    warmup: list[WarmupPass] | None = Field(
        None, description="This arm's own warm-up passes (default: workloads.warmup)."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Server fields this arm overrides (env, volumes, "
        "args, image, ...), written directly under the arm."
    )


class LaneSpec(Model):
    """One lane of a sharded campaign: a machine (or machine pair) that runs its own
    pairs, started with `spec-ab run FILE --lane NAME`. Its server overrides are merged
    into `server` before the arms' (lists appended, maps merged, scalars replaced)."""

    raw_fields = frozenset({"server"})

    description: str = Field("", description="What this lane is (host, GPUs).")
    server: dict[str, Any] = Field(
        default_factory=dict, description="Server fields this lane overrides (host, ports, "
        "env, docker host, ...); every arm on this lane starts from the merged launch."
    )


# --------------------------------------------------------------------------- campaign


class Campaign(Model):
    """A same-window A/B campaign: control → candidate pairs under a pre-registered rule."""

    name: str = Field(pattern=NAME_RE, description="Short name (lowercase, -_. allowed).")
    hypothesis: str = Field(description="What the candidate should change, and why.")
    lane: str = Field("", description="Lane label, e.g. `gb300-station` or `sim` (the one "
                      "lane of a campaign without `lanes:`).")
    lanes: dict[str, LaneSpec] = Field(
        default_factory=dict,
        description="Optional: name → lane. The campaign is sharded: `spec-ab run FILE --lane "
        "NAME` runs that lane's `preregistration.pairs` pairs; `spec-ab report` pools the "
        "shards into one verdict. Leave `lane:` out when lanes are given.",
    )
    preregistration: Preregistration = Field(
        default_factory=Preregistration, description="The rule, frozen before the runs."
    )
    server: Launch = Field(description="The control launch (what every arm starts from).")
    arms: dict[str, ArmSpec] = Field(
        description="`control` plus one or more named candidates."
    )
    workloads: Workloads = Field(description="Warm-up and measured passes.")
    log_captures: dict[CaptureName, str] = Field(
        default_factory=dict,
        description="Name → regex: matching server log lines are copied to "
        "`captures/<name>.log` per arm (a name: letters, digits, `.`, `_`, `-`, not "
        "starting with `.`, at most 64 characters).",
    )
    results_dir: Path = Field(Path("results"), description="Where run directories go.")

    _launches: dict[str, LaunchModel] = PrivateAttr(default_factory=dict)
    _lane_views: dict[str, Campaign] = PrivateAttr(default_factory=dict)
    _lane_chosen: bool = PrivateAttr(False)
    _source: Path | None = PrivateAttr(None)
    _base_dir: Path | None = PrivateAttr(None)

    @field_validator("log_captures")
    @classmethod
    def _regexes(cls, v: dict[str, str]) -> dict[str, str]:
        for pattern in v.values():
            check_regex(pattern)
        return v

    @field_validator("lanes")
    @classmethod
    def _lane_names(cls, v: dict[str, LaneSpec]) -> dict[str, LaneSpec]:
        for name in v:
            if not re.fullmatch(NAME_RE, name):
                raise ValueError(f"lane name {name!r} must match {NAME_RE}")
        return v

    @model_validator(mode="after")
    def _one_lane_or_a_table(self) -> Campaign:
        if self.lanes and self.lane:
            raise ValueError(
                f"`lane: {self.lane}` and `lanes:` both given: with `lanes:` each shard's lane "
                "is chosen by `spec-ab run FILE --lane NAME`; remove `lane:`")
        if not self.lanes and not self.lane:
            raise ValueError("`lane:` is missing: name the lane the campaign runs on (e.g. "
                             "`lane: gb300-station`), or list several under `lanes:`")
        return self

    @field_validator("arms")
    @classmethod
    def _control(cls, v: dict[str, ArmSpec]) -> dict[str, ArmSpec]:
        if CONTROL not in v:
            raise ValueError("arms must include `control`")
        if len(v) < 2:
            raise ValueError("add at least one candidate arm beside `control`")
        for name in v:
            if not re.fullmatch(NAME_RE, name):
                raise ValueError(f"arm name {name!r} must match {NAME_RE}")
            if re.search(REDO_SUFFIX, name):
                raise ValueError(
                    f"arm name '{name}' ends in .redo<N>, which names the folder of a redone "
                    "pair (pairs/NN/<arm>.redoN/): rename the arm")
        return v

    @property
    def arm_names(self) -> list[str]:
        """`control` first, then the candidates in file order."""
        return [CONTROL, *(a for a in self.arms if a != CONTROL)]

    @property
    def candidates(self) -> list[str]:
        return [a for a in self.arm_names if a != CONTROL]

    @property
    def launches(self) -> dict[str, LaunchModel]:
        return dict(self._launches)

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def base_dir(self) -> Path:
        if self._base_dir is not None:
            return self._base_dir
        return self._source.parent if self._source else Path.cwd()

    def with_source(self, path: Path, base_dir: Path | None = None) -> Campaign:
        """This campaign as read from `path`; relative paths resolve against `base_dir`
        (default: the file's folder)."""
        out = self.model_copy()
        out._source = path.resolve()
        out._base_dir = base_dir.resolve() if base_dir is not None else None
        return out

    def with_launches(self, launches: Mapping[str, LaunchModel]) -> Campaign:
        """This campaign with each arm's merged server launch."""
        out = self.model_copy()
        out._launches = dict(launches)
        return out

    @property
    def sharded(self) -> bool:
        """The campaign has a `lanes:` table (each lane runs as its own shard)."""
        return bool(self.lanes)

    @property
    def lane_names(self) -> list[str]:
        """The lanes in file order (the one `lane:` of a campaign without `lanes:`)."""
        return list(self.lanes) if self.lanes else [self.lane]

    @property
    def lane_index(self) -> int:
        """This view's lane's place in the file, from 0 (0 for a campaign without lanes or
        with no lane chosen): each lane's pairs run in their own order (`schedule`)."""
        if not self.lanes or not self._lane_chosen:
            return 0
        return list(self.lanes).index(self.lane)

    @property
    def lane_chosen(self) -> bool:
        """This view is of one lane: no `lanes:` table, or a lane picked by `for_lane`."""
        return not self.lanes or self._lane_chosen

    def every_launch(self) -> list[LaunchModel]:
        """Every arm's launch on this lane, or on every lane when none is chosen (what
        `spec-ab clean FILE` must look for)."""
        views = [self] if self.lane_chosen else list(self._lane_views.values())
        return [launch for view in views for launch in view.launches.values()]

    def for_lane(self, name: str) -> Campaign:
        """This campaign as run on lane `name`: its `server` and launches are the lane's.
        Raises KeyError for a lane the campaign does not list."""
        if not self.lanes:
            if name != self.lane:
                raise KeyError(name)
            return self
        view = self._lane_views[name]
        out = view.model_copy()
        out._lane_views = self._lane_views
        out._lane_chosen = True
        return out

    def with_lane_views(self, views: Mapping[str, Campaign]) -> Campaign:
        """This campaign with each lane's view (`lane` set, `server` and launches merged);
        until a lane is chosen it shows the first lane's launches."""
        first = next(iter(views.values()))
        out = first.model_copy(update={"lane": ""})
        out._lane_views = dict(views)
        out._lane_chosen = False
        return out

    def requests_in(self, workload: str, level: str) -> int | None:
        """The requests a pass of (workload, level) sends: `Workloads.requests_in`, and a
        trace's or a session class's read from its file (the trace's lines; the sessions
        per pass × the file's user turns per session). None: not known beforehand (a
        duration-bound pass, a file that cannot be read: `check` says why)."""
        n = self.workloads.requests_in(workload, level)
        wl = self.workloads
        try:
            if n is None and workload == "trace" and wl.trace and level in wl.trace.files:
                n = trace.summary(self.resolve(wl.trace.files[level])).requests
            if (n is None and workload == "sessions" and wl.sessions
                    and level in wl.sessions.fixtures):
                info = sessions.read(self.resolve(wl.sessions.fixtures[level]))
                n = round(wl.sessions.sessions * info.turns_per_session)
        except (OSError, ValueError):
            return None
        return n

    def resolve(self, path: Path | str) -> Path:
        """A path from the file: `builtin:NAME` is a file shipped with spec-ab (see
        `builtin.builtin_path`), anything else is relative to the campaign file's folder."""
        shipped = builtin_path(path)
        if shipped is not None:
            return shipped
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def warmups(self, arm: str) -> list[WarmupPass]:
        own = self.arms[arm].warmup
        return list(own) if own is not None else list(self.workloads.warmup)



# --------------------------------------------------------------------------- merging


def merge(base: Any, override: Any) -> Any:
    """Lists appended, maps merged key by key, scalars replaced."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        out = dict(base)
        for k, v in override.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(override, list):
        return [*base, *override]
    return override

