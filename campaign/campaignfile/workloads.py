"""The campaign file's workloads: what each arm is measured with (warm-ups, the knee, the
agent fixtures, the rate levels; the fidelity pass is `fidelity`'s, traces `trace`'s,
sessions `sessions`'), and how many requests each cell's pass gets
(`Workloads.requests_in`, the one answer every consumer asks).

A request count is one for every cell, or a mapping cell → count with `"*"` the default
(`workloads.agentfix.requests` per content class, `workloads.knee.requests_per_level` per
level), so a guardrail's cell can be given more requests than the decision's. AIPerf's knee
sweep sends every level one count: levels of different counts need `one_process: true`.
Re-exported by `models` (the models of one file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from campaign.campaignfile.base import (
    Model,
    Requests,
    Streams,
    Tokens,
    close_hint,
    level_names,
    shown,
)
from campaign.campaignfile.fidelity import FidelityWorkload
from campaign.campaignfile.sessions import SessionsWorkload
from campaign.campaignfile.trace import TraceWorkload


class WarmupPass(Model):
    """A throwaway pass after boot (not measured): fills caches, compiles graphs."""

    concurrency: Streams = Field(4, ge=1, description="Concurrent streams.")
    requests: Requests = Field(16, ge=1, description="Requests in the pass.")
    input_tokens: Tokens = Field(256, ge=1, description="Synthetic prompt length (tokens).")
    output_tokens: Tokens = Field(64, ge=1, description="Exact output length (tokens).")


STAR = "*"
"""The key of a per-cell request mapping that gives every cell it does not name."""

_ONE_COUNT: TypeAdapter[int] = TypeAdapter(Requests)


def _count_of(value: Any, where: str) -> int:
    """One request count, as `Requests` reads it (its message, at the mapping's key)."""
    try:
        n = _ONE_COUNT.validate_python(value)
    except ValidationError as exc:
        said = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{where}{said}") from None
    if n < 1:
        raise ValueError(f"{where}{n} requests: give at least 1")
    return n


def _by_cell(value: Any) -> int | dict[str, int]:
    """One count for every cell, or a mapping cell → count (its keys checked by the
    workload, which knows its cells). One message, not one per union member."""
    if not isinstance(value, Mapping):
        return _count_of(value, "")
    out: dict[str, int] = {}
    for key, n in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{key!r}: a key is a class or level name (`prose`, `c4`) or "
                             "\"*\"; quote it")
        out[key] = _count_of(n, f"{key}: ")
    return out


RequestsByCell = Annotated[Requests | dict[str, Requests], PlainValidator(_by_cell)]
"""A request count: one for every cell, or cell → count with `"*"` the default."""


def _cell_counts(value: dict[str, int], cells: list[str], what: str, field: str,
                 where: str) -> None:
    """A per-cell mapping names only `cells` (or `*`), gives each at least 1 request, and
    leaves none without a count."""
    for key in value:
        if key != STAR and key not in cells:
            hint = close_hint(key, cells) or ""
            plural = "classes" if what == "class" else f"{what}s"
            raise ValueError(f"'{shown(key)}' is not a {what} of {where} ({plural}: "
                             f"{', '.join(cells)}){hint}: name one, or \"*\" for every "
                             f"{what} not named")
    missing = [c for c in cells if c not in value]
    if missing and STAR not in value:
        one = len(missing) == 1
        raise ValueError(f"{what} {', '.join(missing)} {'has' if one else 'have'} no count "
                         f"and there is no \"*\": give {'it' if one else 'each'} one "
                         f"({field}: {{{missing[0]}: 100}}) or a default ({{\"*\": 100}})")


def _count(value: int | dict[str, int], cell: str) -> int:
    if isinstance(value, int):
        return value
    return value[cell] if cell in value else value[STAR]


