"""Pooling the shards of a sharded campaign into one run: `spec-ab report DIR_A DIR_B`.

A campaign with a `lanes:` table is run one shard per lane (`spec-ab run FILE --lane
NAME`), each shard in its own run directory. Shards belong to one registration when they
froze the same campaign file (sha256 of `campaign.yaml`'s bytes) and registered the same
rule and values (`preregistration.json`'s `sha256` and `values_sha256`); then their pairs
are judged together as one run, pair numbers given in the order the pairs started (each
keeps its lane: `tidy.RunTable.lanes`). Anything else is refused (exit 2) with what
differs: shards of different registrations, a lane given twice, shards mixed with plain
runs, shards registered more than 12 hours apart (different nights, even of one unchanged
file). Plain runs are not touched here (a nightly history, side by side).

Pure over loaded `RunDir`s: nothing is written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from campaign.errors import UsageError
from campaign.results.journal import recorded_lane
from campaign.results.store import RunDir
from campaign.textfiles import sha256_file


@dataclass(frozen=True)
class Shard:
    """One lane's run directory inside a pooled run."""

    lane: str
    run_id: str
    run_dir: Path
    complete: bool
    pairs: tuple[int, ...]
    """The pooled pair numbers of this lane's pairs."""
    shard_pairs: tuple[int, ...]
    """The same pairs as numbered in the shard's own directory."""


@dataclass(frozen=True)
class Pooled:
    """Shards of one registered campaign, as one run (`run`) plus who is who."""

    run: RunDir
    shards: tuple[Shard, ...]
    lanes: tuple[str, ...]
    """Every lane the campaign lists, in file order (some may have no shard)."""
    lane_of: dict[int, str]
    """Pooled pair → its lane."""

    @property
    def missing_lanes(self) -> tuple[str, ...]:
        given = {s.lane for s in self.shards}
        return tuple(lane for lane in self.lanes if lane not in given)


def shard_lane(run: RunDir) -> str | None:
    """The lane of a shard (a run of a campaign with a `lanes:` table), else None."""
    if run.campaign is None or not run.campaign.sharded:
        return None
    return recorded_lane(run.journal, run.manifest) or "?"


def _file_sha(path: Path) -> str:
    try:
        return sha256_file(path)
    except OSError:
        return "(unreadable)"


def pool(runs: Sequence[RunDir]) -> Pooled | None:
    """The runs as one pooled run when they are shards of one registered campaign; None
    when none is a shard. Raises UsageError (exit 2) saying what differs otherwise."""
    lanes = [shard_lane(r) for r in runs]
    if all(lane is None for lane in lanes):
        return None
    if any(lane is None for lane in lanes):
        plain = [r.run_id for r, lane in zip(runs, lanes, strict=True) if lane is None]
        shards = [r.run_id for r, lane in zip(runs, lanes, strict=True) if lane is not None]
        raise UsageError(
            f"cannot pool: {', '.join(shards)} are shards of a sharded campaign (lanes:) and "
            f"{', '.join(plain)} are not",
            hint="report a campaign's shards together, and other runs on their own")
    _same_registration(runs, [str(lane) for lane in lanes])
    seen: dict[str, str] = {}
    for run, lane in zip(runs, lanes, strict=True):
        assert lane is not None
        if lane in seen:
            raise UsageError(
                f"cannot pool: lane '{lane}' is given twice ({seen[lane]} and {run.run_id}); "
                "a lane runs its pairs once per registered campaign",
                hint="pool one night's shards: one run directory per lane")
        seen[lane] = run.run_id
    _same_night(runs, [str(lane) for lane in lanes])
    campaign = runs[0].campaign
    assert campaign is not None
    order = {lane: i for i, lane in enumerate(campaign.lane_names)}
    by_lane = sorted(zip(runs, [str(x) for x in lanes], strict=True),
                     key=lambda rl: order.get(rl[1], len(order)))
    return _pooled(by_lane, tuple(campaign.lane_names))


def _same_registration(runs: Sequence[RunDir], lanes: Sequence[str]) -> None:
    """Refuse shards that did not register the same campaign, naming what differs."""
    checks = {
        "the frozen campaign file (sha256 of campaign.yaml)":
            [_file_sha(r.run_dir / "campaign.yaml") for r in runs],
        "the registered rule (preregistration.json sha256)":
            [r.registration.sha256 for r in runs],
        "the registered values: drift band and arms (values_sha256)":
            [r.registration.values_sha256 or "(none)" for r in runs],
    }
    differ = [(what, values) for what, values in checks.items() if len(set(values)) > 1]
    if not differ:
        return
    lines = []
    for what, values in differ:
        shown = ", ".join(f"{lane} ({r.run_id}) {v[:12]}"
                          for r, lane, v in zip(runs, lanes, values, strict=True))
        lines.append(f"{what} differs: {shown}")
    raise UsageError(
        "cannot pool: these shards were not registered as one campaign — "
        + "; ".join(lines),
        hint="run every lane from the same campaign file, unchanged, and pool those shards; "
        "report other runs on their own")


