"""The nights `watch` has verified, kept by content: a nightly history is verified once.

`spec-ab verify` reads a run's journal, registration, frozen campaign, passes.csv and
signature, every byte (tens of milliseconds a night). A night's files never change once it
finished, so the summary `watch` reads from a verified night is kept under a key made of
the SHA-256 of each of those files and spec-ab's version: the same bytes verify the same
way. A file edited, added or removed changes the key, and the night is verified again.
Only nights that verify are kept; a failing night is checked every time.

The cache is `$XDG_CACHE_HOME/spec-ab/watch/` (default `~/.cache/spec-ab/watch/`), or the
folder `SPECAB_WATCH_CACHE` names (`off`: no cache). A cache that cannot be read or
written is no error: the night is verified again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from campaign import __version__

FILES = ("journal.jsonl", "preregistration.json", "campaign.yaml", "passes.csv",
         "registration.sig")
"""What `verify_run` reads of a run folder (its key)."""
FORMAT = 1
"""The summary's own format (bumped when `nights.Night` changes)."""


def folder() -> Path | None:
    """The cache folder, or None when it is turned off."""
    given = os.environ.get("SPECAB_WATCH_CACHE", "")
    if given.strip().lower() == "off":
        return None
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spec-ab" / "watch"


def key(run_dir: Path) -> str | None:
    """The content key of a run folder (None: a file cannot be read as a regular file)."""
    h = hashlib.sha256(f"spec-ab {__version__} watch {FORMAT}\n".encode())
    for name in FILES:
        path = run_dir / name
        try:
            if not path.exists():
                h.update(f"{name} -\n".encode())
                continue
            if not path.is_file():
                return None
            h.update(f"{name} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
        except OSError:
            return None
    return h.hexdigest()


def load(where: Path | None, k: str | None) -> dict[str, Any] | None:
    if where is None or k is None:
        return None
    try:
        doc = json.loads((where / f"{k}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def save(where: Path | None, k: str | None, doc: dict[str, Any]) -> None:
    if where is None or k is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{k}.{os.getpid()}.tmp"  # renamed: a reader sees all or nothing
        tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
        os.replace(tmp, where / f"{k}.json")
    except OSError:
        pass  # a cache, not a result: the night is verified again next time