class KneeWorkload(Model):
    """Throughput vs concurrency with fixed input/output lengths (one AIPerf sweep)."""

    concurrency: list[Streams] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16], min_length=1, description="Levels."
    )
    input_tokens: Tokens = Field(1024, ge=1, description="Synthetic prompt length (tokens).")
    output_tokens: Tokens = Field(256, ge=1, description="Exact output length (tokens).")
    requests_per_level: RequestsByCell | None = Field(
        None, description="Requests of each level: one count for every level, or level → "
        "count (`{\"*\": 16, c16: 400}`, `*` for the levels not named), e.g. more for a "
        "guardrail's level. Different counts need `one_process: true` (AIPerf's sweep sends "
        "every level one count). Default: 4 × the highest level, at least 8, at every "
        "level; at most 1,000,000."
    )
    duration_s: float | None = Field(
        None, gt=0, description="Seconds per level instead of a request count."
    )
    one_process: bool = Field(
        False, description="Run every level in one AIPerf process (phases of its YAML "
        "config, a 2 s idle pause between two levels) instead of a sweep that starts AIPerf "
        "again for every level: ~9 s less per level here. Each level still draws prompts of "
        "its own, and the per-level spec-decode figures are cut in the pauses. Needs "
        "request-bound levels (not duration_s); lets each level have its own request count."
    )

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be ≥ 1")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels repeat")
        return sorted(v)

    @field_validator("requests_per_level")
    @classmethod
    def _per_level(cls, v: int | dict[str, int] | None,
                   info: ValidationInfo) -> int | dict[str, int] | None:
        levels = info.data.get("concurrency")
        if isinstance(v, dict) and levels is not None:
            _cell_counts(v, [f"c{c}" for c in levels], "level", "requests_per_level",
                         "concurrency")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> KneeWorkload:
        if self.requests_per_level is not None and self.duration_s is not None:
            raise ValueError("give requests_per_level or duration_s, not both")
        if self.one_process and self.duration_s is not None:
            raise ValueError("one_process needs request-bound levels: a duration-bound "
                             "level cannot size the prompts it draws; drop duration_s "
                             "(or one_process)")
        counts = {c: self.requests_at(c) for c in self.concurrency}
        if len(set(counts.values())) > 1 and not self.one_process:
            said = ", ".join(f"c{c}: {n}" for c, n in counts.items())
            raise ValueError(f"requests_per_level gives the levels different counts ({said}), "
                             "but AIPerf's sweep sends every level one count: set "
                             "one_process: true (each level its own phase), or give one "
                             "count")
        return self

    def requests_at(self, concurrency: int) -> int | None:
        """The requests AIPerf is told to send at level `concurrency` (None:
        duration-bound)."""
        if self.duration_s is not None:
            return None
        if self.requests_per_level is None:  # the default: one count, the top level's
            return max(8, 4 * max(self.concurrency))
        return _count(self.requests_per_level, f"c{concurrency}")

    @property
    def requests_each_level(self) -> int | None:
        """The largest count of a level (None: duration-bound): what a sweep, one AIPerf
        invocation with one request count, sends every level."""
        if self.duration_s is not None:
            return None
        return max(r for c in self.concurrency if (r := self.requests_at(c)) is not None)

    @property
    def level_requests(self) -> tuple[int, ...]:
        """Each level's count in `concurrency` order when they differ (then the levels run
        as phases of one process: `one_process`); () when every level gets one count."""
        counts = tuple(r for c in self.concurrency if (r := self.requests_at(c)) is not None)
        return counts if len(set(counts)) > 1 else ()

    def requests_field(self, level: str) -> str:
        """Where to raise `level`'s requests in the file."""
        field = f"workloads.knee.requests_per_level.{level}"
        return field if self.one_process else f"{field} and one_process: true"

    @property
    def levels(self) -> list[str]:
        return [f"c{c}" for c in self.concurrency]


def rate_label(rate: float) -> str:
    """A rate level's name: `r` + the rate as `format(rate, "g")` (`r0.5`, `r4`, `r16`)."""
    return f"r{format(rate, 'g')}"


