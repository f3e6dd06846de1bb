"""Is what the folder holds what was measured? The copies a run keeps of one fact, checked
against each other.

A run folder holds each fact it is judged on more than once: the registration in
`preregistration.json` and in the journal's first line (its SHA-256, `results.chain`);
the campaign in `campaign.yaml` and in that line; the measured values in `passes.csv` and
in the journal's `pass` events; the journal's lines in the hash chain. When two copies
disagree, this module says which ones and where; it does not guess which was edited.

- `copies_disagree`: the cheap check every report makes (two small files hashed and the
  journal's first line read), so a history of a thousand nights stays fast;
- `foreign_registration`: a registration that differs from the recorded one because it is
  another run's (another campaign, another time of registration), not this one's edited:
  `load_run` refuses it, `verify` fails `copies` with it;
- `verify_run`: everything, for `spec-ab verify` — the chain walked line by line, every
  row of `passes.csv` against the journal, the registration's own hashes, the replayed
  schedules against their registered SHA-256 (`replayed`), and the run's digest against
  one kept outside the folder (`--digest`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.campaignfile.yamlread import read_yaml
from campaign.errors import ResultsError, SpecError, UsageError
from campaign.results import chain, damage, replayed, signing, structure
from campaign.results import journal as jr
from campaign.results import passescsv as pc
from campaign.results.registration import FILE_NAME, Registration
from campaign.textfiles import JOURNAL_CAP, read_capped


def copies_disagree(run_dir: Path, registration: Registration, first: Mapping[str, Any],
                    *, campaign_sha256: str | None = None) -> tuple[str, ...]:
    """Where the registration or the frozen campaign differs from what the journal's first
    line recorded before the first boot. Each line names both copies; none guesses which
    was edited. A journal written before the chain holds the rule's hash only."""
    if first.get("event") != "registered":
        return ()
    out: list[str] = []
    recorded = first.get("sha256")
    if isinstance(recorded, str) and recorded != registration.sha256:
        out.append(f"preregistration.json and journal.jsonl disagree: the registration's rule "
                   f"sha256 is {registration.sha256[:12]}, the journal registered "
                   f"{recorded[:12]}")
    for key, name in (("registration_sha256", "preregistration.json"),
                      ("campaign_sha256", "campaign.yaml")):
        want = first.get(key)
        if not isinstance(want, str):
            continue
        # the bytes the reader already hashed, else the file read again
        got = (registration.file_sha256 if name == "preregistration.json"
               else campaign_sha256) or chain.file_digest(run_dir / name)
        if got != want and not (out and name == "preregistration.json"):
            out.append(f"{name} and journal.jsonl disagree: the file's sha256 is "
                       f"{(got or 'unreadable')[:12]}, the journal registered {want[:12]} "
                       "before the first boot")
    unmarked = missing_marker(registration, first)
    if unmarked is not None:
        out.append(unmarked)
    return tuple(out)


def chain_expected(registration: Registration, run_dir: Path) -> str | None:
    """Why the run's journal must be hash-chained, whatever its first line says (None: the
    run was registered before the chain, or its registration does not say): the
    registration records the chain (`journal_chain`), or the run is signed (signing came
    with the chain)."""
    if registration.journal_chain is not None:
        return (f"{FILE_NAME} records a chained journal (journal_chain "
                f"{registration.journal_chain})")
    if os.path.lexists(run_dir / signing.SIG_FILE):
        return f"the registration is signed ({signing.SIG_FILE}), which came with the chain"
    return None


def missing_marker(registration: Registration, first: Mapping[str, Any]) -> str | None:
    """The cheap check every report makes of the chain: a registration that records it (or
    a first line holding the chain's other keys) with a first line that does not start
    it. The marker decides nothing on its own: an editor deletes it."""
    if first.get("event") != "registered" or first.get("chain") == chain.CHAIN_VERSION:
        return None
    why = (f"{FILE_NAME} records a chained journal (journal_chain "
           f"{registration.journal_chain})" if registration.journal_chain is not None
           else chain.chain_traces(dict(first)))
    if why is None:
        return None
    return (f"journal.jsonl's first line has no chain marker (\"chain\": "
            f"{chain.CHAIN_VERSION}), although {why}: the journal was edited after the run "
            "wrote it")


