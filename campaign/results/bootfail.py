"""Arms that never became ready, read from a run's journal: the one line a report leads
with ("depth7 never became ready (pair 1): server exited with code 2 while booting: error:
…") and the server's first error line it quotes.

The runner journals a `launch_error` when an arm never ready exits while booting twice
the same way (`run.launcherror`); an older run, or one stopped on the first boot exit,
has only its `slot_failed` event: an arm that failed while booting and has no
`server_ready` anywhere in the journal never became ready either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_BOX = re.compile(r"^[\s│┃|╭╮╰╯─━]+|[\s│┃|╭╮╰╯─━]+$")
_ERROR = re.compile(r"\b(error|exception|fatal|traceback|no such|unknown|invalid)\b",
                    re.IGNORECASE)
_BOOT_EXIT = re.compile(r"^(?P<arm>[^:\n]+): server (?P<status>.+?) while booting")


def first_error(lines: Iterable[str]) -> str:
    """The server's first line that reads as an error (box-drawing trimmed; a one-word
    heading such as "Error" gives the line under it), else its last non-empty line, else
    ''."""
    clean = [_BOX.sub("", line).strip() for line in lines]
    clean = [line for line in clean if line]
    for i, line in enumerate(clean):
        if _ERROR.search(line):
            heading = len(line.split()) == 1 and i + 1 < len(clean)
            return clean[i + 1] if heading else line
    return clean[-1] if clean else ""


def headline(arm: str, pair: int, status: str, error: str) -> str:
    """'depth7 never became ready (pair 1): server exited with code 2 while booting: …'"""
    return (f"{arm} never became ready (pair {pair}): server {status} while booting"
            + (f": {error}" if error else ""))


@dataclass(frozen=True)
class NeverReady:
    """An arm that exited while booting and was never ready in the run."""

    arm: str
    pair: int
    status: str
    """How the server ended ("exited with code 2")."""
    error: str
    """The server's first error line ('' when it printed none)."""

    @property
    def line(self) -> str:
        return headline(self.arm, self.pair, self.status, self.error)


def _log_lines(reason: str) -> list[str]:
    """The server's log lines quoted in a boot failure's reason ('    | …')."""
    return [line.split("| ", 1)[1] if "| " in line else ""
            for line in reason.splitlines() if line.lstrip().startswith("|")]


def never_ready(events: Sequence[Mapping[str, Any]]) -> tuple[NeverReady, ...]:
    """Each arm the journal shows exiting while booting and never ready, first failure
    first (one per arm)."""
    ready_slots = {e.get("slot") for e in events if e.get("event") == "server_ready"}
    ready = {e.get("arm") for e in events
             if e.get("event") == "slot_start" and e.get("slot") in ready_slots}
    found: dict[str, NeverReady] = {}
    for e in events:
        arm = e.get("arm")
        if not isinstance(arm, str) or arm in ready or arm in found:
            continue
        if e.get("event") == "launch_error":
            found[arm] = NeverReady(arm, int(e.get("pair", 0)), str(e.get("status", "")),
                                    str(e.get("error", "")))
        elif e.get("event") == "slot_failed":
            m = _BOOT_EXIT.match(str(e.get("reason", "")))
            if m and m["arm"] == arm:
                found[arm] = NeverReady(arm, int(e.get("pair", 0)), m["status"],
                                        first_error(_log_lines(str(e["reason"]))))
    return tuple(found.values())
