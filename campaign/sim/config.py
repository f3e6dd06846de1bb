"""Configuration of the simulated lane and where each knob comes from.

Precedence, lowest to highest (a later source overrides an earlier one, key by key):

  1. built-in defaults (this module);
  2. the config file given by `--config FILE` (or `SPECAB_SIM_CONFIG`);
  3. the overrides file, `campaign/sim/overrides.yaml` inside the installed package (or the
     path in `SPECAB_SIM_OVERRIDES`) — a candidate container bind-mounts a patched copy
     over it, the way real candidates patch a file of vLLM;
  4. `SPECAB_SIM_*` environment variables (one per knob, see `ENV_PREFIX`);
  5. explicit command-line options of `spec-ab sim serve`.

Nested knobs: `cost.<param>` ↔ `SPECAB_SIM_COST_<PARAM>`, `acceptance.<class>` ↔
`SPECAB_SIM_ACCEPTANCE_<CLASS>`.  Every key is validated; an unknown key is an error that
names its source, so a typo in a bind-mounted file cannot silently do nothing.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml import YAML

from campaign.markers import ARM_ENV
from campaign.sim.acceptance import CLASSES, DEFAULT_DECAY, DEFAULT_RATES
from campaign.sim.costmodel import CostParams

ENV_PREFIX = "SPECAB_SIM_"
OVERRIDES_PATH = Path(__file__).resolve().parent / "overrides.yaml"
DEFAULT_TOKENIZER = Path(__file__).resolve().parent.parent / "fixtures" / "tokenizer"


class ConfigError(ValueError):
    """A knob could not be read or is invalid; the message names its source."""


class CostConfig(BaseModel):
    """Step-time cost model parameters (real-time ms); see campaign/sim/costmodel.py."""

    model_config = ConfigDict(extra="forbid")

    base_ms: float = Field(CostParams.base_ms, ge=0, description="fixed cost of a step")
    stream_ms: float = Field(CostParams.stream_ms, ge=0, description="cost per running stream")
    verify_ms_per_token: float = Field(CostParams.verify_ms_per_token, ge=0,
                                       description="dense cost per verified token")
    compute_knee_tokens: float = Field(CostParams.compute_knee_tokens, ge=0,
                                       description="tokens per step where compute-bound starts")
    compute_ms_per_token: float = Field(CostParams.compute_ms_per_token, ge=0,
                                        description="extra cost per token past the knee")
    n_experts: int = Field(CostParams.n_experts, ge=1, description="routed experts N")
    experts_per_token: int = Field(CostParams.experts_per_token, ge=1,
                                   description="experts per token r")
    routing_correlation: float = Field(CostParams.routing_correlation, ge=0, le=1,
                                       description="within-stream routing correlation")
    offloaded_fraction: float = Field(CostParams.offloaded_fraction, ge=0, le=1,
                                      description="fraction of experts in CPU memory")
    fetch_ms_per_expert: float = Field(CostParams.fetch_ms_per_expert, ge=0,
                                       description="cost of reading one offloaded expert")
    draft_ms_per_position: float = Field(CostParams.draft_ms_per_position, ge=0,
                                         description="drafter cost per draft position")
    draft_ms_per_token: float = Field(CostParams.draft_ms_per_token, ge=0,
                                      description="drafter cost per stream and position")
    prefill_ms_per_token: float = Field(CostParams.prefill_ms_per_token, ge=0,
                                        description="prefill cost per prompt token")

    def params(self) -> CostParams:
        return CostParams(**self.model_dump())


VLLM_LIKE_BLOCKS = 65536
"""A prefix cache of 1M tokens (some 250 prompts of 4,000 tokens): what
`SPECAB_SIM_PREFIX_CACHE_BLOCKS` gives to model vLLM's automatic prefix caching. Off by
default: the lane's cost model and the campaigns tuned on it predate the cache (an agent
fixture's repeated prompts would prefill almost free)."""


