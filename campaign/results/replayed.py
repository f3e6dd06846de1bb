"""Did both arms of every pair replay the registered schedules? The `schedules` check of
`spec-ab verify` (`integrity.verify_run`).

A run with a `rate` sweep or a `trace` writes each schedule AIPerf replays once, under
`schedules/<name>.jsonl` (`run.measure.arrivals`), registers each file's SHA-256 (the
journal's `registered` line, `schedules`: name → sha256, and preregistration.json's
`schedules`), and journals on every pass the SHA-256 of the bytes it replayed
(`schedule_sha256`). Three copies of one fact; this module checks them against each other:

- each registered schedule's file is there and hashes to its registered SHA-256, and the
  folder holds no schedule that was not registered;
- every rate or trace pass replayed the schedule registered for its level (its pass name,
  `rate-r4`, `trace-<name>`, is the schedule's; a retry, `rate-r4.retry1`, its level's);
- preregistration.json and the journal's first line register the same schedules.

Any finding means the arms' requests can no longer be shown identical: the schedules are
what makes control and candidate receive byte-identical loads by construction. A run that
replays no schedule (no rate level, no trace) has no such check.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.errors import ResultsError
from campaign.textfiles import open_regular

FOLDER = "schedules"
"""The run folder's subfolder of schedules (`run.measure.arrivals.FOLDER`)."""
TIMED = ("rate", "trace")
"""The workloads whose passes replay a registered schedule (`run.measure.replay.TIMED`)."""
MEANS = "the arms' requests can no longer be shown identical"
"""What every finding means for the run."""
SHOWN = 4
"""Findings named in full; the rest are counted."""
RETRY = re.compile(r"\.retry\d+$")
"""A retried pass's name: `rate-r4.retry1` replays `rate-r4` (`run.slot.lifecycle`)."""


@dataclass(frozen=True)
class Replayed:
    """What the check found: its findings (none: every copy agrees) and, when it holds,
    the pairs whose arms are shown to have replayed the registered schedules."""

    findings: tuple[str, ...]
    registered: Mapping[str, str]
    pairs: Mapping[int, tuple[str, ...]]
    """Pair → its arms that replayed a registered schedule, in the order they ran."""
    passes: int

    @property
    def ok(self) -> bool:
        return not self.findings

    def text(self) -> str:
        """One line for `verify`: the findings, or what holds, per pair."""
        if self.findings:
            more = (f" (+{len(self.findings) - SHOWN} more)"
                    if len(self.findings) > SHOWN else "")
            return "; ".join(self.findings[:SHOWN]) + more
        names = ", ".join(sorted(self.registered))
        if not self.pairs:
            return (f"{len(self.registered)} schedule(s) as registered ({names}); no pass "
                    "replayed one yet")
        each = "; ".join(f"pair {p}: {' and '.join(arms)}"
                         for p, arms in sorted(self.pairs.items()))
        return (f"{len(self.registered)} schedule(s) as registered ({names}); "
                f"{self.passes} passes replayed them byte for byte, both arms of each pair "
                f"({each})")


def registered_schedules(prereg: Mapping[str, str] | None, first: Mapping[str, Any]
                         ) -> tuple[dict[str, str], list[str]]:
    """The registered schedules (name → sha256) and any disagreement between the two
    copies: preregistration.json's `schedules` and the journal's `registered` line's."""
    line = first.get("schedules")
    journaled = ({str(k): str(v) for k, v in line.items()} if isinstance(line, dict)
                 else None)
    if prereg is not None and journaled is not None and dict(prereg) != journaled:
        differ = sorted(k for k in set(prereg) | set(journaled)
                        if prereg.get(k) != journaled.get(k))
        return dict(prereg), [
            f"preregistration.json and journal.jsonl's registered line register different "
            f"schedules ({', '.join(differ)}): {MEANS}"]
    return dict(prereg if prereg is not None else journaled or {}), []


def file_sha256(path: Path) -> str:
    """SHA-256 of a schedule file (a regular file only: `open_regular`)."""
    h = hashlib.sha256()
    with open_regular(path, "schedule") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(run_dir: Path, registered: Mapping[str, str]) -> list[str]:
    """Each schedule file against its registered SHA-256; files not registered."""
    out: list[str] = []
    for name, want in sorted(registered.items()):
        rel = f"{FOLDER}/{name}.jsonl"
        try:
            got = file_sha256(run_dir / rel)
        except FileNotFoundError:
            out.append(f"{rel} is missing (registered sha256 {want[:12]}): {MEANS}")
            continue
        except (ResultsError, OSError) as exc:
            out.append(f"{rel} cannot be read ({getattr(exc, 'message', exc)}; registered "
                       f"sha256 {want[:12]}): {MEANS}")
            continue
        if got != want:
            out.append(f"{rel} changed after registration: registered sha256 {want[:12]}, "
                       f"found {got[:12]}: {MEANS}")
    folder = run_dir / FOLDER
    extra = sorted(p.name for p in folder.glob("*.jsonl")
                   if p.stem not in registered) if folder.is_dir() else []
    for fname in extra:
        try:
            found = f"sha256 {file_sha256(folder / fname)[:12]}"
        except (ResultsError, OSError):
            found = "unreadable"
        out.append(f"{FOLDER}/{fname} was not registered ({found}): a schedule added after "
                   f"registration, that no pass can be shown to have replayed as registered; "
                   f"{MEANS}")
    return out


def _passes(events: Sequence[Mapping[str, Any]], registered: Mapping[str, str]
            ) -> tuple[list[str], dict[int, list[str]], int]:
    """Each rate or trace pass's journaled `schedule_sha256` against its level's
    registered one; the pairs' arms that replayed them; the passes checked."""
    out: list[str] = []
    pairs: dict[int, list[str]] = {}
    n = 0
    for e in events:
        if e.get("event") != "pass" or e.get("workload") not in TIMED:
            continue
        n += 1
        name, got = str(e.get("name")), e.get("schedule_sha256")
        where = (f"pair {e.get('pair')} {e.get('arm')} pass {name}"
                 + (f" (attempt {e['attempt']})" if e.get("attempt", 1) != 1 else ""))
        schedule = RETRY.sub("", name)
        want = registered.get(schedule)
        if want is None:
            out.append(f"{where} replayed a schedule that was not registered "
                       f"({FOLDER}/{schedule}.jsonl): {MEANS}")
        elif not isinstance(got, str):
            out.append(f"{where} journaled no schedule_sha256 (registered {want[:12]}): "
                       f"{MEANS}")
        elif got != want:
            out.append(f"{where} replayed sha256 {got[:12]}, not the registered schedule "
                       f"{want[:12]}: {MEANS}")
        else:
            pair, arm = e.get("pair"), str(e.get("arm"))
            if isinstance(pair, int) and arm not in pairs.setdefault(pair, []):
                pairs[pair].append(arm)
    return out, pairs, n


def check(run_dir: Path, prereg: Mapping[str, str] | None, first: Mapping[str, Any],
          events: Sequence[Mapping[str, Any]]) -> Replayed | None:
    """The run's schedules checked (None: the run replays none and registered none)."""
    registered, findings = registered_schedules(prereg, first)
    timed = any(e.get("event") == "pass" and e.get("workload") in TIMED for e in events)
    if not registered and not timed and not (run_dir / FOLDER).is_dir():
        return None
    findings += _files(run_dir, registered)
    more, pairs, n = _passes(events, registered)
    findings += more
    return Replayed(tuple(findings), registered, {p: tuple(a) for p, a in pairs.items()}, n)
