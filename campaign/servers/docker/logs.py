"""Container output: followed by a thread from the moment a container starts (the engine
keeps output from the first second), written to the arm's log file as it arrives, so a
runner that dies keeps it and a boot failure can quote the last lines. Each line is
scrubbed of the known secret values (`campaign.secrets.scrub`: the runner's secret
variables, what the launch reads in a secret position, URL passwords) as it is written;
a line not yet ended is held back until its newline (or the end of the stream), so a
secret split across two chunks is still found."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from docker.models.containers import Container

from campaign import secrets
from campaign.servers.docker.launchplan import safe_name

HOLD_MAX = 65536
"""Bytes of an unended line held back for scrubbing before they are written anyway."""


class LogFollower:
    """Follows one container's output in a thread: appends it to a file as it arrives and
    keeps the last lines in memory (for log-line readiness and failure messages)."""

    def __init__(self, container: Container, path: Path, keep: int = 2000,
                 values: list[str] | None = None) -> None:
        self.container = container
        self.values = secrets.known_values() if values is None else values
        self.path = path
        self.lines: deque[str] = deque(maxlen=keep)
        self._partial = ""
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"logs-{container.name}", daemon=True
        )
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as out:
                stream: Iterator[bytes] = self.container.logs(
                    stream=True, follow=True, stdout=True, stderr=True
                )
                held = b""
                try:
                    for chunk in stream:
                        lines, sep, held = (held + chunk).rpartition(b"\n")
                        if len(held) > HOLD_MAX:  # a line that never ends: write it anyway
                            lines, sep, held = lines + sep + held, b"", b""
                        if sep or lines:
                            out.write(self._scrub(lines + sep))
                            out.flush()
                        self._add(chunk.decode("utf-8", errors="replace"))
                finally:
                    if held:
                        out.write(self._scrub(held))
        except Exception as exc:  # the container was removed under us, the host went away
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._changed:
                if self._partial:
                    self.lines.append(secrets.scrub(self._partial, values=self.values))
                    self._partial = ""
                self._changed.notify_all()

    def _scrub(self, data: bytes) -> bytes:
        text = data.decode("utf-8", errors="surrogateescape")
        return secrets.scrub(text, values=self.values).encode("utf-8", errors="surrogateescape")

    def _add(self, text: str) -> None:
        with self._changed:
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()
            self.lines.extend(secrets.scrub(p.rstrip("\r"), values=self.values)
                              for p in parts)
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def search(self, pattern: re.Pattern[str]) -> bool:
        with self._changed:
            return any(pattern.search(line) for line in [*self.lines, self._partial])

    def wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def finish(self, timeout: float = 3.0) -> None:
        """Wait for the stream to end (the container exited or was removed)."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def tail(self, n: int) -> list[str]:
        with self._changed:
            lines = [*self.lines, *([secrets.scrub(self._partial, values=self.values)]
                                    if self._partial else [])]
        return lines[-n:]


def extra_log_path(log_path: Path, role: str) -> Path:
    """`server.log` → `server.<role>.log` next to it (an extra container's own log)."""
    return log_path.with_name(f"{log_path.stem}.{safe_name(role)}{log_path.suffix or '.log'}")


def log_line(path: Path, text: str) -> None:
    """Append one line (spec-ab's own notes) to a log file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


__all__ = ["LogFollower", "extra_log_path", "log_line"]
