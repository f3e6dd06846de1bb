"""Whether a registered design can show each guardrail within its limit, before any run.

A candidate is adopted only when every registered guardrail is shown within its limit
(`guardrails`: the upper bound of the mean per-pair log worsening, one-sided at α split
only over a sequential design's looks, lies below the limit). A design too small for its
limit never shows it, and then never adopts: `check` refuses it (exit 2; `run` warns) when the
design shows a guardrail within its limit less than `SHOWN_AT_0_MIN` of the time at no
true change (a design of one pair, which adopts nothing anyway, and an A/A are not
assessed), and name what would: more pairs, more requests per pass, a looser limit, or
another statistic.

The noise is the verdict's own model, as assumed before anything is measured:

- each pass's sampling sd of ln(statistic) from its N requests, for requests whose
  latencies spread as a lognormal of sd `REQUEST_SPREAD` on ln: a q-quantile's
  asymptotic sd √(q(1 − q)/N)·σ / φ(z_q), a mean's σ/√N; times the verdict's inflation for
  a tail quantile from few requests (`sampling.inflation`);
- each pass's pass-to-pass noise beyond sampling: the guardrail's registered band, else
  the statistic's measured default (`guardrails.DEFAULT_JITTER`): never the throughput's;
- the critical value on the degrees of freedom the verdict will have: the prior's and each
  cell's pairs − 1 over the metric's cells (its own and its deterioration cells).

P(shown | no change) ≈ Φ(L/SE − t), SE = √(V/n), V = 2c·se² + 2J² per pair. A normal
approximation: `spec-ab plan` simulates the verdict itself and gives the exact rates.

An SLO-attainment guardrail (a share of requests, in points) is assessed the same way on
the share's own scale (`assess_share`, its section below).

A guardrail's cells are those the report checks it at (`guardrails.guardrail_targets`),
from the configured workloads (knee levels, agent-fixture classes, rate levels, trace
names, session classes): a capacity decision cell `(rate, capacity)` stands for the rate
levels its capacity is read from (`capacity.sweep_cells`). A guardrail whose cells' requests
are not fixed beforehand (duration-bound, a trace, a sessions class) is not assessed.

Pure and light (math and the standard library's normal distribution, so `check` loads no
scipy); reads a validated `Campaign`, no I/O. `guardrails` takes its defaults from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from campaign import catalog
from campaign.campaignfile import Campaign, Guardrail
from campaign.errors import SpecError
from campaign.verdict import capacity, sampling

DEFAULT_JITTER = {"p50": 0.05, "avg": 0.05, "p90": 0.08, "p95": 0.08, "p99": 0.10}
"""A latency statistic's pass-to-pass sd of ln(value) beyond its requests' sampling, per
pass (boot drift included), when nothing better is known: measured on A/A passes of the
simulated lane (docs/limits.md). Never the throughput's band."""
PRIOR_DF = 2.0
"""What the prior τ² is worth, in degrees of freedom: a weak prior, so the campaign's own
pairs outweigh it from a few pairs on (a lane 3× noisier than the default is not hidden)."""
FAILURE_SHARES = frozenset({"error_rate"})
"""Judged on pooled request counts (`rule.FAILURE_METRICS`), not on the log scale."""
_NORMAL = NormalDist()

SHOWN_AT_0_MIN = 0.80
"""The least P(shown within the limit | no true change) a registered guardrail needs."""
REQUEST_SPREAD = 0.3
"""Assumed sd of ln(a request's latency) within a pass (measured on the simulated lane:
TTFT p99 at 32 requests spreads 0.13–0.23 on ln between passes, p50 0.06–0.10)."""
POWER = 0.80
"""The probability at which `Showable` states what the design resolves."""


