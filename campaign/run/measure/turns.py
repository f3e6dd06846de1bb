"""Per-turn figures of a sessions pass (issue 41): descriptive, for the journal and the
report, not verdict cells.

A `sessions` pass replays multi-turn agent sessions through AIPerf's `multi_turn` dataset;
AIPerf numbers each request's turn in its session (`metadata.turn_index`, 0-based) in the
pass's records file (`profile_export.jsonl`, read as `records` reads it: successful
requests of the profiling phase, of one phase when the file holds several).

  * `turn_records(path)`: per turn index, the requests (and failed ones apart), the
    medians of TTFT and ITL (ms; numpy's linear interpolation, as AIPerf's export) and the
    mean input tokens (which grow with the history each turn resends);
  * `turn_acceptance(before, after)`: per turn, the spec-decode counts between two
    /metrics scrapes and their acceptance rate (accepted ÷ draft tokens) and mean tokens
    per drafted step (1 + accepted ÷ drafts), from the simulated lane's
    `specab_sim:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_by_turn_total
    {turn="k"}` counters (turn 15 counts every turn ≥ 15). A server that does not declare
    them (a real vLLM) gives None: its acceptance is known for the pass only;
  * `turn_entries(records, acceptance)`: both as the list a pass journals per session
    class, one entry per turn index, which `campaign.report.turns` reads back (one concept,
    measured here and reported there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from campaign.run.measure.metrics import CounterReset, ScrapeFailed, Snapshot

BY_TURN = {what: f"specab_sim:spec_decode_num_{what}_by_turn_total"
           for what in ("drafts", "draft_tokens", "accepted_tokens")}
"""The simulated lane's spec-decode counters by session turn (label `turn`)."""
TURN_LABEL = "turn"
_TAGS = {"ttft": "time_to_first_token", "itl": "inter_token_latency",
         "input": "input_sequence_length"}


@dataclass(frozen=True)
class TurnRecords:
    """One turn index of a pass, from its AIPerf records."""

    turn: int
    requests: int
    """Successful requests of this turn."""
    errors: int
    """Failed requests of this turn."""
    ttft_p50: float | None
    """ms; None when no request of the turn has one."""
    itl_p50: float | None
    """ms, the median of the requests' inter-token latencies (a one-token reply has none)."""
    input_tokens_mean: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Collect:
    requests: int = 0
    errors: int = 0
    values: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in _TAGS})


def _number(entry: Any) -> float | None:
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _records(path: Path, phase: str | None) -> Iterator[tuple[int, Mapping[str, Any] | None]]:
    """(turn index, metrics or None when the request failed) of each profiling request."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                continue  # a torn last line of a cut run
            if not isinstance(record, dict):
                continue
            meta = record.get("metadata")
            if not isinstance(meta, dict):
                continue
            if meta.get("benchmark_phase", "profiling") != "profiling":
                continue
            if phase is not None and meta.get("phase_name") != phase:
                continue
            turn = meta.get("turn_index")
            if not isinstance(turn, int) or isinstance(turn, bool) or turn < 0:
                continue
            found = record.get("metrics")
            failed = record.get("error") is not None or not isinstance(found, dict)
            yield turn, None if failed else found


def _median(values: list[float]) -> float | None:
    return float(np.percentile(values, 50)) if values else None


def turn_records(path: Path, phase: str | None = None) -> dict[int, TurnRecords]:
    """Turn index → its figures over the pass's records (of `phase` when the file holds
    several); {} when the file cannot be read or no request carries a turn index."""
    turns: dict[int, _Collect] = {}
    try:
        for turn, found in _records(path, phase):
            slot = turns.setdefault(turn, _Collect())
            if found is None:
                slot.errors += 1
                continue
            slot.requests += 1
            for key, tag in _TAGS.items():
                value = _number(found.get(tag))
                if value is not None:
                    slot.values[key].append(value)
    except (OSError, UnicodeDecodeError):
        return {}
    return {turn: TurnRecords(
        turn=turn, requests=slot.requests, errors=slot.errors,
        ttft_p50=_median(slot.values["ttft"]), itl_p50=_median(slot.values["itl"]),
        input_tokens_mean=(float(np.mean(slot.values["input"])) if slot.values["input"]
                           else None))
        for turn, slot in sorted(turns.items())}


@dataclass(frozen=True)
class TurnAcceptance:
    """One turn's spec decoding between two scrapes."""

    turn: int
    drafts: int
    draft_tokens: int
    accepted: int

    @property
    def acceptance_rate(self) -> float | None:
        """accepted ÷ draft tokens (vLLM's draft acceptance rate)."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def tokens_per_step(self) -> float | None:
        """1 + accepted ÷ drafts (vLLM's mean acceptance length)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate,
                "tokens_per_step": self.tokens_per_step}


