"""What a judgement produces: typed verdicts of cells, guardrails, candidates and a run.

Plain frozen data (no logic beyond a few properties), shared by `verdict` (which builds
them), `guardrails`, `aa`, `plan` and the report (which lays them out).
"""

from __future__ import annotations

from dataclasses import dataclass

from campaign import stats as st
from campaign.rule import Decision, Label

FLAG_MEANING = {
    "high-variance": "a sign, not a size",
    "small-sample": "a hint, not a number",
    "window-drift": "the window was not stable",
    "split-pair": "arms of a pair not in one window",
    "invalid-pass": "pairs left out",
}

@dataclass(frozen=True)
class PairGain:
    pair: int
    control: float
    candidate: float
    gain: float


@dataclass(frozen=True)
class LeftOut:
    pair: int
    arm: str
    reason: str


@dataclass(frozen=True)
class HolmInfo:
    """The `ci` rule over m decision cells: this cell's one-sided p, Holm-adjusted p, and
    the lower bound at the level Holm tested it at."""

    m: int
    p: float | None
    p_adjusted: float
    lower_bound: float | None


@dataclass(frozen=True)
class Cell:
    """One cell's verdict for one candidate against the control."""

    workload: str
    level: str
    metric: str
    arm: str
    direction: st.Direction
    kind: st.Kind
    control: float | None
    """Geometric mean of the control over complete pairs (arithmetic for absolute cells)."""
    candidate: float | None
    stats: st.Paired | None
    pairs: tuple[PairGain, ...]
    left_out: tuple[LeftOut, ...]
    verdict: Label
    flags: tuple[str, ...]
    reasons: tuple[str, ...]
    decision_cell: bool = False
    holm: HolmInfo | None = None
    control_trend: float | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.workload, self.level, self.metric)

    @property
    def where(self) -> str:
        return f"{self.workload} {self.level}"

    @property
    def gain(self) -> float | None:
        return None if self.stats is None else self.stats.gain

    @property
    def ci(self) -> tuple[float, float] | None:
        return None if self.stats is None else self.stats.ci


@dataclass(frozen=True)
class GuardrailCheck:
    metric: str
    workload: str
    level: str
    max_worsening: float
    absolute: bool
    worsening: float | None
    """How much worse the candidate is (fraction of the control, or absolute); None when
    the guardrail could not be checked."""
    broken: bool
    reason: str


@dataclass(frozen=True)
class CandidateVerdict:
    arm: str
    decision: Decision
    reasons: tuple[str, ...]
    cells: tuple[Cell, ...]
    guardrails: tuple[GuardrailCheck, ...]
    window_stable: bool
    score: float | None
    """Mean log gain over the decision cells, as a gain (for ranking candidates)."""


@dataclass(frozen=True)
class Ranked:
    rank: int
    arm: str
    decision: Decision
    gain: float | None
    worst: float | None


@dataclass(frozen=True)
class RunVerdict:
    run: str
    decision: Decision
    adopt_arm: str | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    candidates: tuple[CandidateVerdict, ...]
    ranking: tuple[Ranked, ...]
    pairs_measured: int
    pairs_planned: int
    left_out: int
    window_stable: bool

    @property
    def incomplete(self) -> bool:
        return self.left_out > 0 or self.pairs_measured < self.pairs_planned


class DataProblem(ValueError):
    """A value the verdict depends on is missing, zero or damaged (report names the file)."""
