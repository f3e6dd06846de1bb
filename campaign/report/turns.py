"""Acceptance per session turn: the per-turn figures of multi-turn session passes, per arm.

Input (`PassTurns`): each valid session pass's arm and its journaled `turns` — session
class → one entry per turn index (0-based, as AIPerf's `turn_index`):
`{"turn": k, "requests": n, "ttft_p50": ms, "itl_p50": ms, "acceptance": fraction,
"tokens_per_step": tokens}` (acceptance and tokens per step only where the server gives
them, else absent or null). Over an arm's passes, per class and turn: requests summed,
acceptance and tokens per step averaged weighted by requests, TTFT p50 the median of the
passes'. Descriptive figures (journal and report), not verdict cells: measured per pass by
`campaign.run.measure.turns` (one concept, measured there and reported here).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PassTurns = tuple[str, Mapping[str, Sequence[Mapping[str, Any]]]]
"""(arm, a pass's `turns`: class → [{turn, requests, ttft_p50, itl_p50, acceptance,
tokens_per_step}])."""

HEADERS = ("class", "turn", "requests", "acceptance", "tokens/step", "TTFT p50 (ms)")


@dataclass(frozen=True)
class TurnRow:
    klass: str
    turn: int
    requests: int
    acceptance: float | None
    tokens_per_step: float | None
    ttft_p50: float | None

    def cells(self) -> tuple[str, ...]:
        return (self.klass, str(self.turn), str(self.requests), _fmt(self.acceptance, 3),
                _fmt(self.tokens_per_step, 3), _fmt(self.ttft_p50, 4))


@dataclass(frozen=True)
class SessionTurns:
    """Per arm, its rows by class and turn index."""

    arms: tuple[tuple[str, tuple[TurnRow, ...]], ...]

    def title(self, arm: str) -> str:
        return f"acceptance per session turn, {arm}"


def _fmt(x: float | None, digits: int) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def session_turns(passes: Iterable[PassTurns], arms: Sequence[str]) -> SessionTurns | None:
    """The per-turn table of every arm (None when no pass carried turns)."""
    acc: dict[tuple[str, str, int], list[tuple[int, float | None, float | None,
                                               float | None]]] = {}
    for arm, turns in passes:
        for klass, entries in turns.items():
            for e in entries:
                turn, n = _number(e.get("turn")), _number(e.get("requests"))
                if turn is None:
                    continue
                acc.setdefault((arm, str(klass), int(turn)), []).append(
                    (int(n or 0), _number(e.get("acceptance")),
                     _number(e.get("tokens_per_step")), _number(e.get("ttft_p50"))))
    if not acc:
        return None
    out = []
    for arm in [*arms, *sorted({a for a, _, _ in acc} - set(arms))]:
        rows = [_row(klass, turn, acc[(a, klass, turn)])
                for (a, klass, turn) in sorted(acc) if a == arm]
        if rows:
            out.append((arm, tuple(rows)))
    return SessionTurns(tuple(out))


def _weighted(pairs: list[tuple[int, float | None]]) -> float | None:
    known = [(n, v) for n, v in pairs if v is not None]
    weight = sum(n for n, _ in known)
    if not known:
        return None
    if weight == 0:
        return statistics.fmean(v for _, v in known)
    return math.fsum(n * v for n, v in known) / weight


def _row(klass: str, turn: int,
         passes: list[tuple[int, float | None, float | None, float | None]]) -> TurnRow:
    ttft = [t for _, _, _, t in passes if t is not None]
    return TurnRow(klass, turn, sum(n for n, _, _, _ in passes),
                   _weighted([(n, a) for n, a, _, _ in passes]),
                   _weighted([(n, s) for n, _, s, _ in passes]),
                   statistics.median(ttft) if ttft else None)


def from_journal(events: Iterable[Mapping[str, Any]]) -> list[PassTurns]:
    """Each pass's `turns` from a run's journal as the verdict counts passes: of a pair
    redone, its latest attempt; of a pass retried, its latest valid attempt."""
    last: dict[tuple[Any, ...], tuple[int, PassTurns]] = {}
    for ev in events:
        turns = ev.get("turns")
        if (ev.get("event") != "pass" or not isinstance(turns, Mapping)
                or ev.get("valid") is False):
            continue
        key = (ev.get("pair"), ev.get("arm"), ev.get("name"), ev.get("workload"))
        redo = _number(ev.get("pair_attempt")) or 1.0
        if key not in last or redo >= last[key][0]:
            last[key] = (int(redo), (str(ev.get("arm")), turns))
    return [t for _, t in last.values()]