def pre_chain(registration: Registration, first: Mapping[str, Any]) -> bool:
    """A run registered before spec-ab chained its journal: nothing records the chain,
    in the registration or on the first line (its journal is unprotected)."""
    return (registration.journal_chain is None and first.get("chain") is None
            and chain.chain_traces(dict(first)) is None)


PRE_CHAIN_NOTE = f"journal.jsonl is {chain.PRE_CHAIN}: its lines are not hash-chained"
"""The note a report gives a run registered before the chain (`pre_chain`)."""


def unjournaled_rows(rows: int, events: list[dict[str, Any]]) -> str | None:
    """passes.csv holds rows but the journal no pass event: nothing vouches for them
    (asked of a chained run only: a schema-1 journal held no pass events)."""
    if rows == 0 or any(e.get("event") == "pass" for e in events):
        return None
    return (f"passes.csv holds {rows} rows and journal.jsonl no pass events: nothing "
            "vouches for them (the journal lost its passes, or passes.csv is not this "
            "run's)")


REGISTERED_WITHIN_S = 60.0
"""A run writes its registration, then its manifest, then its journal's first line, a few
milliseconds apart: a registration timed further than this from that line is another
run's (another night of a campaign starts hours away, a quick re-run minutes)."""
FOREIGN_HINT = ("put this run's own preregistration.json back (from a backup of the run "
                "folder), or report on the run it was copied from")


def foreign_registration(registration: Registration, first: Mapping[str, Any], *,
                         campaign_name: str | Callable[[], str | None] | None = None
                         ) -> str | None:
    """Why preregistration.json is another run's registration, not this run's edited
    (None: it may be this run's, as written or edited). Asked only when it is not what
    the journal's first line recorded (the file's SHA-256; before the chain, the rule's),
    and decided from what the registration and the journal both hold: the campaign's
    name (`campaign_name`: the frozen campaign's, when it is the campaign.yaml the journal
    registered; a function of none is called only when it is needed: parsing campaign.yaml
    is most of a verify) and the time of registration (the first line is written just
    after it)."""
    recorded = _recorded(registration, first)
    if recorded is None or recorded[1] == recorded[2]:
        return None
    if callable(campaign_name):
        campaign_name = campaign_name()
    why: list[str] = []
    if campaign_name is not None and registration.campaign != campaign_name:
        why.append(f"it registers campaign {registration.campaign!r}, this run is "
                   f"{campaign_name!r} (its campaign.yaml, as journal.jsonl registered it)")
    apart = _seconds_apart(registration.registered_at, first.get("t"))
    if apart is not None and apart > REGISTERED_WITHIN_S:
        why.append(f"it was registered at {registration.registered_at}, this run at "
                   f"{first['t']} (journal.jsonl's first line)")
    if not why:
        return None
    what, got, want = recorded
    why.append(f"its {what} is {got[:12]}, journal.jsonl recorded {want[:12]} before the "
               "first boot")
    return "preregistration.json is another run's registration, not this run's: " + \
        "; ".join(why)


def _recorded(registration: Registration, first: Mapping[str, Any]
              ) -> tuple[str, str, str] | None:
    """(what, the registration's hash, the hash the journal's first line recorded): the
    file's, else (a journal before the chain) the rule's; None: nothing recorded."""
    if first.get("event") != "registered":
        return None
    file_hash = first.get("registration_sha256")
    if isinstance(file_hash, str):
        return "sha256", registration.file_sha256 or "unread", file_hash
    rule_hash = first.get("sha256")
    if isinstance(rule_hash, str):
        return "rule's sha256", registration.sha256, rule_hash
    return None


def _seconds_apart(a: object, b: object) -> float | None:
    """|a − b| in seconds of two ISO 8601 times (None: either is not one)."""
    if not isinstance(a, str) or not isinstance(b, str):
        return None
    try:
        ta, tb = (dt.datetime.fromisoformat(x) for x in (a, b))
    except ValueError:
        return None
    ta, tb = (t if t.tzinfo else t.replace(tzinfo=dt.UTC) for t in (ta, tb))
    return abs((ta - tb).total_seconds())


