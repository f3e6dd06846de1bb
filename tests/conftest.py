"""Shared test configuration.

Markers (see pyproject): `integration` starts real servers / real AIPerf, `docker` needs a
real Docker engine and the offline sim image, `browser` needs headless Chromium, `gb10`
also needs root and sshd (the `sshbox` fixture of tests/sshbox.py plays box 2), `vllm`
needs a real CPU vLLM and the tiny model (scripts/setup-vllm-cpu).  Outside
CI a test whose engine is missing skips with the command that enables it; with CI=true a
missing engine is a failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, what: str, how: str) -> None:
    """Skip (outside CI) or fail (in CI) when `condition` is false."""
    if condition:
        return
    message = f"{what} is not available; to enable: {how}"
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return ROOT / "fixtures" / "tokenizer"


from sshbox import sshbox  # noqa: E402,F401  (the loopback "second box" for the gb10 tests)
