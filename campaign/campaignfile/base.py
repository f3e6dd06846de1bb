"""The shared base of the campaign-file models: strict frozen models, arm names, regexes,
metric names, and the value types every model uses.

Rules every field follows, whatever its model (one place, so no field is forgotten):

- a number is finite (`.inf` and `.nan` are refused: the config's `allow_inf_nan`);
- a whole number is written as one: a YAML `true` or `2.0` is not a count (`Int` and the
  bounded counts `Requests`, `Tokens`, `Streams`, `Prompts`; a number written as a string,
  `"2"`, is read as before);
- no text holds a NUL character, which no argument, environment variable or file name can
  carry (`Model._no_nul`);
- a fraction (a margin, a limit, a band, a share: `Fraction`, `FractionBelowOne`) is at
  most 1 and may be written as a percentage (`10%` is 0.10): a `10` meant as 10% is
  refused with "did you mean 0.10 (10%)?", never read as +1000%.

A name spec-ab does not know (a key, a metric) is named with the invisible characters it
holds escaped (`margin\\u200b`) and the closest known one (`close_hint`).
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

from campaign import catalog

CONTROL = "control"
NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"


def level_names(v: dict[str, Any], *, empty: str, what: str, reserved: str = r"[cr][0-9.]+",
                like: str = "c<N> or r<N>") -> dict[str, Any]:
    """A workload's named cells (agent-fixture or session classes, traces): at least one
    (`empty` says what to give), each a `NAME_RE` name that no knee or rate level's name
    (`reserved`, said as `like`) could be."""
    if not v:
        raise ValueError(empty)
    for name in v:
        if not re.fullmatch(NAME_RE, name) or re.fullmatch(reserved, name):
            raise ValueError(f"{what} name {name!r} must be lowercase letters, digits, "
                             f"'.', '_' or '-' (at most 63) and not like {like}")
    return v

NUL_TEXT = ("holds a NUL character (\\0): no argument, environment variable or file name can "
            "carry one; remove it")


def _shown(text: str) -> str:
    return '"' + text.replace("\0", "\\0") + '"'


def _text(value: Any) -> str | None:
    """A text or path value with a NUL character in it, as text; else None."""
    if isinstance(value, str | PurePath):
        text = str(value)
        return text if "\0" in text else None
    return None


def nul_problem(value: Any) -> str | None:
    """What holds a NUL character in a field's value (a text or path, a list of them, a map
    of them), or None. Nested models check their own fields."""
    if (text := _text(value)) is not None:
        return f"{_shown(text)} {NUL_TEXT}"
    if isinstance(value, list | tuple):
        for item in value:
            if (text := _text(item)) is not None:
                return f"{_shown(text)} {NUL_TEXT}"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if (text := _text(key)) is not None:
                return f"the key {_shown(text)} {NUL_TEXT}"
            if (text := _text(item)) is not None:
                return f"the value of {key} ({_shown(text)}) {NUL_TEXT}"
    return None


# --------------------------------------------------------------------------- unseen names

_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs"})
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def invisible(text: str) -> list[str]:
    """The characters of `text` no one sees, each once: format characters (zero-width
    space and joiners, word joiner, byte-order mark), spaces other than ' ' (no-break
    space), line and paragraph separators, control characters."""
    return list(dict.fromkeys(c for c in text
                              if c != " " and unicodedata.category(c) in _INVISIBLE))


def escaped(char: str) -> str:
    """One character as an escape: `\\u200b`, `\\n`."""
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


def shown(text: str) -> str:
    """`text` with its invisible characters escaped (`margin\\u200b`), the rest as is."""
    hidden = invisible(text)
    return "".join(escaped(c) if c in hidden else c for c in text) if hidden else text


def close_hint(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """What follows a message about an unknown `name`: the closest of `choices`
    (` (did you mean 'margin'?)`), and first, when `name` holds invisible characters,
    those characters escaped and named (`: it holds an invisible character, \\u200b (zero
    width space); did you mean 'margin'?`); "" when there is nothing to say."""
    hidden = invisible(name)
    pool = list(choices)
    clean = "".join(c for c in name if c not in hidden)
    close = ([clean] if hidden and clean in pool
             else difflib.get_close_matches(clean, pool, n=1, cutoff=cutoff))
    if not hidden:
        return f" (did you mean '{close[0]}'?)" if close else ""
    each = [f"{escaped(c)} ({unicodedata.name(c).lower()})" if unicodedata.name(c, "")
            else escaped(c) for c in hidden]
    chars = " and ".join([", ".join(each[:-1]), each[-1]] if len(each) > 1 else each)
    what = "an invisible character" if len(hidden) == 1 else "invisible characters"
    return f": it holds {what}, {chars}" + (f"; did you mean '{close[0]}'?" if close else "")


class Model(BaseModel):
    """Forbids unknown keys, is frozen, accepts fields by name or by alias; refuses `.inf`,
    `.nan` and NUL characters in every field."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)

    raw_fields: ClassVar[frozenset[str]] = frozenset()
    """Fields holding raw server overrides: checked once merged into a launch, not here."""

    @field_validator("*")
    @classmethod
    def _no_nul(cls, v: Any, info: ValidationInfo) -> Any:
        if info.field_name not in cls.raw_fields:
            problem = nul_problem(v)
            if problem is not None:
                raise ValueError(problem)
        return v


