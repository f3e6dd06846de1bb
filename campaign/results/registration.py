"""preregistration.json: the rule a run is judged under, frozen and hashed before its first
slot. `Registration` is the file's model: `save` writes it (once, atomically), `load` reads
it back, migrates an older results schema in memory and validates it, raising
`ResultsError` (exit 2) that names the file and the problem.

Results schema versions (`campaign.RESULTS_SCHEMA_VERSION`; every results file that
carries a `schema_version` carries the same number):

    1  first layout: campaign.yaml, preregistration.json, manifest.json, journal.jsonl,
       passes.csv, pairs/. preregistration.json was read back as a plain dict and checked
       key by key by the report.
    2  preregistration.json is a validated document: `schema_version` is an integer,
       `drift_band` the resolved band (a fraction in [0, 1), also when the campaign took
       it `{from: <A/A run>}`), `sha256` 64 hex digits, `arms` control plus at least one
       candidate; new keys `tool_version`, the spec-ab version that registered the run,
       and `values_sha256`, the hash of every value a verdict depends on (the rule, the
       resolved drift band, the arms in their order: `values_hash`). `sha256` stays the
       rule's own hash. Nothing else in the directory changed. Schema-1 directories have
       no `values_sha256`: only their rule is checked, as before.
    3  preregistration.json carries `levels`: the decision cells and each guardrail's
       cells, with `level: "*"` resolved to the levels the campaign configured at
       registration (`RegisteredLevels`), so a verdict knows every registered level
       without the frozen campaign.yaml; and `guardrail_bands`, each guardrail's
       boot-to-boot band resolved (its own, its A/A run's, or the campaign's).
       `values_sha256` covers both. Schema-2 directories have neither (None): their
       verdict reads the levels from campaign.yaml and judges guardrails against the
       campaign's band, as before. Registrations made since the journal is chained
       also carry `journal_chain` (`results.chain`): the run's journal must be chained
       (an added key, not a new schema: absent, the run reads as before). A run that
       replays schedules (rate levels, traces: `run.measure.arrivals`) registers each
       one's SHA-256 (`schedules`, name → sha256, under `values_sha256` too); a run
       without them writes no such key, byte for byte the file it wrote before.

Reading a directory of an older schema never rewrites it: `update_to_<N>` turns the
version N-1 document into version N in memory, one step at a time, and remembers the
version it was written with (`Registration.written_version`). A directory of a newer
schema than this spec-ab knows is refused with a hint to upgrade.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from campaign import RESULTS_SCHEMA_VERSION, __version__, catalog
from campaign.campaignfile import Campaign
from campaign.errors import ResultsError
from campaign.results.chain import CHAIN_VERSION
from campaign.textfiles import DOC_CAP, atomic_write, read_capped

FILE_NAME = "preregistration.json"


def rule_hash(rule: dict[str, Any]) -> str:
    """sha256 of the rule's canonical JSON: what `report` checks the frozen rule with."""
    canonical = json.dumps(rule, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def values_hash(rule: dict[str, Any], drift_band: float, arms: list[str],
                levels: RegisteredLevels | None = None,
                guardrail_bands: Sequence[float] | None = None,
                schedules: Mapping[str, str] | None = None) -> str:
    """sha256 of every value a verdict depends on: the rule, the resolved drift band, the
    arms in their order and (schema 3) the resolved levels and each guardrail's resolved
    band, and the replayed schedules' sha256, as canonical JSON. A value registered later
    is one more key of this document (absent: the older hash)."""
    doc: dict[str, Any] = {"arms": list(arms), "drift_band": float(drift_band), "rule": rule}
    if levels is not None:
        doc["levels"] = levels.model_dump(mode="json")
    if guardrail_bands is not None:
        doc["guardrail_bands"] = [float(b) for b in guardrail_bands]
    if schedules:
        doc["schedules"] = dict(schedules)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class CellRef(BaseModel):
    """One (workload, level) place of the results."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str
    level: str


class GuardrailCells(BaseModel):
    """Where one guardrail of the rule (same position in `rule.guardrails`) is checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    cells: list[CellRef]


class RegisteredLevels(BaseModel):
    """The rule's places resolved at registration: `*` → the levels the campaign
    configured (a level registered here and never measured is missing, not skipped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decision_cells: list[CellRef] = Field(
        description="Every decision cell, `level: \"*\"` resolved.")
    guardrails: list[GuardrailCells] = Field(
        description="Each guardrail's cells, `workload`/`level` `*` resolved.")

    def guardrail_cells(self) -> list[list[tuple[str, str]]]:
        """Each guardrail's registered cells as (workload, level), in the rule's order."""
        return [[(c.workload, c.level) for c in g.cells] for g in self.guardrails]

    def decision_levels(self) -> dict[str, list[str]]:
        """workload → its registered decision levels (what `judge_run` expands `*` to)."""
        out: dict[str, list[str]] = {}
        for cell in self.decision_cells:
            levels = out.setdefault(cell.workload, [])
            if cell.level not in levels:
                levels.append(cell.level)
        return out


WORKLOADS = ("knee", "agentfix", "rate", "trace", "sessions")


def _configured(campaign: Campaign, workload: str, metric: str) -> list[str]:
    """The levels a metric has rows at in a workload: a knee sweep's spec-decode figures
    are read around the whole sweep (level `all`), everything else per level."""
    levels = campaign.workloads.levels(workload)
    if workload == "rate" and levels and catalog.has_rows_at(metric, "rate", "capacity"):
        return ["capacity"]  # capacity at SLO: one cell of the sweep (`verdict.capacity`)
    if levels and not catalog.has_rows_at(metric, workload, levels[0]):
        return ["all"]
    return levels


def _sweep(decisions: list[CellRef], campaign: Campaign, metric: str) -> list[CellRef]:
    """The decision cells as a guardrail of `metric` sees them: the capacity cell (rate,
    capacity) stands for the rate levels it is read from (`verdict.capacity.sweep_cells`)."""
    out: list[CellRef] = []
    for d in decisions:
        expand = (d.workload, d.level) == ("rate", "capacity") and metric != "capacity_at_slo"
        for c in ([CellRef(workload="rate", level=lvl)
                   for lvl in campaign.workloads.levels("rate")] if expand else [d]):
            if c not in out:
                out.append(c)
    return out


def registered_levels(campaign: Campaign) -> RegisteredLevels:
    """The campaign's decision cells and guardrail cells, `*` resolved to its configured
    levels (what `start_run` registers): a guardrail `at: decision` is checked at the
    decision cells its workload and level match (where it names others, at those), one
    `at: all` at every configured level of its metric that they match."""
    pre = campaign.preregistration
    decisions: list[CellRef] = []
    for dc in pre.decision_cells:
        levels = (_configured(campaign, dc.workload, pre.primary_metric) if dc.level == "*"
                  else [dc.level])
        decisions += [c for lvl in levels if (c := CellRef(workload=dc.workload, level=lvl))
                      not in decisions]
    guards = []
    for g in pre.guardrails:
        cells = [c for c in _sweep(decisions, campaign, g.metric)
                 if g.workload in ("*", c.workload)
                 and g.level in ("*", c.level)
                 and catalog.has_rows_at(g.metric, c.workload, c.level)
                 ] if g.at == "decision" else []
        if not cells and (g.at == "all" or g.workload != "*" or g.level != "*"):
            cells = [CellRef(workload=w, level=lvl)
                     for w in (WORKLOADS if g.workload == "*" else (g.workload,))
                     for lvl in _configured(campaign, w, g.metric) if g.level in ("*", lvl)]
        if g.level != "*" and g.workload != "*" and not cells:
            cells = [CellRef(workload=g.workload, level=g.level)]  # named as written
        guards.append(GuardrailCells(metric=g.metric, cells=cells))
    return RegisteredLevels(decision_cells=decisions, guardrails=guards)


@dataclass(frozen=True)
class Verified:
    """The registered values a verdict may use, after checking them against the hashes."""

    drift_band: float
    arms: tuple[str, ...]
    levels: RegisteredLevels | None = None
    guardrail_bands: tuple[float, ...] | None = None
    edits: tuple[str, ...] = ()
    """What was edited in preregistration.json after registration (then not used)."""

    @property
    def intact(self) -> bool:
        return not self.edits


class Registration(BaseModel):
    """preregistration.json (results schema 3; older schemas are migrated by `load`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(RESULTS_SCHEMA_VERSION, strict=True)
    campaign: str = Field(description="The campaign's name.")
    registered_at: str = Field(description="UTC time of registration, ISO 8601 with ms.")
    arms: list[str] = Field(min_length=2, description="`control` first, then candidates.")
    rule: dict[str, Any] = Field(
        description="The preregistration section as registered (`spec.Preregistration` "
        "dumped by alias), exactly the bytes `sha256` was computed over."
    )
    drift_band: float = Field(description="The band the rule is applied with, resolved.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="`rule_hash(rule)`.")
    tool_version: str | None = Field(
        None, description="spec-ab version that registered the run (None: schema 1)."
    )
    values_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$",
        description="`values_hash(rule, drift_band, arms, levels)` (None: schema 1, rule "
        "only).",
    )
    levels: RegisteredLevels | None = Field(
        None, description="The decision and guardrail cells, `*` resolved at registration "
        "(None: schema 2 and older, or registered without a campaign)."
    )
    guardrail_bands: list[float] | None = Field(
        None, description="Each guardrail's boot-to-boot band (same order as "
        "`rule.guardrails`), resolved at registration: its `drift_band`, measured on its A/A "
        "run, or the campaign's band (None: registered before guardrails had bands)."
    )

    journal_chain: int | None = Field(
        None, description="How the run's journal.jsonl is hash-chained (`results.chain."
        "CHAIN_VERSION`), recorded at registration: a run registered by a spec-ab that "
        "chains must hold a chained journal, whatever its first line says (None: "
        "registered before the registration recorded it)."
    )

    schedules: dict[str, str] | None = Field(
        None, description="The SHA-256 of each schedule the run replays (a rate level's, a "
        "trace's copy: `schedules/<name>.jsonl`), name → sha256, as the journal's "
        "`registered` line holds them (None: the run replays none; the key is then not "
        "written)."
    )

    _written_version: int = PrivateAttr(RESULTS_SCHEMA_VERSION)
    _file_sha256: str | None = PrivateAttr(None)
    """SHA-256 of the file's bytes as read (`load`): what the journal's first line is
    checked against (`results.integrity`)."""
    _rule_intact: bool | None = PrivateAttr(None)
    """`rule_intact`, once asked (None: not yet)."""

    @field_validator("drift_band", mode="before")
    @classmethod
    def _fraction(cls, v: Any) -> Any:
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1:
            raise ValueError(f"{v!r} is not a fraction in [0, 1)")
        return v

    @classmethod
    def new(cls, rule: dict[str, Any], *, campaign: str, arms: list[str], drift_band: float,
            registered_at: str, levels: RegisteredLevels | None = None,
            guardrail_bands: Sequence[float] | None = None,
            schedules: Mapping[str, str] | None = None) -> Registration:
        """The registration of a rule now (hashes it, stamps this spec-ab's version);
        `levels`: the campaign's resolved cells (`registered_levels`); `guardrail_bands`:
        each guardrail's resolved band (`verdict.aa.checked_guardrail_bands`);
        `schedules`: each replayed schedule's sha256 (`run.measure.arrivals`; none or
        empty: not registered)."""
        bands = None if guardrail_bands is None else [float(b) for b in guardrail_bands]
        # a fixed design without an SLO registers as it did before sequential designs and
        # SLOs existed (its hash unchanged)
        rule = {k: v for k, v in rule.items()
                if not (k in ("sequential", "slo") and v is None)}
        if isinstance(rule.get("slo"), dict) and rule["slo"].get("target", 0) is None:
            rule["slo"] = {k: v for k, v in rule["slo"].items() if k != "target"}
        return cls(campaign=campaign, registered_at=registered_at, arms=arms, rule=rule,
                   drift_band=drift_band, sha256=rule_hash(rule), tool_version=__version__,
                   values_sha256=values_hash(rule, drift_band, arms, levels, bands,
                                             schedules),
                   levels=levels, guardrail_bands=bands, journal_chain=CHAIN_VERSION,
                   schedules=dict(schedules) if schedules else None)

    @property
    def file_sha256(self) -> str | None:
        """SHA-256 of preregistration.json as `load` read it (None: not read from a file)."""
        return self._file_sha256

    @property
    def written_version(self) -> int:
        """The results schema the file was written with (before any migration)."""
        return self._written_version

    @property
    def rule_intact(self) -> bool:
        """Does the rule still hash to `sha256` (nobody edited it after registration)?
        Hashed once per object (the model is frozen): loading a run asks twice."""
        if self._rule_intact is None:
            self._rule_intact = rule_hash(self.rule) == self.sha256
        return self._rule_intact

    def verify(self, path: Path, campaign_arms: Sequence[str] | None = None, *,
               campaign: Campaign | None = None) -> Verified:
        """The registered drift band, arms and levels, checked against the hashes.

        Schema 1 checks the rule only (as it always did). Schema 2 and later also check
        the band, the arms (and, schema 3, the levels) with `values_sha256`; when they do
        not match, the registered values are recovered where the hash proves them (the
        band from a numeric `rule.drift_band`, the arms from the frozen campaign's arm
        list, the levels resolved from the frozen campaign) and the edit is reported.
        Raises `ResultsError` naming the file when the rule itself, or a value that cannot
        be recovered, was edited.
        """
        if not self.rule_intact:
            raise ResultsError(
                f"{path}: the rule does not match its sha256 — the file was changed after "
                "registration, so no verdict can claim to be pre-registered",
                hint="re-run the campaign, or report with --rule overrides (exploratory)",
            )
        band, arms, levels = float(self.drift_band), tuple(self.arms), self.levels
        gbands = None if self.guardrail_bands is None else tuple(self.guardrail_bands)
        if self.values_sha256 is None:  # schema 1: the rule only
            return Verified(band, arms, levels, gbands)
        sched = self.schedules
        if values_hash(self.rule, band, list(arms), levels, gbands,
                       sched) == self.values_sha256:
            return Verified(band, arms, levels, gbands)
        levels_now = None if campaign is None else registered_levels(campaign)
        for b, a, lv in self._candidates(campaign_arms, levels_now):
            if values_hash(self.rule, b, list(a), lv, gbands, sched) != self.values_sha256:
                continue
            edits = []
            if b != band:
                edits.append(f"drift_band {band:g} (registered {b:g})")
            if a != arms:
                edits.append(f"arms {list(arms)} (registered {list(a)})")
            if lv != levels:
                edits.append("levels (registered: as the frozen campaign resolves them)")
            return Verified(b, a, lv, gbands, tuple(edits))
        what = ("the drift band, the arms, the levels or the schedules" if sched
                else "the drift band, the arms or the levels")
        raise ResultsError(
            f"{path}: {what} do not match values_sha256 — "
            "the file was changed after registration and the registered values cannot be "
            "recovered, so no verdict can claim to be pre-registered",
            hint="restore the file from a backup, or re-run the campaign",
        )

    def _candidates(self, campaign_arms: Sequence[str] | None,
                    campaign_levels: RegisteredLevels | None
                    ) -> list[tuple[float, tuple[str, ...], RegisteredLevels | None]]:
        """The values the registration may have held: the file's, and those the rule and
        the frozen campaign prove."""
        bands = [float(self.drift_band)]
        if _is_fraction(self.rule.get("drift_band")):
            bands.insert(0, float(self.rule["drift_band"]))
        arm_lists = [tuple(self.arms)]
        if campaign_arms is not None and tuple(campaign_arms) != tuple(self.arms):
            arm_lists.append(tuple(campaign_arms))
        level_sets = [self.levels]
        if campaign_levels is not None and campaign_levels != self.levels:
            level_sets.append(campaign_levels)
        return [(b, a, lv) for b in bands for a in arm_lists for lv in level_sets]

    @property
    def arm_order(self) -> list[str]:
        """The arms with `control` first (the order verdicts pair them in)."""
        if "control" not in self.arms:
            return list(self.arms)
        return ["control", *(a for a in self.arms if a != "control")]

    def save(self, path: Path) -> None:
        """Write the file atomically; an existing file is never replaced."""
        doc = self.model_dump(mode="json")
        if doc.get("schedules") is None:  # a run replaying none: the file as before
            doc.pop("schedules", None)
        text = json.dumps(doc, indent=2, default=str) + "\n"
        atomic_write(path, text, overwrite=False)
        self._file_sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()

    @classmethod
    def load(cls, path: Path) -> Registration:
        """Read, migrate (in memory) and validate; `ResultsError` names what is wrong."""
        try:
            raw = read_capped(path, DOC_CAP, "preregistration")
            doc = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            raise ResultsError(f"{path}: missing; not a spec-ab run",
                               hint="give a folder made by `spec-ab run`") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(f"{path}: unreadable ({exc})") from None
        if not isinstance(doc, dict):
            raise ResultsError(f"{path}: not a JSON object but a {type(doc).__name__}")
        version = doc.get("schema_version")
        if version is None:
            raise ResultsError(f"{path}: 'schema_version' is missing")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ResultsError(f"{path}: schema_version {version!r} is not a results schema "
                               "number (1, 2, ...)")
        if version > RESULTS_SCHEMA_VERSION:
            raise ResultsError(
                f"{path.parent} uses results schema {version}; this spec-ab reads up to "
                f"{RESULTS_SCHEMA_VERSION}",
                hint="upgrade spec-ab (pip install -U spec-ab) to read it",
            )
        for to in range(version + 1, RESULTS_SCHEMA_VERSION + 1):
            doc = MIGRATIONS[to](doc)
        try:
            reg = cls.model_validate(doc)
        except ValidationError as exc:
            raise ResultsError(f"{path}: {_problem(exc)}") from None
        if version >= 2 and reg.values_sha256 is None:
            raise ResultsError(f"{path}: 'values_sha256' is missing")
        if version >= 3 and "levels" not in doc:
            raise ResultsError(f"{path}: 'levels' is missing")
        reg._written_version = version
        reg._file_sha256 = hashlib.sha256(raw).hexdigest()
        return reg


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"'{where}' is missing"
    return f"{where}: {err['msg']}".replace("Value error, ", "")


def _is_fraction(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1


def update_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 → 2: the version and the new `tool_version` and `values_sha256` (unknown
    for schema 1: its rule alone is checked)."""
    return {**doc, "schema_version": 2, "tool_version": doc.get("tool_version"),
            "values_sha256": doc.get("values_sha256")}


def update_to_3(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 → 3: the version, `levels` and `guardrail_bands` (not registered before
    schema 3: None; the verdict reads the configured levels from the frozen campaign.yaml
    and judges guardrails against the campaign's band)."""
    return {**doc, "schema_version": 3, "levels": doc.get("levels"),
            "guardrail_bands": doc.get("guardrail_bands")}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    2: update_to_2, 3: update_to_3}
"""Target version → the step from the version before it."""
