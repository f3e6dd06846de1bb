"""The server measured on a docker arm is the container spec-ab started (`portguard`), on
the real engine with the offline sim image, through the real CLI in a subprocess:

- `network: host`, nothing else on the port: the arm is measured (the listener is inside
  the container's process tree), exit 0;
- `network: host`, and while the container's sim is still "loading its model" another
  server starts answering on the arm's address ([::1], IPv6 only, while the container's
  sim listens on 0.0.0.0): readiness succeeds against it at once, and the slot is a lane
  fault naming it, redone, never measured — exit 4. Before the check it was measured.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from campaign.markers import LABEL_RUN
from tests.runs import ROOT, SIM_IMAGE, free_port

pytestmark = pytest.mark.docker

SPEC_AB = [sys.executable, "-m", "campaign"]


def campaign(tmp_path: Path, name: str, port: int, host: str, boot_delay: str) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(f"""
name: {name}
hypothesis: test
lane: dk-guard-{name}
preregistration:
  pairs: 1
  decision_cells: [{{workload: knee, level: c1}}]
  gates: {{retries: 0, pair_retries: 0, redo_budget: 1, min_completed_requests: 2,
          pass_timeout_s: 120, min_output_tokens: 10}}
server:
  backend: docker
  image: {SIM_IMAGE}
  command: [python3, -m, campaign.sim, serve, --host, 0.0.0.0, --port, "{port}"]
  network: host
  host: "{host}"
  port: {port}
  env:
    SPECAB_SIM_MODEL: sim
    SPECAB_SIM_TIME_SCALE: "40"
    SPECAB_SIM_BOOT_DELAY: "{boot_delay}"
  stop_timeout_s: 5
  readiness: {{timeout_s: 60, poll_interval_s: 0.1}}
arms:
  control: {{}}
  cand:
    env: {{SPECAB_SIM_DEPTH: "7"}}
workloads:
  model: sim
  tokenizer: {ROOT / "fixtures" / "tokenizer"}
  warmup: []
  knee:
    concurrency: [1]
    input_tokens: 64
    output_tokens: 32
    requests_per_level: 6
""")
    return path


def events_of(out: Path) -> list[dict[str, Any]]:
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def containers_of(engine: Any, name: str) -> list[Any]:
    return [c for c in engine.containers.list(all=True, filters={"label": LABEL_RUN},
                                                 ignore_removed=True)
            if name in c.labels.get(LABEL_RUN, "")]


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SPECAB_LOCK_DIR": str(tmp_path / "locks")}


def test_a_host_network_container_that_owns_its_port_is_measured(
        engine: Any, tmp_path: Path) -> None:
    name = f"dkg-ok-{uuid.uuid4().hex[:6]}"
    path = campaign(tmp_path, name, free_port(), "127.0.0.1", "0.5")
    out = tmp_path / "results"
    try:
        proc = subprocess.run([*SPEC_AB, "run", str(path), "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600, env=env(tmp_path),
                              check=False)
    finally:
        for c in containers_of(engine, name):
            c.remove(force=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = events_of(out)
    assert len([e for e in events if e["event"] == "server_ready"]) == 2
    assert not [e for e in events if e["event"] == "pair_invalid"]


class _Impostor(BaseHTTPRequestHandler):
    """A vLLM-like server that answers every readiness stage for model `sim`."""

    def _answer(self) -> None:
        body = json.dumps({"data": [{"id": "sim"}], "choices": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


class _V6Only(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


@contextmanager
def impostor(port: int) -> Iterator[None]:
    server = _V6Only(("::1", port), _Impostor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_foreign_listener_on_a_host_network_arms_address_is_a_lane_fault(
        engine: Any, tmp_path: Path) -> None:
    name = f"dkg-bad-{uuid.uuid4().hex[:6]}"
    port = free_port()
    path = campaign(tmp_path, name, port, "::1", "15")
    out = tmp_path / "results"
    # the slot's own check is tested: the boot check before the run (which a squatter
    # there would fool alike) is skipped
    proc = subprocess.Popen([*SPEC_AB, "run", str(path), "--out", str(out),
                             "--skip-boot-check"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(tmp_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(c.status == "running" for c in containers_of(engine, name)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no container started"
            time.sleep(0.1)
        with impostor(port):  # arrives after the check before the boot, as between pairs
            stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in containers_of(engine, name):
            c.remove(force=True)
    assert proc.returncode == 4, stdout[-3000:] + stderr[-3000:]
    events = events_of(out)
    invalid = [e for e in events if e["event"] == "pair_invalid"]
    assert invalid and all(e["fault"] == "lane" for e in invalid), invalid
    first = str(invalid[0]["reason"])
    assert f"port {port} is answered by pid {os.getpid()}" in first, first
    assert "not by container specab-" in first, first
    assert [e["pair"] for e in events if e["event"] == "pair_redo"] == [1]
    assert not [e for e in events if e["event"] == "pass"]  # never measured