# --------------------------------------------------------------------------- whole numbers


def yaml_float(v: float) -> str:
    """A float as YAML writes it: `.inf`, `-.inf`, `.nan`, `2.0`, `1e+12`."""
    if math.isnan(v):
        return ".nan"
    if math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    text = f"{v:g}"
    return text if ("e" in text or "." in text) else f"{text}.0"


@dataclass(frozen=True)
class WholeNumber:
    """The validators of a whole-number field: a YAML `true`/`false` or a decimal (`2.0`,
    `1e12`) is refused where pydantic's lax int would take it; with `limit`, so is a count
    above it."""

    limit: int | None = None
    unit: str = ""

    def before(self, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"{str(v).lower()} is a yes/no value, not a number: write a "
                             "whole number")
        if isinstance(v, float):
            text = yaml_float(v)
            if self.limit is not None and math.isfinite(v) and abs(v) > self.limit:
                raise ValueError(self._too_many(text))
            if math.isfinite(v) and v.is_integer():
                raise ValueError(f"{text} is not written as a whole number: write {int(v)}")
            raise ValueError(f"{text} is not a whole number: write one without a decimal "
                             "point or exponent")
        return v

    def after(self, v: int) -> int:
        if self.limit is not None and v > self.limit:
            raise ValueError(self._too_many(f"{v:,}"))
        return v

    def _too_many(self, text: str) -> str:
        return f"{text} is more than the {self.limit:,} {self.unit} spec-ab takes here: lower it"


MAX_REQUESTS = 1_000_000
"""Requests of one pass (per level): hours of load at the fastest server."""
MAX_TOKENS = 10_000_000
"""Tokens of one prompt or answer: past any model's context."""
MAX_STREAMS = 100_000
"""Concurrent streams of one pass."""
MAX_PROMPTS = 10_000
"""Prompts of one fidelity class."""
MAX_CELL_TOKENS = 1_000_000_000
"""Output tokens measured in one cell (a pass's level)."""
MAX_SEED = 2**32 - 1
"""The largest seed AIPerf's generators take whole: AIPerf refuses a negative seed, and
numpy's legacy MT19937 seeding takes 32 bits (AIPerf folds a wider seed onto a 32-bit one
there, so two seeds the user thinks apart give one workload)."""

_WHOLE = WholeNumber()
_REQUESTS = WholeNumber(MAX_REQUESTS, "requests")
_TOKENS = WholeNumber(MAX_TOKENS, "tokens")
_STREAMS = WholeNumber(MAX_STREAMS, "concurrent streams")
_PROMPTS = WholeNumber(MAX_PROMPTS, "prompts")
_CELL_TOKENS = WholeNumber(MAX_CELL_TOKENS, "tokens")