class RateWorkload(Model):
    """An open-loop sweep over offered request rates (req/s): per level, a seeded arrival
    schedule spec-ab writes once per run and AIPerf replays on both arms (one pass each)."""

    rates: list[float] = Field(min_length=1, description="Offered request rates (req/s), "
                               "each > 0 and distinct; the levels `r<rate>` (`r0.5`, `r4`).")
    arrival: Literal["poisson", "constant", "gamma"] = Field(
        "poisson", description="Arrival process: `poisson` (exponential gaps), `constant` "
        "(1/rate apart) or `gamma` (gaps of shape `smoothness`: below 1 burstier than "
        "Poisson, above 1 smoother).")
    smoothness: float | None = Field(None, gt=0, description="The gamma shape; only with "
                                     "`arrival: gamma` (default 1: Poisson).")
    requests_per_level: RequestsByCell | None = Field(
        None, description="Requests of each level: one count, or level → count (`{\"*\": "
        "64, r16: 400}`). Default 64.")
    duration_s: float | None = Field(
        None, gt=0, description="Seconds of schedule per level instead: ceil(rate × "
        "duration_s) requests.")
    input_tokens: Tokens = Field(512, ge=1, description="Prompt length (tokens) of the "
                                 "word prompts (not with `prompts`).")
    prompts: Path | None = Field(
        None, description="An AIPerf single_turn JSONL whose texts the levels send instead "
        "of word prompts (e.g. `builtin:agentfix/code`), drawn in an order seeded like the "
        "arrivals: the content the drafts meet (acceptance differs by class).")
    output_tokens: Tokens = Field(128, ge=1, description="Exact output length (tokens).")
    max_concurrency: Streams | None = Field(
        None, ge=1, description="The most requests AIPerf keeps in flight (None: 1000, no "
        "cap in practice); a schedule it cannot keep shows as send lag.")

    @field_validator("rates")
    @classmethod
    def _levels(cls, v: list[float]) -> list[float]:
        if any(not r > 0 or not math.isfinite(r) for r in v):
            raise ValueError("every rate must be > 0 (requests per second)")
        if len({rate_label(r) for r in v}) != len(v):
            raise ValueError("rates repeat: give each once")
        return sorted(v)

    @field_validator("requests_per_level")
    @classmethod
    def _per_level(cls, v: int | dict[str, int] | None,
                   info: ValidationInfo) -> int | dict[str, int] | None:
        rates = info.data.get("rates")
        if isinstance(v, dict) and rates is not None:
            _cell_counts(v, [rate_label(r) for r in rates], "level", "requests_per_level",
                         "rates")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> RateWorkload:
        if self.requests_per_level is not None and self.duration_s is not None:
            raise ValueError("give requests_per_level or duration_s, not both")
        if self.prompts is not None and "input_tokens" in self.model_fields_set:
            raise ValueError("give prompts (a fixture's texts) or input_tokens (word "
                             "prompts of that length), not both")
        if self.smoothness is not None and self.arrival != "gamma":
            raise ValueError("smoothness shapes gamma arrivals: set arrival: gamma, or drop "
                             "smoothness")
        return self

    @property
    def levels(self) -> list[str]:
        return [rate_label(r) for r in self.rates]

    def rate_of(self, level: str) -> float:
        """The offered rate of level `level` (`r4` → 4.0)."""
        return self.rates[self.levels.index(level)]

    def requests_at(self, level: str) -> int:
        """The requests of level `level`'s schedule."""
        if self.duration_s is not None:
            return max(1, math.ceil(self.rate_of(level) * self.duration_s - 1e-9))
        if self.requests_per_level is None:
            return DEFAULT_RATE_REQUESTS
        return _count(self.requests_per_level, level)

    def requests_field(self, level: str) -> str:
        """Where to raise `level`'s requests in the file."""
        if self.duration_s is not None:
            return "workloads.rate.duration_s"
        return f"workloads.rate.requests_per_level.{level}"

    @property
    def cap(self) -> int:
        """The concurrency AIPerf is given (`max_concurrency`, else `NO_CAP`)."""
        return self.max_concurrency or NO_CAP


DEFAULT_RATE_REQUESTS = 64
NO_CAP = 1000
"""The in-flight cap of a rate level without `max_concurrency` (AIPerf needs one)."""


FIXTURE_CLASSES = ("prose", "shell", "code", "tool_json", "structured")


class AgentfixWorkload(Model):
    """Real-looking agent prompts by content class, one AIPerf pass per class."""

    fixtures: dict[str, Path] = Field(
        description="Content class → AIPerf single_turn JSONL file (prose, shell, code, "
        "tool_json, structured, or your own class names)."
    )
    concurrency: Streams = Field(4, ge=1, description="Concurrent streams.")
    requests: RequestsByCell = Field(
        30, description="Requests of each class's pass: one count for every class, or "
        "class → count (`{\"*\": 64, prose: 400}`, `*` for the classes not named), e.g. "
        "more for a guardrail's class than for the decision's."
    )
    output_tokens: Tokens = Field(256, ge=1, description="Exact output length (tokens).")

    @field_validator("fixtures")
    @classmethod
    def _classes(cls, v: dict[str, Path]) -> dict[str, Path]:
        return level_names(v, empty="give at least one content class", what="class",
                           reserved=r"c[0-9]+", like="c<N>")

    @field_validator("requests")
    @classmethod
    def _per_class(cls, v: int | dict[str, int], info: ValidationInfo) -> int | dict[str, int]:
        classes = info.data.get("fixtures")
        if isinstance(v, dict) and classes is not None:
            _cell_counts(v, list(classes), "class", "requests", "fixtures")
        return v

    def requests_of(self, cls: str) -> int:
        """The requests of class `cls`'s pass."""
        return _count(self.requests, cls)

    def requests_field(self, cls: str) -> str:
        """Where to raise class `cls`'s requests in the file."""
        return f"workloads.agentfix.requests.{cls}"

    @property
    def levels(self) -> list[str]:
        return list(self.fixtures)


