"""The journal's hash chain: every line names the digest of the line before it.

`journal.jsonl` is appended line by line (`journal.append`). From results schema 3 with
`chain: 1` on its first line (`registered`), every later line carries `prev`, the SHA-256
of the raw bytes of the line before it (its newline included). The digest of the last
line therefore vouches for every line before it: the **run's digest**. `spec-ab run`
prints it when it ends and `spec-ab report --format json` carries it, so a CI log holds
an outside copy; `spec-ab verify RUN --digest D` walks the chain and compares.

The first line also holds the SHA-256 of `preregistration.json` and of the frozen
`campaign.yaml` as they were written before the first boot (`registration_sha256`,
`campaign_sha256`): the registration, its time, the campaign, its launches and its
hypothesis are all under the chain. A chain is evidence against an edit only with an
anchor outside the folder (the digest printed in a CI log, or a signature:
`results.signing`); without one, an editor who rewrites every line consistently is
caught by nothing but the anchor — which is why the digest is printed.

Whether a journal is chained is not its first line's to say: an editor would delete the
marker. `walk` is told why it must be (`integrity.chain_expected`: the registration
records `journal_chain`, or the run is signed) and also takes any line's `prev`, or the
first line's file digests, as proof; only a journal none of these marks is read as
written before the chain (`PRE_CHAIN`).

Appends are cheap: the digest of the last line is kept per path with the file's size and
modification time, and re-read from the file's tail only when either differs (another
process appended, or the file was replaced).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from campaign.errors import ResultsError
from campaign.textfiles import open_regular

CHAIN_VERSION = 1
"""`chain` on the first line: how the lines are chained (1: `prev` = SHA-256 of the
previous raw line, newline included)."""

_READ_BACK = 65536
_heads: dict[str, tuple[tuple[int, int], str]] = {}
"""path → ((file size, mtime in ns), digest of its last line) after this process's last
append: another writer changes the size or the time, and the tail is read again."""


def line_digest(raw: bytes) -> str:
    """SHA-256 of one raw journal line (bytes as in the file, its newline included)."""
    return hashlib.sha256(raw).hexdigest()


def file_digest(path: Path) -> str | None:
    """SHA-256 of a regular file's bytes; None when it is missing, not a regular file (a
    FIFO would block, a device never end) or cannot be read."""
    try:
        with open_regular(path) as f:
            digest = hashlib.sha256()
            while chunk := f.read(1 << 20):
                digest.update(chunk)
            return digest.hexdigest()
    except (OSError, ResultsError):
        return None


def last_line(fd: int, size: int) -> bytes:
    """The last line of an open file of `size` bytes, newline included (b"" when empty);
    an unterminated tail (a torn line) is returned as it is."""
    end = size
    if end == 0:
        return b""
    chunks: list[bytes] = []
    pos = end
    # skip the final newline, then read back to the newline before it
    while pos > 0:
        step = min(_READ_BACK, pos)
        pos -= step
        chunk = os.pread(fd, step, pos)
        search = chunk if chunks or not chunk.endswith(b"\n") else chunk[:-1]
        cut = search.rfind(b"\n")
        if cut >= 0:
            chunks.append(chunk[cut + 1:])
            break
        chunks.append(chunk)
    return b"".join(reversed(chunks))


def prev_for_append(fd: int, path: Path) -> tuple[str | None, bool]:
    """What the next line of an open journal chains to: (digest of its last line, None
    for an empty file; whether the file ends unterminated, a line torn by a crash, which
    the append must end with a newline first)."""
    st = os.fstat(fd)
    size = st.st_size
    if size == 0:
        return None, False
    cached = _heads.get(str(path))
    if cached is not None and cached[0] == (size, st.st_mtime_ns):
        return cached[1], False
    raw = last_line(fd, size)
    if raw.endswith(b"\n"):
        return line_digest(raw), False
    return line_digest(raw + b"\n"), True


def appended(fd: int, path: Path, raw: bytes) -> None:
    """Remember the digest of the line just appended to the open file `fd`."""
    st = os.fstat(fd)
    _heads[str(path)] = ((st.st_size, st.st_mtime_ns), line_digest(raw))


def head(path: Path) -> str | None:
    """The run's digest: SHA-256 of the journal's last complete line (None: no journal,
    or none complete)."""
    try:
        with open_regular(path, "journal") as f:  # a FIFO would block, a device never end
            raw = last_line(f.fileno(), os.fstat(f.fileno()).st_size)
    except (OSError, ResultsError):
        return None
    return line_digest(raw) if raw.endswith(b"\n") else None


PRE_CHAIN = "unprotected (written before the chain)"
"""What `verify` and `report` say of a run registered before spec-ab chained its journal."""

CHAIN_KEYS = ("chain", "registration_sha256", "campaign_sha256")
"""Keys only a chaining spec-ab writes on the first line."""


def chain_traces(first: object) -> str | None:
    """Why a first line without a valid marker still belongs to a chained journal (it
    holds a `chain` key of another value, or the file digests that came with the chain);
    None: none of those keys."""
    if not isinstance(first, dict):
        return None
    if "chain" in first and first["chain"] != CHAIN_VERSION:
        return f"its chain marker is {json.dumps(first['chain'])[:40]}, not {CHAIN_VERSION}"
    keys = [k for k in CHAIN_KEYS[1:] if k in first]
    if keys:
        return f"it records {' and '.join(keys)}, which only a chaining spec-ab writes"
    return None


@dataclass(frozen=True)
class Walk:
    """A journal's chain, walked from its first line."""

    chained: bool
    """The chain was walked: the first line says the journal is chained (`chain`), or the
    journal must be (the registration records it, the journal's lines carry `prev`). A
    journal of a run registered before the chain is not: nothing vouches for its lines."""
    head: str | None
    """SHA-256 of the last complete line."""
    lines: int
    breaks: tuple[str, ...] = ()
    """Each place the chain does not hold, with its line number."""
    damaged: tuple[int, ...] = ()
    """Lines that are not JSON objects but are chained to (a crash while writing one):
    as written, so not a break, but nothing can be read from them."""


