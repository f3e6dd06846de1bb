"""A launch error: an arm that has never become ready in this run exits while booting, the
same way, on its first boot and on one more. The campaign stops at once (exit 3): the
launch is frozen in the registration, so `--resume` would boot it again and fail the same
way; the campaign file must be fixed and a new run started.

One boot exit can be a flake (a port still closing, a driver hiccup): the arm is booted
once more before anything is called a launch error. An arm that was ready earlier in the
run and exits while booting later is not a launch error: the night stops as before
(`ServerError`), and `--resume` continues it.
"""

from __future__ import annotations

from campaign.campaignfile import Campaign
from campaign.campaignfile.schedule import Slot
from campaign.errors import BootExited, ServerError
from campaign.results import journal as jr
from campaign.results.bootfail import first_error, headline
from campaign.results.store import RunStore
from campaign.run.measure.passes import InvalidPass
from campaign.run.runtime import Runtime, check_cancel
from campaign.run.slot.lifecycle import run_slot


class LaunchError(ServerError):
    """The same boot exit twice for an arm never ready in this run (exit 3)."""


def _ever_ready(store: RunStore, arm: str) -> bool:
    """Whether `arm` became ready in this run (any session, any pair)."""
    events = store.read_journal()
    ready = {e.get("slot") for e in jr.of_kind(events, "server_ready")}
    return any(e.get("arm") == arm and e.get("slot") in ready
               for e in jr.of_kind(events, "slot_start"))


def run_slot_guarded(campaign: Campaign, store: RunStore, rt: Runtime, slot: Slot,
                     pair_attempt: int, *, shown_as: str | None = None) -> list[InvalidPass]:
    """`arm.run_slot`, with one more boot for an arm never ready in this run that exits
    while booting; the same exit again raises `LaunchError` (journaled `launch_error` with
    the first boot's error)."""
    try:
        return run_slot(campaign, store, rt, slot, pair_attempt)
    except BootExited as first:
        if _ever_ready(store, slot.arm):
            raise
        store.journal("boot_retry", pair=slot.pair, arm=slot.arm, reason=first.message)
        rt.progress("boot_retry", pair=slot.pair, arm=slot.arm, reason=first.status)
        check_cancel(rt)
        try:
            return run_slot(campaign, store, rt, slot, pair_attempt)
        except BootExited as again:
            if (again.status, first_error(again.lines)) != (first.status,
                                                            first_error(first.lines)):
                raise
            raise _launch_error(store, slot, first, shown_as or campaign.source) from None


def _launch_error(store: RunStore, slot: Slot, first: BootExited,
                  shown: object) -> LaunchError:
    error = first_error(first.lines)
    line = headline(slot.arm, slot.pair, first.status, error)
    store.journal("launch_error", pair=slot.pair, arm=slot.arm, status=first.status,
                  error=error, headline=line, reason=first.message)
    file = shown if shown is not None else "FILE"
    _, _, tail = first.message.partition("\n")
    return LaunchError(
        f"{line}\n  (the same on a second boot: a launch error, not a flake)"
        + (f"\n{tail}" if tail else ""),
        hint=f"fix the campaign file and start a new run: `spec-ab run {file}`. The launch "
        f"is frozen in {store.run_dir}'s registration: `--resume` would boot it again and "
        "fail the same way")
