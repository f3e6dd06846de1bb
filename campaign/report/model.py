"""What a report is: typed runs with their verdicts and how they were reached.

`build.build_report` makes a `Report`; every renderer lays one out. Nothing here reads a
file or prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from campaign import RESULTS_SCHEMA_VERSION, __version__
from campaign.report.ratesweep import RateSweep
from campaign.report.turns import SessionTurns
from campaign.results.bootfail import NeverReady
from campaign.results.pool import Pooled
from campaign.results.store import RunDir
from campaign.verdict.aa import BandRecommendation
from campaign.verdict.outcome import Cell, RunVerdict
from campaign.verdict.rule import Decision, Rule

REPORT_SCHEMA_VERSION = 3
"""Version of the JSON report (bumped when a key changes meaning or disappears).

1: first version (decision, rule, cells, guardrails, ranking, runs/history).
2: `reason` (rule-met / below-bar / loss / guardrail / inconclusive) and `settle` beside
   every decision; cells carry `change` (the metric's own change), `better` and
   `change_ci`; `verdict` of a cell that is not a decision cell is better / worse /
   no-clear-change; `holm` is gone (decision cells form an intersection–union test);
   guardrails carry `pair_worsening`; `best_by_level`.
   Added since (no older key changed meaning): `metrics_shown` (`--metrics`: the metrics
   `cells` holds beside the decision and guardrail metrics; null = the default set) and
   `guardrails_held` / `guardrails_broken` (counts); `lanes` (a run pooled from the
   shards of a sharded campaign, else null) and each pooled pair's `lane`.
3: guardrails are tests on their metric's own noise with a `state` (holds / unclear /
   broken / missing); `broken` means state broken only (a guardrail that cannot be
   checked is `missing`, and stops adoption: `stops`), each guardrail carries `change`,
   `ci`, `ci_level`, `direction`, `stops`, `evidence` and `resolve`; the counts
   `guardrails_unclear`, `guardrails_missing`, `guardrails_stopping` beside
   `guardrails_held` (state holds) and `guardrails_broken`; a history entry's
   `guardrails_stopping`; `aa.guardrails` (a band per guardrail metric); a decision's
   reasons name the guardrails that stop it once (their lines are in `guardrails`); the
   rule may be `bound` (the new default). docs/report.schema.json describes version 3
   (JSON Schema draft 2020-12).
   Added since (no key disappeared): the reason `guardrail-unresolved` (a met rule stopped
   only by guardrails not shown within their limits) and each guardrail check's `role`
   (`guardrail`, or `deterioration`: another measured cell of its metric); `rate_sweep`
   (each arm's capacity at SLO and each candidate's crossover) and `session_turns`
   (acceptance per session turn), only when the run has them."""

Format = Literal["table", "markdown", "json", "html"]
EXPLORATORY = "EXPLORATORY, not pre-registered"


Loader = Callable[[Path], RunDir]


@dataclass(frozen=True)
class PreparedRule:
    """The rule a run is judged under, and what the reader must be told about it."""

    rule_dict: dict[str, Any]
    """The rule as used: the registered one, or it with `--rule` overrides applied."""
    rule: Rule
    edited: tuple[str, ...]
    """Keys of campaign.yaml's rule that differ from the registered rule (then ignored)."""
    notes: tuple[str, ...]


