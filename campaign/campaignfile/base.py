"""The shared base of the campaign-file models: strict frozen models, arm names, regexes,
metric names."""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, ConfigDict

from campaign import catalog

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


def check_metric(name: str) -> str:
    """`name` if it is a metric spec-ab knows, else a ValueError with the closest one."""
    if catalog.is_known(name):
        return name
    close = difflib.get_close_matches(name, list(catalog.METRICS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(f"unknown metric '{name}'{hint}")
