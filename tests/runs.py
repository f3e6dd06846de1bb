"""What tests share beside the fixtures of conftest.py: the repository's paths, CI's
never-skip rule, a free loopback port, tidy rows, results directories written through the
store's own API, and the Docker engine's helpers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import pandas as pd
import pytest

from campaign.campaignfile import Preregistration, load_campaign
from campaign.errors import SpecError
from campaign.results.journal import PassRow
from campaign.results.registration import RegisteredLevels, registered_levels
from campaign.results.store import RunStore

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, what: str, how: str) -> None:
    """Skip (outside CI) or fail (in CI) when `condition` is false."""
    if condition:
        return
    message = f"{what} is not available; to enable: {how}"
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_passes(store: RunStore, rows: Iterable[PassRow], *, complete: bool = True) -> Path:
    """Journal `rows` as one pass event, rebuild passes.csv from the journal and, when
    `complete`, mark the run finished (what `spec-ab run` leaves); the run directory."""
    store.journal("pass", rows=[dataclasses.asdict(r) for r in rows])
    store.rebuild_passes_csv()
    if complete:
        store.finish(complete=True)
    return store.run_dir


# --------------------------------------------------------------------------- tidy rows and runs

T0 = dt.datetime(2026, 11, 28, 22, 0, tzinfo=dt.UTC)
Values = float | list[float]


def frame(
    spec: dict[tuple[str, str, str], list[tuple[Values, ...]]],
    *,
    arms: tuple[str, ...] = ("control", "cand"),
    tokens: float | None = 5000,
    requests: float | None = 32,
    run: str = "r1",
    arm_gap_s: float = 600,
    extra: list[dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """Tidy rows: spec maps a cell to, per pair, one value (or a list of repeats) per arm.

    Pair p's control starts at T0 + (p-1)·20 min, each next arm `arm_gap_s` later.
    """
    out: list[dict[str, Any]] = []
    places: set[tuple[str, str, int]] = set()
    for (w, lvl, m), pairs in spec.items():
        for p, values in enumerate(pairs, start=1):
            for a, (arm, v) in enumerate(zip(arms, values, strict=True)):
                for rep in v if isinstance(v, list) else [v]:
                    out.append(row(run, p, arm, a, len(arms), w, lvl, m, rep, arm_gap_s))
                places.add((w, lvl, p))
    for w, lvl, p in sorted(places):
        for a, arm in enumerate(arms):
            if tokens is not None:
                out.append(row(run, p, arm, a, len(arms), w, lvl, "output_tokens", tokens,
                                arm_gap_s))
            if requests is not None:
                out.append(row(run, p, arm, a, len(arms), w, lvl, "requests_completed",
                                requests, arm_gap_s))
    out.extend(extra or [])
    return pd.DataFrame(out)


def row(run: str, pair: int, arm: str, a: int, n_arms: int, w: str, lvl: str, m: str,
         value: float, gap: float, **kw: Any) -> dict[str, Any]:
    start = T0 + dt.timedelta(seconds=(pair - 1) * 1200 + a * gap)
    row = dict(run=run, pair=pair, pair_attempt=1, arm=arm, slot=(pair - 1) * n_arms + a,
               started_at=start.isoformat().replace("+00:00", "Z"), workload=w, level=lvl,
               metric=m, value=value, valid=True, attempt=1, reason="")
    row.update(kw)
    return row


TPUT = "output_token_throughput"


def make_run(
    root: Path,
    spec: dict[tuple[str, str, str], list[tuple[Any, ...]]],
    *,
    name: str = "demo",
    short_id: str = "aaaaaa",
    arms: tuple[str, ...] = ("control", "cand"),
    arm_specs: dict[str, Any] | None = None,
    band: float = 0.03,
    when: dt.datetime = T0,
    complete: bool = True,
    edit: Any = None,
    guardrail_bands: list[float] | None = None,
    **rule_kw: Any,
) -> Path:
    """A results directory made with the store's API (what `spec-ab run` writes); each
    guardrail's band is registered resolved as `spec-ab run` does, or as given."""
    rule_kw.setdefault("decision_cells", [{"workload": "knee", "level": "c1"}])
    measured = max((len(v) for v in spec.values()), default=0)
    if "pairs" not in rule_kw and "sequential" not in rule_kw and measured > 2:
        rule_kw["pairs"] = measured  # as `spec-ab run` would: no pair beyond the registered
    rule = Preregistration(**rule_kw).model_dump(mode="json", by_alias=True)
    campaign = {
        "name": name,
        "hypothesis": "The candidate decodes faster at one stream.",
        "lane": "sim",
        "preregistration": rule,
        "server": {"backend": "process", "command": ["serve"], "port": 8000},
        "arms": arm_specs or {a: {"description": a, "env": {"K": str(i)}}
                              for i, a in enumerate(arms)},
        "workloads": {"model": "m", "tokenizer": "t",
                      "knee": {"concurrency": [1, 4]},
                      "agentfix": {"fixtures": {"shell": "s.jsonl", "prose": "p.jsonl"}}},
    }
    store = RunStore.create(root, name, json.dumps(campaign, indent=1).encode(),
                            clock=lambda: when, short_id=short_id)
    levels, bands = _resolved(store.run_dir / "campaign.yaml", band)
    digest = store.register(rule, campaign=name, arms=list(arms), drift_band=band,
                            levels=levels,
                            guardrail_bands=bands if guardrail_bands is None else guardrail_bands)
    store.journal_registered(sha256=digest, lane="sim")
    df = frame(spec, arms=arms, run=store.run_id)
    if edit is not None:
        df = edit(df)
    rows = [PassRow(**r) for r in df.to_dict("records")]  # type: ignore[arg-type]
    return record_passes(store, rows, complete=complete)


