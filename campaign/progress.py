"""Progress of a run: a live rich status on a terminal, plain lines elsewhere (CI logs).

Both are sinks for the runner's events (`runner.ProgressSink`); the runner never prints.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from campaign.fmt import clock as human


class PlainProgress:
    """One timestamped line per event: greppable in CI logs."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self.eta = ""

    def line(self, text: str) -> None:
        elapsed = human(time.monotonic() - self.t0)
        self.console.print(f"[{elapsed:>6}] {text}", highlight=False, markup=False)

    def __call__(self, event: str, **d: Any) -> None:
        if event == "pair_start":
            redo = " (redo)" if d.get("pair_attempt", 1) > 1 else ""
            self.line(f"pair {d['pair']}/{d['pairs']}{redo}")
        elif event == "arm_start":
            self.line(f"  {d['arm']}: booting")
        elif event == "arm_phase" and d.get("phase") == "ready":
            self.line(f"  {d['arm']}: ready in {d['boot_s']:.1f} s")
        elif event == "pass_done":
            tput = ", ".join(f"{k} {v:.0f} tok/s" for k, v in d.get("summary", {}).items())
            problems = "; ".join(d.get("problems", []))
            if d.get("valid"):
                state = "ok"
            elif not d.get("measured", True):
                state = f"done (warm-up, not measured; {problems})"
            else:
                state = f"INVALID: {problems}"
            self.line(f"  {d['arm']}: {d['name']} {state}" + (f" ({tput})" if tput else ""))
        elif event == "arm_done":
            self.line(f"  {d['arm']}: done in {human(d['wall_s'])}")
        elif event == "pair_invalid":
            self.line(f"pair {d['pair']} INVALID: {d['reason']}")
        elif event == "pair_redo":
            self.line(f"pair {d['pair']}: redoing the whole pair (gates.pair_retries)")
        elif event == "eta":
            self.eta = human(d["eta_s"])
            self.line(f"  elapsed {human(d['elapsed_s'])}, about {self.eta} to go")


class RichProgress(PlainProgress):
    """Plain lines scroll above a live status line (pairs, arm, phase, elapsed, ETA)."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self.status = console.status("starting…")
        self.pairs = "?"
        self.where = ""
        self.last = ""
        self.status.start()

    def __call__(self, event: str, **d: Any) -> None:
        super().__call__(event, **d)
        if event == "pair_start":
            self.pairs = f"pair {d['pair']}/{d['pairs']}"
        elif event in ("arm_start", "arm_phase"):
            self.where = f"{d['arm']}: {d.get('phase', '')}"
        elif event == "pass_done" and d.get("summary"):
            k, v = next(iter(d["summary"].items()))
            self.last = f"last {k} {v:.0f} tok/s"
        elapsed = human(time.monotonic() - self.t0)
        eta = f" · ETA {self.eta}" if self.eta else ""
        self.status.update(f"{self.pairs} · {self.where} · {elapsed}{eta} · {self.last}")

    def close(self) -> None:
        self.status.stop()


def make_progress(console: Console) -> PlainProgress:
    return RichProgress(console) if console.is_terminal else PlainProgress(console)
