"""Each watch test keeps its own cache of verified nights (never the user's)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECAB_WATCH_CACHE", str(tmp_path / "watch-cache"))
