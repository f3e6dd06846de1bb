"""Guardrails: where each pre-registered guardrail is checked, and the test it gets there.

Where (`guardrail_targets`): `at: decision` (the default) checks a guardrail at the
decision cells' workloads and levels (`*` expanded as the decision cells are), `at: all`
at every measured cell of its metric (what a registration made before `at` existed
means); an explicit `workload` / `level` narrows either (when it names no decision cell,
the guardrail is checked where it names). A capacity-at-SLO decision cell `(rate,
capacity)` is read from the sweep's rate levels: a guardrail at it is checked there.

How (`check_guardrail`): a test on the metric's own noise (`guardstats`) with three states
— `broken` (a worsening shown beyond the limit: one-sided at α ÷ k, k every check of the
candidate, family-wise), `holds` (shown within it: one-sided at α, not split over the
guardrails, each must be shown), `unclear` — and `missing` when there is nothing to check:

- relative guardrails: the per-pair log worsening against the passes' own sampling error
  (`log_se`, from each pass's requests, inflated by `sampling.inflation` for a tail
  quantile from few requests) and the metric's own noise beyond it, pooled over every
  measured cell of the metric from a prior (`pooled_noise`: the guardrail's band, else the
  statistic's measured default; never the campaign's band); without `log_se` on every pair,
  the pairs' own spread (t);
- failure shares (`error_rate`): the requests pooled over pairs, Fisher's exact test
  (limit 0) or the Farrington–Manning score test (limit > 0);
- a cell compared by differences (a measured 0, e.g. an ITL of a one-burst stream, or an
  absolute guardrail without request counts): the pairs' own spread of the differences.

At a guardrail's own cells `broken`, `missing` and `unclear` stop adoption (a guardrail
must be shown within its limit; an older registration's `unclear_stops: false` is read but
ignored). At its deterioration cells (`deterioration_cells`: every other measured cell of
a relative guardrail's metric) only `broken` does. A failed pass of the candidate still
counts on failure metrics (its measured error rate and requests are one more pair).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from campaign import catalog
from campaign.campaignfile import Guardrail
from campaign.fmt import abs_pct, fmt_gain
from campaign.verdict import capacity, sampling
from campaign.verdict import guardstats as gs
from campaign.verdict import stats as st
from campaign.verdict.guardstats import Family as Family  # the levels of the checks
from campaign.verdict.outcome import Cell, GuardrailCheck, GuardrailState, Role
from campaign.verdict.rule import EPS, FAILURE_METRICS, change_of, worse_d
from campaign.verdict.showable import DEFAULT_JITTER, PRIOR_DF, at_decision_cells, relative
from campaign.verdict.tidy import CellData, RunTable, cell_sort_key

MAX_PAIRS = 200
"""Largest pair count a registration allows (the resolution hint stops there)."""


def guardrail_targets(g: Guardrail, table: RunTable, order: Sequence[str] = (),
                      decisions: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """Where a guardrail is checked (see the module docstring); a capacity decision cell
    stands for the rate levels it is read from (`capacity.sweep_cells`)."""
    decisions = capacity.sweep_cells(g.metric, decisions, table.cells)
    named = at_decision_cells(g, decisions)
    if named is not None:
        return named
    return sorted(
        {
            (w, lvl)
            for (w, lvl, m) in table.cells
            if m == g.metric and g.workload in ("*", w) and g.level in ("*", lvl)
        },
        key=lambda k: cell_sort_key((*k, ""), order),
    )


def deterioration_cells(g: Guardrail, table: RunTable, taken: set[tuple[str, str, str]],
                        order: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Every other measured cell of a relative guardrail's metric (`taken`: every
    guardrail's own (workload, level, metric)): there a worsening shown beyond its limit
    stops adoption too (`deterioration`, on by default). None for failure shares, fidelity
    figures and absolute guardrails (checked where registered)."""
    if not g.deterioration or not relative(g):
        return []
    return sorted({(w, lvl) for (w, lvl, m) in table.cells
                   if m == g.metric and (w, lvl, m) not in taken
                   and catalog.has_rows_at(m, w, lvl)},
                  key=lambda k: cell_sort_key((*k, ""), order))


