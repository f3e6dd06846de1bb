"""Pairs × arms → the ordered list of slots (pure).

A pair is a block holding the control and every candidate, booted back to back so each
candidate is measured in the same window as its own control.  Orders:

- `AB`: control first in every pair (control, cand1, cand2, ...);
- `ABBA`: pairs alternate AB then BA, so a linear drift across the window cancels;
- `random`: a seeded shuffle of the arms inside each pair.

A sharded campaign runs the same number of pairs on every lane, each lane its own
schedule (`lane`: the lane's place in the file, from 0). The first lane's is the campaign's
as written; ABBA starts every other lane with BA, and `random` gives each further lane
a stream of its own (from the seed and the lane's place), so pooled lanes balance the
arms' positions instead of repeating one lane's order L times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Order = Literal["AB", "ABBA", "random"]


@dataclass(frozen=True)
class Slot:
    index: int
    """Position in the whole campaign, from 0."""
    pair: int
    """Pair number, from 1."""
    arm: str
    position: int
    """Position inside the pair, from 0."""

    @property
    def key(self) -> str:
        return f"{self.pair:02d}/{self.arm}"


def plan_slots(pairs: int, arms: list[str], order: Order, seed: int = 0,
               lane: int = 0) -> list[Slot]:
    """Every arm of every pair, in the pre-registered order, on the lane in place `lane`
    (0 for a campaign without lanes). `arms[0]` is the control."""
    if pairs < 1:
        raise ValueError("pairs must be ≥ 1")
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise ValueError("need a control and at least one distinct candidate")
    if lane < 0:
        raise ValueError("lane must be ≥ 0")
    rng = random.Random(seed if lane == 0 else f"{seed}/lane{lane}")
    slots: list[Slot] = []
    for pair in range(1, pairs + 1):
        block = list(arms)
        if order == "ABBA" and (pair + lane) % 2 == 0:
            block.reverse()
        elif order == "random":
            rng.shuffle(block)
        for position, arm in enumerate(block):
            slots.append(Slot(index=len(slots), pair=pair, arm=arm, position=position))
    return slots
