"""`portguard`: a squatter on the campaign's port is named, never measured."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from campaign.campaignfile import ExternalLaunch, ProcessLaunch
from campaign.run import portguard
from campaign.servers.process import ProcessServer
from campaign.sim.testing import free_port
from tests.unit.servers.test_server_context import ctx


@contextmanager
def listening(port: int) -> Iterator[None]:
    """This test process listens on 127.0.0.1:port (the squatter)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    try:
        yield
    finally:
        sock.close()


def launch(port: int, *code: str) -> ProcessLaunch:
    return ProcessLaunch(backend="process", port=port, stop_timeout_s=2,
                         command=[sys.executable, "-c", "\n".join(code)])


def test_a_port_held_before_the_boot_is_named_with_its_holder() -> None:
    port = free_port()
    assert portguard.busy_before_boot(launch(port, "pass")) is None
    with listening(port):
        why = portguard.busy_before_boot(launch(port, "pass"))
        external = ExternalLaunch(backend="external", base_url=f"http://127.0.0.1:{port}")
        assert portguard.busy_before_boot(external) is None  # busy by design
    assert why is not None and f"port {port} on 127.0.0.1 was busy before" in why
    assert f"pid {os.getpid()}" in why and "lane fault" in why


def test_a_listener_outside_the_servers_process_group_is_foreign(tmp_path: Path) -> None:
    port = free_port()
    idle = launch(port, "import time", "time.sleep(30)")  # started, never listens
    with listening(port), ProcessServer(idle, ctx(tmp_path)) as server:
        why = portguard.foreign_listener(idle, server)
    assert why is not None and f"answered by pid {os.getpid()}" in why

    own = launch(port, "import socket, time", "s = socket.socket()",
                 f"s.bind(('127.0.0.1', {port}))", "s.listen()", "print('up', flush=True)",
                 "time.sleep(30)")
    with ProcessServer(own, ctx(tmp_path)) as server:
        deadline = time.monotonic() + 20
        while not portguard.listener_pids(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert portguard.listener_pids(port)
        assert portguard.foreign_listener(own, server) is None
        assert portguard.foreign_listener(own, object()) is None  # cannot tell: not judged