@dataclass(frozen=True)
class RunReport:
    """One run's verdicts with everything needed to show how they were reached."""

    run_id: str
    run_dir: Path
    campaign: str
    hypothesis: str
    lane: str
    registered_at: str
    complete: bool
    arms: tuple[str, ...]
    rule: Rule
    rule_dict: dict[str, Any]
    rule_sha256: str
    """Hash of the rule actually used (differs from the registered one under overrides)."""
    registered_sha256: str
    overrides: dict[str, str]
    edited_after_registration: tuple[str, ...]
    """Keys of campaign.yaml's rule that differ from the registered rule (then ignored)."""
    verdict: RunVerdict
    aa: BandRecommendation | None = None
    notes: tuple[str, ...] = ()
    results_schema_version: int = RESULTS_SCHEMA_VERSION
    """The results schema the run directory was written with."""
    registration_edits: tuple[str, ...] = ()
    """Values edited in preregistration.json after registration (the registered ones,
    recovered through their hash, are used)."""
    disagreements: tuple[str, ...] = ()
    """Where the run's copies of its registration or campaign disagree with the journal's
    first line (`results.integrity`): then nothing of the run is pre-registered."""
    journal_sha256: str | None = None
    """The run's digest (`results.chain`): the SHA-256 of the journal's last line."""
    journal_chained: bool = False
    running: str | None = None
    """The run is still being measured (`results.running`): the line that says so."""
    shown_metrics: frozenset[str] | None = None
    """Metrics whose cells the report shows beside the decision and guardrail metrics
    (`--metrics`); None: every metric judged."""
    slots: dict[int, dict[str, int]] = field(default_factory=dict)
    """pair → arm → slot (position in the window's run order), for the window plot."""
    measurements: dict[tuple[str, str, str], dict[int, dict[str, float]]] = field(
        default_factory=dict)
    """(workload, level, metric) → pair → arm → value, for the plots: knee throughput,
    acceptance rate and per-position acceptance (whatever `--metrics` shows)."""
    pooled: Pooled | None = None
    """The shards this run was pooled from (a sharded campaign), else None."""
    never_ready: tuple[NeverReady, ...] = ()
    """Arms that exited while booting and never became ready (the report leads with
    them; their cells, all without data, are counted, not listed)."""
    registered_exploratory: str | None = None
    """Why the run was registered as exploratory (`spec-ab try`), else None."""
    rate_sweep: RateSweep | None = None
    """The newest run's open-loop rate sweep: each arm's capacity at SLO and each
    candidate's crossover (None without rate levels)."""
    session_turns: SessionTurns | None = None
    """The newest run's acceptance per session turn, per arm (None without session
    passes that carried per-turn figures)."""

    def never_ready_arms(self) -> set[str]:
        return {n.arm for n in self.never_ready}

    @property
    def lane_of(self) -> dict[int, str]:
        """pair → lane of a pooled run (empty otherwise)."""
        return self.pooled.lane_of if self.pooled is not None else {}

    @property
    def exploratory(self) -> bool:
        """Not pre-registered: registered as exploratory (`spec-ab try`), judged under
        `--rule` overrides, or its copies disagree."""
        return (bool(self.registered_exploratory) or bool(self.overrides)
                or bool(self.disagreements))

    @property
    def why_exploratory(self) -> str:
        if self.registered_exploratory:
            return self.registered_exploratory
        if self.disagreements:
            return "the run's copies of its registration disagree (see the notes)"
        return "these verdicts use --rule overrides"

    @property
    def decision(self) -> Decision:
        return self.verdict.decision

    @property
    def incomplete(self) -> bool:
        return self.verdict.incomplete or not self.complete

    def decision_cells(self) -> list[Cell]:
        return [c for cv in self.verdict.candidates for c in cv.cells if c.decision_cell]

    def guardrail_metrics(self) -> set[str]:
        return {g.metric for g in self.rule.prereg.guardrails}

    def shows(self, c: Cell) -> bool:
        """Whether a cell is shown: decision and guardrail cells always, others when their
        metric was asked for (`--metrics`) or nothing was asked."""
        return (self.shown_metrics is None or c.decision_cell or c.metric in self.shown_metrics
                or c.metric == self.rule.metric or c.metric in self.guardrail_metrics())


@dataclass(frozen=True)
class Report:
    runs: tuple[RunReport, ...]
    """Oldest first (by registration time); the last one is the newest."""
    tool_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def latest(self) -> RunReport:
        return self.runs[-1]

    @property
    def exploratory(self) -> bool:
        return any(r.exploratory for r in self.runs)

    @property
    def why_exploratory(self) -> str:
        return "; ".join(dict.fromkeys(r.why_exploratory for r in self.runs if r.exploratory))