class SimConfig(BaseModel):
    """Every knob of the simulated lane (docs/simulator.md)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("sim", description="served model name (/v1/models, model_name label)")
    depth: int = Field(5, ge=0, le=16, description="draft depth k (num_speculative_tokens)")
    verify: Literal["fixed", "adaptive"] = Field(
        "fixed", description="verify all k drafts, or let the adaptive controller choose")
    adaptive_live: bool = Field(
        False, description="adaptive controller keeps its cost table live (else boot-measured)")
    effect: float = Field(1.0, gt=0, description="speed factor: step times are divided by it")
    time_scale: float = Field(1.0, gt=0, description="run N× faster than real time")
    serve_models: bool = Field(
        True, description="serve GET /v1/models (false: 404, like some OpenAI-compatible servers)")
    serve_metrics: bool = Field(
        True, description="serve GET /metrics (false: 404, a server with no Prometheus counters)")
    seed: int | None = Field(None, description="seed of acceptance/noise/outputs (None: random)")
    drift: float | None = Field(None, gt=0, description="explicit per-boot speed factor")
    drift_sigma: float = Field(0.03, ge=0, description="log-normal sigma of per-boot drift")
    drift_seed: int | None = Field(None, description="seed of the per-boot drift (None: random)")
    step_noise: float = Field(0.02, ge=0, description="log-normal sigma of per-step noise")
    boot_delay: float = Field(0.0, ge=0, description="wall seconds 'loading' before the port opens")
    max_num_seqs: int = Field(256, ge=1, description="running streams; the rest wait")
    prefix_cache_blocks: int = Field(
        0, ge=0, strict=True,
        description="prefix cache size in blocks of 16 prompt tokens, least "
        f"recently used out first (0, the default: no prefix caching; {VLLM_LIKE_BLOCKS}: "
        "about 1M tokens, like vLLM's automatic prefix caching)")
    default_max_tokens: int = Field(1024, ge=1, description="max_tokens when a request has none")
    eos_mean_tokens: float = Field(256.0, gt=0,
                                   description="mean natural length when ignore_eos is false")
    acceptance: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_RATES),
        description="reported acceptance rate at k=5 per content class")
    acceptance_decay: float = Field(DEFAULT_DECAY, gt=0, le=1,
                                    description="per-position decay of conditional acceptance")
    force_class: str | None = Field(None, description="treat every prompt as this class")
    cost: CostConfig = Field(default_factory=CostConfig, description="step-time cost model")
    tokenizer: str = Field(str(DEFAULT_TOKENIZER), description="tokenizer folder or json file")
    log_interval: float = Field(10.0, gt=0, description="wall seconds between stats log lines")
    die_after_requests: int | None = Field(None, ge=0, description="engine dies when N finished")
    die_after_seconds: float | None = Field(None, ge=0, description="engine dies S s after ready")
    death_mode: Literal["exit", "unhealthy"] = Field(
        "exit", description="exit: process exits 1; unhealthy: /health 503, requests fail 500")
    hang_after_requests: int | None = Field(None, ge=0, description="stop answering after N")
    hang_after_seconds: float | None = Field(None, ge=0, description="stop answering after S s")
    error_rate: float = Field(0.0, ge=0, le=1, description="fraction of requests answered 500")
    lossy: float = Field(0.0, ge=0, le=1, description="chance an accepted draft token differs "
                         "from the target's (a lossy verifier; 0: outputs are lossless)")

    @field_validator("acceptance")
    @classmethod
    def _known_classes(cls, value: dict[str, float]) -> dict[str, float]:
        merged = dict(DEFAULT_RATES)
        for name, rate in value.items():
            if name not in CLASSES:
                raise ValueError(f"unknown class {name!r} (known: {', '.join(CLASSES)})")
            if not 0.0 < rate < 1.0:
                raise ValueError(f"acceptance.{name} must be in (0, 1), got {rate}")
            merged[name] = rate
        return merged

    @field_validator("force_class")
    @classmethod
    def _known_forced(cls, value: str | None) -> str | None:
        if value is not None and value not in CLASSES:
            raise ValueError(f"unknown class {value!r} (known: {', '.join(CLASSES)})")
        return value


# --- sources ---------------------------------------------------------------------------

def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`; an empty or all-comment file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = YAML(typ="safe").load(io.StringIO(text))
    except Exception as exc:  # ruamel raises many parser error types
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of knobs, got {type(data).__name__}")
    return {str(k): v for k, v in data.items()}


def _parse_env_value(raw: str) -> Any:
    """Env values are YAML scalars ("0.5", "true", "null", "adaptive")."""
    value = YAML(typ="safe").load(io.StringIO(raw))
    return raw if value is None and raw.strip().lower() not in ("null", "~", "") else value


SOURCE_VARIABLES = (f"{ENV_PREFIX}CONFIG", f"{ENV_PREFIX}OVERRIDES")
"""The two variables that name a knob source (a file), not a knob."""


def _knob_variables() -> tuple[str, ...]:
    top = [k for k in SimConfig.model_fields if k not in ("cost", "acceptance")]
    return (*SOURCE_VARIABLES,
            *(f"{ENV_PREFIX}{k.upper()}" for k in top),
            *(f"{ENV_PREFIX}COST_{k.upper()}" for k in CostConfig.model_fields),
            *(f"{ENV_PREFIX}ACCEPTANCE_{c.upper()}" for c in CLASSES))


KNOWN_VARIABLES: tuple[str, ...] = _knob_variables()
"""Every `SPECAB_SIM_*` environment variable the simulator reads: one per knob (nested
ones as `SPECAB_SIM_COST_<PARAM>`, `SPECAB_SIM_ACCEPTANCE_<CLASS>`) and the two knob
sources. Any other `SPECAB_SIM_*` name makes `spec-ab sim serve` exit 2 at boot, and
`spec-ab check` refuses it before the night (`campaign.run.checks.launchcheck`)."""


def _knob_path(name: str) -> tuple[str, ...] | None:
    """The knob a `SPECAB_SIM_*` variable sets (`("cost", "base_ms")`), None if none."""
    key = name[len(ENV_PREFIX):].lower()
    if key.startswith("cost_") and key[5:] in CostConfig.model_fields:
        return ("cost", key[5:])
    if key.startswith("acceptance_") and key[11:] in CLASSES:
        return ("acceptance", key[11:])
    if key in set(SimConfig.model_fields) - {"cost", "acceptance"}:
        return (key,)
    return None


def env_knobs(environ: Mapping[str, str]) -> dict[str, Any]:
    """The `SPECAB_SIM_*` variables as a nested knob mapping (unknown names are errors)."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in SOURCE_VARIABLES:
            continue
        path = _knob_path(name)
        if path is None:
            key = name[len(ENV_PREFIX):].lower()
            raise ConfigError(f"environment variable {name}: unknown knob {key!r}")
        value = _parse_env_value(raw)
        if len(path) == 2:
            out.setdefault(path[0], {})[path[1]] = value
        else:
            out[path[0]] = value
    return out


