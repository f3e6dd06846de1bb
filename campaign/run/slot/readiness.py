"""Is the server ready? Port open → /health 200 → /v1/models lists the model → one
1-token request answers. A 404 on /v1/models means the server has no such route: that
stage is skipped with a note (the 1-token request still proves the model answers).
Polls fast (ready is seen within a poll interval), gives up at
the boot timeout, and fails at once when the server exits while booting, quoting its
last log lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlparse

import httpx

from campaign.campaignfile import Readiness
from campaign.errors import BootExited, ServerError
from campaign.run.guards.portguard import port_open
from campaign.servers.protocol import Server

LOG_LINES_ON_FAILURE = 25


def _failure(server: Server, arm: str, what: str, hint: str) -> ServerError:
    tail = "\n".join(f"    | {line}" for line in server.logs(LOG_LINES_ON_FAILURE))
    return ServerError(f"{arm}: {what}" + (f"\n  last log lines:\n{tail}" if tail else ""),
                       hint=hint)


def wait_ready(
    server: Server,
    readiness: Readiness,
    *,
    model: str,
    endpoint_type: str,
    arm: str,
    client: httpx.Client,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    notes: list[str] | None = None,
) -> float:
    """Block until ready; return the seconds it took. Raises `ServerError`. Stages skipped
    are explained in `notes` when given."""
    start = clock()
    deadline = start + readiness.timeout_s
    url = urlparse(server.base_url)
    host, port = url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80)
    stage = "port"
    last_detail = ""
    while True:
        if not server.alive():
            failure = _failure(server, arm, f"server {server.exit_status()} while booting "
                               f"(stage: {stage})", "read the log lines above; fix the launch")
            raise BootExited(failure.message, hint=failure.hint, arm=arm,
                             status=server.exit_status() or "exited",
                             lines=tuple(server.logs(LOG_LINES_ON_FAILURE)))
        if clock() > deadline:
            raise _failure(
                server, arm,
                f"not ready after {readiness.timeout_s:.0f} s (stuck at: {stage}"
                + (f", {last_detail}" if last_detail else "") + ")",
                "raise server.readiness.timeout_s if it is just slow to load",
            )
        try:
            if stage == "port":
                if port_open(host, port):
                    stage = "health"
                    continue
            elif stage == "health":
                r = client.get(server.base_url + readiness.health_path, timeout=2.0)
                last_detail = f"{readiness.health_path} → {r.status_code}"
                if r.status_code == 200:
                    stage = "models"
                    continue
            elif stage == "models":
                r = client.get(server.base_url + readiness.models_path, timeout=5.0)
                if r.status_code == 200:
                    ids = [m.get("id") for m in r.json().get("data", [])]
                    if model in ids:
                        stage = "probe" if readiness.probe_request else "ready"
                        continue
                    raise _failure(server, arm, f"serves {ids}, not the campaign's model "
                                   f"'{model}'", "fix workloads.model (or the server's "
                                   "served model name)")
                if r.status_code == 404:
                    if notes is not None:
                        notes.append(f"{readiness.models_path} → 404: the server has no model "
                                     "list; skipped (the 1-token request checks the model)")
                    stage = "probe"
                    continue
                last_detail = f"{readiness.models_path} → {r.status_code}"
            elif stage == "probe":
                r = _probe(client, server.base_url, model, endpoint_type)
                last_detail = f"probe request → {r.status_code}"
                if r.status_code == 200:
                    stage = "ready"
                    continue
            else:
                return clock() - start
        except (httpx.TransportError, ValueError) as exc:
            last_detail = type(exc).__name__
        sleep(readiness.poll_interval_s)


def _probe(client: httpx.Client, base_url: str, model: str, endpoint_type: str) -> httpx.Response:
    if endpoint_type == "completions":
        body = {"model": model, "prompt": "ping", "max_tokens": 1}
        return client.post(base_url + "/v1/completions", json=body, timeout=60.0)
    body = {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    return client.post(base_url + "/v1/chat/completions", json=body, timeout=60.0)