MEASURED = ("knee", "agentfix", "rate", "trace", "sessions")
"""The measured workloads with cells of their own, in the order their passes run."""


class Workloads(Model):
    """What each arm is measured with. Both measured passes use the same client settings."""

    model: str = Field(description="Served model name (as /v1/models lists it).")
    tokenizer: Path = Field(
        description="Local tokenizer folder (tokenizer.json + tokenizer_config.json)."
    )
    endpoint_type: Literal["chat", "completions"] = Field("chat", description="API endpoint.")
    streaming: bool = Field(True, description="Stream responses (needed for TTFT/ITL).")
    warmup: list[WarmupPass] = Field(
        default_factory=lambda: [WarmupPass()], description="Throwaway passes after boot."
    )
    knee: KneeWorkload | None = Field(None, description="The knee pass (None: skipped).")
    agentfix: AgentfixWorkload | None = Field(
        None, description="The agent-fixture pass (None: skipped)."
    )
    rate: RateWorkload | None = Field(
        None, description="The open-loop request-rate sweep (None: skipped).")
    trace: TraceWorkload | None = Field(
        None, description="Replay of the lab's request traces (None: skipped).")
    sessions: SessionsWorkload | None = Field(
        None, description="Multi-turn agent sessions by class (None: skipped).")
    fidelity: FidelityWorkload | None = Field(
        None, description="The lossless check after the measured passes (None: skipped)."
    )

    @model_validator(mode="after")
    def _some(self) -> Workloads:
        if all(getattr(self, w) is None for w in MEASURED):
            raise ValueError("define at least one measured workload: "
                             + ", ".join(MEASURED[:-1]) + " or " + MEASURED[-1])
        return self

    def requests_in(self, workload: str, level: str) -> int | None:
        """The requests a pass of (workload, level) gets: what AIPerf is told for that knee
        level or content class, a rate level's schedule. None: duration-bound (known once
        measured), a trace or a sessions class (its file's, read by `check`), or not a
        request-bound cell of this campaign (a fidelity cell, an unknown level)."""
        if workload == "knee" and self.knee and level in self.knee.levels:
            return self.knee.requests_at(int(level[1:]))
        if workload == "agentfix" and self.agentfix and level in self.agentfix.fixtures:
            return self.agentfix.requests_of(level)
        if workload == "rate" and self.rate and level in self.rate.levels:
            return self.rate.requests_at(level)
        return None

    def requests_fields(self, cells: Sequence[tuple[str, str]]) -> str:
        """The fields that give `cells` their requests, to name in a fix: a workload's one
        field when the cells are all its levels, else each cell's own
        (`workloads.agentfix.requests.prose`)."""
        out: list[str] = []
        for w in dict.fromkeys(w for w, _ in cells):
            levels = [lvl for x, lvl in cells if x == w]
            if w == "knee" and self.knee:
                whole = "workloads.knee.requests_per_level"
                own = [self.knee.requests_field(lvl) for lvl in levels]
            elif w == "agentfix" and self.agentfix:
                whole = "workloads.agentfix.requests"
                own = [self.agentfix.requests_field(lvl) for lvl in levels]
            elif w == "rate" and self.rate:
                whole = ("workloads.rate.duration_s" if self.rate.duration_s is not None
                         else "workloads.rate.requests_per_level")
                own = [self.rate.requests_field(lvl) for lvl in levels]
            elif w == "sessions" and self.sessions:
                whole = "workloads.sessions.sessions"  # one count for every class
                own = [whole]
            elif w == "trace" and self.trace:
                whole = "workloads.trace.files (a longer trace)"
                own = [f"workloads.trace.files.{lvl} (a longer trace)" for lvl in levels]
            else:
                continue
            out += [whole] if sorted(levels) == sorted(self.levels(w)) else own
        return ", ".join(dict.fromkeys(out))

    def levels(self, workload: str) -> list[str]:
        if workload == "knee" and self.knee:
            return self.knee.levels
        if workload == "agentfix" and self.agentfix:
            return self.agentfix.levels
        if workload == "rate" and self.rate:
            return self.rate.levels
        if workload == "trace" and self.trace:
            return self.trace.levels
        if workload == "sessions" and self.sessions:
            return self.sessions.levels
        if workload == "fidelity" and self.fidelity:
            return ["c1"]
        return []