def requests_of(table: RunTable, where: tuple[str, str]) -> dict[tuple[int, str], float]:
    """(pair, arm) → requests completed in that pass at `where`, valid passes and the last
    attempt of failed ones."""
    data = table.cells.get((*where, "requests_completed"))
    if data is None:
        return {}
    out = {(p, a): v for p, arms in data.failed.items() for a, v in arms.items()}
    out.update({(p, a): v.value for p, arms in data.values.items() for a, v in arms.items()})
    return out


@dataclass(frozen=True)
class Inputs:
    """What a check reads beside the guardrail: the cell's pairs and noise."""

    cell: Cell | None
    data: CellData | None = None
    requests: Mapping[tuple[int, str], float] | None = None
    failed: Mapping[int, tuple[float, float]] | None = None
    """pair → (control, candidate) of pairs whose candidate pass failed (failure metrics)."""
    band: float = 0.03
    """The metric's boot-to-boot drift band (without `extra`)."""
    band_source: str = "the campaign's band"
    """Where the noise comes from, in words (the prior's source with `extra`)."""
    extra: gs.Pooled | None = None
    """The metric's own per-pair noise beyond sampling (`pooled_noise`); None: 2·ln(1 +
    band)², taken as known."""
    control: str = "control"
    arm: str = ""
    role: Role = "guardrail"
    """`deterioration`: a check at another measured cell of the metric (only a worsening
    shown beyond the limit stops adoption)."""


def check_guardrail(g: Guardrail, where: tuple[str, str], inputs: Inputs,
                    family: Family) -> GuardrailCheck:
    """One guardrail at one cell (see the module docstring)."""
    cell = inputs.cell
    extra = dict(inputs.failed or {}) if g.metric in FAILURE_METRICS else {}
    pairs = [] if cell is None else [(pg.pair, pg.control, pg.candidate) for pg in cell.pairs]
    pairs += [(p, x, y) for p, (x, y) in sorted(extra.items())]
    if not pairs:
        return _missing(g, where, cell, inputs.role)
    if g.metric in catalog.FIDELITY_METRICS:
        return _fidelity_check(g, where, pairs)
    direction: st.Direction = cell.direction if cell is not None else "lower"
    if g.metric in FAILURE_METRICS:
        shares = _shares(pairs, inputs)
        if shares is not None:
            return _counts_check(g, where, inputs, family, pairs, shares, len(extra))
    if g.absolute or (cell is not None and cell.kind == "absolute"):
        return _difference_check(g, where, inputs, family, pairs, direction, len(extra))
    return _relative_check(g, where, inputs, family, pairs, direction)


def _missing(g: Guardrail, where: tuple[str, str], cell: Cell | None,
             role: Role = "guardrail") -> GuardrailCheck:
    if cell is None:
        why = "not measured"
    else:
        left = "; ".join(f"pair {lo.pair} {lo.arm}: {lo.reason}" for lo in cell.left_out)
        why = "no complete pair" + (f" ({left})" if left else "")
    w, lvl = where
    guard = role == "guardrail"
    what = "guardrail" if guard else "deterioration check"
    effect = ("a guardrail that cannot be checked stops adoption" if guard else
              "nothing to check here; only a worsening shown beyond the limit would stop "
              "adoption")
    return GuardrailCheck(
        g.metric, w, lvl, g.max_worsening, g.absolute, None, False,
        f"{what} {g.metric} at {w} {lvl} missing: {why} — {effect}", state="missing",
        stops=guard, evidence=why, role=role)


# --------------------------------------------------------------------------- relative


