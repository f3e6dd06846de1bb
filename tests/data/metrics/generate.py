"""Regenerate the vLLM-like /metrics samples in this folder.

    .venv/bin/python tests/data/metrics/generate.py

Rendered by prometheus_client, the library vLLM itself exports with, using vLLM's metric
names, types and labels (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py):
labels `model_name` and `engine` on every series, plus `position` on the per-position
counter; two engines (data parallel 2), draft depth k = 4. Counters render as `*_total`
with a `*_created` gauge next to them, exactly as on a real server.

Hand-chosen deltas (after − before), summed over both engines:
drafts 1000, draft tokens 4000, accepted 1740 (rate 0.435, so a ≈ 0.69 at k = 4),
accepted per position 700, 480, 330, 230; generation tokens 2740 (= drafts + accepted),
prompt tokens 20000. `vllm_spec_restarted.prom` has smaller counters and a later
process_start_time_seconds (a restart); `vllm_nospec.prom` has no spec-decode counters.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ["model_name", "engine"]


def render(engines: list[dict[str, Any]], *, spec: bool = True,
           start_time: float = 1795960000.0) -> str:
    reg = CollectorRegistry()
    Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          registry=reg).set(start_time)
    running = Gauge("vllm:num_requests_running",
                    "Number of requests in model execution batches.", LABELS, registry=reg)
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS,
                     registry=reg)
    gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.", LABELS,
                  registry=reg)
    ttft = Histogram("vllm:time_to_first_token_seconds",
                     "Histogram of time to first token in seconds.", LABELS,
                     buckets=[0.01, 0.05, 0.1, 0.5, 1.0, 5.0], registry=reg)
    if spec:
        drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                         LABELS, registry=reg)
        dtoks = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                        LABELS, registry=reg)
        acc = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                      LABELS, registry=reg)
        pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                      "Accepted tokens per draft position.", [*LABELS, "position"],
                      registry=reg)
    for idx, e in enumerate(engines):
        lv = ["sim-model", str(idx)]
        running.labels(*lv).set(e.get("running", 0))
        prompt.labels(*lv).inc(e["prompt"])
        gen.labels(*lv).inc(e["gen"])
        for value in e.get("ttft", []):
            ttft.labels(*lv).observe(value)
        if spec:
            drafts.labels(*lv).inc(e["drafts"])
            dtoks.labels(*lv).inc(e["draft_tokens"])
            acc.labels(*lv).inc(e["accepted"])
            for p, value in enumerate(e["pos"]):
                pos.labels(*lv, str(p)).inc(value)
    return generate_latest(reg).decode()


BEFORE = [
    dict(prompt=400000, gen=26000, drafts=5000, draft_tokens=20000, accepted=8000,
         pos=[3500, 2300, 1400, 800], ttft=[0.02, 0.03, 0.2]),
    dict(prompt=240000, gen=16000, drafts=3000, draft_tokens=12000, accepted=5000,
         pos=[2100, 1500, 900, 500], ttft=[0.04]),
]
# engine 0: +600 drafts, +2400 draft tokens, +1044 accepted (420, 288, 198, 138), +1644 gen
# engine 1: +400 drafts, +1600 draft tokens, +696 accepted (280, 192, 132, 92), +1096 gen
AFTER = [
    dict(prompt=412000, gen=27644, drafts=5600, draft_tokens=22400, accepted=9044,
         pos=[3920, 2588, 1598, 938], running=2, ttft=[0.02, 0.03, 0.2, 0.06, 0.07]),
    dict(prompt=248000, gen=17096, drafts=3400, draft_tokens=13600, accepted=5696,
         pos=[2380, 1692, 1032, 592], running=1, ttft=[0.04, 0.6]),
]
RESTARTED = [
    dict(prompt=2000, gen=900, drafts=300, draft_tokens=1200, accepted=600,
         pos=[250, 170, 110, 70]),
    dict(prompt=1000, gen=450, drafts=150, draft_tokens=600, accepted=300,
         pos=[125, 85, 55, 35]),
]
NOSPEC = [dict(prompt=5000, gen=700), dict(prompt=3000, gen=500)]


def main(out: Path) -> None:
    (out / "vllm_spec_before.prom").write_text(render(BEFORE))
    (out / "vllm_spec_after.prom").write_text(render(AFTER))
    (out / "vllm_spec_restarted.prom").write_text(render(RESTARTED, start_time=1795963600.0))
    (out / "vllm_nospec.prom").write_text(render(NOSPEC, spec=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
