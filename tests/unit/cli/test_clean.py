"""`spec-ab clean FILE` of a docker campaign on a machine whose docker engine does not
answer: one clear line (what, which endpoint, what to do) and exit 3, never docker's own
words or a traceback; a process campaign is not told about Docker."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from campaign.run.guards import cleanup
from tests.cli import invoke
from tests.runs import ROOT
from tests.unit.run.test_launchcheck import write

DOCKER = textwrap.dedent("""\
    backend: docker
    image: vllm/vllm-openai:v1
    command: [--model, /m, --port, "8000"]
    port: 8000
    """)


def _docker_campaign(tmp_path: Path) -> Path:
    return write(tmp_path, DOCKER, "control: {}\ncand: {env: {A: '1'}}\n")


@pytest.mark.parametrize(("docker_host", "reason"), [
    ("unix:///nonexistent/spec-ab-test/docker.sock", "no socket there"),
    ("bogus", "not an address docker understands"),
])
def test_clean_of_a_docker_campaign_without_an_engine_says_so_in_one_line(
        tmp_path: Path, docker_host: str, reason: str) -> None:
    """Issue "The first night, for a newcomer", 12: `clean` ended with docker's own message
    ("Invalid bind address format: …", or a note without the endpoint) and exit 0 with "no
    leftovers" although no container was looked for."""
    r = invoke("clean", str(_docker_campaign(tmp_path)), "--dry-run",
               env={"DOCKER_HOST": docker_host, "COLUMNS": "1000"})
    assert r.code == 3, (r.stdout, r.stderr)
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, r.stderr
    (line,) = errors
    assert f"no docker engine answers at {docker_host}" in line and reason in line
    assert "run `spec-ab clean" in line and "again" in line
    assert "Traceback" not in r.stderr and "Invalid bind address" not in r.stderr
    assert "Error while fetching" not in r.stderr and "no leftovers" not in r.stdout


def test_clean_of_a_process_campaign_says_nothing_about_docker(tmp_path: Path) -> None:
    r = invoke("clean", str(ROOT / "examples" / "sim-pair.yaml"), "--dry-run",
               env={"DOCKER_HOST": "unix:///nonexistent/spec-ab-test/docker.sock"})
    assert r.code == 0, r.stderr
    assert "docker" not in r.stderr.lower()


def test_an_ssh_engine_that_cannot_be_reached_is_a_note_not_a_traceback() -> None:
    """DOCKER_HOST=ssh://… whose host is not known raised socket.gaierror out of `clean`
    (a traceback): it is an unreachable engine like any other."""

    def unknown(host: str | None) -> Any:
        raise socket.gaierror(-2, "Name or service not known")

    scan = cleanup.find_leftovers(unknown, docker_hosts=["ssh://nohost"],
                                  include_processes=False)
    assert list(scan) == []
    assert [(u.endpoint, u.reason) for u in scan.unreachable] == [
        ("ssh://nohost", "its host name is not known")]
    assert len(scan.notes) == 1 and "ssh://nohost" in scan.notes[0]
