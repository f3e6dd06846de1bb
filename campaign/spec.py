"""The campaign file: pydantic models and `load_campaign(path)`.

Every model forbids unknown keys and describes every field (the README's reference is
generated from these descriptions, and a test checks it is current). `load_campaign`
reads YAML with ruamel (which keeps line numbers), validates, merges each arm's
overrides into the server launch, and raises one `SpecError` listing every problem as
`yaml.path: what is wrong (line N)`.

Merge rule for arms: lists are appended, maps merged key by key, scalars replaced. The
merged launch of each arm (`Campaign.launches[arm]`) is what the runner starts and what
`spec-ab check` prints.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from campaign import catalog
from campaign.errors import SpecError

CONTROL = "control"
NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- rule


class DriftFrom(Model):
    """Take the drift band from the spread of an A/A campaign on the same lane."""

    from_: Path = Field(alias="from", description="Results directory of an A/A campaign.")


class DecisionCell(Model):
    """A workload × level whose primary metric must adopt for the campaign to adopt."""

    workload: Literal["knee", "agentfix"] = Field(description="Workload of the cell.")
    level: str = Field(
        "*",
        description="Knee level `c<N>` (concurrency N), an agentfix class, or `*` for all.",
    )


class Guardrail(Model):
    """A metric the candidate may not worsen by more than a pre-registered amount."""

    metric: str = Field(description="Metric name (see `spec-ab check --metrics`).")
    max_worsening: float = Field(
        0.05,
        ge=0,
        description="Largest allowed worsening: a fraction of the control's value (0.05 = "
        "5%), or an absolute difference when `absolute` is true.",
    )
    absolute: bool = Field(
        False, description="Compare absolute differences (for rates that are often 0)."
    )
    workload: Literal["knee", "agentfix", "*"] = Field("*", description="Where it applies.")
    level: str = Field("*", description="Level where it applies, or `*`.")

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        return _check_metric(v)


class Gates(Model):
    """When a pass counts as valid. An invalid pass is retried, then kept as invalid."""

    max_error_rate: float = Field(
        0.0, ge=0, le=1, description="Largest share of failed requests in a valid pass."
    )
    min_completed_requests: int = Field(
        4, ge=1, description="Fewest completed requests per level in a valid pass."
    )
    pass_timeout_s: float = Field(
        1800, gt=0, description="Wall-clock limit of one AIPerf invocation (seconds)."
    )
    retries: int = Field(1, ge=0, le=5, description="Retries of an invalid pass.")
    pair_retries: int = Field(
        1, ge=0, le=5,
        description="Redos of a whole pair whose server died or restarted mid-pass (the pair "
        "is redone at once, both arms, so it stays in one window).",
    )
    max_pair_gap_s: float = Field(
        3600,
        gt=0,
        description="Largest allowed time between the starts of a pair's arms; beyond it "
        "the pair is flagged `split-pair`.",
    )
    min_output_tokens: int = Field(
        2000,
        ge=0,
        description="Fewer measured output tokens than this in a cell flags it "
        "`small-sample` (a hint, not a number).",
    )


class Preregistration(Model):
    """The adoption rule, fixed (frozen and hashed) before the first arm boots."""

    primary_metric: str = Field(
        "output_token_throughput", description="The metric the rule decides on."
    )
    direction: Literal["higher", "lower"] | None = Field(
        None, description="Which way is better; default: the metric's own direction."
    )
    margin: float = Field(
        0.10, ge=0, le=10, description="Bar the gain must clear to adopt (0.10 = +10%)."
    )
    drift_band: float | DriftFrom = Field(
        0.03,
        description="Changes inside ±band are noise: a fraction (0.03), or `{from: RUN_DIR}` "
        "of an A/A campaign.",
    )
    rule: Literal["point", "ci"] = Field(
        "point",
        description="`point`: adopt when the gain ≥ margin and every pair's gain ≥ +band; "
        "`ci`: adopt when the CI's lower bound ≥ margin (Holm-corrected over cells).",
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="Confidence level of the CIs.")
    pairs: int = Field(2, ge=1, le=200, description="Number of control → candidate pairs.")
    order: Literal["AB", "ABBA", "random"] = Field(
        "AB", description="Order of arms within pairs: AB, ABBA (alternating), random."
    )
    seed: int = Field(0, description="Seed of the `random` order and of the load generator.")
    decision_cells: list[DecisionCell] = Field(
        default_factory=lambda: [DecisionCell(workload="knee", level="*")],
        min_length=1,
        description="Cells whose primary metric must adopt (default: every knee level).",
    )
    guardrails: list[Guardrail] = Field(
        default_factory=lambda: [
            Guardrail(metric="ttft_p99", max_worsening=0.05),
            Guardrail(metric="error_rate", max_worsening=0.0, absolute=True),
        ],
        description="Metrics the candidate may not worsen (any decision cell).",
    )
    gates: Gates = Field(default_factory=Gates, description="Validity gates of a pass.")

    @field_validator("primary_metric")
    @classmethod
    def _known_primary(cls, v: str) -> str:
        return _check_metric(v)

    @property
    def metric_direction(self) -> Literal["higher", "lower"]:
        return self.direction or catalog.direction(self.primary_metric)


def _check_metric(name: str) -> str:
    if catalog.is_known(name):
        return name
    close = difflib.get_close_matches(name, list(catalog.METRICS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(f"unknown metric '{name}'{hint}")


# --------------------------------------------------------------------------- server


class Readiness(Model):
    """How the runner decides a server is ready: port, health, model list, one request."""

    health_path: str = Field("/health", description="GET path that answers 200 when ready.")
    models_path: str = Field("/v1/models", description="GET path listing the served models.")
    probe_request: bool = Field(
        True, description="Send one 1-token completion before declaring ready."
    )
    timeout_s: float = Field(900, gt=0, description="Boot timeout (seconds).")
    poll_interval_s: float = Field(
        0.05, gt=0, le=10, description="Polling interval while booting (seconds)."
    )


class Volume(Model):
    """A parsed `host:container[:ro|rw]` volume."""

    source: str
    target: str
    read_only: bool | None = None
    """None: files read-only, directories and named volumes read-write."""

    @property
    def is_named(self) -> bool:
        return "/" not in self.source and not self.source.startswith(".")

    def spec(self) -> str:
        mode = "" if self.read_only is None else (":ro" if self.read_only else ":rw")
        return f"{self.source}:{self.target}{mode}"


def parse_volume(text: str) -> Volume:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError(f"'{text}' is not host:container[:ro|rw]")
    read_only: bool | None = None
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            raise ValueError(f"'{text}': mode must be ro or rw, not '{parts[2]}'")
        read_only = parts[2] == "ro"
    if not parts[1].startswith("/"):
        raise ValueError(f"'{text}': container path '{parts[1]}' must be absolute")
    return Volume(source=parts[0], target=parts[1], read_only=read_only)


def _volumes(v: list[str]) -> list[str]:
    for item in v:
        parse_volume(item)
    return v


Env = dict[str, str]


def _env_as_strings(cls: Any, v: Any) -> Any:
    """YAML writes `FOO: 1` and `BAR: true`; the environment only holds strings."""
    if isinstance(v, Mapping):
        return {str(k): _scalar_str(x) for k, x in v.items()}
    return v


def _scalar_str(x: Any) -> Any:
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int | float):
        return str(x)
    return x



class _LaunchBase(Model):
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")
    env: Env = Field(default_factory=dict, description="Environment variables of the server.")
    command: list[str] = Field(default_factory=list, description="Command (argv list).")
    args: list[str] = Field(
        default_factory=list, description="Arguments appended to `command` (arms append more)."
    )

    _env_ok = field_validator("env", mode="before")(_env_as_strings)

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]


class ProcessLaunch(_LaunchBase):
    """A server started as a local command in its own process group."""

    backend: Literal["process"] = Field(description="`process`: a local command.")
    cwd: Path | None = Field(None, description="Working directory (default: campaign's).")
    host: str = Field("127.0.0.1", description="Host the server listens on.")
    port: int = Field(ge=1, le=65535, description="Port the server listens on.")
    stop_timeout_s: float = Field(15, gt=0, description="Grace period before SIGKILL.")

    @model_validator(mode="after")
    def _needs_command(self) -> ProcessLaunch:
        if not self.command:
            raise ValueError("command: a process server needs a command")
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ExternalLaunch(Model):
    """A server that is already running (or started by your own hook commands)."""

    backend: Literal["external"] = Field(description="`external`: a running URL.")
    base_url: str = Field(description="http://host:port of the OpenAI-compatible server.")
    start_hook: str | None = Field(None, description="Shell command run to start the arm.")
    stop_hook: str | None = Field(None, description="Shell command run to stop the arm.")
    hook_timeout_s: float = Field(600, gt=0, description="Time limit of a hook (seconds).")
    env: Env = Field(default_factory=dict, description="Environment given to the hooks.")
    _env_ok = field_validator("env", mode="before")(_env_as_strings)
    args: list[str] = Field(
        default_factory=list, description="Extra words appended to the start hook."
    )
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"'{v}' is not an http(s) URL")
        return v.rstrip("/")


class ReadyCheck(Model):
    """How an extra container shows it is ready."""

    log_regex: str | None = Field(None, description="Ready when a log line matches this.")
    command: list[str] | None = Field(None, description="Ready when this exec exits 0.")
    timeout_s: float = Field(300, gt=0, description="How long to wait (seconds).")

    @model_validator(mode="after")
    def _one(self) -> ReadyCheck:
        if (self.log_regex is None) == (self.command is None):
            raise ValueError("give exactly one of log_regex or command")
        if self.log_regex is not None:
            _check_regex(self.log_regex)
        return self


Gpus = Literal["all"] | list[int] | None


class _ContainerBase(Model):
    image: str = Field(description="Image reference (must be present locally unless pull).")
    entrypoint: list[str] | None = Field(None, description="Entrypoint override.")
    command: list[str] = Field(default_factory=list, description="Container command (argv).")
    args: list[str] = Field(
        default_factory=list, description="Arguments appended to `command` (arms append more)."
    )
    env: Env = Field(default_factory=dict, description="Environment variables.")
    volumes: list[str] = Field(
        default_factory=list,
        description="`host:container[:ro|rw]`; bind-mounted files are read-only by default.",
    )
    network: str | None = Field(None, description="`host`, or a docker network name.")
    gpus: Gpus = Field(None, description="`all`, or a list of device ids.")
    ipc: str | None = Field(None, description="IPC mode, e.g. `host`.")
    shm_size: str | None = Field(None, description="Shared memory size, e.g. `16g`.")
    ulimits: dict[str, int] = Field(default_factory=dict, description="e.g. {memlock: -1}.")
    docker_host: str | None = Field(
        None, description="Docker daemon of this container, e.g. `ssh://spark2` (None: local)."
    )

    _volumes_ok = field_validator("volumes")(_volumes)
    _env_ok = field_validator("env", mode="before")(_env_as_strings)

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]


class ExtraContainer(_ContainerBase):
    """A container started before the server (e.g. a Ray worker on a second node)."""

    name: str = Field(pattern=NAME_RE, description="Short name, unique within the arm.")
    ready: ReadyCheck | None = Field(None, description="Readiness of this container.")


class DockerLaunch(_ContainerBase):
    """A server started as a container through the docker SDK."""

    backend: Literal["docker"] = Field(description="`docker`: containers.")
    host: str = Field("127.0.0.1", description="Host where the runner reaches the server.")
    port: int = Field(ge=1, le=65535, description="Host port the runner talks to.")
    ports: list[str] = Field(
        default_factory=list, description="Published ports `host:container` (not with host "
        "network)."
    )
    pull: bool = Field(False, description="Pull the image if missing (default: refuse).")
    stop_timeout_s: float = Field(60, gt=0, description="Graceful stop timeout (seconds).")
    extra_containers: list[ExtraContainer] = Field(
        default_factory=list, description="Started in order before the server, stopped after."
    )
    readiness: Readiness = Field(default_factory=Readiness, description="Readiness checks.")

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        for p in v:
            if not re.match(r"^(\d+\.\d+\.\d+\.\d+:)?\d+:\d+(/tcp|/udp)?$", p):
                raise ValueError(f"'{p}' is not host:container")
        return v

    @model_validator(mode="after")
    def _network(self) -> DockerLaunch:
        if self.network == "host" and self.ports:
            raise ValueError("ports cannot be published with network: host")
        names = [c.name for c in self.extra_containers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"extra container names repeat: {', '.join(sorted(dup))}")
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


Launch = Annotated[ProcessLaunch | ExternalLaunch | DockerLaunch, Field(discriminator="backend")]
LAUNCH_ADAPTER: TypeAdapter[ProcessLaunch | ExternalLaunch | DockerLaunch] = TypeAdapter(Launch)
LaunchModel = ProcessLaunch | ExternalLaunch | DockerLaunch


# --------------------------------------------------------------------------- workloads


class WarmupPass(Model):
    """A throwaway pass after boot (not measured): fills caches, compiles graphs."""

    concurrency: int = Field(4, ge=1, description="Concurrent streams.")
    requests: int = Field(16, ge=1, description="Requests in the pass.")
    input_tokens: int = Field(256, ge=1, description="Synthetic prompt length (tokens).")
    output_tokens: int = Field(64, ge=1, description="Exact output length (tokens).")


class KneeWorkload(Model):
    """Throughput vs concurrency with fixed input/output lengths (one AIPerf sweep)."""

    concurrency: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16], min_length=1, description="Levels."
    )
    input_tokens: int = Field(1024, ge=1, description="Synthetic prompt length (tokens).")
    output_tokens: int = Field(256, ge=1, description="Exact output length (tokens).")
    requests_per_level: int | None = Field(
        None, ge=1, description="Requests per level (default: 4 × concurrency, at least 8)."
    )
    duration_s: float | None = Field(
        None, gt=0, description="Seconds per level instead of a request count."
    )

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be ≥ 1")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels repeat")
        return sorted(v)

    @model_validator(mode="after")
    def _one_of(self) -> KneeWorkload:
        if self.requests_per_level is not None and self.duration_s is not None:
            raise ValueError("give requests_per_level or duration_s, not both")
        return self

    def requests_at(self, concurrency: int) -> int | None:
        if self.duration_s is not None:
            return None
        return self.requests_per_level or max(8, 4 * concurrency)

    @property
    def levels(self) -> list[str]:
        return [f"c{c}" for c in self.concurrency]


FIXTURE_CLASSES = ("prose", "shell", "code", "tool_json", "structured")


class AgentfixWorkload(Model):
    """Real-looking agent prompts by content class, one AIPerf pass per class."""

    fixtures: dict[str, Path] = Field(
        description="Content class → AIPerf single_turn JSONL file (prose, shell, code, "
        "tool_json, structured, or your own class names)."
    )
    concurrency: int = Field(4, ge=1, description="Concurrent streams.")
    requests: int = Field(30, ge=1, description="Requests per class.")
    output_tokens: int = Field(256, ge=1, description="Exact output length (tokens).")

    @field_validator("fixtures")
    @classmethod
    def _classes(cls, v: dict[str, Path]) -> dict[str, Path]:
        if not v:
            raise ValueError("give at least one content class")
        for name in v:
            if not re.match(NAME_RE, name) or (name.startswith("c") and name[1:].isdigit()):
                raise ValueError(f"class name '{name}' must be lowercase and not like c<N>")
        return v

    @property
    def levels(self) -> list[str]:
        return list(self.fixtures)


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

    @model_validator(mode="after")
    def _some(self) -> Workloads:
        if self.knee is None and self.agentfix is None:
            raise ValueError("define at least one measured workload: knee or agentfix")
        return self

    def levels(self, workload: str) -> list[str]:
        if workload == "knee" and self.knee:
            return self.knee.levels
        if workload == "agentfix" and self.agentfix:
            return self.agentfix.levels
        return []


# --------------------------------------------------------------------------- arms


ARM_OWN_FIELDS = {"description", "warmup"}


class ArmSpec(Model):
    """An arm: the server launch plus overrides (lists appended, maps merged, scalars
    replaced). Validated again after merging, against the backend's own fields."""

    description: str = Field("", description="What this arm changes.")
    warmup: list[WarmupPass] | None = Field(
        None, description="This arm's own warm-up passes (default: workloads.warmup)."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Server fields this arm overrides (env, volumes, "
        "args, image, ...), written directly under the arm."
    )


# --------------------------------------------------------------------------- campaign


class Campaign(Model):
    """A same-window A/B campaign: control → candidate pairs under a pre-registered rule."""

    name: str = Field(pattern=NAME_RE, description="Short name (lowercase, -_. allowed).")
    hypothesis: str = Field(description="What the candidate should change, and why.")
    lane: str = Field(description="Lane label, e.g. `gb300-station` or `sim`.")
    preregistration: Preregistration = Field(
        default_factory=Preregistration, description="The rule, frozen before the runs."
    )
    server: Launch = Field(description="The control launch (what every arm starts from).")
    arms: dict[str, ArmSpec] = Field(
        description="`control` plus one or more named candidates."
    )
    workloads: Workloads = Field(description="Warm-up and measured passes.")
    log_captures: dict[str, str] = Field(
        default_factory=dict,
        description="Name → regex: matching server log lines are copied to "
        "`captures/<name>.log` per arm.",
    )
    results_dir: Path = Field(Path("results"), description="Where run directories go.")

    _launches: dict[str, LaunchModel] = PrivateAttr(default_factory=dict)
    _source: Path | None = PrivateAttr(None)
    _base_dir: Path | None = PrivateAttr(None)

    @field_validator("log_captures")
    @classmethod
    def _regexes(cls, v: dict[str, str]) -> dict[str, str]:
        for pattern in v.values():
            _check_regex(pattern)
        return v

    @field_validator("arms")
    @classmethod
    def _control(cls, v: dict[str, ArmSpec]) -> dict[str, ArmSpec]:
        if CONTROL not in v:
            raise ValueError("arms must include `control`")
        if len(v) < 2:
            raise ValueError("add at least one candidate arm beside `control`")
        for name in v:
            if not re.match(NAME_RE, name):
                raise ValueError(f"arm name '{name}' must match {NAME_RE}")
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

    def resolve(self, path: Path | str) -> Path:
        """A path from the file, relative to the campaign file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def warmups(self, arm: str) -> list[WarmupPass]:
        own = self.arms[arm].warmup
        return list(own) if own is not None else list(self.workloads.warmup)


def _check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex '{pattern}': {exc}") from None


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


# --------------------------------------------------------------------------- loading


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


class _Lines:
    """Line numbers of YAML paths in the ruamel tree."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def line(self, path: tuple[str | int, ...]) -> int | None:
        node = self.root
        best: int | None = None
        for part in path:
            if isinstance(node, CommentedMap) and part in node:
                try:
                    best = node.lc.key(part)[0] + 1
                except (KeyError, TypeError):
                    pass
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
                try:
                    best = node.lc.item(part)[0] + 1
                except (KeyError, TypeError, IndexError):
                    pass
                node = node[part]
        return best

    def problem(self, path: tuple[str | int, ...], msg: str) -> str:
        """One problem line: `yaml.path: what is wrong (line N)`."""
        ln = self.line(path)
        return f"{_fmt_path(path)}: {msg}" + (f" (line {ln})" if ln else "")


def _all_field_names() -> list[str]:
    names: set[str] = set()
    models: list[type[BaseModel]] = [
        Campaign, Preregistration, Gates, Guardrail, DecisionCell, DriftFrom, Readiness,
        ProcessLaunch, ExternalLaunch, DockerLaunch, ExtraContainer, ReadyCheck, Workloads,
        KneeWorkload, AgentfixWorkload, WarmupPass, ArmSpec,
    ]
    for m in models:
        for name, f in m.model_fields.items():
            names.add(f.alias or name)
    names.discard("overrides")
    return sorted(names)


def _fmt_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


_TAGS = {"process", "external", "docker", "function-after", "function-before"}


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[str | int, ...]:
    """Drop pydantic's union tags from a location, keeping real YAML keys."""
    out: list[str | int] = []
    node = data
    for part in loc:
        in_map = isinstance(node, Mapping) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_map or in_list:
            out.append(part)
            node = node[part]
        elif isinstance(part, str) and (part in _TAGS or "[" in part):
            continue
        else:
            out.append(part)
            node = None
    return tuple(out)


def _message(err: Any, loc: tuple[str | int, ...], vocab: list[str]) -> str:
    """A pydantic error in the words of the campaign file."""
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        close = difflib.get_close_matches(key, vocab, n=1, cutoff=0.6)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return "required but missing"
    if kind == "union_tag_invalid":
        return "backend must be one of: process, external, docker"
    if kind == "union_tag_not_found":
        return "missing `backend` (process, external or docker)"
    return str(err["msg"]).removeprefix("Value error, ")


def _problems_from(exc: ValidationError, data: Any, lines: _Lines) -> list[str]:
    vocab = _all_field_names()
    out = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]), data)
        out.append(lines.problem(loc, _message(err, loc, vocab)))
    return out