def vouched_campaign_name(run_dir: Path, first: Mapping[str, Any]) -> str | None:
    """The frozen campaign's name, when campaign.yaml is the file the journal's first line
    registered (None: not recorded, another file, or no name in it)."""
    want = first.get("campaign_sha256")
    path = run_dir / "campaign.yaml"
    if not isinstance(want, str) or chain.file_digest(path) != want:
        return None
    try:
        doc = read_yaml(path)
    except SpecError:
        return None
    name = doc.get("name")
    return name if isinstance(name, str) else None


NOT_PREREGISTERED = ("the run's copies disagree, so no verdict of it is pre-registered "
                     "(`spec-ab verify RUN` runs every check)")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    text: str


@dataclass(frozen=True)
class Verification:
    run_dir: Path
    digest: str | None
    """The run's digest: SHA-256 of the journal's last complete line."""
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def verify_run(run_dir: Path, expected_digest: str | None = None, *,
               allowed_signers: Path | None = None, signer: str | None = None
               ) -> Verification:
    """Every copy of the run checked against the others (and the digest against
    `expected_digest`, a copy kept outside the folder; the registration's signature
    against `allowed_signers`)."""
    want = None if expected_digest is None else parse_digest(expected_digest)
    if signer is not None and allowed_signers is None:
        raise UsageError("--signer needs --allowed-signers: the signer is looked up in "
                         "that file", hint=f"add --allowed-signers FILE (an OpenSSH "
                         f"allowed_signers file naming {signer})")
    if allowed_signers is not None:
        signing.check_allowed_signers(allowed_signers)
    path = run_dir / jr.FILE_NAME
    if not run_dir.is_dir() or not (path.exists()
                                    or (run_dir / "preregistration.json").exists()):
        raise ResultsError(f"{run_dir}: not a run directory (no {jr.FILE_NAME})",
                           hint="give the folder `spec-ab run` printed")
    damage.require_registered(run_dir, jr.first_event(run_dir))  # missing, or no line 1
    raw = read_capped(path, JOURNAL_CAP, "journal")  # a FIFO or a device is refused
    registration = Registration.load(run_dir / "preregistration.json")
    walk = chain.walk(raw, expected=chain_expected(registration, run_dir))
    checks = [_chain_check(walk)]
    checks.append(_registration_check(run_dir, registration))
    first = jr.first_event(run_dir)
    disagree = copies_disagree(run_dir, registration, first)
    foreign = foreign_registration(registration, first,
                                   campaign_name=lambda: vouched_campaign_name(run_dir, first))
    if foreign is not None:  # said once: the lines about preregistration.json go
        disagree = (foreign, *(d for d in disagree if not d.startswith(FILE_NAME)))
    checks.append(Check("copies", not disagree,
                        "; ".join(disagree) if disagree else _copies_ok(first)))
    reading = jr.read(run_dir)  # parsed once, lines that are no event left out
    events = reading.events
    checks.append(_rows_check(run_dir, reading, chained=walk.chained))
    checks.append(Check("structure", *structure.check(
        run_dir, registration.rule, registration.levels is not None, events,
        jr.base_dir_of([first]))))
    replay = replayed.check(run_dir, registration.schedules, first, events)
    if replay is not None:  # a run replaying schedules (rate levels, traces)
        checks.append(Check("schedules", replay.ok, replay.text()))
    checks.append(_signature_check(run_dir, events, allowed_signers, signer))
    if want is not None:
        checks.append(_digest_check(walk, want))
    return Verification(run_dir, walk.head, tuple(checks))


def _chain_check(walk: chain.Walk) -> Check:
    if not walk.chained:
        return Check("chain", True, f"{chain.PRE_CHAIN}: journal.jsonl is not "
                     "hash-chained and its registration records no chain, so its lines "
                     "cannot be checked one by one and no digest vouches for them")
    if walk.breaks:
        more = f" (+{len(walk.breaks) - 3} more)" if len(walk.breaks) > 3 else ""
        return Check("chain", False, "journal.jsonl's chain is broken: "
                     + "; ".join(walk.breaks[:3]) + more)
    torn = (f"; line(s) {', '.join(map(str, walk.damaged))} damaged by a crash while "
            "writing them, chained to as they are" if walk.damaged else "")
    return Check("chain", True, f"journal.jsonl: {walk.lines} lines, each chained to the "
                 f"one before it{torn}")


