"""A one-shot container on a real Docker engine (the offline sim image): what `check` uses
to read vLLM's flags from an image. The script runs with the image's python3 and no
network, its failure is said with its own last line, nothing is pulled and no container
is left behind. Needs `scripts/start-dockerd && scripts/build-sim-image` (CI runs both)."""

from __future__ import annotations

import docker
import pytest

from campaign.campaignfile import DockerLaunch
from campaign.markers import LABEL_ROLE
from campaign.run.checks.vllmengine import Engines
from campaign.servers.docker.oneshot import PROBE_ROLE, OneShotError, image_info, run_python
from tests.runs import ROOT, SIM_IMAGE

pytestmark = pytest.mark.docker

OFFLINE = """
import socket, sys
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    print("online")
except OSError:
    print("offline")
print(sys.version_info[0])
"""


def probes(engine: docker.DockerClient) -> set[str]:
    found = engine.containers.list(all=True, filters={"label": f"{LABEL_ROLE}={PROBE_ROLE}"})
    return {c.id for c in found}


def test_a_script_runs_in_the_image_offline_and_leaves_nothing(
        engine: docker.DockerClient) -> None:
    before = probes(engine)
    assert run_python(engine, SIM_IMAGE, OFFLINE, timeout_s=120).split() == ["offline", "3"]
    with pytest.raises(OneShotError, match="exited with code 3: boom"):
        run_python(engine, SIM_IMAGE, "import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)",
                   timeout_s=120)
    with pytest.raises(OneShotError, match="not present"):
        run_python(engine, "spec-ab-no-such-image:never", "print(1)", timeout_s=60)
    assert probes(engine) == before
    info = image_info(engine, SIM_IMAGE)
    assert info.image_id.startswith("sha256:")


def test_the_sim_image_is_not_taken_for_vllm(engine: docker.DockerClient) -> None:
    launch = DockerLaunch(backend="docker", image=SIM_IMAGE, port=8000)
    assert Engines(client_factory=lambda host: engine).target(launch, ROOT) is None
