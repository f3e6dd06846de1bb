"""What a run holds that its registration does not allow: cheap structural checks made
without the digest, so a report judges only what was registered and `verify` names the
rest.

A run's registration fixes how many pairs it may measure (`pairs`; a sequential design's
`max_pairs`), the run's rows carry the run's id (the folder's name when it was written),
a `finished` event with `complete` ends the run, and the decision cells the rule names
are known (its `*` resolved at registration, or through the frozen campaign). Rows past
any of these are measured data, kept in the files, but not the registered experiment:

- `unregistered`: the rows of a run that are not judged (a pair beyond the registered
  pairs, a pair attempt journaled after the run finished, rows of another run's id) and
  one line each that names them (`report` judges the rest and says so; `verify` fails
  its `structure` check with them);
- `unknown_cells`: why the registered decision cells cannot be known (a run of an older
  spec-ab registered `level: "*"` and its frozen campaign.yaml is unreadable): there is
  nothing registered to judge;
- `look_problems`: the journal's `look` events that disagree with the looks recomputed
  from the rows (a look flipped, duplicated with another outcome, or taken where the
  design takes none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from campaign.campaignfile import load_campaign
from campaign.errors import ResultsError, SpecError
from campaign.results import journal as jr

NAMED = 5
"""How many pairs, ids or looks a line names (then "and N more")."""


def registered_pairs(rule: Mapping[str, Any]) -> int | None:
    """The most pairs the registered rule allows: `pairs`, or a sequential design's
    `max_pairs` (None: the rule does not say)."""
    seq = rule.get("sequential")
    if isinstance(seq, Mapping) and isinstance(seq.get("max_pairs"), int):
        return int(seq["max_pairs"])
    pairs = rule.get("pairs")
    return pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else None


def own_run_id(run_dir: Path, ids: Sequence[str]) -> str | None:
    """The run's id as its rows carry it: the folder's name, or (a folder renamed or
    copied whole) the id of its first row; None without rows."""
    if run_dir.name in ids:
        return run_dir.name
    return ids[0] if len(ids) else None


def after_finished(events: jr.Events) -> set[tuple[int, int]]:
    """(pair, pair_attempt) of the rows journaled after the run's first `finished` event
    with `complete` and not before it: a run that finished measures nothing more."""
    before: set[tuple[int, int]] = set()
    after: set[tuple[int, int]] = set()
    done = False
    for ev in events:
        kind = ev.get("event")
        if kind == "finished" and ev.get("complete"):
            done = True
        elif kind == "pass":
            rows = ev.get("rows")
            keys = {(r.get("pair"), r.get("pair_attempt")) for r in rows or []
                    if isinstance(r, Mapping)}
            (after if done else before).update(
                (int(p), int(a)) for p, a in keys if isinstance(p, int)
                and isinstance(a, int))
    return after - before


@dataclass(frozen=True)
class Unregistered:
    """The rows a run's registration does not allow, and one line per reason."""

    keep: np.ndarray | None
    """Row mask of what is judged (None: every row)."""
    lines: tuple[str, ...]


def unregistered(run_dir: Path, rows: pd.DataFrame, rule: Mapping[str, Any],
                 events: jr.Events | None) -> Unregistered:
    """The rows of `rows` (a run's tidy rows) its registration does not allow: a pair
    beyond the registered pairs, a pair attempt journaled after the run finished
    (`events`: None when the journal was not read — it then ends in its `finished` event
    as written), rows of another run's id. Each kind is named once."""
    if not len(rows) or not {"run", "pair"} <= set(rows.columns):
        return Unregistered(None, ())
    keep = np.ones(len(rows), dtype=bool)
    lines: list[str] = []
    ids = rows["run"].to_numpy()
    if str(ids[0]) == run_dir.name and bool((ids == ids[0]).all()):
        own: str | None = run_dir.name  # one id, the folder's: the usual case, one compare
        others: list[str] = []
    else:
        ids = ids.astype(str)
        distinct = [str(i) for i in pd.unique(ids)]  # in order of first row
        own = own_run_id(run_dir, distinct)
        others = [i for i in distinct if i != own]
    if others:
        mask = ids != own
        keep &= ~mask
        lines.append(f"{run_dir}: {int(mask.sum())} row(s) carry another run's id "
                     f"({_some(others)}), not this run's ({own}): another run's rows, "
                     "kept in the files, not judged")
    pairs = rows["pair"].to_numpy()
    if pairs.dtype.kind not in "iuf":
        pairs = pd.to_numeric(rows["pair"], errors="coerce").to_numpy()
    allowed = registered_pairs(rule)
    if allowed is not None:
        beyond = pairs > allowed
        if beyond.any():
            keep &= ~beyond
            extra = sorted({int(p) for p in pairs[beyond]})
            lines.append(f"{run_dir}: pair {_some(extra)} beyond the {allowed} pairs "
                         "registered: measured, kept in the files, not judged")
    late = after_finished(events) if events is not None else set()
    if late and "pair_attempt" in rows.columns:
        attempts = pd.to_numeric(rows["pair_attempt"], errors="coerce").to_numpy()
        mask = np.array([(p, a) in late for p, a in zip(pairs, attempts, strict=True)],
                        dtype=bool)
        if mask.any():
            keep &= ~mask
            shown = [f"{p} (attempt {a})" for p, a in sorted(late)]
            lines.append(f"{run_dir}: pair {_some(shown)} journaled after the run "
                         "finished: a redo the run did not measure, kept in the files, "
                         "not judged")
    return Unregistered(None if keep.all() else keep, tuple(lines))


