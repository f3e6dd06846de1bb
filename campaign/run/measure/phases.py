"""A knee's levels in one AIPerf process (`workloads.knee.one_process`): YAML phases
instead of a sweep that boots AIPerf again for every level.

AIPerf 0.13's `--concurrency 1,4,16` runs each level in a fresh subprocess that starts its
whole system (~9 s a level on 2 cores). Its YAML `--config` (schema "2.0") runs several
`profiling` phases in one boot: measured on the sim, a warm-up and three levels took
33.8 s as one process against 68.9 s as a warm-up invocation plus a sweep (docs/plan.md).
What this module decides, each checked against AIPerf 0.13's own runs:

- **Prompts.** One dataset sampler serves every phase, and the `sequential` one keeps its
  index across phases. With `entries` = every level's requests plus one per pause (a pause
  takes an entry without sending it), each level draws prompts of its own and none wraps
  around, as the sweep's levels do (each its own seed).
- **Per-level counters.** Phases run back to back (the next level's first request 4-20 ms
  after the last response), too close for `levelcut`'s ticks. AIPerf has no pause option;
  between two levels a filler phase (`kind: warmup`, a constant rate whose first send
  would come long after its `duration`) sends nothing and leaves the server idle for
  `PAUSE_S`, so each boundary is cut exactly, as in the sweep's gaps.
- **Exports.** `phase_manifest.json` lists the phases and each one's export
  (`phases/<name>/profile_export_aiperf.json`); a phase's concurrency is its entry in the
  export's `input_config.phases` (every phase's export lists all of them); the warm-up and
  pause phases are left out. Every phase's per-request records are in the run's one
  `profile_export.jsonl`, each naming its phase (`metadata.phase_name`).

Only a request-bound, synthetic pass of several levels runs this way (a duration-bound
level cannot size its prompts), and not when its URL carries a password (the config file
is kept with the results; the command line is scrubbed, a file AIPerf reads is not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from campaign import secrets
from campaign.run.measure import pacing

CONFIG_NAME = "aiperf-config.yaml"
"""The config, beside the pass's `aiperf.command` (JSON text: YAML reads it as written)."""
MANIFEST_NAME = "phase_manifest.json"
PAUSE_S = 2.0
"""Idle seconds between two levels: four of `levelcut.TICK_S`, so a tick lands wholly
inside the gap even when a scrape is slow."""
PAUSE_RATE = 0.01
"""A pause phase's request rate: its first send would come at 1/rate = 100 s, long after
the pause ended, so it sends nothing."""


class Plan(Protocol):
    """What a config is made of (`loadgen.PassPlan`)."""

    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    @property
    def endpoint_type(self) -> str: ...
    @property
    def streaming(self) -> bool: ...
    @property
    def tokenizer(self) -> Path: ...
    @property
    def concurrency(self) -> tuple[int, ...]: ...
    @property
    def requests_per_level(self) -> int | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def one_process(self) -> bool: ...
    @property
    def extra_args(self) -> tuple[str, ...]: ...


def phase_name(concurrency: int) -> str:
    """A level's phase (and the label the report gives it)."""
    return f"c{concurrency}"


def applies(plan: Plan) -> bool:
    """Whether `plan` runs as one process: asked for, several request-bound synthetic
    levels, no extra AIPerf flags (a config takes none beside it), no password in the URL."""
    return (plan.one_process and len(plan.concurrency) > 1
            and plan.requests_per_level is not None and plan.input_tokens is not None
            and not plan.extra_args and secrets.redact_url(plan.base_url) == plan.base_url)


def config(plan: Plan, aiperf_dir: Path) -> dict[str, Any]:
    """The AIPerf config of `plan`: every flag of `loadgen.aiperf_command`'s sweep, one
    profiling phase per level (a paced closed loop: `pacing`) with a pause phase between
    two levels."""
    if not applies(plan):
        raise ValueError("not a one-process pass (see phases.applies)")
    assert plan.requests_per_level is not None
    phases: list[dict[str, Any]] = []
    for i, c in enumerate(plan.concurrency):
        if i:
            phases.append({"name": f"pause{i}", "kind": "warmup", "type": "constant",
                           "rate": PAUSE_RATE, "duration": PAUSE_S})
        phases.append({"name": phase_name(c), "kind": "profiling", **pacing.phase(c),
                       "requests": plan.requests_per_level})
    levels = len(plan.concurrency)
    length = {"stddev": 0}
    return {
        "schemaVersion": "2.0",
        "randomSeed": plan.seed,
        "benchmark": {
            "model": plan.model,
            "endpoint": {"url": plan.base_url, "type": plan.endpoint_type,
                         "streaming": plan.streaming,
                         # exact output: the cap (osl), a floor and no early stop
                         "extra": {"ignore_eos": True, "min_tokens": plan.output_tokens}},
            # absolute: AIPerf takes a relative name for a Hugging Face hub id
            "tokenizer": {"name": str(Path(plan.tokenizer).absolute())},
            # the seed of the prompts themselves (the top-level one seeds the run)
            "dataset": {"type": "synthetic", "sampling": "sequential", "randomSeed": plan.seed,
                        "entries": plan.requests_per_level * levels + levels - 1,
                        "prompts": {"isl": {"mean": plan.input_tokens, **length},
                                    "osl": {"mean": plan.output_tokens, **length}}},
            "phases": phases,
            # /metrics is scraped by spec-ab around (and, per level, during) the pass
            "gpuTelemetry": {"enabled": False},
            "serverMetrics": {"enabled": False},
            "runtime": {"ui": "none"},
            "artifacts": {"dir": str(aiperf_dir.absolute())},
        },
    }


def config_text(plan: Plan, aiperf_dir: Path) -> str:
    return json.dumps(config(plan, aiperf_dir), indent=1) + "\n"


def command(artifact_dir: Path, executable: str) -> list[str]:
    """The command line that runs the config written to `artifact_dir`."""
    return [executable, "profile", "--config", str((artifact_dir / CONFIG_NAME).absolute())]


def exports(aiperf_dir: Path, problems: list[str]) -> list[tuple[Path, str]]:
    """(export, phase name) of each profiling phase in the run's manifest, in order; what
    cannot be read is said in `problems` and left out."""
    path = aiperf_dir / MANIFEST_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path}: unreadable phase manifest ({exc})")
        return []
    entries = doc.get("phases") if isinstance(doc, Mapping) else None
    out: list[tuple[Path, str]] = []
    for entry in entries if isinstance(entries, Sequence) else []:
        if not isinstance(entry, Mapping) or entry.get("phase_kind") != "profiling":
            continue
        name, rel = entry.get("phase_name"), entry.get("metrics_json")
        if not isinstance(name, str) or not isinstance(rel, str):
            problems.append(f"{path}: a profiling phase without its name or export")
            continue
        out.append((aiperf_dir / rel, name))
    return out