_PLAIN = {"int_parsing": "not a whole number", "int_type": "not a whole number",
          "int_from_float": "not a whole number", "float_parsing": "not a number",
          "float_type": "not a number", "bool_parsing": "not true or false",
          "bool_type": "not true or false", "string_type": "not a word"}
"""Pydantic's error types in plain words."""


def knob_value_problem(name: str, raw: str) -> str:
    """What is wrong with the value `raw` of the knob variable `name`, in plain words with
    what the knob is ("not a whole number (draft depth k …)"); "" when the simulator would
    take it, or `name` is no knob (an unknown name is `KNOWN_VARIABLES`' check). Each
    variable is checked alone, as `spec-ab check` checks a launch's env."""
    if not name.startswith(ENV_PREFIX) or name in SOURCE_VARIABLES:
        return ""
    path = _knob_path(name)
    if path is None:
        return ""
    value = _parse_env_value(raw)
    layer: dict[str, Any] = {path[0]: {path[1]: value}} if len(path) == 2 else {path[0]: value}
    try:
        SimConfig.model_validate(layer)
    except ValidationError as exc:
        return "; ".join(_plain(err["type"], err["msg"], err.get("ctx"), path)
                         for err in exc.errors())
    return ""


def _plain(kind: str, msg: str, ctx: Mapping[str, Any] | None, path: tuple[str, ...]) -> str:
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "literal_error" and ctx:
        words = f"not one of {ctx.get('expected')}"
    else:
        words = _PLAIN.get(kind) or msg.removeprefix("Input ")
    fields = CostConfig.model_fields if path[0] == "cost" else SimConfig.model_fields
    desc = fields[path[-1] if path[0] == "cost" else path[0]].description
    return f"{words} ({desc})" if desc else words


