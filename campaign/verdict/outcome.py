"""What a judgement produces: typed verdicts of cells, guardrails, candidates and a run.

Plain frozen data (no logic beyond a few properties), shared by `verdict` (which builds
them), `guardrails`, `aa`, `plan` and the report (which lays them out).

Every number a reader sees is on one scale: `change` is the change of the metric itself
(candidate ÷ control − 1, or the difference for absolute metrics), and `better` says
whether that is an improvement for this metric. `gain` (positive = better) stays for
ranking and for the JSON contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from campaign.verdict import stats as st
from campaign.verdict.rule import Decision, Label, Reason, change_of

FLAG_MEANING = {
    "high-variance": "a sign, not a size",
    "small-sample": "a hint, not a number",
    "window-drift": "the window was not stable",
    "split-pair": "arms of a pair not in one window",
    "invalid-pass": "pairs left out",
    "incomplete": "fewer complete pairs than pre-registered",
    "one-pair": "no spread, no window check",
    "lanes-disagree": "the lanes measured different changes",
}
GATING_FLAGS = frozenset({"small-sample", "window-drift", "incomplete", "one-pair",
                          "lanes-disagree"})
"""Flags that stop a decision cell from adopting (it is `inconclusive` instead)."""


@dataclass(frozen=True)
class PairGain:
    pair: int
    control: float
    candidate: float
    gain: float
    """Positive = better (exp(d) − 1 for ratios, d for absolute differences)."""
    change: float = 0.0
    """The change of the metric itself in this pair (candidate ÷ control − 1, or y − x)."""


@dataclass(frozen=True)
class LeftOut:
    pair: int
    arm: str
    reason: str


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
    control_trend: float | None = None
    planned_pairs: int = 0
    look: CellLook | None = None
    """A decision cell of a sequential design: its look at the last pair measured (None:
    a fixed design, or no look is due yet)."""
    """Pairs the rule pre-registered (a decision cell short of them cannot adopt)."""

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

    @property
    def change(self) -> float | None:
        """The change of the metric itself (−18% = candidate 18% below the control)."""
        if self.stats is None:
            return None
        return change_of(self.stats.mean, self.direction, self.kind)

    @property
    def change_ci(self) -> tuple[float, float] | None:
        """The CI of `change` (low, high), on the metric's own scale."""
        if self.stats is None or self.stats.sd is None:
            return None
        a, b = (change_of(v, self.direction, self.kind) for v in self.stats.mean_ci)
        return (min(a, b), max(a, b))

    @property
    def better(self) -> bool | None:
        """True when the candidate is better on this metric, False when worse, None when
        there is no difference or no data."""
        if self.stats is None or self.stats.mean == 0:
            return None
        return self.stats.mean > 0


