"""`workloads.sessions`: multi-turn agent sessions by class, one AIPerf pass per class (its
`multi_turn` dataset: each turn sends the growing history), each class a cell
`("sessions", <class>)`; and the check its files get when the campaign is read.

A sessions file is AIPerf's `multi_turn` JSONL: one session a line, `{"type":
"multi_turn", "session_id": ..., "turns": [{"text": ...}, ...]}`, a leading `role: system`
turn allowed (AIPerf sends it as the system message of every turn). spec-ab ships three
classes (`builtin:sessions/coding`, `shell`, `tool_json`). The per-turn figures of a pass
(TTFT, ITL, acceptance by turn index) are `run.measure.turns`'.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from campaign.campaignfile.base import Model, Requests, Streams, Tokens, level_names

FORMAT = ('AIPerf multi_turn JSONL: one {"type": "multi_turn", "session_id": "...", '
          '"turns": [{"text": "..."}, ...]} session per line')


class SessionsWorkload(Model):
    """Multi-turn agent sessions by class, one AIPerf pass per class."""

    fixtures: dict[str, Path] = Field(
        description="Session class → AIPerf multi_turn JSONL file (`builtin:sessions/coding`, "
        "`shell`, `tool_json`, or your own); each class a cell of workload `sessions`.")
    concurrency: Streams = Field(4, ge=1, description="Sessions in flight.")
    sessions: Requests = Field(16, ge=1, description="Sessions of each class's pass (whole "
                               "sessions, every turn; the file's drawn again past its end).")
    output_tokens: Tokens = Field(128, ge=1, description="Exact output length of every "
                                  "turn (tokens).")

    @field_validator("fixtures")
    @classmethod
    def _classes(cls, v: dict[str, Path]) -> dict[str, Path]:
        return level_names(v, empty="give at least one session class", what="class")

    @property
    def levels(self) -> list[str]:
        return list(self.fixtures)


@dataclass(frozen=True)
class SessionsInfo:
    """What a valid sessions file holds."""

    sessions: int
    turns: int
    """User turns over every session (a system turn is not a request)."""

    @property
    def turns_per_session(self) -> float:
        return self.turns / self.sessions if self.sessions else 0.0


class SessionsProblem(ValueError):
    """A sessions file AIPerf cannot replay: the message names the file and line."""


def _user_turns(at: str, line: str) -> int:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise SessionsProblem(f"{at}: not a JSON object; write the file as {FORMAT}")
    turns = doc.get("turns")
    if not isinstance(turns, list) or not turns:
        raise SessionsProblem(f"{at}: no turns (a list of {{\"text\": ...}}); give each "
                              "session its turns")
    users = [t for t in turns if isinstance(t, dict) and t.get("role") != "system"]
    if not users:
        raise SessionsProblem(f"{at}: no user turn (only a system turn): give the session "
                              "at least one turn to send")
    return len(users)


def read(path: Path) -> SessionsInfo:
    """The summary of a sessions file; `SessionsProblem` when it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SessionsProblem(f"{path.name}: cannot be read as UTF-8 ({exc})") from None
    sessions = turns = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            turns += _user_turns(f"{path.name}:{n}", line)
            sessions += 1
    if not sessions:
        raise SessionsProblem(f"{path.name}: no session; write the file as {FORMAT}")
    return SessionsInfo(sessions, turns)


def file_problem(path: Path) -> str | None:
    """What makes an existing file unusable as a sessions class, or None."""
    try:
        read(path)
    except SessionsProblem as exc:
        return str(exc)
    return None
