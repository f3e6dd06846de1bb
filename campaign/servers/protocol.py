"""The protocol every server backend implements, and the context an arm runs in.

A backend only launches, watches and stops. `with serving(server):` (any `Server`) or
`with server:` (the backends here, through `ServerContext`) starts it and always stops it,
also when the start or the body fails. Readiness (port, /health, /v1/models, a
1-token request) is generic and lives in `campaign.run.slot.readiness`; it polls `alive()` so a
server that dies while booting fails fast with `exit_status()` and the last `logs()`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar


@dataclass(frozen=True)
class ArmContext:
    """Where and as what one arm of one pair runs."""

    run_id: str
    pair: int
    arm: str
    log_path: Path
    """The server's combined output is streamed here from its first second."""
    campaign_dir: Path
    """Relative paths in the campaign file resolve against this folder."""
    labels: dict[str, str] = field(default_factory=dict)
    """Labels for everything started (`campaign.markers`: run, pair, arm)."""


class Server(Protocol):
    """One arm's server. `stop()` is idempotent and safe to call after any failure."""

    @property
    def base_url(self) -> str:
        """http://host:port the load generator talks to."""
        ...

    def start(self) -> None:
        """Launch (not wait for readiness). Raises `ServerError` when it cannot launch."""
        ...

    def alive(self) -> bool:
        """False once the server process / container has exited."""
        ...

    def exit_status(self) -> str | None:
        """How it ended, in words ("exited with code 1", "OOM-killed"), or None if alive."""
        ...

    def logs(self, tail: int = 40) -> list[str]:
        """The last `tail` lines of the server's output."""
        ...

    def stop(self) -> None:
        """Stop gracefully with a timeout, then kill; remove what was started."""
        ...

    def describe(self) -> list[str]:
        """Command lines a person could paste to do the same launch by hand."""
        ...

    def facts(self) -> dict[str, Any]:
        """Facts for the manifest (image digests, pids, hosts), JSON-serialisable."""
        ...


S = TypeVar("S", bound=Server)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """Start `server`, yield it, and stop it always: also when `start()` or the body raises
    (a failed start may have left a process or container behind; `stop()` is idempotent).
    An error in `stop()` itself propagates, chained to the body's error if there was one."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


Self = TypeVar("Self", bound="ServerContext")


class ServerContext(ABC):
    """Makes a backend a context manager: `with ProcessServer(...) as server:` starts it and
    stops it on the way out, whatever happens (the same rules as `serving`)."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self: Self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


__all__ = ["ArmContext", "Server", "ServerContext", "serving"]