def walk(raw: bytes, *, expected: str | None = None) -> Walk:
    """Check every line's `prev` against the line before it. A line whose `prev` is not
    the previous line's digest breaks the chain there: a line was edited, inserted or
    removed (or the line before it was).

    Whether the journal is chained is not the first line's to say (an editor deletes its
    marker): `expected` says why it must be (the registration records the chain: see
    `integrity.chain_expected`), and any line holding `prev` or a first line holding the
    chain's other keys say so too. A journal that must be chained and whose first line is
    not the chain's start (no marker, another value) is broken at line 1."""
    parts = raw.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    complete = [ln for ln in lines if ln.endswith(b"\n")]
    head_digest = line_digest(complete[-1]) if complete else None
    first = _record(lines[0]) if lines else None
    breaks: list[str] = []
    if not (isinstance(first, dict) and first.get("chain") == CHAIN_VERSION):
        why = expected or chain_traces(first) or _linked(lines)
        if why is None:
            return Walk(False, head_digest, len(lines))
        breaks.append(f"line 1 has no chain marker (\"chain\": {CHAIN_VERSION}) although "
                      f"{why}: the marker was removed or the line replaced")
    damaged: list[int] = []
    prev = line_digest(lines[0]) if lines else None
    for i, ln in enumerate(lines[1:], start=2):
        rec = _record(ln)
        if rec is None:
            damaged.append(i)
        elif rec.get("prev") != prev:
            breaks.append(f"line {i} does not follow line {i - 1} (its prev is not the "
                          "digest of the line before it): a line was edited, inserted or "
                          "removed")
        prev = line_digest(ln if ln.endswith(b"\n") else ln + b"\n")
    # A damaged line is a crash's only when a later line chains to it, or it is the torn
    # last line (no newline): a whole line that is no event after the last one chained
    # was added after the run wrote its last line, and nothing vouches for it.
    last_event = max((i for i, ln in enumerate(lines, start=1) if _record(ln) is not None),
                     default=1)
    for i in [d for d in damaged if d > last_event and lines[d - 1].endswith(b"\n")]:
        damaged.remove(i)
        breaks.append(f"line {i} is no event and no line after it is chained to it: it was "
                      "added after the run's last line")
    return Walk(True, head_digest, len(lines), tuple(breaks), tuple(damaged))


def _linked(lines: list[bytes]) -> str | None:
    """Which line after the first names the line before it (`prev`): only a chaining
    spec-ab writes one (None: no line does)."""
    for i, ln in enumerate(lines[1:], start=2):
        if b'"prev"' in ln and "prev" in (_record(ln) or {}):
            return f"line {i} names the digest of the line before it (prev)"
    return None


def _record(line: bytes) -> dict[str, object] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None
