"""Pairs measured again, from the journal: which attempt counts, and why each earlier one
did not (the report's note on every redone pair, in every format).

A pair attempt ends invalid when a server died, froze or was not the one spec-ab started
(`pair_invalid`: its `reason` and whose `fault`), or when a measured pass stayed invalid
(`pair_redo` then names the `cause`). The runner redoes the lane's failures, at once
(`gates.pair_retries`) or at the end of the night (`gates.redo_budget`); the rows of
passes.csv carry the `pair_attempt` they were measured in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

FAULTS = {"lane": "the lane's fault", "own": "the arm's own failure"}


def redone_pairs(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per pair measured in more than one attempt, naming each earlier attempt's
    arm and reason; [] when no pair was redone."""
    last: dict[int, int] = {}
    arm_of: dict[tuple[int, int], str] = {}
    why: dict[tuple[int, int], str] = {}
    current: tuple[int, int] | None = None
    for ev in events:
        kind, pair = ev.get("event"), ev.get("pair")
        attempt = ev.get("pair_attempt")
        if kind == "pair_start" and isinstance(pair, int) and isinstance(attempt, int):
            last[pair] = max(last.get(pair, 0), attempt)
            current = (pair, attempt)
        elif kind == "slot_start" and current is not None and ev.get("pair") == current[0]:
            arm_of[current] = str(ev.get("arm"))
        elif kind == "pair_invalid" and isinstance(pair, int) and isinstance(attempt, int):
            fault = FAULTS.get(str(ev.get("fault")), "")
            why[(pair, attempt)] = (f"{arm_of.get((pair, attempt), '?')}: {ev.get('reason')}"
                                    + (f" ({fault})" if fault else ""))
        elif kind == "pair_redo" and isinstance(pair, int) and isinstance(attempt, int):
            why.setdefault((pair, attempt - 1), str(ev.get("cause")))
    lines = []
    for pair, final in sorted(last.items()):
        if final < 2:
            continue
        earlier = "; ".join(
            f"attempt {a}: " + why.get((pair, a), "cut when the run stopped; redone on resume")
            for a in range(1, final))
        lines.append(f"pair {pair} redone, measured in attempt {final} — {earlier}")
    return lines