def _resolved(frozen: Path, band: float
              ) -> tuple[RegisteredLevels | None, list[float] | None]:
    """The rule's cells and its guardrails' bands resolved as `spec-ab run` registers them
    (None when the campaign file does not load)."""
    try:
        campaign = load_campaign(frozen, check_files=False)
    except SpecError:
        return None, None
    bands = [float(g.drift_band) if isinstance(g.drift_band, float | int) else band
             for g in campaign.preregistration.guardrails]
    return registered_levels(campaign), bands


def golden_spec() -> dict[tuple[str, str, str], list[tuple[Any, ...]]]:
    """Three pairs: c1 adopts, c4 is mixed, TTFT and errors hold, acceptance up."""
    return {
        ("knee", "c1", TPUT): [(52.0, 60.5), (51.5, 59.8), (52.4, 60.1)],
        ("knee", "c1", "ttft_p99"): [(210.0, 214.0), (205.0, 211.0), (212.0, 215.0)],
        ("knee", "c1", "error_rate"): [(0.0, 0.0)] * 3,
        ("knee", "c4", TPUT): [(180.0, 199.0), (176.0, 178.0), (182.0, 190.0)],
        ("knee", "c4", "ttft_p99"): [(260.0, 262.0), (255.0, 270.0), (258.0, 259.0)],
        ("knee", "c4", "error_rate"): [(0.0, 0.0)] * 3,
        ("knee", "all", "acceptance_rate"): [(0.435, 0.47), (0.44, 0.468), (0.43, 0.471)],
        ("knee", "all", "tokens_per_decode_step"): [(2.74, 3.1), (2.76, 3.08), (2.72, 3.11)],
        ("agentfix", "shell", TPUT): [(150.0, 170.0), (148.0, 168.0), (151.0, 171.0)],
        ("agentfix", "shell", "acceptance_rate"): [(0.91, 0.9), (0.9, 0.91), (0.91, 0.9)],
        ("agentfix", "prose", TPUT): [(120.0, 118.0), (119.0, 121.0), (121.0, 119.5)],
        ("agentfix", "prose", "acceptance_rate"): [(0.30, 0.33), (0.31, 0.32), (0.3, 0.33)],
    }


SIM_RUN = TESTS / "golden" / "sim-run" / "2026-11-29-sim-depth7-f06adb"
"""A real run of examples/sim-pair.yaml on the simulated lane (real servers, real AIPerf),
kept without its raw artifacts: the report's behaviour on real numbers, pinned."""


# --------------------------------------------------------------------------- docker

SIM_IMAGE = "spec-ab-sim:latest"
"""The offline simulated-lane image (scripts/build-sim-image)."""


def docker_engine() -> docker.DockerClient | None:
    """The local Docker engine when it answers and holds the sim image, else None."""
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(SIM_IMAGE)
        return client
    except Exception:
        return None


def container_events(engine: docker.DockerClient, run_id: str,
                     since: float) -> list[tuple[str, str]]:
    """(action, role) of a run's container starts and deaths, in the engine's order."""
    from campaign.markers import LABEL_RUN

    stream = engine.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                           filters={"label": f"{LABEL_RUN}={run_id}", "type": "container"})
    out = []
    for ev in stream:
        action = ev.get("Action") or ev.get("status")
        if action in ("start", "die"):
            out.append((action, ev["Actor"]["Attributes"]["spec-ab.role"]))
    return out


CHAIN_FIELDS = ("prev", "chain", "registration_sha256", "campaign_sha256")


def unchain(run_dir: Path) -> None:
    """Rewrite a run's journal as a spec-ab before the hash chain wrote it (no `prev`, no
    file digests on its first line, no `journal_chain` in preregistration.json): a
    directory of an older results schema."""
    path = run_dir / "journal.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps({k: v for k, v in ev.items() if k not in CHAIN_FIELDS})
                            + "\n" for ev in lines))
    reg = run_dir / "preregistration.json"  # nor did its registration record the chain
    doc = json.loads(reg.read_text())
    if doc.pop("journal_chain", None) is not None:
        reg.chmod(0o644)
        reg.write_text(json.dumps(doc, indent=2) + "\n")
