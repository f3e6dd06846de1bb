"""Ctrl-C and SIGTERM during `spec-ab run`: the first stops gracefully (AIPerf, the
server, the journal), saying at once what it waits for; the second stops at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


def install(cancel: threading.Event, doing: Callable[[], str],
            say: Callable[[str], None]) -> dict[int, Any]:
    """Handle SIGINT and SIGTERM: set `cancel` and `say` what the run waits for (`doing`);
    a second signal raises KeyboardInterrupt. Returns the previous handlers (`restore`)."""
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        now = doing()
        waiting = (f"waiting for {now} to stop" if now
                   else "waiting for AIPerf and the server to stop")
        say(f"\nstopping: {waiting}; press Ctrl-C again to stop at once")

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore(previous: dict[int, Any]) -> None:
    for sig, h in previous.items():
        signal.signal(sig, h)