def _by_turn(snapshot: Snapshot) -> dict[str, dict[int, float]] | None:
    """Counter → turn → value (summed over engines); None when the server does not declare
    the by-turn counters."""
    out: dict[str, dict[int, float]] = {name: {} for name in BY_TURN.values()}
    declared = False
    try:
        for family in text_string_to_metric_families(snapshot.text):
            if family.name + "_total" in out or family.name in out:
                declared = True
            for sample in family.samples:
                into = out.get(sample.name)
                label = sample.labels.get(TURN_LABEL)
                if into is None or label is None or not label.isdigit():
                    continue
                into[int(label)] = into.get(int(label), 0.0) + float(sample.value)
    except ValueError as exc:
        raise ScrapeFailed(f"unparsable /metrics text: {exc}") from exc
    return out if declared else None


def turn_acceptance(before: Snapshot, after: Snapshot) -> dict[int, TurnAcceptance] | None:
    """Turn → its spec decoding between the two scrapes (turns that drafted in between;
    a turn `before` lacks counts from 0); None when `after` does not declare the by-turn
    counters (a real vLLM). Raises CounterReset when a counter went down."""
    end = _by_turn(after)
    if end is None:
        return None
    begin = _by_turn(before) or {}
    deltas: dict[str, dict[int, float]] = {}
    for name, values in end.items():
        deltas[name] = {}
        for turn, value in values.items():
            start = begin.get(name, {}).get(turn, 0.0)
            if value < start:
                raise CounterReset(f"server restarted during the pass: {name}"
                                   f'{{turn="{turn}"}} {start:g} → {value:g}')
            deltas[name][turn] = value - start
    drafts, tokens, accepted = (deltas[BY_TURN[w]] for w in
                                ("drafts", "draft_tokens", "accepted_tokens"))
    return {turn: TurnAcceptance(turn=turn, drafts=round(drafts.get(turn, 0.0)),
                                 draft_tokens=round(tokens[turn]),
                                 accepted=round(accepted.get(turn, 0.0)))
            for turn in sorted(tokens) if tokens[turn] > 0}


def turn_entries(records: Mapping[int, TurnRecords],
                 acceptance: Mapping[int, TurnAcceptance] | None) -> list[dict[str, Any]]:
    """One entry per turn index of the records, as a pass journals them:
    `{"turn", "requests", "ttft_p50", "itl_p50", "input_tokens_mean", "acceptance",
    "tokens_per_step"}`; acceptance and tokens per step are None where the server gave no
    per-turn counts (a real vLLM) or the turn drafted nothing."""
    out = []
    for turn, rec in sorted(records.items()):
        spec = (acceptance or {}).get(turn)
        out.append({"turn": turn, "requests": rec.requests, "ttft_p50": rec.ttft_p50,
                    "itl_p50": rec.itl_p50, "input_tokens_mean": rec.input_tokens_mean,
                    "acceptance": spec.acceptance_rate if spec else None,
                    "tokens_per_step": spec.tokens_per_step if spec else None})
    return out