def _env_problems(env: Mapping[str, str]) -> None:
    """Every bad knob value of the environment as one ConfigError naming each variable and
    where a campaign file sets it (the arm's env when the runner says which arm)."""
    bad = [f"environment variable {name}={raw!r}: {problem}" for name, raw in env.items()
           if (problem := knob_value_problem(name, raw))]
    if not bad:
        return
    one = len(bad) == 1
    arm = env.get(ARM_ENV)
    where = (f"the campaign file's env of arm {arm} (arms.{arm}.env, or server.env for "
             "every arm)" if arm else "a launch's env (in a campaign file: arms.<arm>.env, "
             "lanes.<lane>.server.env or server.env)")
    raise ConfigError("; ".join(bad) + f"; {'it is' if one else 'they are'} set in {where}: "
                      f"give {'it a valid value' if one else 'them valid values'} there "
                      "(knobs and their values: docs/simulator.md)")


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in layer.items():
        if key in ("cost", "acceptance") and isinstance(value, Mapping):
            inner = dict(out.get(key) or {})
            inner.update(value)
            out[key] = inner
        else:
            out[key] = value
    return out


def _validate_layer(source: str, layer: Mapping[str, Any]) -> None:
    """Check one source on its own so an error names the file or variable it came from."""
    try:
        SimConfig.model_validate(dict(layer))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{source}: {problems}") from exc


def overrides_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the overrides file is read from (the fixed package path unless redirected)."""
    env = os.environ if environ is None else environ
    return Path(env.get(f"{ENV_PREFIX}OVERRIDES") or OVERRIDES_PATH)


def load_config(
    config_file: Path | None = None,
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides_file: Path | None = None,
) -> SimConfig:
    """Merge the sources in precedence order (module docstring) into one validated config."""
    env = dict(os.environ if environ is None else environ)
    if config_file is None and env.get(f"{ENV_PREFIX}CONFIG"):
        config_file = Path(env[f"{ENV_PREFIX}CONFIG"])
    if overrides_file is None:
        overrides_file = overrides_path(env)
    layers: list[tuple[str, dict[str, Any]]] = []
    if config_file is not None:
        layers.append((str(config_file), read_yaml(config_file)))
    if overrides_file.exists():
        layers.append((f"overrides file {overrides_file}", read_yaml(overrides_file)))
    env_layer = env_knobs(env)
    _env_problems(env)
    layers.append(("environment", env_layer))
    if cli:
        layers.append(("command line", {k: v for k, v in cli.items() if v is not None}))
    merged: dict[str, Any] = {}
    for source, layer in layers:
        _validate_layer(source, layer)
        merged = _merge(merged, layer)
    try:
        return SimConfig.model_validate(merged)
    except ValidationError as exc:  # pragma: no cover - each layer validated above
        raise ConfigError(str(exc)) from exc
