"""Progress of a run: a live, ticking rich display on a terminal, plain lines elsewhere
(CI logs).

Both are sinks for the runner's events (`runner.ProgressSink`); the runner never prints.
They also log each step (`logging`, logger `campaign.run`: `spec-ab -v run` shows them).

Inside a pass the display polls the server's `/metrics` (`vllm:request_success_total`,
which vLLM and the simulated lane both export) for the requests done so far; the pass's
total and the server's address come with the runner's `pass_start` event.

The ETA is known from the start: per arm, the median wall time of this campaign's earlier
runs in the same results folder (else `duration.estimate`, with the boot time of earlier
runs on the same lane), and, once an arm of this run is done, scaled by how this run
compares with that expectation. A resumed run counts what is left: every slot of every pair
its journal has not settled (`pair_done`, `pair_invalid`), the interrupted pair whole (its
finished arms are measured again). A sequential design counts its `max_pairs`, and says
so: up to that many pairs, it may stop early (`design_words`).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from campaign.campaignfile import Campaign
from campaign.campaignfile.duration import boot_s, estimate
from campaign.campaignfile.schedule import plan_slots
from campaign.fmt import clock as human
from campaign.results.journal import of_kind, pair_status, read_journal
from campaign.run.measure.metrics import ScrapeFailed, parse

log = logging.getLogger("campaign.run")

SUCCESS_COUNTER = "vllm:request_success_total"
POLL_S = 1.0


# --------------------------------------------------------------------------- ETA


def _earlier_runs(campaign: Campaign, run_dir: Path | None
                  ) -> tuple[dict[str, list[float]], list[float]]:
    """(wall seconds per arm of this campaign's earlier runs, boot seconds of any earlier
    run on the same lane), from the journals of the run directories beside `run_dir`."""
    walls: dict[str, list[float]] = {}
    boots: list[float] = []
    if run_dir is None or not run_dir.parent.is_dir():
        return walls, boots
    for other in sorted(run_dir.parent.iterdir())[-50:]:
        if other == run_dir or not (other / "journal.jsonl").is_file():
            continue
        try:
            frozen = YAML(typ="safe", pure=True).load(
                (other / "campaign.yaml").read_text(encoding="utf-8"))
            events = read_journal(other)
        except (OSError, ValueError, YAMLError):
            continue
        if not isinstance(frozen, dict) or frozen.get("lane") != campaign.lane:
            continue
        same = frozen.get("name") == campaign.name
        for e in of_kind(events, "slot_done"):
            if isinstance(e.get("boot_s"), int | float):
                boots.append(float(e["boot_s"]))
            if same and isinstance(e.get("wall_s"), int | float) and e.get("arm"):
                walls.setdefault(str(e["arm"]), []).append(float(e["wall_s"]))
    return walls, boots


def design_words(campaign: Campaign) -> str | None:
    """A sequential design in a few words ("up to 6 pairs, looks from pair 2, may stop
    early"), or None for a fixed number of pairs."""
    design = campaign.preregistration.sequential
    if design is None:
        return None
    every = ", every second pair" if design.step > 1 else ""
    return (f"up to {design.max_pairs} pairs, looks from pair {design.schedule()[0]}{every}, "
            "may stop early")


def run_line(campaign: Campaign, *, resumed: bool) -> str:
    """`spec-ab run`'s first line: the campaign, its lane and how many pairs it may spend."""
    pairs = design_words(campaign) or f"{campaign.preregistration.pairs} pairs"
    what = " (a sequential design)" if campaign.preregistration.sequential else ""
    return (f"{'resuming' if resumed else 'running'} {campaign.name} on lane {campaign.lane}: "
            f"{pairs}{what}")


def _settled_pairs(run_dir: Path | None, redo_invalid: bool) -> set[int]:
    """The pairs this run's journal settled (done, or invalid unless `redo_invalid` measures
    them again): what a resumed session will not measure."""
    if run_dir is None or not (run_dir / "journal.jsonl").is_file():
        return set()
    try:
        events = read_journal(run_dir)
    except (OSError, ValueError):
        return set()
    keep = {"done"} if redo_invalid else {"done", "invalid"}
    return {p for p, (_, state) in pair_status(events).items() if state in keep}


class Eta:
    """Time left in a run, from the schedule and what each arm is expected to take."""

    def __init__(self, campaign: Campaign, run_dir: Path | None = None, *,
                 redo_invalid: bool = False) -> None:
        pre = campaign.preregistration
        self.settled = _settled_pairs(run_dir, redo_invalid)
        """Pairs an earlier session of this run settled (a resume measures none of them)."""
        self.slots = [(s.pair, s.arm) for s in
                      plan_slots(pre.pairs, campaign.arm_names, pre.order, pre.seed,
                                 campaign.lane_index)]
        est = estimate(campaign)
        walls, boots = _earlier_runs(campaign, run_dir)
        self.learned = bool(walls or boots)
        self.per_arm: dict[str, float] = {}
        for arm, t in est.per_arm_s.items():
            if walls.get(arm):
                self.per_arm[arm] = statistics.median(walls[arm])
            elif boots:
                assumed = boot_s(campaign.launches[arm])  # what the estimate put in
                self.per_arm[arm] = max(1.0, t - assumed + statistics.median(boots))
            else:
                self.per_arm[arm] = t
        self.position = 0
        self.slot_started: float | None = None
        self.done_expected = 0.0
        self.done_actual = 0.0

    def total(self) -> float:
        return sum(self.per_arm[a] for _, a in self.slots)

    def start_slot(self, pair: int, arm: str, now: float) -> None:
        for i in range(len(self.slots)):
            if self.slots[i] == (pair, arm) and i >= self._pair_start(pair):
                self.position = i
                break
        self.slot_started = now

    def _pair_start(self, pair: int) -> int:
        return next((i for i, (p, _) in enumerate(self.slots) if p == pair), 0)

    def pair_started(self, pair: int) -> None:
        self.position = self._pair_start(pair)  # a redo starts the pair again

    def finish_slot(self, arm: str, wall_s: float) -> None:
        self.done_expected += self.per_arm.get(arm, wall_s)
        self.done_actual += wall_s
        self.position += 1
        self.slot_started = None

    def pairs_left(self) -> int:
        """Pairs still to measure (all, or on a resume those not settled)."""
        return len({p for p, _ in self.slots if p not in self.settled})

    def remaining(self, now: float) -> float:
        scale = self.done_actual / self.done_expected if self.done_expected else 1.0
        left = 0.0
        for i, (pair, arm) in enumerate(self.slots[self.position:]):
            if pair in self.settled:
                continue  # measured by an earlier session of this run
            t = self.per_arm[arm] * scale
            if i == 0 and self.slot_started is not None:
                t = max(0.0, t - (now - self.slot_started))
            left += t
        return left


# --------------------------------------------------------------------------- requests


def count_successes(text: str) -> float | None:
    """Sum of `vllm:request_success_total` over its label sets in a /metrics text, read by
    the runner's own parser (`metrics.parse`); None when the text is not Prometheus text
    or has no such counter."""
    try:
        return parse(text).value(SUCCESS_COUNTER)
    except ScrapeFailed:
        return None


class PassWatch:
    """Requests done in the running pass: the success counter now minus at its start."""

    def __init__(self, base_url: str, total: int | None, levels: list[str],
                 get: Callable[[str], str | None] | None = None) -> None:
        self.base_url = base_url
        self.total = total
        self.levels = levels
        self._get = get or _get_metrics
        self.start = self._get(base_url)
        self.base = count_successes(self.start) if self.start is not None else None
        self.done = 0

    def poll(self) -> int:
        text = self._get(self.base_url)
        now = count_successes(text) if text is not None else None
        if now is not None and self.base is not None:
            self.done = max(self.done, int(now - self.base))
        elif now is not None:
            self.base = now
        return self.done

    def level(self) -> str:
        """The level being measured (a sweep runs its levels one after another)."""
        if not self.levels:
            return ""
        if len(self.levels) == 1 or not self.total:
            return self.levels[0]
        per = self.total / len(self.levels)
        i = min(len(self.levels) - 1, int(self.done // per))
        return f"{self.levels[i]} ({i + 1}/{len(self.levels)})"


def _get_metrics(base_url: str) -> str | None:
    try:
        r = httpx.get(base_url + "/metrics", timeout=2.0)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


# --------------------------------------------------------------------------- sinks


class PlainProgress:
    """One timestamped line per event: greppable in CI logs."""

    def __init__(self, console: Console, campaign: Campaign | None = None,
                 run_dir: Path | None = None, *, redo_invalid: bool = False) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self.eta = (Eta(campaign, run_dir, redo_invalid=redo_invalid)
                    if campaign is not None else None)
        self.design = design_words(campaign) if campaign is not None else None
        self.pairs = "?"
        self.where = ""
        self.last = ""
        self.watch: PassWatch | None = None
        self.pass_name = ""
        if self.eta is not None:
            self.line(self._headline(self.eta))

    def _headline(self, eta: Eta) -> str:
        """What the run will take: in all, or on a resume what is left; a sequential
        design's figure is its most (every pair spent)."""
        source = "earlier runs of this lane" if eta.learned else "the estimate"
        most = ", at most" if self.design else ""
        if eta.settled:
            total = len({p for p, _ in eta.slots})
            up_to = "up to " if self.design else ""
            return (f"{eta.pairs_left()} of {up_to}{total} pairs left (a pair cut in the "
                    f"middle is measured again whole): about {human(eta.remaining(self.t0))} "
                    f"to go ({source}){most}")
        head = f"{self.design}: " if self.design else ""
        return f"{head}about {human(eta.total())} in all ({source}){most}"

    def line(self, text: str) -> None:
        elapsed = human(time.monotonic() - self.t0)
        self.console.print(f"[{elapsed:>6}] {text}", highlight=False, markup=False)

    def eta_text(self) -> str:
        if self.eta is None:
            return ""
        return f"about {human(self.eta.remaining(time.monotonic()))} to go"

    def __call__(self, event: str, **d: Any) -> None:
        now = time.monotonic()
        if event == "pair_start":
            redo = " (redo)" if d.get("pair_attempt", 1) > 1 else ""
            of = f" of up to {d['pairs']}" if self.design else f"/{d['pairs']}"
            self.pairs = f"pair {d['pair']}{of}{redo}"
            if self.eta is not None:
                self.eta.pair_started(d["pair"])
            self.line(self.pairs)
        elif event == "slot_start":
            if self.eta is not None:
                self.eta.start_slot(d["pair"], d["arm"], now)
            self.where = f"{d['arm']}: booting"
            log.info("pair %s %s: booting", d.get("pair"), d["arm"])
            self.line(f"  {d['arm']}: booting")
        elif event == "slot_phase" and d.get("phase") == "ready":
            self.where = f"{d['arm']}: ready"
            log.info("%s: ready in %.1f s", d["arm"], d["boot_s"])
            self.line(f"  {d['arm']}: ready in {d['boot_s']:.1f} s")
        elif event == "pass_start":
            total = d.get("requests")
            self.pass_name = d["name"]
            self.where = f"{d['arm']}: {d['name']}"
            self.watch = (PassWatch(d["base_url"], total, list(d.get("levels", [])))
                          if d.get("base_url") else None)
            what = f"{total} requests" if total else "duration-bound"
            log.info("%s: pass %s starts (%s)", d["arm"], d["name"], what)
            self.line(f"  {d['arm']}: {d['name']} ({what})")
        elif event == "pass_done":
            self.watch = None
            tput = ", ".join(f"{k} {v:.0f} tok/s" for k, v in d.get("summary", {}).items())
            problems = "; ".join(d.get("problems", []))
            if d.get("valid"):
                state = "ok"
            elif not d.get("measured", True):
                state = f"done (warm-up, not measured; {problems})"
            else:
                state = f"INVALID: {problems}"
            if d.get("measured", True) and d.get("summary"):
                k, v = next(iter(d["summary"].items()))
                self.last = f"last {d['name']} {k} {v:.0f} tok/s"
            log.info("%s: pass %s ends: %s", d["arm"], d["name"], state)
            self.line(f"  {d['arm']}: {d['name']} {state}" + (f" ({tput})" if tput else ""))
        elif event == "slot_done":
            if self.eta is not None:
                self.eta.finish_slot(d["arm"], d["wall_s"])
            log.info("%s: stopped after %s", d["arm"], human(d["wall_s"]))
            eta = ""
            if self.eta is not None and self.eta.position < len(self.eta.slots):
                eta = f"; {self.eta_text()}"
            self.line(f"  {d['arm']}: done in {human(d['wall_s'])}{eta}")
        elif event == "boot_retry":
            log.warning("%s exited while booting (%s): booting it once more", d["arm"],
                        d["reason"])
            self.line(f"  {d['arm']}: server {d['reason']} while booting; booting it once "
                      "more (the same exit again is a launch error)")
        elif event == "pair_invalid":
            log.warning("pair %s invalid: %s", d["pair"], d["reason"])
            self.line(f"pair {d['pair']} INVALID: {d['reason']}")
        elif event == "pair_redo" and "budget_left" in d:
            log.warning("pair %s redone within the night: %s", d["pair"], d["reason"])
            self.line(f"pair {d['pair']}: redoing the whole pair within the night, invalid by "
                      f"the lane ({d['reason']}); {d['budget_left']} of {d['budget']} redos "
                      "left (gates.redo_budget)")
        elif event == "pair_redo":
            self.line(f"pair {d['pair']}: redoing the whole pair (gates.pair_retries)")
        elif event == "look":
            for text in d.get("lines", []):
                log.info("%s", text)
                self.line(text)
        elif event == "eta" and self.eta is None:  # without a campaign: the runner's figure
            self.line(f"  elapsed {human(d['elapsed_s'])}, about {human(d['eta_s'])} to go")

    def close(self) -> None:
        pass


class RichProgress(PlainProgress):
    """Event lines scroll above a live display that ticks on its own: pair, arm, pass and
    level, requests done of the pass's total, elapsed time, ETA, last measured figure."""

    def __init__(self, console: Console, campaign: Campaign | None = None,
                 run_dir: Path | None = None, *, redo_invalid: bool = False) -> None:
        super().__init__(console, campaign, run_dir, redo_invalid=redo_invalid)
        self._stop = threading.Event()
        self.live = Live(self, console=console, refresh_per_second=2, transient=True)
        self.live.start()
        self._poller = threading.Thread(target=self._poll, name="spec-ab-progress",
                                        daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            watch = self.watch
            if watch is not None:
                watch.poll()

    def __rich__(self) -> RenderableType:
        elapsed = human(time.monotonic() - self.t0)
        head = Text.assemble((self.pairs, "bold"), " · ", self.where or "starting")
        grid = Table.grid(padding=(0, 1))
        watch = self.watch
        if watch is not None:
            level = watch.level()
            label = (self.pass_name if level.split(" ")[0] in self.pass_name
                     else f"{self.pass_name} {level}").strip()
            if watch.total:
                grid.add_row(Text(label), ProgressBar(total=watch.total,
                                                      completed=min(watch.done, watch.total),
                                                      width=30),
                             Text(f"{watch.done}/{watch.total} requests"))
            else:
                grid.add_row(Text(label), Text(f"{watch.done} requests"))
        tail = Text(f"elapsed {elapsed}")
        if self.eta is not None:
            tail.append(f" · {self.eta_text()}")
        if self.last:
            tail.append(f" · {self.last}", style="dim")
        return Group(head, grid, tail)

    def close(self) -> None:
        self._stop.set()
        self.live.stop()


def make_progress(console: Console, campaign: Campaign | None = None,
                  run_dir: Path | None = None, *, redo_invalid: bool = False) -> PlainProgress:
    if console.is_terminal:
        return RichProgress(console, campaign, run_dir, redo_invalid=redo_invalid)
    return PlainProgress(console, campaign, run_dir, redo_invalid=redo_invalid)
