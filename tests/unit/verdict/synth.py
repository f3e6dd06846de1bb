"""Synthetic campaigns built from per-request latencies, judged by the real verdict.

Each pass draws N requests' TTFT from a shape (lognormal, a prefill wave, a heavy tail),
scaled by its boot's drift exp(N(0, b²)) (b = ln 1.03, shared by the boot's cells); its
p99 is numpy's linear percentile (as AIPerf computes it) and its `log_se` the bootstrap of
`campaign.verdict.sampling` (batched here with the very same resamples: the tests check
they agree). Throughput pairs carry the lane's assumed noise. A campaign is a
`tidy.RunTable` judged by `verdict.judge.judge_run`.

`python -m tests.unit.verdict.synth` prints the error rates docs/verdict.md quotes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from campaign.campaignfile import Preregistration
from campaign.verdict import judge as vd
from campaign.verdict import rule as rl
from campaign.verdict import sampling
from campaign.verdict import tidy as td
from campaign.verdict.outcome import RunVerdict

B = math.log(1.03)
"""True boot-to-boot drift (log sd) of every pass: the assumed band."""
SHAPES = ("lognormal", "wave", "heavy")
TPUT = "output_token_throughput"
CONTROL, CAND = "control", "cand"
DEFAULT_GUARDS = [{"metric": "ttft_p99", "max_worsening": 0.05},
                  {"metric": "error_rate", "max_worsening": 0.0, "absolute": True}]


def draw(rng: np.random.Generator, shape: str, shape_size: tuple[int, ...],
         n: int, sigma: float = 0.2) -> np.ndarray:
    """TTFT of n requests per pass, median 20 ms: values[..., n] (ms)."""
    size = (*shape_size, n)
    if shape == "lognormal":
        return np.exp(rng.normal(math.log(20.0), sigma, size))
    if shape == "wave":  # the first requests wait behind a prefill wave
        x = np.exp(rng.normal(math.log(20.0), 0.15, size))
        k = min(4, n)
        x[..., :k] *= rng.uniform(1.5, 3.0, (*shape_size, k))
        return x
    if shape == "heavy":  # 2% of requests far in a Pareto tail
        x = np.exp(rng.normal(math.log(20.0), 0.2, size))
        tail = rng.random(size) < 0.02
        return np.where(tail, x * 3 * (1 + rng.pareto(3.0, size)), x)
    raise ValueError(shape)


def p99_and_log_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pass's p99 and `sampling.quantile_log_se` of it, batched over passes
    (values[..., n]): the same resamples as the real function (its seed and index draws)."""
    n = values.shape[-1]
    flat = values.reshape(-1, n)
    p99 = np.percentile(flat, 99, axis=1)
    rng = np.random.default_rng([sampling.SEED, n])
    idx = rng.integers(0, n, size=(sampling.RESAMPLES, n))
    se = np.empty(flat.shape[0])
    chunk = max(1, 4_000_000 // (sampling.RESAMPLES * n))
    for i in range(0, flat.shape[0], chunk):
        stat = np.percentile(flat[i:i + chunk][:, idx], 99, axis=2)
        se[i:i + chunk] = np.std(np.log(stat), axis=1, ddof=1)
    shape = values.shape[:-1]
    return p99.reshape(shape), se.reshape(shape)


@dataclass(frozen=True)
class Passes:
    """Simulated campaigns: [campaign, pair, cell, arm] arrays (arm 0 the control)."""

    tput: np.ndarray
    ttft: np.ndarray
    log_se: np.ndarray | None
    requests: int
    failed: np.ndarray | None = None
    """Failed requests [campaign, pair, cell, arm] out of `requests` (default: none)."""


def latency_campaigns(rng: np.random.Generator, campaigns: int, pairs: int, cells: int,
                      n: int, shape: str | Sequence[str] = "lognormal", *,
                      candidate: Callable[[np.ndarray], np.ndarray] | None = None,
                      sigma: float = 0.2, tput_gain: float = 0.0) -> Passes:
    """Campaigns whose candidate's requests are `candidate(control-like requests)` (A/A
    without it); each boot drifts by exp(N(0, B²)) shared by its cells."""
    shapes = [shape] * campaigns if isinstance(shape, str) else list(shape)
    reqs = np.stack([draw(rng, s, (pairs, cells, 2), n, sigma) for s in shapes])
    if candidate is not None:
        reqs[..., 1, :] = candidate(reqs[..., 1, :])
    boot = np.exp(rng.normal(0.0, B, (campaigns, pairs, 1, 2)))
    p99, se = p99_and_log_se(reqs)
    tput = 1000.0 * boot * np.exp(rng.normal(0.0, 0.01, (campaigns, pairs, cells, 2)))
    tput[..., 1] *= 1 + tput_gain
    return Passes(tput, p99 * boot, se, n)


def table_of(p: Passes, i: int, pairs: int, cells: int, *,
             log_se: bool = True) -> td.RunTable:
    """Campaign i's first `pairs` pairs and `cells` cells as the verdict reads a run."""
    t = td.RunTable(run="synth")
    t.pairs = list(range(1, pairs + 1))
    t.slots = {k + 1: {CONTROL: 2 * k, CAND: 2 * k + 1} for k in range(pairs)}
    for c in range(cells):
        lvl = f"c{2 ** c}"
        for metric, arr, ses in ((TPUT, p.tput, None),
                                 ("ttft_p99", p.ttft, p.log_se if log_se else None)):
            data = td.CellData("knee", lvl, metric)
            for k in range(pairs):
                data.values[k + 1] = {
                    a: td.ArmValue(float(arr[i, k, c, j]), float(arr[i, k, c, j]),
                                   float(arr[i, k, c, j]), 1,
                                   None if ses is None else float(ses[i, k, c, j]))
                    for j, a in enumerate((CONTROL, CAND))}
            t.cells[("knee", lvl, metric)] = data
        tokens = td.CellData("knee", lvl, "output_tokens")
        tokens.values = {k + 1: {a: td.ArmValue(5000.0, 5000.0, 5000.0, 1)
                                 for a in (CONTROL, CAND)} for k in range(pairs)}
        t.cells[("knee", lvl, "output_tokens")] = tokens
        done = td.CellData("knee", lvl, "requests_completed")
        err = td.CellData("knee", lvl, "error_rate")
        for k in range(pairs):
            done.values[k + 1], err.values[k + 1] = {}, {}
            for j, a in enumerate((CONTROL, CAND)):
                f = 0.0 if p.failed is None else float(p.failed[i, k, c, j])
                n = float(p.requests)
                done.values[k + 1][a] = td.ArmValue(n - f, n - f, n - f, 1)
                err.values[k + 1][a] = td.ArmValue(f / n, f / n, f / n, 1)
        t.cells[("knee", lvl, "requests_completed")] = done
        t.cells[("knee", lvl, "error_rate")] = err
    return t


def rule(pairs: int, *, guardrails: Sequence[dict[str, Any]] | None = None,
         **kw: Any) -> rl.Rule:
    kw.setdefault("decision_cells", [{"workload": "knee", "level": "*"}])
    pre = Preregistration(pairs=pairs,
                          guardrails=DEFAULT_GUARDS if guardrails is None else guardrails,
                          **kw)
    return rl.parse_rule(pre.model_dump(mode="json", by_alias=True), 0.03)


def judge(p: Passes, i: int, pairs: int, cells: int, r: rl.Rule | None = None,
          **kw: Any) -> RunVerdict:
    levels = {"knee": [f"c{2 ** c}" for c in range(cells)]}
    return vd.judge_run(table_of(p, i, pairs, cells, **kw), r or rule(pairs), [CONTROL, CAND],
                        levels=levels, metrics=[])


def states(v: RunVerdict, metric: str = "ttft_p99") -> list[str]:
    return [g.state for g in v.candidates[0].guardrails if g.metric == metric]


# --------------------------------------------------------------------------- rule rates


def paired_tables(rng: np.random.Generator, campaigns: int, pairs: int, effect: float,
                  sd: float, candidates: int = 1) -> list[td.RunTable]:
    """Campaigns of one decision cell whose pair log ratios are N(ln(1 + effect), sd²)."""
    out = []
    arms = [CONTROL, *(CAND if j == 0 else f"{CAND}{j + 1}" for j in range(candidates))]
    for _ in range(campaigns):
        t = td.RunTable(run="synth")
        t.pairs = list(range(1, pairs + 1))
        t.slots = {k + 1: {a: len(arms) * k + j for j, a in enumerate(arms)}
                   for k in range(pairs)}
        data = td.CellData("knee", "c1", TPUT)
        boot = rng.normal(0.0, sd / math.sqrt(2), (pairs, len(arms)))
        for k in range(pairs):
            vals = {}
            for j, a in enumerate(arms):
                v = 1000.0 * math.exp(boot[k, j] + (math.log1p(effect) if j else 0.0))
                vals[a] = td.ArmValue(v, v, v, 1)
            data.values[k + 1] = vals
        t.cells[("knee", "c1", TPUT)] = data
        out.append(t)
    return out


def adopt_rate(tables: Sequence[td.RunTable], r: rl.Rule, arms: Sequence[str] = (CONTROL, CAND)
               ) -> tuple[int, int]:
    """(adopted, loss) campaigns under `r`."""
    adopted = loss = 0
    for t in tables:
        v = vd.judge_run(t, r, list(arms), metrics=[])
        adopted += v.decision == "adopt"
        loss += v.reason == "loss"
    return adopted, loss


def aa_flag_table(rng: np.random.Generator, pairs: int, cells: int, candidates: int,
              lanes: int) -> td.RunTable:
    """An A/A campaign (every candidate the control's launch) on `lanes` pooled lanes of
    `pairs` pairs each: boots drift 3% (shared by a boot's cells), passes 1%; each lane
    runs its own window (slots from 0)."""
    arms = [CONTROL, *(f"cand{j}" for j in range(candidates))]
    t = td.RunTable(run="aa")
    n = pairs * lanes
    t.pairs = list(range(1, n + 1))
    for p in range(n):
        lane, k = p % lanes, p // lanes
        t.slots[p + 1] = {a: k * len(arms) + j for j, a in enumerate(arms)}
        if lanes > 1:
            t.lanes[p + 1] = f"lane-{lane + 1}"
    boot = rng.normal(0.0, math.log(1.03), (n, len(arms)))
    for c in range(cells):
        data = td.CellData("knee", f"c{2 ** c}", TPUT)
        noise = rng.normal(0.0, 0.01, (n, len(arms)))
        for p in range(n):
            data.values[p + 1] = {a: td.ArmValue(v, v, v, 1) for j, a in enumerate(arms)
                                  for v in [1000.0 * math.exp(boot[p, j] + noise[p, j])]}
        t.cells[data.workload, data.level, TPUT] = data
    return t


def flagged(v: RunVerdict) -> bool:
    """Any noise flag on any decision cell of any candidate."""
    return bool({f for cv in v.candidates for c in cv.cells if c.decision_cell
                 for f in c.flags} & {"high-variance", "window-drift", "lanes-disagree"})


# --------------------------------------------------------------------------- the docs' tables


def _aa_rows(sims: int) -> None:
    print(f"\n## A/A: the default guardrails ({sims} campaigns per row): P(any cell broken), "
          "P(every cell holds)")
    for n in (32, 100, 300):
        for shape in SHAPES:
            rng = np.random.default_rng([n, SHAPES.index(shape)])
            p = latency_campaigns(rng, sims, 4, 5, n, shape)
            row = []
            for cells, pairs in ((1, 2), (1, 4), (5, 2), (5, 4)):
                s = [states(judge(p, i, pairs, cells)) for i in range(sims)]
                broken = sum("broken" in x for x in s) / sims
                holds = sum(all(y == "holds" for y in x) for x in s) / sims
                row.append(f"{broken:.1%} / {holds:.1%}")
            print(f"| {n} | {shape} | " + " | ".join(row) + " |")


def _power_rows(sims: int) -> None:
    print(f"\n## One cell (k = 2 checks), P(broken) at 2 / 4 / 8 pairs ({sims} campaigns)")
    effects: list[tuple[str, Callable[[np.ndarray], np.ndarray]]] = [
        ("×1.05 (at the limit)", lambda x: x * 1.05), ("×1.10 (2× the limit)", lambda x: x * 1.10),
        ("+25 ms (20 → 45 ms)", lambda x: x + 25.0), ("×2.25", lambda x: x * 2.25)]
    for n in (32, 100):
        for shape in SHAPES:
            rng = np.random.default_rng([7, n, SHAPES.index(shape)])
            row = []
            for _, fn in effects:
                p = latency_campaigns(rng, sims, 8, 1, n, shape, candidate=fn)
                row.append(" / ".join(
                    f"{sum('broken' in states(judge(p, i, k, 1)) for i in range(sims)) / sims:.0%}"
                    for k in (2, 4, 8)))
            print(f"| {n} | {shape} | " + " | ".join(row) + " |")
    print("columns: " + ", ".join(name for name, _ in effects))


def _error_rows(sims: int) -> None:
    print(f"\n## error_rate (limit 0, pooled counts), {sims} campaigns, one cell, 2 pairs")
    for n in (32, 100):
        for p_ctrl, p_cand in ((0.0, 0.0), (0.01, 0.01), (0.02, 0.02), (0.0, 0.02),
                               (0.01, 0.05), (0.0, 0.10)):
            rng = np.random.default_rng([n, int(p_ctrl * 1000), int(p_cand * 1000)])
            base = latency_campaigns(rng, sims, 2, 1, n)
            failed = rng.binomial(n, [p_ctrl, p_cand], size=(sims, 2, 1, 2)).astype(float)
            p = Passes(base.tput, base.ttft, base.log_se, n, failed)
            s = [states(judge(p, i, 2, 1), "error_rate")[0] for i in range(sims)]
            print(f"| {n} | {p_ctrl:.0%} → {p_cand:.0%} | "
                  + " | ".join(f"{s.count(x) / sims:.1%}" for x in ("broken", "unclear", "holds"))
                  + " |")


def _rule_rows(sims: int) -> None:
    sigma0 = math.sqrt(2) * math.hypot(B, 0.01)
    print(f"\n## bound through judge_run ({sims} campaigns): P(adopt) at 0 / m/2 / m / 1.5m")
    for scale in (1.0, 2.0):
        for pairs in (2, 3, 4, 5, 6, 8):
            r = rule(pairs, guardrails=[], decision_cells=[{"workload": "knee", "level": "c1"}])
            rng = np.random.default_rng([pairs, int(scale)])
            rates = [adopt_rate(paired_tables(rng, sims, pairs, e, scale * sigma0), r)[0] / sims
                     for e in (0.0, 0.05, 0.10, 0.15)]
            print(f"| {scale:g}σ0 | {pairs} | " + " | ".join(f"{x:.1%}" for x in rates) + " |")
    print(f"\n## loss through judge_run ({sims} campaigns): A/A at σ0 / 2σ0, −10% at σ0")
    for pairs in (2, 3, 4, 8):
        r = rule(pairs, guardrails=[], decision_cells=[{"workload": "knee", "level": "c1"}])
        rng = np.random.default_rng([pairs, 99])
        rates = [adopt_rate(paired_tables(rng, sims, pairs, e, s * sigma0), r)[1] / sims
                 for e, s in ((0.0, 1.0), (0.0, 2.0), (-0.10, 1.0))]
        print(f"| {pairs} | " + " | ".join(f"{x:.1%}" for x in rates) + " |")


def _flag_rows(sims: int) -> None:
    print(f"\n## noise flags on A/A campaigns ({sims} each, 2 pairs per lane, 2 cells): "
          "any flag, now / with the old level 5% ÷ (2 × cells)")
    old = rl.flag_alpha
    names = vars(vd)  # judge_run reads `flag_alpha` from its module
    for candidates, lanes in ((1, 1), (3, 1), (1, 2), (3, 2)):
        arms = [CONTROL, *(f"cand{j}" for j in range(candidates))]
        r = rule(2 * lanes, guardrails=[])
        row = []
        for alpha in (old, lambda cells, *_: 0.05 / (2 * cells)):
            names["flag_alpha"] = alpha
            rng = np.random.default_rng([candidates, lanes])
            row.append(sum(flagged(vd.judge_run(aa_flag_table(rng, 2, 2, candidates, lanes),
                                                r, arms, levels={"knee": ["c1", "c2"]},
                                                metrics=[])) for _ in range(sims)) / sims)
        names["flag_alpha"] = old
        print(f"| {candidates} | {lanes} | {row[0]:.1%} | {row[1]:.1%} |")


def main() -> None:  # pragma: no cover - prints the figures docs/verdict.md quotes
    sims = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    parts = sys.argv[2:] or ["aa", "power", "errors", "rule", "flags"]
    for name, fn in (("aa", _aa_rows), ("power", _power_rows), ("errors", _error_rows),
                     ("rule", _rule_rows), ("flags", _flag_rows)):
        if name in parts:
            fn(sims)
            sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    main()
