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
       candidate; new key `tool_version`, the spec-ab version that registered the run.
       Nothing else in the directory changed.

Reading a directory of an older schema never rewrites it: `update_to_<N>` turns the
version N-1 document into version N in memory, one step at a time, and remembers the
version it was written with (`Registration.written_version`). A directory of a newer
schema than this spec-ab knows is refused with a hint to upgrade.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from campaign import RESULTS_SCHEMA_VERSION, __version__
from campaign.errors import ResultsError
from campaign.textfiles import atomic_write

FILE_NAME = "preregistration.json"


def rule_hash(rule: dict[str, Any]) -> str:
    """sha256 of the rule's canonical JSON: what `report` checks the frozen rule with."""
    canonical = json.dumps(rule, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Registration(BaseModel):
    """preregistration.json (results schema 2; older schemas are migrated by `load`)."""

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

    _written_version: int = PrivateAttr(RESULTS_SCHEMA_VERSION)

    @field_validator("drift_band", mode="before")
    @classmethod
    def _fraction(cls, v: Any) -> Any:
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1:
            raise ValueError(f"{v!r} is not a fraction in [0, 1)")
        return v

    @classmethod
    def new(cls, rule: dict[str, Any], *, campaign: str, arms: list[str], drift_band: float,
            registered_at: str) -> Registration:
        """The registration of a rule now (hashes it, stamps this spec-ab's version)."""
        return cls(campaign=campaign, registered_at=registered_at, arms=arms, rule=rule,
                   drift_band=drift_band, sha256=rule_hash(rule), tool_version=__version__)

    @property
    def written_version(self) -> int:
        """The results schema the file was written with (before any migration)."""
        return self._written_version

    @property
    def rule_intact(self) -> bool:
        """Does the rule still hash to `sha256` (nobody edited it after registration)?"""
        return rule_hash(self.rule) == self.sha256

    @property
    def arm_order(self) -> list[str]:
        """The arms with `control` first (the order verdicts pair them in)."""
        if "control" not in self.arms:
            return list(self.arms)
        return ["control", *(a for a in self.arms if a != "control")]

    def save(self, path: Path) -> None:
        """Write the file atomically; an existing file is never replaced."""
        text = json.dumps(self.model_dump(mode="json"), indent=2, default=str) + "\n"
        atomic_write(path, text, overwrite=False)

    @classmethod
    def load(cls, path: Path) -> Registration:
        """Read, migrate (in memory) and validate; `ResultsError` names what is wrong."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
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
        reg._written_version = version
        return reg


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"'{where}' is missing"
    return f"{where}: {err['msg']}".replace("Value error, ", "")


def update_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 → 2: only the version and the new `tool_version` (unknown for schema 1)."""
    return {**doc, "schema_version": 2, "tool_version": doc.get("tool_version")}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {2: update_to_2}
"""Target version → the step from the version before it."""