def _relative_check(g: Guardrail, where: tuple[str, str], inputs: Inputs, family: Family,
                    pairs: Sequence[tuple[int, float, float]],
                    direction: st.Direction) -> GuardrailCheck:
    """The per-pair log worsening against the passes' own noise and the metric's own noise
    beyond it (`inputs.extra`), or the pairs' own spread without a sampling error on every
    pass."""
    higher = direction == "higher"
    w = log_worsening(pairs, direction)
    limit = -worse_d(g.max_worsening, "higher" if higher else "lower")
    noise = _own_noise(g.metric, pairs, inputs)
    pooled = inputs.extra or gs.Pooled(2 * math.log1p(inputs.band) ** 2, math.inf, None, 0)
    resolve = ""
    beyond = noise is not None and gs.spread_beyond_model(w, noise[0], pooled.extra)
    if noise is not None and not beyond:
        cv, n_req, factor = noise
        df = None if math.isinf(pooled.df) else pooled.df
        tested = gs.own_noise(w, cv, pooled.extra, limit, family.each, family.shown, df)
        beyond_shown = gs.beyond_at(tested, gs.critical(family.beyond, df))
        evidence = _own_evidence(g.metric, n_req, factor, inputs, pooled)
        if tested.state == "unclear":
            resolve = _resolve_own(tested, cv, n_req, g.metric, pooled.extra)
    else:
        spread = gs.pairs_spread(w, limit, family.each, family.shown)
        evidence = ("the pairs' own spread (they disagree beyond the passes' own noise and "
                    "the metric's pass-to-pass noise: a noisier lane or host than the "
                    "model)" if beyond else
                    "the pairs' own spread (no sampling error from the passes' requests)")
        if spread is None:
            return _no_noise(g, where, w[0], direction, inputs)
        tested = spread
        beyond_shown = gs.beyond_at(tested, st.t_critical(1 - family.beyond, len(w) - 1))
        if tested.state == "unclear":
            resolve = _resolve_spread(tested, len(w), family, beyond)
    sign = -1.0 if higher else 1.0

    def change(v: float) -> float:
        return math.expm1(sign * v)

    lo, hi = sorted((change(tested.low), change(tested.high)))
    made = _make(g, where, inputs, family, tested.state, change(tested.estimate), (lo, hi),
                 evidence, resolve, [change(v) for v in w], direction,
                 worse=math.expm1(tested.estimate) if not higher
                 else -math.expm1(-tested.estimate))
    return replace(made, shown_beyond=beyond_shown or made.state == "broken")



def log_worsening(pairs: Sequence[tuple[int, float, float]],
                  direction: st.Direction) -> list[float]:
    """Each pair's log worsening (positive = worse), from (pair, control, candidate)."""
    sign = -1.0 if direction == "higher" else 1.0
    return [sign * math.log(y / x) for _, x, y in pairs]


def prior_extra(metric: str, registered: float | None, source: str) -> tuple[float, str]:
    """τ² before the campaign's own pairs (both passes of a pair: 2·J²), and its source: the
    guardrail's registered band (or its A/A's), else the statistic's measured default."""
    if registered is not None:
        return 2 * math.log1p(registered) ** 2, f"±{abs_pct(registered)} per pass ({source})"
    stat = sampling.statistic_of(metric) or "avg"
    jitter = DEFAULT_JITTER.get(stat, DEFAULT_JITTER["p99"])
    return 2 * jitter**2, (f"±{jitter:.0%} per pass, the measured default for a {stat} "
                           "(docs/limits.md)")


def pooled_noise(metric: str, cells: Sequence[tuple[Sequence[tuple[int, float, float]],
                                                    Inputs]],
                 direction: st.Direction, prior: float) -> gs.Pooled:
    """τ² of `metric` from every cell where it is measured (each cell's pairs and inputs),
    with the prior (`prior_extra`): the metric's own pass-to-pass noise."""
    samples = []
    for pairs, inputs in cells:
        noise = _own_noise(metric, pairs, inputs) if len(pairs) >= 2 else None
        if noise is not None:
            samples.append((log_worsening(pairs, direction), noise[0]))
    return gs.pooled_extra(samples, prior, PRIOR_DF)


