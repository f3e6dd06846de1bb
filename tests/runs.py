"""Results directories for tests, written through the store's own API."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from campaign.results.journal import PassRow
from campaign.results.store import RunStore


def record_passes(store: RunStore, rows: Iterable[PassRow], *, complete: bool = True) -> Path:
    """Journal `rows` as one pass event, rebuild passes.csv from the journal and, when
    `complete`, mark the run finished (what `spec-ab run` leaves); the run directory."""
    store.journal("pass", rows=[dataclasses.asdict(r) for r in rows])
    store.rebuild_passes_csv()
    if complete:
        store.journal("finished", complete=True)
    return store.run_dir