def _read_yaml(path: Path) -> Any:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), ["file not found"]) from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as exc:
        raise SpecError(str(path), [f"cannot read: {exc}"]) from None
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        ln = f" (line {mark.line + 1})" if mark else ""
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise SpecError(str(path), [f"YAML: {problem}{ln}"]) from None
    except Exception as exc:  # ruamel raises several unrelated types for broken input
        raise SpecError(str(path), [f"YAML: {exc}"]) from None
    if data is None:
        raise SpecError(str(path), ["the file is empty"])
    if not isinstance(data, Mapping):
        raise SpecError(str(path), ["the top level must be a mapping of keys"])
    return data


def load_campaign(path: Path | str, *, base_dir: Path | None = None,
                  check_files: bool = True) -> Campaign:
    """Read, validate and merge a campaign file. Raises `SpecError` with every problem.

    `base_dir` resolves relative paths when the file is a frozen copy (resume) that no
    longer sits beside the fixtures it names. `check_files=False` skips the checks that
    named files and folders exist (reading a frozen copy back for a report, where the
    fixtures may be long gone).
    """
    path = Path(path)
    raw = _read_yaml(path)
    lines = _Lines(raw)
    data = _plain(raw)
    problems: list[str] = []

    # Arms carry server overrides directly under their name; split them off so the arm
    # model stays strict while any server field may be overridden.
    arms_raw = data.get("arms")
    if isinstance(arms_raw, Mapping):
        shaped: dict[str, Any] = {}
        for name, arm in arms_raw.items():
            if arm is None:
                arm = {}
            if isinstance(arm, Mapping):
                own = {k: v for k, v in arm.items() if k in ARM_OWN_FIELDS}
                own["overrides"] = {k: v for k, v in arm.items() if k not in ARM_OWN_FIELDS}
                shaped[name] = own
            else:
                shaped[name] = arm
        data = {**data, "arms": shaped}

    try:
        campaign = Campaign.model_validate(data)
    except ValidationError as exc:
        for p in _problems_from(exc, data, lines):
            problems.append(p.replace(".overrides", ""))
        raise SpecError(str(path), problems) from None
    campaign._source = path.resolve()
    if base_dir is not None:
        campaign._base_dir = base_dir.resolve()

    server_raw = _plain(raw["server"])
    launches: dict[str, LaunchModel] = {}
    backend_fields = set(type(campaign.server).model_fields)
    for arm in campaign.arm_names:
        overrides = campaign.arms[arm].overrides
        bad = [k for k in overrides if k not in backend_fields or k == "backend"]
        for key in bad:
            close = difflib.get_close_matches(key, sorted(backend_fields | ARM_OWN_FIELDS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(lines.problem(
                ("arms", arm, key),
                f"not a field a {campaign.server.backend} arm can override{hint}"))
        if bad:
            continue
        merged = merge(server_raw, overrides)
        try:
            launches[arm] = LAUNCH_ADAPTER.validate_python(merged)
        except ValidationError as exc:
            problems.extend(_arm_problems(exc, merged, server_raw, overrides, arm, lines))
    problems.extend(_semantic_problems(campaign, launches, lines, check_files=check_files))
    if problems:
        raise SpecError(str(path), problems)
    campaign._launches = launches
    return campaign


def _arm_problems(
    exc: ValidationError,
    merged: dict[str, Any],
    server_raw: dict[str, Any],
    overrides: dict[str, Any],
    arm: str,
    lines: _Lines,
) -> list[str]:
    """Name the arm when the problem comes from its overrides, the server otherwise."""
    vocab = _all_field_names()
    out = []
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]), merged)
        key = loc[0] if loc else None
        from_arm = key in overrides
        if from_arm and len(loc) >= 2 and isinstance(loc[1], int) and isinstance(
            server_raw.get(str(key)), list
        ):
            # appended list: index inside the arm's own list
            base_len = len(server_raw[str(key)])
            if loc[1] < base_len:
                from_arm = False
            else:
                loc = (loc[0], loc[1] - base_len, *loc[2:])
        prefix: tuple[str | int, ...] = ("arms", arm) if from_arm else ("server",)
        line = lines.problem(prefix + loc, _message(err, loc, vocab))
        if not from_arm:
            line += f" [after merging arm '{arm}']" if arm != CONTROL else ""
        if line not in out:
            out.append(line)
    return out