def _own_noise(metric: str, pairs: Sequence[tuple[int, float, float]],
               inputs: Inputs) -> tuple[list[float], float | None, float] | None:
    """Each pair's c·(v_control + v_candidate), the fewest requests of a pass (None when
    unknown) and the largest inflation used; None when a pass has no `log_se`."""
    data = inputs.data
    if data is None:
        return None
    stat = sampling.statistic_of(metric)
    reqs = inputs.requests or {}
    cv: list[float] = []
    fewest: float | None = None
    unknown = False
    factor = 1.0
    for pair, _, _ in pairs:
        arms = data.values.get(pair, {})
        ses = [arms[a].log_se if a in arms else None for a in (inputs.control, inputs.arm)]
        if any(se is None for se in ses):
            return None
        ns = [reqs.get((pair, a)) for a in (inputs.control, inputs.arm)]
        if any(n is None for n in ns):
            unknown = True
            n_pair = None
        else:
            n_pair = min(n for n in ns if n is not None)
            fewest = n_pair if fewest is None else min(fewest, n_pair)
        c = sampling.inflation(stat, n_pair if n_pair is not None else 1)
        factor = max(factor, c)
        cv.append(c * math.fsum(se * se for se in ses if se is not None))
    return cv, (None if unknown else fewest), factor


def _own_evidence(metric: str, n_req: float | None, factor: float, inputs: Inputs,
                  pooled: gs.Pooled) -> str:
    stat = sampling.statistic_of(metric)
    if n_req is None:
        size = (f"requests per pass unknown: ×{factor:g}, the largest inflation"
                if factor > 1 else "requests per pass unknown")
    else:
        note = sampling.inflation_note(stat, n_req)
        size = f"{n_req:.0f} per pass" + (f", {note}" if note else "")
    if inputs.extra is None:
        return (f"the passes' own requests ({size}) and boot noise ±{abs_pct(inputs.band)} "
                f"({inputs.band_source})")
    per_pass = math.sqrt(pooled.extra / 2)
    seen = ("" if pooled.data_extra is None else
            f"; the campaign's pairs show ±{math.sqrt(pooled.data_extra / 2):.1%} over "
            f"{pooled.data_df} df")
    return (f"the passes' own requests ({size}) and the metric's pass-to-pass noise "
            f"±{per_pass:.1%} per pass (prior {inputs.band_source}{seen}; "
            f"{pooled.df:.0f} df)")


def _resolve_own(tested: gs.Tested, cv: Sequence[float], n_req: float | None, metric: str,
                 extra: float) -> str:
    """Roughly how many requests per level, or more pairs, would make the interval clear
    the limit at the change measured: shown within, or (estimated beyond) shown broken."""
    gap = abs(tested.limit - tested.estimate)
    if gap <= EPS:
        return "the change sits at the limit: no size of campaign resolves it"
    beyond = tested.estimate > tested.limit
    half = (tested.estimate - tested.low) if beyond else (tested.high - tested.estimate)
    z = half / (tested.se or 1.0)
    target = (gap / z) ** 2
    n = len(cv)
    boot = extra / n
    parts = []
    stat = sampling.statistic_of(metric)
    if n_req is not None and boot < target:
        raw = math.fsum(cv) / n**2 / sampling.inflation(stat, n_req)
        for more in (100, 150, 200, 300, 500, 1000, 2000, 5000, 10000):
            if more > n_req and raw * n_req / more * sampling.inflation(stat, more) <= target:
                parts.append(f"about {more} requests per level (now {n_req:.0f})")
                break
    per_pair = math.fsum(cv) / n + extra
    pairs = math.ceil(per_pair / target)
    if n < pairs <= MAX_PAIRS:
        parts.append(f"{pairs} pairs (now {n})")
    if not parts:
        return "more requests per level and more pairs than a campaign holds"
    side = " (shown beyond its limit, at this estimate)" if beyond else ""
    return f"would resolve{side} with " + " or ".join(parts)


def _resolve_spread(tested: gs.Tested, n: int, family: Family, beyond: bool = False) -> str:
    gap = abs(tested.limit - tested.estimate)
    se = tested.se or 0.0
    sd = se * math.sqrt(n)
    other = ("an A/A band for this metric (its `drift_band`) or a quieter host"
             if beyond else "the passes' own sampling error recorded (`log_se`)")
    for more in range(n + 1, MAX_PAIRS + 1):
        if st.t_critical(1 - family.each, more - 1) * sd / math.sqrt(more) < gap:
            return f"would resolve with about {more} pairs (now {n}), or with {other}"
    return f"would resolve with {other}"


