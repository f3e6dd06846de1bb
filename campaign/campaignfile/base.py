"""The shared base of the campaign-file models: strict frozen models, arm names, regexes."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

CONTROL = "control"
NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Model(BaseModel):
    """Forbids unknown keys, is frozen, accepts fields by name or by alias."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex '{pattern}': {exc}") from None