def _registration_check(run_dir: Path, registration: Registration) -> Check:
    try:
        verified = registration.verify(run_dir / "preregistration.json",
                                       list(registration.arms))
    except ResultsError as exc:
        return Check("registration", False, exc.message)
    if verified.edits:
        return Check("registration", False, "preregistration.json was edited after "
                     "registration: " + ", ".join(verified.edits))
    return Check("registration", True, "preregistration.json matches its own hashes")


def _copies_ok(first: Mapping[str, Any]) -> str:
    if isinstance(first.get("registration_sha256"), str):
        return ("preregistration.json and campaign.yaml are the files journal.jsonl "
                "registered before the first boot")
    return ("the registered rule matches journal.jsonl's first line (an older journal: "
            "the files themselves were not recorded)")


def _rows_check(run_dir: Path, reading: jr.Reading, *, chained: bool) -> Check:
    csv = pc.read_passes(run_dir / "passes.csv")
    lost = unjournaled_rows(len(csv.rows), reading.events) if chained else None
    if lost is not None:
        return Check("rows", False, lost)
    try:
        _, problems = pc.reconcile(run_dir, csv, reading.events)
    except ResultsError as exc:
        return Check("rows", False, exc.message)
    # rows the journal holds but no one can read: lost, whatever passes.csv says
    problems[:0] = [f"{jr.FILE_NAME} line {n}: {lost}" for n, lost in reading.rows]
    if problems:
        return Check("rows", False, "; ".join(problems))
    return Check("rows", True, f"passes.csv holds the journal's {len(csv.rows)} rows, "
                 "value by value")


def _signature_check(run_dir: Path, events: list[dict[str, Any]], allowed: Path | None,
                     signer: str | None) -> Check:
    ok, text = signing.check_signature(run_dir, allowed, signer)
    digest = signing.signature_digest(run_dir)
    recorded = next((e["registration_sig_sha256"] for e in events
                     if isinstance(e.get("registration_sig_sha256"), str)), None)
    if digest is None and recorded is not None:
        return Check("signature", False, f"signature recorded in the journal, file missing: "
                     f"journal.jsonl records {signing.SIG_FILE} (sha256 {recorded[:12]}), "
                     "the folder holds none (restore it from a backup of the run folder)")
    if not ok or digest is None:
        return Check("signature", ok, text)
    firsts = [e for e in events if e.get("event") in ("run_start", "slot_start")][:1]
    if not firsts or firsts[0].get("registration_sig_sha256") != digest:
        return Check("signature", False, text + f"; but journal.jsonl does not record "
                     f"{signing.SIG_FILE} before the first boot (made or replaced later)")
    return Check("signature", True, text + ", before the first boot")


DIGEST = re.compile(r"[0-9a-f]{12,64}")


def parse_digest(text: str) -> str:
    """A digest as given to --digest (`sha256:` and `digest=` prefixes allowed, any case):
    its hex digits; a UsageError (exit 2) when it is none, so a typo never reads as
    tampering."""
    want = text.strip().lower().removeprefix("digest=").removeprefix("sha256:")
    if not DIGEST.fullmatch(want):
        raise UsageError(f"--digest {text!r}: malformed digest (want ≥ 12 hex digits)",
                         hint="give the digest= line `spec-ab run` printed (sha256:<64 hex "
                         "digits>), or at least its first 12 digits")
    return want


def _digest_check(walk: chain.Walk, want: str) -> Check:
    head = walk.head
    if not walk.chained:
        return Check("digest", False, f"the chain was not walked (journal.jsonl is "
                     f"{chain.PRE_CHAIN}): its last line's digest vouches for no line before "
                     "it, so no digest can verify this run")
    if walk.breaks:
        return Check("digest", False, "the chain is broken (see chain): the digest of the "
                     "last line vouches for no line before the break")
    if head is not None and head.startswith(want):
        return Check("digest", True, f"the run's digest is {head}, as given")
    return Check("digest", False, f"the run's digest is {head or 'none'}, not {want}: the "
                 "journal is not the one whose digest was kept (a line was edited, added "
                 "or removed, or the run went on after the digest was taken)")