def _no_noise(g: Guardrail, where: tuple[str, str], w: float,
              direction: st.Direction, inputs: Inputs) -> GuardrailCheck:
    """One pair and no sampling error of its passes: nothing to judge the change against."""
    higher = direction == "higher"
    ch = math.expm1((-1.0 if higher else 1.0) * w)
    worse = ch if not higher else -ch
    state: GuardrailState = "unclear"
    stops = inputs.role == "guardrail"
    w_, lvl = where
    line = (f"guardrail {g.metric} at {w_} {lvl} unclear: {_change_words(ch, direction)} on "
            f"one pair, no noise estimate (no second pair, no sampling error from the "
            f"passes' requests), limit {_limit_words(g, direction)}; would resolve with a "
            f"second pair; {'stops' if stops else 'does not stop'} adoption")
    return GuardrailCheck(g.metric, w_, lvl, g.max_worsening, g.absolute, worse, False,
                          line, (worse,), state=state, change=ch, stops=stops,
                          evidence="no noise estimate", resolve="a second pair",
                          direction=direction, limit=_change_limit(g, direction),
                          role=inputs.role)


# --------------------------------------------------------------------------- fidelity

_FIDELITY_WORDS = {
    "fidelity_token_match": ("matches control on {y} of tokens", "matches itself on {x}"),
    "fidelity_identical_share": ("answers {y} of prompts exactly as control",
                                 "answers {x} exactly as itself"),
    "fidelity_first_divergence": ("first differs from control at token {y} on average",
                                  "first differs from itself at token {x}"),
}


def _fidelity_check(g: Guardrail, where: tuple[str, str],
                    pairs: Sequence[tuple[int, float, float]]) -> GuardrailCheck:
    """A fidelity figure against the control's own agreement (its rows hold it: the
    control of the previous pair, or itself on its boot), pooled over the pairs: broken
    when the candidate agrees with the control less than the control agrees with itself,
    by more than the limit. No pair-to-pair noise is assumed: the reference is the lane's
    measured nondeterminism (docs/verdict.md, "Fidelity")."""
    x = math.fsum(v for _, v, _ in pairs) / len(pairs)
    y = math.fsum(v for _, _, v in pairs) / len(pairs)
    worse = x - y if g.absolute else (x - y) / x if x > 0 else 0.0
    state: GuardrailState = "broken" if worse > g.max_worsening + EPS else "holds"
    cand, ref = _FIDELITY_WORDS.get(g.metric, ("{y}", "{x}"))
    pct = g.metric != "fidelity_first_divergence"
    fx, fy = ((f"{v:.1%}" if pct else f"{v:.1f}") for v in (x, y))
    limit = (f"{g.max_worsening:.1%}" if pct else f"{g.max_worsening:g}") if g.absolute \
        else f"{g.max_worsening:.0%} of the control's"
    w, lvl = where
    evidence = (f"the control's own agreement, measured ({len(pairs)} pair(s))")
    line = (f"guardrail {g.metric} at {w} {lvl} {state}: candidate {cand.format(y=fy)}; "
            f"control {ref.format(x=fx)} — "
            f"{'more than' if state == 'broken' else 'within'} the {limit} limit below it; "
            f"noise: {evidence}")
    return GuardrailCheck(g.metric, w, lvl, g.max_worsening, g.absolute, worse + 0.0,
                          state == "broken", line,
                          tuple(xv - yv + 0.0 for _, xv, yv in pairs), state=state,
                          change=y - x + 0.0, stops=state == "broken", evidence=evidence,
                          direction="higher")


# --------------------------------------------------------------------------- differences