GuardrailState = Literal["holds", "unclear", "broken", "missing"]
"""A guardrail check's outcome: the data show the worsening within the limit (`holds`),
beyond it (`broken`), cannot tell (`unclear`), or there is nothing to check (`missing`)."""
Role = Literal["guardrail", "deterioration"]
"""Where a check stands: at a guardrail's registered cells (it must be shown within its
limit), or a deterioration check at another cell of its metric (only a worsening shown
beyond the limit stops adoption)."""


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail at one cell for one candidate: a test on the metric's own noise."""

    metric: str
    workload: str
    level: str
    max_worsening: float
    absolute: bool
    worsening: float | None
    """How much worse the candidate is (fraction of the control, or absolute); None when
    the guardrail could not be checked."""
    broken: bool
    """state == "broken" (kept for callers; whether it stops adoption is `stops`)."""
    reason: str
    """The guardrail's line: state, change with its sense, CI, limit, evidence and, when
    unclear, what would resolve it and whether it stops adoption."""
    pair_worsening: tuple[float, ...] = ()
    """Each pair's own worsening (failed candidate passes of failure metrics included)."""
    state: GuardrailState = "holds"
    change: float | None = None
    """The change of the metric itself (candidate ÷ control − 1; for absolute guardrails
    the difference, of pooled failure shares for the error rate)."""
    ci: tuple[float, float] | None = None
    """(low, high) of `change`, each end a one-sided bound at α ÷ checks (so the interval
    is a (1 − 2α/checks) one)."""
    ci_level: float | None = None
    """The two-sided level of `ci` (1 − 2α/checks)."""
    stops: bool = False
    """Whether this check stops adoption: broken, missing, or unclear where that stops."""
    evidence: str = ""
    """Which noise decided, in words (the passes' own requests and the boot noise, the
    pairs' own spread, or pooled request counts)."""
    resolve: str = ""
    """For `unclear`: what would resolve it (requests per level, pairs)."""
    direction: str = "lower"
    limit: float | None = None
    """The limit on `change`'s scale (+0.05: 5% worse for a lower-is-better metric), or
    None when there was nothing to check."""
    kind: st.Kind = "ratio"
    """How `change`, `ci` and `limit` read: a fraction of the control (ratio) or a
    difference in the metric's unit (absolute)."""
    shown_beyond: bool = False
    """Whether the worsening is shown beyond the limit at the level that shows a guardrail
    within it (α, not α ÷ k): weaker than `broken`, enough to say that no number of pairs
    would show it within (a sequential design's guardrail futility)."""
    role: Role = "guardrail"
    """`guardrail`: where it is registered (it must be shown within its limit);
    `deterioration`: another measured cell of its metric (only a worsening shown beyond
    the limit stops adoption)."""


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
    reason: Reason = "below-bar"
    """Why: rule-met, below-bar, loss, guardrail or inconclusive."""
    settle: str = ""
    """For `inconclusive`: what would settle it."""
    sequential: SequentialPath | None = None
    """The looks of a sequential design (None: a fixed number of pairs)."""


SequentialState = Literal["adopt", "keep-default", "continue", "inconclusive"]
"""Where a sequential design stands at a look: stopped (adopt, keep-default), going on
(continue), or at max_pairs without a crossing (inconclusive)."""


@dataclass(frozen=True)
class CellLook:
    """One decision cell at one look: what was measured and where the boundaries were."""

    workload: str
    level: str
    n: int
    """Complete pairs of the cell at the look."""
    change: float
    """The measured change of the metric (mean log ratio, as a change)."""
    boundary: float | None
    """The adopt boundary as a change: the estimate's bound that must clear the floor
    (None: this look spends no error, nothing can cross)."""
    statistic: float
    bound: float
    futility_statistic: float
    futility_bound: float
    outcome: str
    """adopt (the boundary for "better than the bar" crossed), futile (the boundary for
    "not worth it" crossed) or continue."""


@dataclass(frozen=True)
class LookStep:
    """One look of a candidate's sequential design."""

    look: int
    """1-based index among the looks taken."""
    pairs: int
    """The pair count the look was taken after."""
    cells: tuple[CellLook, ...]
    state: SequentialState
    why: str
    """The look's outcome in words (the rule, the guardrail or the boundary that decided)."""


@dataclass(frozen=True)
class SequentialPath:
    """A candidate's looks, where it stopped and the line the runner prints."""

    max_pairs: int
    min_pairs: int
    look: str
    max_looks: int
    steps: tuple[LookStep, ...]
    state: SequentialState
    stopped_at: int | None
    """The pair count of the look that stopped it (None: not stopped)."""

    @property
    def decided(self) -> bool:
        return self.state in ("adopt", "keep-default")


@dataclass(frozen=True)
class Ranked:
    rank: int
    arm: str
    decision: Decision
    gain: float | None
    worst: float | None


@dataclass(frozen=True)
class LevelBest:
    """The best candidate at one decision cell (ranking per level)."""

    workload: str
    level: str
    arm: str
    change: float | None


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
    reason: Reason = "below-bar"
    settle: str = ""
    best_by_level: tuple[LevelBest, ...] = ()
    decided: bool = False
    """A sequential design decided every candidate: the pairs it did not spend are not
    missing."""

    @property
    def incomplete(self) -> bool:
        return self.left_out > 0 or (self.pairs_measured < self.pairs_planned
                                     and not self.decided)


class DataProblem(ValueError):
    """A value the verdict depends on is missing or damaged (report names the file)."""
