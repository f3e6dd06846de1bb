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
    errors: np.ndarray | None = None
    """Failure shares [campaign, pair, cell, arm] (default: none failed)."""


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
        for metric, value in (("requests_completed", float(p.requests)),
                              ("output_tokens", 5000.0)):
            data = td.CellData("knee", lvl, metric)
            data.values = {k + 1: {a: td.ArmValue(value, value, value, 1)
                                   for a in (CONTROL, CAND)} for k in range(pairs)}
            t.cells[("knee", lvl, metric)] = data
        err = td.CellData("knee", lvl, "error_rate")
        for k in range(pairs):
            err.values[k + 1] = {}
            for j, a in enumerate((CONTROL, CAND)):
                e = 0.0 if p.errors is None else float(p.errors[i, k, c, j])
                err.values[k + 1][a] = td.ArmValue(e, e, e, 1)
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


# --------------------------------------------------------------------------- the docs' table


def main() -> None:  # pragma: no cover - prints the figures docs/verdict.md quotes
    sims = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"{sims} campaigns per row; A/A: P(broken) / P(unclear) / P(holds) of the default "
          "ttft_p99 guardrail (any cell broken; every cell holds)")
    for n in (32, 100, 300):
        for shape in SHAPES:
            rng = np.random.default_rng(hash((n, shape)) % 2**32)
            p = latency_campaigns(rng, sims, 4, 5, n, shape)
            for cells, pairs in ((1, 2), (1, 4), (5, 2), (5, 4)):
                s = [states(judge(p, i, pairs, cells)) for i in range(sims)]
                broken = sum("broken" in x for x in s) / sims
                holds = sum(all(y == "holds" for y in x) for x in s) / sims
                print(f"N={n:>3} {shape:9} cells={cells} pairs={pairs}: broken {broken:.1%}, "
                      f"every cell holds {holds:.1%}")
    for shape in SHAPES:
        for n in (32, 100):
            rng = np.random.default_rng(7)
            for name, fn in (("+25 ms", lambda x: x + 25.0), ("+10%", lambda x: x * 1.10),
                             ("×2.25", lambda x: x * 2.25)):
                p = latency_campaigns(rng, sims, 8, 1, n, shape, candidate=fn)
                for pairs in (2, 4, 8):
                    broken = sum("broken" in states(judge(p, i, pairs, 1))
                                 for i in range(sims)) / sims
                    print(f"{shape:9} N={n:>3} {name:7} pairs={pairs}: broken {broken:.1%}")


if __name__ == "__main__":  # pragma: no cover
    main()