def _semantic_problems(
    campaign: Campaign, launches: dict[str, LaunchModel], lines: _Lines, *,
    check_files: bool = True,
) -> list[str]:
    """Cross-field checks: files that must exist, cells that must name real levels."""
    problems: list[str] = []

    def add(path: tuple[str | int, ...], msg: str) -> None:
        problems.append(lines.problem(path, msg))

    wl = campaign.workloads
    tok = Path(wl.tokenizer)
    if check_files and not tok.is_absolute():
        resolved = campaign.resolve(tok)
        if not resolved.is_dir():
            add(("workloads", "tokenizer"), f"tokenizer folder {tok} does not exist")
        elif not (resolved / "tokenizer.json").exists() and not (
            resolved / "tokenizer_config.json"
        ).exists():
            add(("workloads", "tokenizer"), f"{tok} has no tokenizer.json")
    if wl.agentfix and check_files:
        for cls, file in wl.agentfix.fixtures.items():
            if not Path(file).is_absolute() and not campaign.resolve(file).is_file():
                add(("workloads", "agentfix", "fixtures", cls),
                    f"fixture file {file} does not exist")

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
    if isinstance(campaign.preregistration.drift_band, float) and not (
        0 <= campaign.preregistration.drift_band < 1
    ):
        add(("preregistration", "drift_band"), "must be a fraction in [0, 1), e.g. 0.03")
    if campaign.preregistration.order == "ABBA" and campaign.preregistration.pairs % 2:
        add(("preregistration", "pairs"),
            "ABBA needs an even number of pairs so each order is used equally")

    for arm, launch in launches.items():
        if not check_files:
            break
        for path, vol in _volume_entries(campaign, arm, launch):
            src = vol.source
            if vol.is_named or Path(src).is_absolute() or _remote(launch, path):
                continue  # absolute / remote sources are checked by the preflight
            if not campaign.resolve(src).exists():
                add(path, f"source {src} does not exist")
        if (isinstance(launch, ProcessLaunch) and launch.cwd and not launch.cwd.is_absolute()
                and not campaign.resolve(launch.cwd).is_dir()):
            add(("server", "cwd"), f"folder {launch.cwd} does not exist")
    return problems


def _remote(launch: LaunchModel, path: tuple[str | int, ...]) -> bool:
    if not isinstance(launch, DockerLaunch):
        return False
    if "extra_containers" in path:
        idx = path[path.index("extra_containers") + 1]
        assert isinstance(idx, int)
        return launch.extra_containers[idx].docker_host is not None
    return launch.docker_host is not None


def _volume_entries(
    campaign: Campaign, arm: str, launch: LaunchModel
) -> Iterator[tuple[tuple[str | int, ...], Volume]]:
    """Each volume with the YAML path it was written at (server or arm)."""
    if not isinstance(launch, DockerLaunch):
        return
    base = campaign.server.volumes if isinstance(campaign.server, DockerLaunch) else []
    for i, spec in enumerate(launch.volumes):
        if i < len(base):
            if arm != CONTROL:
                continue  # reported once, for the control
            yield ("server", "volumes", i), parse_volume(spec)
        else:
            yield ("arms", arm, "volumes", i - len(base)), parse_volume(spec)
    for j, extra in enumerate(launch.extra_containers):
        if arm != CONTROL:
            continue
        for i, spec in enumerate(extra.volumes):
            yield ("server", "extra_containers", j, "volumes", i), parse_volume(spec)