def _seed(v: int) -> int:
    if not 0 <= v <= MAX_SEED:
        raise ValueError(f"{v} is outside 0 to {MAX_SEED} (2**32 - 1), the seeds AIPerf's "
                         "generators take whole; pick a seed in that range, e.g. 7")
    return v


Int = Annotated[int, BeforeValidator(_WHOLE.before)]
"""A whole number (no `true`, no `2.0`)."""
Requests = Annotated[int, BeforeValidator(_REQUESTS.before), AfterValidator(_REQUESTS.after)]
Tokens = Annotated[int, BeforeValidator(_TOKENS.before), AfterValidator(_TOKENS.after)]
Streams = Annotated[int, BeforeValidator(_STREAMS.before), AfterValidator(_STREAMS.after)]
Prompts = Annotated[int, BeforeValidator(_PROMPTS.before), AfterValidator(_PROMPTS.after)]
CellTokens = Annotated[int, BeforeValidator(_CELL_TOKENS.before),
                       AfterValidator(_CELL_TOKENS.after)]
Seed = Annotated[int, BeforeValidator(_WHOLE.before), AfterValidator(_seed)]
"""A seed AIPerf takes: 0 ≤ seed < 2**32."""


# --------------------------------------------------------------------------- fractions

READ_BACK = "read_back"
"""Validation context key: a frozen copy (or registered rule) of an earlier run is read
back for a report; what was valid when it was registered stays readable."""


def _read_back(info: ValidationInfo | None) -> bool:
    return bool(info is not None and (info.context or {}).get(READ_BACK))


def _as_fraction_text(v: float) -> str:
    """0.1 → "0.10", 0.125 → "0.125": two decimals at least, as a margin is written."""
    text = f"{v:.2f}"
    return text if float(text) == v else f"{v:g}"


@dataclass(frozen=True)
class FractionOf:
    """The validator of a fraction field (a change of a metric, a share of requests): a
    number from 0 to 1 (`below_one`: less than 1), or a percentage written as text (`10%` →
    0.10). A number above 1 is a percentage typo: `10` is refused with "did you mean 0.10
    (10%)?". An earlier run's registration read back (`READ_BACK`) is left as it was
    registered."""

    below_one: bool = False

    def check(self, v: Any, info: ValidationInfo | None) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"{str(v).lower()} is a yes/no value, not a fraction: write a "
                             "fraction, e.g. 0.10 for 10%")
        if isinstance(v, str):
            text = v.strip()
            if text.endswith("%"):
                try:
                    number = float(text[:-1].strip())
                except ValueError:
                    raise ValueError(f"'{v}' is not a percentage: write a fraction (0.10) or "
                                     "a percentage (10%)") from None
                if not math.isfinite(number):
                    raise ValueError(f"'{v}' is not a finite percentage")
                if number < 0 and not _read_back(info):
                    raise ValueError(f"{text} is negative: a fraction here is 0 or more")
                if self._over(number / 100) and not _read_back(info):
                    most = "below 100%" if self.below_one else "at most 100%"
                    raise ValueError(f"{text} is {self._limit_text('%')}: this fraction is "
                                     f"{most}")
                return number / 100
            try:
                v = float(text)
            except ValueError:
                return v  # pydantic says it is no number
        if isinstance(v, int | float) and math.isfinite(v) and not _read_back(info):
            if v < 0:
                raise ValueError(f"{v:g} is negative: a fraction here is 0 or more, e.g. 0.05 "
                                 "or 5%")
            if self._over(v):
                raise ValueError(self._typo(float(v)))
        return v

    def _over(self, v: float) -> bool:
        return v >= 1 if self.below_one else v > 1

    def _limit_text(self, unit: str = "") -> str:
        one = "100%" if unit else "1"
        return f"{'not below' if self.below_one else 'more than'} {one}"

    def _typo(self, v: float) -> str:
        head = (f"{v:g} would be {v * 100:g}%"
                + (", and this fraction must be below 1" if self.below_one and v == 1 else "")
                + ": a fraction is written 0.10 (or 10%) for 10%")
        if not self._over(v / 100):
            return f"{head}; did you mean {_as_fraction_text(v / 100)} ({v:g}%)?"
        return f"{head}; write a fraction, e.g. 0.10 or 10%"