def assumed_log_se(metric: str, requests: float) -> float:
    """A pass's sampling sd of ln(statistic) from `requests` requests (module docstring)."""
    n = max(2.0, requests)
    q = catalog.quantile_of(metric)
    if q is None:
        return REQUEST_SPREAD / math.sqrt(n)
    z = _NORMAL.inv_cdf(q)
    return math.sqrt(q * (1 - q) / n) * REQUEST_SPREAD / _NORMAL.pdf(z)


def t_quantile(p: float, df: float) -> float:
    """Student's t p-quantile by its Cornish–Fisher expansion in 1/df (within 0.5% of the
    exact one from 5 degrees of freedom on, 1% at 4; `spec-ab plan` uses the exact one)."""
    z = _NORMAL.inv_cdf(p)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def _log_limit(limit: float, metric: str) -> float:
    """A fraction's limit on the log worsening (positive)."""
    return (math.log1p(limit) if catalog.direction(metric) == "lower"
            else -math.log1p(-min(limit, 0.999)))


def at_decision_cells(g: Guardrail, decisions: Sequence[tuple[str, str]]
                      ) -> list[tuple[str, str]] | None:
    """An `at: decision` guardrail's cells: the decision cells it names where its metric is
    measured (None: `at: all`, or it names none of them and a workload or level of its own:
    its measured cells then)."""
    if g.at != "decision":
        return None
    named = [(w, lvl) for w, lvl in decisions
             if g.workload in ("*", w) and g.level in ("*", lvl)
             and catalog.has_rows_at(g.metric, w, lvl)]
    return named if named or (g.workload == "*" and g.level == "*") else None


@dataclass(frozen=True)
class Design:
    """What a registration gives a guardrail: pairs, requests per pass, cells, levels."""

    pairs: int
    requests: float
    cells: int
    """Cells the metric's noise is pooled over (its own and its deterioration cells)."""
    alpha_shown: float
    alpha_each: float


@dataclass(frozen=True)
class _Assessment:
    """One guardrail under a registered design: what `check` says of it."""

    index: int
    guardrail: Guardrail
    design: Design
    jitter: float
    """Pass-to-pass sd beyond sampling assumed (on ln; in points for a share)."""
    jitter_source: str
    shown_at_0: float
    """P(shown within the limit | no true change)."""
    smallest_limit: float
    """The smallest limit (a fraction; points for a share) the design shows at no change
    `POWER` of the time."""
    pairs_needed: int | None
    """Pairs that would show it at no change `SHOWN_AT_0_MIN` of the time (None: > 200)."""
    requests_needed: int | None
    """Requests per pass that would, at the registered pairs (None: none up to 10,000)."""
    requests_field: str = ""
    """Where the guardrail's cells get their requests (the fewest's field): what to raise."""

    @property
    def ok(self) -> bool:
        return self.shown_at_0 >= SHOWN_AT_0_MIN

    def _said(self, head: str, fixes: Sequence[str], tail: str = "") -> str:
        """`head`, and below `SHOWN_AT_0_MIN` the refusal with its fixes: more pairs, more
        requests (where), then `fixes`."""
        if self.ok:
            return head
        every = [*_more(self.pairs_needed, self.requests_needed, self.requests_field), *fixes]
        return (f"{head}; below {SHOWN_AT_0_MIN:.0%}, so no candidate would ever be "
                "adopted: register " + " or ".join(every) + tail)