def unknown_cells(run_dir: Path, rule: Mapping[str, Any], resolved: bool,
                  campaign_readable: bool) -> str | None:
    """Why the registered decision cells cannot be known (None: they can): the rule
    registered `level: "*"`, the registration does not resolve it (`resolved`: a run of
    an older spec-ab) and the frozen campaign.yaml that configured its levels is not
    readable. The measured levels are then no stand-in: which ones were registered is
    unknown."""
    if resolved or campaign_readable:
        return None
    cells = rule.get("decision_cells")
    stars = [c.get("workload") for c in cells or [] if isinstance(c, Mapping)
             and c.get("level") == "*"]
    if not stars:
        return None
    return (f"{run_dir}: the registered decision cells are {', '.join(map(str, stars))} "
            "at level \"*\", and neither preregistration.json (written before spec-ab "
            "resolved \"*\") nor campaign.yaml (not readable) says which levels that is: "
            "nothing registered to judge, the default is kept")


def campaign_readable(run_dir: Path, base: Path | None) -> bool:
    """Does the frozen campaign.yaml load as a campaign (its named files unchecked)?"""
    try:
        load_campaign(run_dir / "campaign.yaml", base_dir=base, check_files=False)
    except (SpecError, ResultsError, OSError):
        return False
    return True


def look_problems(events: jr.Events, recomputed: Mapping[str, Sequence[tuple[int, str]]],
                  run_dir: Path) -> list[str]:
    """The journal's `look` events that disagree with the looks recomputed from the rows
    (`recomputed`: candidate → (pairs, state) of each look): a look whose state differs
    (flipped, or a duplicate with another outcome), or one after a pair where the design
    takes no look. A look journaled with its `problem` (not judged then) is left alone."""
    out: list[str] = []
    want = {arm: dict(steps) for arm, steps in recomputed.items()}
    for ev in events:
        if ev.get("event") != "look" or "problem" in ev:
            continue
        pair = ev.get("pair")
        cands = ev.get("candidates")
        for arm, doc in (cands.items() if isinstance(cands, Mapping) else ()):
            state = doc.get("state") if isinstance(doc, Mapping) else None
            steps = want.get(str(arm))
            if steps is None:
                out.append(f"look after pair {pair}: candidate {arm} is not one of the "
                           "run's")
            elif pair not in steps:
                out.append(f"look after pair {pair} ({arm}: {state}): the rows give no "
                           "look there")
            elif steps[pair] != state:
                out.append(f"look after pair {pair} ({arm}): journal.jsonl says {state}, "
                           f"the rows give {steps[pair]}")
    if not out:
        return []
    more = f"; and {len(out) - NAMED} more" if len(out) > NAMED else ""
    return [f"{run_dir / jr.FILE_NAME}: " + "; ".join(out[:NAMED]) + more
            + " — the journal's looks are not the ones its rows give"]


def _some(items: Sequence[object]) -> str:
    shown = ", ".join(map(str, items[:NAMED]))
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def check(run_dir: Path, rule: Mapping[str, Any], resolved: bool, events: jr.Events,
          base: Path | None) -> tuple[bool, str]:
    """`verify`'s `structure` check: (holds, what it found) from the journal's rows and
    events, the registered rule and (`resolved`) whether the registration resolved its
    cells; `base` the campaign's folder for reading the frozen campaign.yaml."""
    rows = pd.DataFrame([(r.get("run"), r.get("pair"), r.get("pair_attempt"))
                         for ev in events if ev.get("event") == "pass"
                         for r in ev.get("rows") or () if isinstance(r, Mapping)],
                        columns=["run", "pair", "pair_attempt"])
    found = [*unregistered(run_dir, rows, rule, events).lines]
    unknown = unknown_cells(run_dir, rule, resolved,
                            resolved or campaign_readable(run_dir, base))
    found += [unknown] if unknown is not None else []
    if found:
        return False, "; ".join(found)
    return True, ("every row is the run's own, within its registered pairs and before "
                  "it finished; its decision cells are known")