Fraction = Annotated[float, BeforeValidator(FractionOf().check)]
"""A fraction in [0, 1] (a margin, a limit, a share of requests): `0.10` or `10%`; `10` is
refused as a percentage typo. Every fraction field of the campaign file uses this (or
`FractionBelowOne`, or `FractionOf` itself where the unit depends on another field)."""
FractionBelowOne = Annotated[float, BeforeValidator(FractionOf(below_one=True).check)]
"""A fraction in [0, 1) (a drift band): as `Fraction`, 1 itself refused."""


@dataclass(frozen=True)
class _Limit:
    """A guardrail's `max_worsening` as written, with its unit (set by the guardrail, which
    knows `absolute` and the metric): a fraction, or the metric's unit."""

    value: Any
    unit: str
    """"fraction", or the metric's unit (ms, tokens) for an absolute limit on it."""
    metric: str


def _limit(v: Any, info: ValidationInfo) -> Any:
    """A relative limit, or an absolute one on a share (error_rate), is a fraction
    (`FractionOf`: `5` is refused as 500%); an absolute limit on another metric is a
    difference in its unit (`5` ms), never a percentage."""
    if not isinstance(v, _Limit):
        return FractionOf().check(v, info)
    if v.unit == "fraction":
        return FractionOf().check(v.value, info)
    if isinstance(v.value, str) and v.value.strip().endswith("%"):
        raise ValueError(f"an absolute limit on {v.metric} is a difference in {v.unit}, not a "
                         f"percentage: write a number of {v.unit} (or drop `absolute: true` "
                         "for a limit relative to the control)")
    return v.value


def _is_true(v: Any) -> bool:
    """What pydantic reads as a yes (`true`, `1`, `"yes"`, `"on"`, …)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return v == 1
    return isinstance(v, str) and v.strip().lower() in ("1", "on", "t", "true", "y", "yes")


def limit_with_unit(data: Any) -> Any:
    """A guardrail's fields as written, its `max_worsening` told its unit (`Limit`), which
    depends on `absolute` and the metric: fields a field validator cannot see. (A model
    validator's error would point at the guardrail, not at `max_worsening`.)"""
    if isinstance(data, Mapping) and "max_worsening" in data \
            and not isinstance(data["max_worsening"], _Limit):
        metric = str(data.get("metric", ""))
        known = catalog.METRICS.get(metric)
        unit = (known.unit if known is not None and _is_true(data.get("absolute"))
                else "fraction")
        data = {**data, "max_worsening": _Limit(data["max_worsening"], unit, metric)}
    return data


Limit = Annotated[float, BeforeValidator(_limit)]
"""A guardrail's limit: a `Fraction`, or a number of the metric's unit when absolute on a
metric with one (`limit_with_unit` tells it which)."""


# --------------------------------------------------------------------------- names and checks

CAPTURE_NAME_RE = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"
"""A `log_captures` name: it becomes the file `captures/<name>.log` of each arm."""


def _capture_name(name: str) -> str:
    if not re.fullmatch(CAPTURE_NAME_RE, name):
        length = f" ({len(name)} characters)" if len(name) > 64 else ""
        raise ValueError(
            f"capture name '{name}'{length} becomes the file captures/<name>.log: use "
            "letters, digits, '.', '_' and '-' (not starting with '.'), at most 64 "
            "characters, e.g. spec_decoding")
    return name


CaptureName = Annotated[str, AfterValidator(_capture_name)]


def check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex '{pattern}': {exc}") from None


def check_metric(name: str) -> str:
    """`name` if it is a metric spec-ab knows, else a ValueError with the closest one."""
    if catalog.is_known(name):
        return name
    raise ValueError(f"unknown metric '{shown(name)}'{close_hint(name, catalog.METRICS)}")


ZERO_ON_CONTROL = frozenset({"error_rate", "osl_mismatch_share"})
"""Metrics whose control value is normally 0: no relative bar can be put on them (the
verdict compares them by differences, `verdict.rule.ABSOLUTE_METRICS`)."""