@dataclass(frozen=True)
class Showable(_Assessment):
    """One relative guardrail under a registered design."""

    resolves_beyond: float = 0.0
    """The true worsening (a fraction) the design shows beyond the limit `POWER` of the
    time."""

    def text(self) -> str:
        g, d = self.guardrail, self.design
        limit = f"+{g.max_worsening:.0%}"
        head = (f"guardrail {g.metric} (limit {limit}): the registered design ({d.pairs} "
                f"pairs, {d.requests:.0f} requests per pass) shows it within its limit "
                f"{self.shown_at_0:.0%} of the time at no true change (pass-to-pass sd "
                f"±{self.jitter:.0%}, {self.jitter_source}); the smallest limit it shows "
                f"{POWER:.0%} of the time is +{self.smallest_limit:.0%}, and it shows a "
                f"worsening beyond {limit} when the worsening is +{self.resolves_beyond:.0%}")
        fixes = [f"a limit of +{math.ceil(self.smallest_limit * 100) / 100:.0%}"]
        if catalog.quantile_of(g.metric) not in (None, 0.5):
            fixes.append(f"another statistic ({g.metric.rsplit('_', 1)[0]}_p50, or the share "
                         "of requests within an SLO: slo_attainment)")
        return self._said(head, fixes, " (`spec-ab plan` simulates the verdict itself)")


def _more(pairs: int | None, requests: int | None, field: str) -> list[str]:
    """The fixes that measure more: pairs, then requests per pass (and where to give them)."""
    fixes = [] if pairs is None else [f"{pairs} pairs"]
    if requests is not None:
        fixes.append(f"{requests} requests per pass" + (f" ({field})" if field else ""))
    return fixes


def _se(d: Design, metric: str, jitter: float, pairs: int | None = None,
        requests: float | None = None) -> tuple[float, float]:
    """(SE of the mean log worsening, degrees of freedom) at a design."""
    n = pairs or d.pairs
    reqs = requests or d.requests
    c = sampling.inflation(sampling.statistic_of(metric), reqs)
    per_pair = 2 * c * assumed_log_se(metric, reqs) ** 2 + 2 * jitter**2
    return math.sqrt(per_pair / n), PRIOR_DF + d.cells * (n - 1)


def _shown(d: Design, g: Guardrail, jitter: float, pairs: int | None = None,
           requests: float | None = None) -> float:
    se, df = _se(d, g.metric, jitter, pairs, requests)
    lim = _log_limit(g.max_worsening, g.metric)
    return _NORMAL.cdf(lim / se - t_quantile(1 - d.alpha_shown, df))


def assess(index: int, g: Guardrail, d: Design, registered: float | None,
           source: str) -> Showable:
    """One relative guardrail under a design (module docstring)."""
    if registered is not None:
        jitter, where = math.log1p(registered), source
    else:
        stat = sampling.statistic_of(g.metric) or "avg"
        jitter = DEFAULT_JITTER.get(stat, DEFAULT_JITTER["p99"])
        where = f"the measured default for a {stat}"
    se, df = _se(d, g.metric, jitter)
    z = _NORMAL.inv_cdf(POWER)
    smallest = math.expm1((t_quantile(1 - d.alpha_shown, df) + z) * se)
    lim = _log_limit(g.max_worsening, g.metric)
    beyond = math.expm1(lim + (t_quantile(1 - d.alpha_each, df) + z) * se)
    pairs, reqs = _needed(d, lambda n, r: _shown(d, g, jitter, pairs=n, requests=r))
    return Showable(index, g, d, jitter, where, _shown(d, g, jitter), smallest, pairs, reqs,
                    resolves_beyond=beyond)


REQUEST_STEPS = (64, 100, 128, 200, 300, 500, 1000, 2000, 5000, 10000)
"""The requests per pass a refusal tries, in turn, at the registered pairs."""


def _needed(d: Design, shown: Callable[[int | None, float | None], float]
            ) -> tuple[int | None, int | None]:
    """(the fewest pairs from the registered ones, at least 2, and the fewest requests per
    pass above the registered ones) that `shown(pairs, requests)` shows the guardrail
    within its limit at no change `SHOWN_AT_0_MIN` of the time; None: none up to 200 pairs
    or 10,000 requests."""
    pairs = next((n for n in range(max(2, d.pairs), 201)
                  if shown(n, None) >= SHOWN_AT_0_MIN), None)
    reqs = next((r for r in REQUEST_STEPS
                 if r > d.requests and shown(None, r) >= SHOWN_AT_0_MIN), None)
    return pairs, reqs


