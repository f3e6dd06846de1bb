"""vLLM-like log lines, so the runner's log capture is tested against the real formats.

Formats (the message part matches vLLM v1's `loggers.py` / `spec_decode/metrics.py`):

  INFO 11-29 15:44:01 [api_server.py:1] <message>                      (every line's prefix)
  SpecDecoding metrics: Mean acceptance length: 2.87, Accepted throughput: 41.20 tokens/s,
    Drafted throughput: 90.10 tokens/s, Accepted: 412 tokens, Drafted: 901 tokens,
    Per-position acceptance rate: 0.780, 0.600, 0.440, 0.340, 0.260,
    Avg Draft acceptance rate: 45.7%                                    (one line)
  Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 80.1
    tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%,
    Prefix cache hit rate: 0.0%                                         (one line)
  Adaptive verification cost table (boot|live, 4 streams, ms by verified tokens):
    4=40.10, 8=52.30, …                                                 (one line)
  Adaptive verification: running: 4 reqs, verified 2.10 of 5 drafts per stream,
    est. acceptance 0.712                                               (one line)
  Application startup complete.                                         (uvicorn's last line)
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO


def prefix(level: str, source: str, now: float | None = None) -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    return f"{level} {stamp} [{source}]"


def spec_decoding_message(
    drafts: int,
    draft_tokens: int,
    accepted: int,
    per_pos: Sequence[int],
    elapsed_s: float,
) -> str:
    """vLLM's SpecDecodingLogging.log message for one interval's counts."""
    draft_tp = draft_tokens / elapsed_s if elapsed_s > 0 else 0.0
    accepted_tp = accepted / elapsed_s if elapsed_s > 0 else 0.0
    rate = accepted / draft_tokens * 100 if draft_tokens > 0 else float("nan")
    mean_len = 1 + (accepted / drafts) if drafts else 1.0
    rates = ", ".join(f"{(n / drafts if drafts else 0.0):.3f}" for n in per_pos)
    return (
        f"SpecDecoding metrics: Mean acceptance length: {mean_len:.2f}, "
        f"Accepted throughput: {accepted_tp:.2f} tokens/s, "
        f"Drafted throughput: {draft_tp:.2f} tokens/s, "
        f"Accepted: {accepted} tokens, Drafted: {draft_tokens} tokens, "
        f"Per-position acceptance rate: {rates}, "
        f"Avg Draft acceptance rate: {rate:.1f}%"
    )


def engine_stats_message(prompt_tps: float, gen_tps: float, running: int, waiting: int,
                         prefix_hit_rate: float = 0.0) -> str:
    """vLLM's periodic engine line; `prefix_hit_rate` is a fraction (hits ÷ queries)."""
    return (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
        f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
        f"Waiting: {waiting} reqs, GPU KV cache usage: {min(99.9, running * 0.4):.1f}%, "
        f"Prefix cache hit rate: {prefix_hit_rate * 100:.1f}%"
    )


def cost_table_message(kind: str, streams: int, rendered: str) -> str:
    return (f"Adaptive verification cost table ({kind}, {streams} streams, ms by verified "
            f"tokens): {rendered}")


def controller_message(running: int, mean_verify: float, depth: int, est_a: float) -> str:
    return (
        f"Adaptive verification: running: {running} reqs, verified {mean_verify:.2f} of "
        f"{depth} drafts per stream, est. acceptance {est_a:.3f}"
    )


class Log:
    """Writes prefixed, flushed lines (a crash must not lose the last ones)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, level: str, source: str, message: str) -> None:
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(f"{prefix(level, source)} {message}\n")
            stream.flush()

    def info(self, source: str, message: str) -> None:
        self.write("INFO", source, message)

    def warning(self, source: str, message: str) -> None:
        self.write("WARNING", source, message)

    def error(self, source: str, message: str) -> None:
        self.write("ERROR", source, message)

    def raw(self, text: str) -> None:
        """A line without the vLLM prefix (uvicorn's 'INFO:     …' lines)."""
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(text + "\n")
            stream.flush()