def _difference_check(g: Guardrail, where: tuple[str, str], inputs: Inputs, family: Family,
                      pairs: Sequence[tuple[int, float, float]], direction: st.Direction,
                      failed: int) -> GuardrailCheck:
    """A cell compared by differences: the pairs' own spread of y − x."""
    higher = direction == "higher"
    w = [(x - y) if higher else (y - x) for _, x, y in pairs]
    limit = g.max_worsening
    if not g.absolute:  # a relative limit on a cell compared by differences (a measured 0)
        limit = g.max_worsening * math.fsum(x for _, x, _ in pairs) / len(pairs)
    tested = gs.pairs_spread(w, limit, family.each, family.shown)
    sign = -1.0 if higher else 1.0
    if tested is None:
        ch = sign * w[0]
        stops = inputs.role == "guardrail"
        w_, lvl = where
        what = "guardrail" if stops else "deterioration check"
        line = (f"{what} {g.metric} at {w_} {lvl} unclear: {fmt_gain(ch, 'absolute')} on "
                f"one pair, no noise estimate (compared by differences); would resolve with "
                f"a second pair; {'stops' if stops else 'does not stop'} adoption")
        return GuardrailCheck(g.metric, w_, lvl, g.max_worsening, g.absolute, w[0], False,
                              line, tuple(w), state="unclear", change=ch, stops=stops,
                              evidence="no noise estimate", resolve="a second pair",
                              direction=direction, limit=_change_limit(g, direction, limit),
                              kind="absolute", role=inputs.role)
    why = "a value is 0" if not g.absolute else "an absolute guardrail"
    evidence = f"the pairs' own spread of the differences ({why})"
    if failed:
        evidence += f"; {failed} failed candidate pass(es) counted"
    resolve = _resolve_spread(tested, len(w), family) if tested.state == "unclear" else ""
    lo, hi = sorted((sign * tested.low, sign * tested.high))
    return _make(g, where, inputs, family, tested.state, sign * tested.estimate, (lo, hi),
                 evidence, resolve, [sign * v for v in w], direction,
                 worse=tested.estimate, limit=limit, kind="absolute")


# --------------------------------------------------------------------------- counts


def _shares(pairs: Sequence[tuple[int, float, float]],
            inputs: Inputs) -> tuple[int, int, int, int] | None:
    """(failed, total) of the candidate and of the control, pooled over pairs, from each
    pass's failure share and completed requests (share = failed ÷ (completed + failed));
    None when a pass's requests are not known."""
    reqs = inputs.requests or {}
    fy = ty = fx = tx = 0
    for pair, x, y in pairs:
        for arm, share, is_cand in ((inputs.control, x, False), (inputs.arm, y, True)):
            done = reqs.get((pair, arm))
            if done is None or not 0 <= share <= 1:
                return None
            if share >= 1:
                failed, total = 1, 1  # every request failed: at least one
            else:
                failed = round(share * done / (1 - share))
                failed = max(failed, 1) if share > 0 else failed
                total = round(done) + failed
            if is_cand:
                fy, ty = fy + failed, ty + total
            else:
                fx, tx = fx + failed, tx + total
    if ty <= 0 or tx <= 0:
        return None
    return fy, ty, fx, tx


def _counts_check(g: Guardrail, where: tuple[str, str], inputs: Inputs, family: Family,
                  pairs: Sequence[tuple[int, float, float]], shares: tuple[int, int, int, int],
                  failed: int) -> GuardrailCheck:
    fy, ty, fx, tx = shares
    limit = g.max_worsening if g.absolute else g.max_worsening * fx / tx
    tested = gs.counts(fy, ty, fx, tx, limit, family.each)
    test = ("Fisher's exact test" if limit <= 0 else "Farrington–Manning score test")
    evidence = f"pooled request counts: {fy} of {ty} requests failed vs {fx} of {tx}"
    if tested.p_value is not None:
        evidence += f" ({test}, one-sided p={tested.p_value:.2g})"
    if failed:
        evidence += f"; {failed} failed candidate pass(es) counted"
    resolve = ""
    if tested.state == "unclear":
        resolve = _resolve_counts(fy, ty, fx, tx, limit, family)
    lim = _limit_words(g, "lower", limit)
    relation = {"holds": f"; the candidate's failure share is within the control's + the "
                         f"{lim} limit",
                "broken": f"; its excess over the {lim} limit is significant",
                "unclear": f"; above the {lim} limit, but not significantly"}[tested.state]
    return _make(g, where, inputs, family, tested.state, tested.estimate,
                 (tested.low, tested.high), evidence, resolve,
                 [y - x for _, x, y in pairs], "lower", worse=tested.estimate, limit=limit,
                 kind="absolute", relation=relation, asymmetric=False)