def guard_cells(g: Guardrail, campaign: Campaign,
                decisions: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Where `spec-ab report` checks the guardrail (`guardrails.guardrail_targets`), from
    the campaign's configured cells instead of a run's rows."""
    named = at_decision_cells(g, capacity.sweep_cells(
        g.metric, decisions, [("rate", lvl, g.metric) for lvl in _levels(campaign, "rate")]))
    if named is not None:
        return named
    return [(w, lvl) for w in (*WORKLOADS, "fidelity")  # fidelity: not modelled, it holds
            for lvl in _levels(campaign, w) if g.workload in ("*", w)
            and g.level in ("*", lvl) and catalog.has_rows_at(g.metric, w, lvl)]


def other_cells(guards: Sequence[Guardrail], campaign: Campaign,
                decisions: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Each guardrail's deterioration cells (`guardrails.deterioration_cells`), from the
    campaign's configured cells: every other cell of its metric."""
    taken = {(*where, g.metric) for g in guards for where in guard_cells(g, campaign, decisions)}
    out: list[list[tuple[str, str]]] = []
    for g in guards:
        if not g.deterioration or not relative(g):
            out.append([])
            continue
        mine = [(w, lvl) for w, lvl in _configured(campaign, g.metric)
                if (w, lvl, g.metric) not in taken]
        taken |= {(w, lvl, g.metric) for w, lvl in mine}
        out.append(mine)
    return out


WORKLOADS = ("knee", "agentfix", "rate", "sessions", "trace")
"""The measured workloads whose cells a guardrail is checked at, in the verdict's order
(`tidy.WORKLOAD_ORDER`)."""


def _levels(campaign: Campaign, workload: str) -> list[str]:
    """A workload's configured levels; a rate sweep's capacity cell (`capacity.LEVEL`)
    after its rate levels."""
    levels = campaign.workloads.levels(workload)
    return [*levels, capacity.LEVEL] if workload == capacity.WORKLOAD and levels else levels


def _configured(campaign: Campaign, metric: str) -> list[tuple[str, str]]:
    """Every configured cell of `metric` the verdict checks (not the fidelity pass)."""
    return [(w, lvl) for w in WORKLOADS for lvl in _levels(campaign, w)
            if catalog.has_rows_at(metric, w, lvl)]


def family_checks(campaign: Campaign, decisions: Sequence[tuple[str, str]]) -> int:
    """k: every guardrail check of one candidate (absolute ones and deterioration checks
    too), as `decide.guardrail_checks` counts them."""
    guards = campaign.preregistration.guardrails
    return (sum(max(1, len(guard_cells(g, campaign, decisions))) for g in guards)
            + sum(len(o) for o in other_cells(guards, campaign, decisions)))


def decision_cells(campaign: Campaign) -> list[tuple[str, str]]:
    """The registered decision cells, `*` expanded to the configured levels where the
    primary metric is measured (as `results.registration.registered_levels` resolves it:
    capacity at SLO at `(rate, capacity)`, a knee's spec-decode figures at `all`)."""
    cells: list[tuple[str, str]] = []
    metric = campaign.preregistration.primary_metric
    for dc in campaign.preregistration.decision_cells:
        levels = [lvl for lvl in _levels(campaign, dc.workload)
                  if catalog.has_rows_at(metric, dc.workload, lvl)]
        if not levels and campaign.workloads.levels(dc.workload):
            levels = ["all"]  # a knee's spec-decode figures: around the whole sweep
        for lvl in (levels if dc.level == "*" else [dc.level]):
            if (dc.workload, lvl) not in cells:
                cells.append((dc.workload, lvl))
    return cells


def assess_campaign(campaign: Campaign, registered: Sequence[float | None] = ()
                    ) -> list[Assessed]:
    """Each relative guardrail of a campaign under its registered design: its pairs (a
    sequential design's most, each lane's pairs pooled), the fewest requests per pass of
    its own cells, its noise pooled over its own and deterioration cells, α split over the
    looks for showing it within, and over every check for breaking it. `registered`: each
    guardrail's resolved band (an A/A's), else its own number, else the statistic's
    default."""
    pre = campaign.preregistration
    if all(not campaign.arms[a].overrides for a in campaign.arm_names[1:]):
        return []  # an A/A campaign measures the lane's noise: it adopts nothing
    decisions = decision_cells(campaign)
    seq = pre.sequential
    pairs = (pre.pairs if seq is None else seq.max_pairs) * max(1, len(campaign.lanes))
    if pairs < 2:
        return []  # one pair adopts nothing whatever its guardrails (the one-pair gate)
    looks = 1 if seq is None else seq.max_looks
    alpha = (1 - pre.confidence) / looks
    k = family_checks(campaign, decisions)
    others = other_cells(pre.guardrails, campaign, decisions)
    out = []
    for i, g in enumerate(pre.guardrails):
        mine = guard_cells(g, campaign, decisions)
        share = g.metric in catalog.SLO_SHARES
        if not (relative(g) or share) or not mine:
            continue
        cells = mine + others[i]
        reqs = requests_at(campaign, mine)
        if reqs is None:
            continue  # duration-bound passes, a trace or a sessions class: their
            # requests are their schedule's or file's, known to `check`, not to the model
        band = registered[i] if i < len(registered) and not share else None
        if band is None and isinstance(g.drift_band, float | int):
            band = float(g.drift_band)
        d = Design(pairs, reqs, len(cells), alpha, alpha / max(1, k))
        shown: Assessed = (assess_share(i, g, d, band, "registered") if share
                           else assess(i, g, d, band, "registered"))
        out.append(replace(shown, requests_field=fewest_fields(campaign, mine)))
    return out


def relative(g: Guardrail) -> bool:
    """A guardrail the verdict judges on the log scale (not a failure share, a fidelity
    figure or an absolute difference)."""
    return not (g.absolute or g.metric in FAILURE_SHARES
                or g.metric in catalog.FIDELITY_METRICS)


def requests_at(campaign: Campaign, cells: Sequence[tuple[str, str]]) -> float | None:
    """The fewest requests per pass the campaign configures at `cells` (each (workload,
    level) its own: `Workloads.requests_in`); None when a pass is duration-bound (not
    known beforehand) or a cell is not request-bound (a fidelity cell)."""
    got: list[float] = []
    for w, lvl in cells:
        n = campaign.requests_in(w, lvl)
        if n is None:
            return None
        got.append(float(n))
    return min(got) if got else None


def fewest_fields(campaign: Campaign, cells: Sequence[tuple[str, str]]) -> str:
    """The fields that give the cells with the fewest requests theirs: what to raise."""
    wl = campaign.workloads
    counts = {c: campaign.requests_in(*c) for c in cells}
    known = [n for n in counts.values() if n is not None]
    if not known:
        return ""
    return wl.requests_fields([c for c, n in counts.items() if n == min(known)])


def refuse_unshowable(campaign: Campaign, registered: Sequence[float | None] = ()
                      ) -> list[Assessed]:
    """`assess_campaign`, raising `SpecError` (exit 2) naming each guardrail the registered
    design shows within its limit less than `SHOWN_AT_0_MIN` of the time at no change."""
    found = assess_campaign(campaign, registered)
    bad = [s for s in found if not s.ok]
    if bad:
        where = str(campaign.source) if campaign.source is not None else campaign.name
        raise SpecError(where, [f"preregistration.guardrails[{s.index}]: {s.text()}"
                                for s in bad])
    return found


# --------------------------------------------------------------------------- SLO shares
# The share guardrails (`catalog.SLO_SHARES`: the share of requests meeting
# `preregistration.slo`) are judged by the pairs' own spread of the shares' differences, in
# points (`guardrails._difference_check`: t on n − 1 degrees of freedom). Before anything is
# measured, each pass of N requests is assumed to have a control meeting the SLO
# `ASSUMED_SHARE` of the time (sampling variance p(1 − p)/N) and a pass-to-pass movement of
# the share beyond sampling: the guardrail's `drift_band` (sd in points), else what the
# latency's measured pass-to-pass movement does to it (a pass whose latencies all move by
# exp(J), J = `DEFAULT_JITTER` of a median, moves the share by about φ(z_p)/σ · J points,
# σ = `REQUEST_SPREAD`). P(shown | no change) ≈ Φ(L/SE − t(1 − α, n − 1)),
# SE = √(2(p(1 − p)/N + J²)/n).

ASSUMED_SHARE = 0.95
"""The share of a control's requests assumed to meet the SLO before anything is measured
(a serving SLO is usually set so that most requests meet it)."""
def share_jitter(p: float = ASSUMED_SHARE) -> float:
    """The share's pass-to-pass sd (points) from the latency's measured pass-to-pass sd."""
    z = _NORMAL.inv_cdf(p)
    return _NORMAL.pdf(z) / REQUEST_SPREAD * DEFAULT_JITTER["p50"]


@dataclass(frozen=True)
class ShareShowable(_Assessment):
    """One SLO-attainment guardrail under a registered design."""

    def text(self) -> str:
        g, d = self.guardrail, self.design
        limit = _points(g.max_worsening)
        head = (f"guardrail {g.metric} (limit {limit}): the registered design ({d.pairs} "
                f"pairs, {d.requests:.0f} requests per pass) shows it within its limit "
                f"{self.shown_at_0:.0%} of the time at no true change (assumed: "
                f"{ASSUMED_SHARE:.0%} of the control's requests meet the SLO, the share "
                f"moving ±{self.jitter * 100:.1f} points a pass, {self.jitter_source}); the "
                f"smallest limit it shows {POWER:.0%} of the time is "
                f"{_points(math.ceil(self.smallest_limit * 1000) / 1000)}")
        return self._said(head, [f"a limit of "
                                 f"{_points(math.ceil(self.smallest_limit * 100) / 100)}"])


def _points(share: float) -> str:
    """A share's difference in points: 0.02 → "2 points"."""
    value = round(share * 100, 1)
    return f"{value:g} point{'' if value == 1 else 's'}"


def _share_se(pairs: int, requests: float, jitter: float) -> float:
    p = ASSUMED_SHARE
    return math.sqrt(2 * (p * (1 - p) / max(2.0, requests) + jitter**2) / pairs)


def _share_shown(d: Design, limit: float, jitter: float, pairs: int | None = None,
                 requests: float | None = None) -> float:
    n = pairs or d.pairs
    se = _share_se(n, requests or d.requests, jitter)
    return _NORMAL.cdf(limit / se - t_quantile(1 - d.alpha_shown, max(1, n - 1)))


def assess_share(index: int, g: Guardrail, d: Design, registered: float | None,
                 source: str) -> ShareShowable:
    """One share guardrail under a design (module docstring)."""
    if registered is not None:
        jitter, where = float(registered), source
    else:
        jitter, where = share_jitter(), "from the measured default for a median latency"
    se = _share_se(d.pairs, d.requests, jitter)
    smallest = (t_quantile(1 - d.alpha_shown, max(1, d.pairs - 1))
                + _NORMAL.inv_cdf(POWER)) * se
    limit = g.max_worsening
    pairs, reqs = _needed(d, lambda n, r: _share_shown(d, limit, jitter, pairs=n,
                                                       requests=r))
    return ShareShowable(index, g, d, jitter, where, _share_shown(d, limit, jitter), smallest,
                         pairs, reqs)


Assessed = Showable | ShareShowable
"""A guardrail under a registered design: relative (on the log scale) or a share."""
