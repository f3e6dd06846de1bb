"""The unit tier starts no server and no AIPerf: a test that accepts a connection in its
own process (an HTTP server in a thread), or starts AIPerf's `profile`, the simulated lane,
`docker` or `sshd` as a child, fails with where it belongs (tests/integration, or
tests/e2e for a whole campaign). A socket that only listens (the readiness's port check
needs one) is no server; `aiperf --version` and `aiperf config validate` measure nothing."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest

WHERE = "it belongs in tests/integration (tests/e2e for a whole campaign)"
SERVERS = ("docker", "dockerd", "sshd", "xpyd-sim")
"""Children that serve (by their executable's name)."""


def _words(args: Any) -> list[str]:
    if isinstance(args, str | bytes):
        return str(args).split()
    try:
        return [str(a) for a in args]
    except TypeError:
        return [str(args)]


def serving_child(words: Sequence[str]) -> str | None:
    """What in a child's command line serves or loads a server, if anything: AIPerf's
    `profile`, the simulated lane (`sim serve`, `campaign.sim`), a named server."""
    names = [w.rsplit("/", 1)[-1] for w in words]
    for i, name in enumerate(names):
        if name in SERVERS:
            return words[i]
        if name == "aiperf" and "profile" in names[i + 1:]:
            return "aiperf profile"
        if name == "campaign.sim" or (name == "sim" and "serve" in names[i + 1:i + 2]):
            return "the simulated lane"
        if name in ("campaign", "spec-ab") and _boots(names[i + 1:]):
            return "a campaign (spec-ab run or check --boot)"
    return None


def _boots(args: Sequence[str]) -> bool:
    """Does `spec-ab ARGS` boot servers: `run` without --dry-run, `check --boot`?"""
    sub = next((a for a in args if not a.startswith("-")), "")
    return ((sub == "run" and "--dry-run" not in args)
            or (sub == "check" and "--boot" in args))


def no_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the guard for one test (tests/conftest.py does, for every test under
    tests/unit: by the test's path, so no order of arguments on the command line can
    leave a unit test unguarded, as a conftest's autouse fixture could)."""
    def accept(self: socket.socket) -> Any:
        raise AssertionError(f"a unit test accepted a connection (a server): {WHERE}")

    popen_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        words = _words(args)
        if words and words[0].rsplit("/", 1)[-1] in ("sh", "bash") and "-c" in words:
            words = [w for part in words for w in part.split()]  # a shell's command text
        what = serving_child(words)
        if what is not None:
            raise AssertionError(f"a unit test started {what}: {WHERE}")
        popen_init(self, args, *rest, **kw)

    monkeypatch.setattr(socket.socket, "accept", accept)
    monkeypatch.setattr(subprocess.Popen, "__init__", init)