def _resolve_counts(fy: int, ty: int, fx: int, tx: int, limit: float, family: Family) -> str:
    for times in (2, 3, 5, 10, 20, 50, 100):
        t = gs.counts(fy * times, ty * times, fx * times, tx * times, limit, family.each)
        if t.state == "broken":
            return (f"at the shares measured, about {ty * times} requests per arm "
                    f"(now {ty}) would show it broken")
    return "more requests per arm"


# --------------------------------------------------------------------------- words


def _change_words(change: float, direction: st.Direction, kind: str = "ratio") -> str:
    shown = fmt_gain(change, "ratio" if kind == "ratio" else "absolute")
    if abs(change) <= EPS or shown in ("+0.0%", "+0"):
        return "no change"
    worse = change > 0 if direction == "lower" else change < 0
    return f"{shown} ({'worse' if worse else 'better'})"


def _bound_words(value: float, kind: str) -> str:
    """A CI end: beyond +1000% a ratio's end says only that (a bound from few pairs)."""
    if kind == "ratio" and value > 10:
        return "> +1000%"
    return fmt_gain(value, "ratio" if kind == "ratio" else "absolute")


def _limit_words(g: Guardrail, direction: st.Direction, limit: float | None = None) -> str:
    if g.absolute or limit is not None:
        value = g.max_worsening if limit is None else limit
        return f"{fmt_gain(value if direction == 'lower' else -value, 'absolute')}"
    return fmt_gain(change_of(worse_d(g.max_worsening, direction), direction), "ratio")


def _change_limit(g: Guardrail, direction: st.Direction, limit: float | None = None) -> float:
    """The limit on the scale of `change` (what `_limit_words` says, as a number)."""
    if limit is None and not g.absolute:
        return change_of(worse_d(g.max_worsening, direction), direction)
    value = g.max_worsening if limit is None else limit
    return value if direction == "lower" else -value


def _make(g: Guardrail, where: tuple[str, str], inputs: Inputs, family: Family,
          state: GuardrailState, change: float, ci: tuple[float, float], evidence: str,
          resolve: str, pair_changes: Sequence[float], direction: st.Direction, *,
          worse: float, limit: float | None = None, kind: str = "ratio",
          relation: str | None = None, asymmetric: bool = True) -> GuardrailCheck:
    """The check and its one line: state, change with its sense, CI, limit, evidence and,
    when unclear, what would resolve it and whether it stops adoption."""
    w, lvl = where
    guard = inputs.role == "guardrail"
    stops = state == "broken" or (state == "unclear" and guard)
    if relation is None:
        relation = " " + {"holds": "is within", "broken": "is wholly beyond",
                          "unclear": "includes"}[state] + (
            f" the {_limit_words(g, direction, limit)} limit")
    lo, hi = (_bound_words(v, kind) for v in ci)
    what = "guardrail" if guard else "deterioration check"
    line = (f"{what} {g.metric} at {w} {lvl} {state}: "
            f"{_change_words(change, direction, kind)}, {lo} … {hi} "
            f"({family.interval_text(direction, asymmetric)})"
            f"{relation}; noise: {evidence}")
    if state == "unclear":
        line += (f"; {resolve}" if resolve else "") + (
            "; stops adoption: not shown within its limit" if stops else
            "; does not stop adoption (only a worsening shown beyond the limit does here)")
    worsening = [(c if direction == "lower" else -c) for c in pair_changes]
    return GuardrailCheck(
        g.metric, w, lvl, g.max_worsening, g.absolute, worse + 0.0, state == "broken", line,
        tuple(v + 0.0 for v in worsening), state=state, change=change + 0.0, ci=ci,
        ci_level=family.ci_level, stops=stops, evidence=evidence, resolve=resolve,
        direction=direction, limit=_change_limit(g, direction, limit),
        kind="ratio" if kind == "ratio" else "absolute", role=inputs.role)