ONE_NIGHT = dt.timedelta(hours=12)
"""Shards registered further apart than this are not one night's registration."""


def _registered(run: RunDir) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(run.registration.registered_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _same_night(runs: Sequence[RunDir], lanes: Sequence[str]) -> None:
    """Refuse shards registered more than `ONE_NIGHT` apart, whatever their files' hashes:
    the same unchanged file run on lane a one night and on lane b another is two
    registrations, and pooling them would let a lane's best night be picked."""
    times = [(t, r, lane) for r, lane in zip(runs, lanes, strict=True)
             if (t := _registered(r)) is not None]
    if len(times) < 2:
        return
    first, last = min(times, key=lambda x: x[0]), max(times, key=lambda x: x[0])
    apart = last[0] - first[0]
    if apart <= ONE_NIGHT:
        return
    hours = apart.total_seconds() / 3600
    raise UsageError(
        f"cannot pool: lane {first[2]}'s shard ({first[1].run_id}) was registered "
        f"{first[1].registration.registered_at} and lane {last[2]}'s ({last[1].run_id}) "
        f"{last[1].registration.registered_at}, {hours:.1f} hours apart — shards of one "
        f"registration run the same night (registered within {ONE_NIGHT.total_seconds() / 3600:g} "
        "hours of each other); pooling nights would let a lane's best night be picked",
        hint="pool the shards of one night; for a pooled verdict, run every lane again in "
        "one night (spec-ab run FILE --lane NAME on each lane's machine)")


def _first_start(passes: pd.DataFrame) -> dict[int, dt.datetime | None]:
    """pair → when its first pass started (None when no row says)."""
    out: dict[int, dt.datetime | None] = {}
    if "started_at" not in passes.columns:
        return {int(p): None for p in passes["pair"].unique()}
    times = pd.to_datetime(passes["started_at"], errors="coerce", utc=True)
    for pair, t in times.groupby(passes["pair"].astype(int)).min().items():
        out[int(str(pair))] = None if pd.isna(t) else t.to_pydatetime()
    return out


def _pooled(shards: Sequence[tuple[RunDir, str]], lanes: tuple[str, ...]) -> Pooled:
    # every pair of every lane, numbered in the order it started (lane order breaks ties)
    keys: list[tuple[float, int, int]] = []
    for i, (run, _lane) in enumerate(shards):
        for pair, t in sorted(_first_start(run.passes).items()):
            keys.append((t.timestamp() if t is not None else float("inf"), i, pair))
    keys.sort()
    number = {(i, pair): n for n, (_t, i, pair) in enumerate(keys, start=1)}
    frames = []
    out_shards = []
    lane_of: dict[int, str] = {}
    for i, (run, lane) in enumerate(shards):
        df = run.passes.copy()
        if len(df):
            df["pair"] = [number[(i, int(p))] for p in df["pair"]]
        df["lane"] = lane
        frames.append(df)
        own = sorted(p for (j, p) in number if j == i)
        pooled_pairs = tuple(number[(i, p)] for p in own)
        lane_of.update({n: lane for n in pooled_pairs})
        out_shards.append(Shard(lane, run.run_id, run.run_dir, bool(run.complete),
                                pooled_pairs, tuple(own)))
    first = shards[0][0]
    passes = pd.concat(frames, ignore_index=True)
    given = {lane for _, lane in shards}
    notes = [f"{lane}: {note}" for run, lane in shards for note in run.notes]
    missing = [lane for lane in lanes if lane not in given]
    if missing:
        notes.insert(0, f"lane(s) {', '.join(missing)}: no shard given; their pairs are "
                     "missing from the pooled verdict")
    run = replace(
        first,
        run_id="+".join(r.run_id for r, _ in shards),
        passes=passes,
        complete=all(r.complete for r, _ in shards) and not missing,
        notes=tuple(notes),
        registration_edits=tuple(dict.fromkeys(e for r, _ in shards
                                               for e in r.registration_edits)),
        disagreements=tuple(f"{lane}: {d}" for r, lane in shards for d in r.disagreements),
        chained=all(r.chained for r, _ in shards),
        journal_sha256=None,  # each shard has its own (`spec-ab verify SHARD`)
    )
    return Pooled(run, tuple(out_shards), lanes, lane_of)
