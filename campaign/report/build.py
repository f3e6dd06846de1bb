"""Run directories → a typed `Report`: each run judged under its registered rule.

`build_report(run_dirs)` loads each run through the store, checks its frozen rule against
its hash, applies the rule to the tidy table (`verdict`) and returns a `Report`.
`exit_code_for` maps a report and `--fail-on` to the process's exit code.

Honesty rules kept here: a rule edited in `campaign.yaml` after registration is ignored
(the registered one is used) and said so; `--rule` overrides make every output
"exploratory, not pre-registered".
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from campaign import catalog
from campaign.campaignfile import Campaign
from campaign.errors import EXIT_INCOMPLETE, EXIT_OK, ResultsError, UsageError
from campaign.report import reads
from campaign.report.formats import check_fail_on, collector_paused
from campaign.report.model import (
    EXPLORATORY,
    Loader,
    PreparedRule,
    Report,
    RunReport,
)
from campaign.results import bootfail, pool, redos, replayed, running, structure
from campaign.results.store import RunDir, load_runs, rule_hash, stacked_batch
from campaign.verdict import aa, capacity
from campaign.verdict import judge as vd
from campaign.verdict import outcome as oc
from campaign.verdict import rule as rl
from campaign.verdict import tidy as td

# --------------------------------------------------------------------------- building


REQUIRED_COLUMNS = ("run", "pair", "arm", "workload", "level", "metric", "value", "valid")


def build_report(
    run_dirs: Sequence[Path],
    *,
    rule_overrides: dict[str, str] | None = None,
    loader: Loader | None = None,
    metrics: Sequence[str] | None = None,
) -> Report:
    """Load run directories and judge each under its registered rule (or the overrides).

    The newest run (by registration time) is judged in full: every cell of its primary,
    guardrail and descriptive metrics. Older runs of a history are judged on what their
    decision needs (decision and guardrail cells), which keeps a 1,000-night history fast;
    report a run alone to see all of its cells.

    `metrics` (`--metrics`) picks the metrics shown beside the decision and guardrail
    metrics (always shown); None shows the descriptive set (`verdict.DESCRIPTIVE_METRICS`).

    Raises ResultsError (naming the file) for damaged results: a rule that does not match
    its hash, missing columns, a zero or missing value in a decision or guardrail cell.
    """
    with collector_paused():
        return _build(run_dirs, rule_overrides, loader, metrics)


def _build(run_dirs: Sequence[Path], rule_overrides: dict[str, str] | None,
           loader: Loader | None, metrics: Sequence[str] | None) -> Report:
    if not run_dirs:
        raise UsageError("give at least one run directory", hint="spec-ab report results/<run>")
    if loader is None:
        runs = load_runs([Path(d) for d in run_dirs])
    else:
        runs = [loader(Path(d)) for d in run_dirs]
    unjudged = {run.run_id: _registered_only(run) for run in runs}
    pooled = pool.pool(runs)  # shards of one sharded campaign: one run (or refused)
    if pooled is not None:
        runs = [pooled.run]
    overrides = dict(rule_overrides or {})
    cache: dict[Any, Any] = {}
    prepared = [_prepare(run, overrides, cache) for run in runs]
    if pooled is not None:
        prepared = [_pooled_rule(prepared[0], pooled)]
    newest = max(range(len(runs)), key=lambda i: (
        runs[i].registration.registered_at, runs[i].run_id))
    picked = _picked_metrics(metrics)
    shown: set[str] = set(vd.DESCRIPTIVE_METRICS if picked is None else picked)
    rule_new = prepared[newest].rule
    shown.add(rule_new.metric)
    shown.update(g.metric for g in rule_new.prereg.guardrails)
    if picked is None and rule_new.prereg.slo is not None:
        shown.update(reads.SLO_SHOWN)  # a registered SLO: its shares and goodput, described
    # the directory names the run, whatever its rows say (a copied or renamed run dir)
    all_rows = _stack(runs)
    if picked is None and reads.has_rate_sweep(all_rows):
        shown.update(reads.RATE_SHOWN)
    _refuse_unmeasured(picked, all_rows)
    targets = reads.slo_targets(runs, prepared)
    tables = td.tidy_tables(reads.rows_needed(all_rows, runs, prepared, newest,
                                              shown | reads.PLOTTED), slo_target=targets)
    out = [_run_report(run, prep, tables.get(run.run_id, td.RunTable(run=run.run_id)),
                       pooled, overrides, picked, shown if i == newest else None,
                       unjudged.get(run.run_id, tuple(
                           line for lines in unjudged.values() for line in lines)))
           for i, (run, prep) in enumerate(zip(runs, prepared, strict=True))]
    out.sort(key=lambda r: (r.registered_at, r.run_id))
    return Report(runs=tuple(out))


def _frames(runs: Sequence[RunDir]) -> list[pd.DataFrame]:
    """Each run's tidy rows; ResultsError for a run without the columns or the rows."""
    frames = []
    for run in runs:
        df = run.passes
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise ResultsError(f"{run.run_dir / 'passes.csv'}: missing columns {missing}")
        if len(df) == 0:
            never = bootfail.never_ready(run.journal)
            if never:
                source = run.campaign_path or "CAMPAIGN_FILE"
                raise ResultsError(
                    "; ".join(n.line for n in never) + f" (nothing measured in {run.run_dir})",
                    hint=f"fix the campaign file and start a new run: spec-ab run {source}")
            live = _live(run)
            raise ResultsError(
                f"{run.run_dir / 'passes.csv'}: no measured passes yet"
                + (f" ({live.line(run.run_dir)})" if live is not None else "")
                + "".join(f"; {note}" for note in run.notes),  # e.g. rows lost in the journal
                hint=(live.settle(run.run_dir) if live is not None
                      else f"spec-ab run --resume {run.run_dir}"),
            )
        frames.append(df)
    return frames


def _run_report(run: RunDir, prep: PreparedRule, table: td.RunTable,
                pooled: pool.Pooled | None, overrides: dict[str, str],
                picked: tuple[str, ...] | None, shown: set[str] | None,
                unjudged: Sequence[str] = ()) -> RunReport:
    """One run judged under its prepared rule; `shown`: the metrics of the newest run,
    judged in full (None for an older run of a history: its decision needs only);
    `unjudged`: what the run holds beyond its registration (`_registered_only`), said
    first among the headline's reasons."""
    rule_dict, rule = prep.rule_dict, prep.rule
    arms = _arms(run)
    never = _never_ready(run, arms) if pooled is None else ()
    live = _live(run) if pooled is None else None
    try:
        verdict = vd.judge_run(
            table, rule, arms, level_order=_level_order(run.campaign),
            levels=_levels(run), guard_cells=_guard_cells(run),
            metrics=shown or (),
            resume_command=(live.settle(run.run_dir) if live is not None
                            else _resume_command(run, pooled, never, bool(overrides))))
    except oc.DataProblem as exc:
        raise ResultsError(f"{run.run_dir / 'passes.csv'}: {exc}",
                           hint="the file is damaged or the pass never measured it") from None
    verdict = _registered_verdict(run, rule, verdict, unjudged, pooled, shown is not None)
    reg, frozen = run.registration, run.campaign
    newest = shown is not None
    sweep, sessions = (reads.load_shapes(run, table, verdict, arms, rule,
                                         capacity.slo_target(rule_dict))
                       if newest else (None, None))
    return RunReport(
        run_id=run.run_id,
        run_dir=run.run_dir,
        campaign=reg.campaign,
        hypothesis="" if frozen is None else frozen.hypothesis.strip(),
        lane=(", ".join(s.lane for s in pooled.shards) if pooled is not None
              else "" if frozen is None else frozen.lane),
        registered_at=reg.registered_at,
        complete=bool(run.complete),
        arms=tuple(arms),
        rule=rule,
        rule_dict=rule_dict,
        # without overrides the rule used is the registered one (its hash was checked)
        rule_sha256=rule_hash(rule_dict) if overrides else reg.sha256,
        registered_sha256=reg.sha256,
        overrides=overrides,
        edited_after_registration=prep.edited,
        verdict=verdict,
        aa=_aa_band(run, arms, verdict, table),
        notes=(*run.notes, *prep.notes, *_redone(run), *(_replayed(run) if newest else ())),
        registration_edits=run.registration_edits,
        disagreements=run.disagreements,
        journal_sha256=run.journal_sha256,
        journal_chained=run.chained,
        running=None if live is None else live.line(run.run_dir),
        results_schema_version=run.schema_version,
        shown_metrics=None if picked is None else frozenset(picked),
        slots={p: dict(a) for p, a in table.slots.items()} if newest else {},
        measurements=reads.measurements(table) if newest else {},
        rate_sweep=sweep,
        session_turns=sessions,
        pooled=pooled,
        never_ready=never,
        registered_exploratory=run.exploratory,
    )


def _registered_only(run: RunDir) -> tuple[str, ...]:
    """Set aside the rows the run's registration does not allow (`results.structure`:
    a pair beyond the registered pairs, a redo journaled after the run finished, another
    run's rows): they stay in the files, the verdict does not read them. The lines that
    name them. A journal the store did not read ends in its `finished` event as the run
    wrote it (`store._run_data`): nothing was journaled after it."""
    found = structure.unregistered(run.run_dir, run.passes, run.registration.rule,
                                   run._journal)
    if found.keep is not None:
        run.passes = run.passes[found.keep].reset_index(drop=True)
        run.batch = None
    return found.lines


def _registered_verdict(run: RunDir, rule: rl.Rule, verdict: oc.RunVerdict,
                        unjudged: Sequence[str], pooled: pool.Pooled | None,
                        newest: bool) -> oc.RunVerdict:
    """The verdict with what the registration does not allow said first among its
    reasons: rows set aside (`unjudged`), journaled looks its rows do not give, and, when
    the registered decision cells cannot be known, the default kept (nothing registered
    to judge: the measured levels are no stand-in for the registered ones)."""
    said = list(unjudged)
    # the newest run's journal is read; an older night's only when the store read it
    # (else it is as the run finished it): a history of sequential nights stays fast
    if (rule.prereg.sequential is not None and pooled is None
            and (newest or run._journal is not None)):
        said += structure.look_problems(run.journal, recomputed_looks(verdict), run.run_dir)
    unknown = structure.unknown_cells(run.run_dir, run.registration.rule,
                                      run.registration.levels is not None,
                                      run.campaign is not None)
    if unknown is not None:
        return dataclasses.replace(
            verdict, decision="keep-default", adopt_arm=None, reason="inconclusive",
            settle="restore campaign.yaml from a backup of the run folder",
            reasons=(unknown, *said), ranking=(),
            candidates=tuple(dataclasses.replace(cv, decision="keep-default")
                             for cv in verdict.candidates))
    if not said:
        return verdict
    return dataclasses.replace(verdict, reasons=(*said, *verdict.reasons))


def recomputed_looks(verdict: oc.RunVerdict) -> dict[str, list[tuple[int, str]]]:
    """Candidate → (pairs, state) of each look its rows give (a sequential design)."""
    return {cv.arm: [(s.pairs, s.state) for s in cv.sequential.steps]
            for cv in verdict.candidates if cv.sequential is not None}


def _aa_band(run: RunDir, arms: list[str], verdict: oc.RunVerdict,
             table: td.RunTable) -> aa.BandRecommendation | None:
    """The drift bands an A/A run measures, of the primary metric and of each guardrail
    metric (None for a run that is not one)."""
    if run.campaign is None or not aa.is_aa(run.campaign, arms):
        return None
    try:
        return aa.aa_report(verdict, table)
    except oc.DataProblem:
        return None


def _pooled_rule(prep: PreparedRule, pooled: pool.Pooled) -> PreparedRule:
    """The registered rule over the pooled pairs: `pairs` counts per lane, so the pooled
    run is owed pairs × lanes."""
    per_lane = prep.rule.prereg.pairs
    lanes = len(pooled.lanes)
    rule = dataclasses.replace(prep.rule, prereg=prep.rule.prereg.model_copy(
        update={"pairs": per_lane * lanes}))
    given = ", ".join(f"{s.lane} ({s.run_id})" for s in pooled.shards)
    note = (f"pooled {len(pooled.shards)} of {lanes} lanes' shards of one registration "
            f"(same campaign file, rule and values): {given}; {per_lane} pairs per lane × "
            f"{lanes} lanes = {per_lane * lanes} pre-registered pairs; the pooled verdict "
            "assumes lanes of equal noise (`spec-ab plan` shows what a lane twice as noisy "
            "costs)")
    return dataclasses.replace(prep, rule=rule, notes=(note, *prep.notes))


def _live(run: RunDir) -> running.Session | None:
    """The session still measuring an unfinished run (its journal is read only then)."""
    return None if run.complete else running.in_progress(run.journal)


def _resume_command(run: RunDir, pooled: pool.Pooled | None,
                    never: Sequence[bootfail.NeverReady] = (),
                    exploratory: bool = False) -> str:
    """What measures the pairs a run lacks: resuming it; or a new run of the fixed file
    when an arm never became ready (its launch is frozen in the registration); or a new
    run when the run finished (`run --resume` refuses a finished run: a design that
    would go on under `--rule` is one such)."""
    if never:
        arms = ", ".join(n.arm for n in never)
        file = run.campaign_path or "CAMPAIGN_FILE"
        return (f"fix the launch of {arms} (it never became ready) in the campaign file and "
                f"start a new run: spec-ab run {file}")
    if pooled is None and run.complete:
        file = run.campaign_path or "CAMPAIGN_FILE"
        register = (" (register the rule you gave with --rule in the campaign file first)"
                    if exploratory else "")
        return (f"the run is finished and cannot be resumed: start a new run{register}: "
                f"spec-ab run {file}")
    if pooled is None:
        return f"spec-ab run --resume {run.run_dir}"
    todo = [f"spec-ab run --resume {s.run_dir}" for s in pooled.shards if not s.complete]
    source = run.campaign_path
    todo += [f"spec-ab run {source or 'CAMPAIGN_FILE'} --lane {lane}"
             for lane in pooled.missing_lanes]
    return "; ".join(todo) or f"spec-ab run --resume {run.run_dir}"


def _picked_metrics(metrics: Sequence[str] | None) -> tuple[str, ...] | None:
    if metrics is None:
        return None
    names = tuple(dict.fromkeys(m.strip() for item in metrics for m in item.split(",")
                                if m.strip()))
    unknown = [m for m in names if m not in catalog.METRICS]
    if unknown:
        raise UsageError(f"--metrics {','.join(unknown)}: not a metric spec-ab measures"
                         + _did_you_mean(unknown, catalog.METRICS),
                         hint="spec-ab report --metrics ttft_p99,itl_p99,acceptance_rate "
                         "(the names: spec-ab check --metrics)")
    return names


def _did_you_mean(names: Sequence[str], known: Iterable[str]) -> str:
    """"; did you mean tokens_per_drafted_step?" for the closest known name of each."""
    pool = sorted(known)
    close = [c[0] for n in names if (c := difflib.get_close_matches(n, pool, n=1, cutoff=0.5))]
    return f"; did you mean {', '.join(dict.fromkeys(close))}?" if close else ""


def _refuse_unmeasured(picked: Sequence[str] | None, rows: pd.DataFrame) -> None:
    """`--metrics` naming a metric none of the runs measured would show nothing: exit 2
    with the closest measured name (a name an older results schema used, say)."""
    if not picked:
        return
    present = set(rows["metric"].astype(str).unique())
    absent = [m for m in picked if m not in present]
    if absent:
        raise UsageError(f"--metrics {','.join(absent)}: no run given measured it"
                         + _did_you_mean(absent, present),
                         hint="the names: spec-ab check --metrics")


def _stack(runs: Sequence[RunDir]) -> pd.DataFrame:
    """The runs' tidy rows as one frame, `run` set from the directory names.

    A history `load_runs` read in one parse is one slice of that table (`stacked_batch`);
    otherwise column by column with numpy: `pd.concat` of 1,000 small frames spends most of
    its time reconciling their blocks (0.8 s here); the columns are the same in every run."""
    frames = _frames(runs)
    run_ids = [r.run_id for r in runs]
    if len(frames) == 1:
        return frames[0].assign(run=run_ids[0])
    counts = [len(f) for f in frames]
    run_col = np.repeat(np.array(run_ids, dtype=object), counts)
    batch = stacked_batch(runs, run_col)
    if batch is not None:
        return batch
    cols = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    data = {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in cols if c != "run"}
    data["run"] = run_col
    return pd.DataFrame(data)


def _prepare(
    run: RunDir, overrides: dict[str, str], cache: dict[Any, Any]
) -> PreparedRule:
    """The rule to judge a run under: the registered one, checked against its hash.

    Runs of a nightly history share their rule: the parsed result is cached by hash."""
    path = run.run_dir / "preregistration.json"
    reg = run.registration
    registered = reg.rule
    # the rule (refused when edited), the band and the arms checked against their hashes;
    # the store already put back the registered band and arms and noted any edit
    reg.verify(path, list(reg.arms))
    band = reg.drift_band
    frozen = (run.campaign.preregistration if run.campaign is not None
              else run.campaign_problems)
    cache_key = (reg.sha256, band)
    hit = cache.get(cache_key)
    if hit is not None and hit[0] == frozen:
        return hit[1]  # type: ignore[no-any-return]
    notes: list[str] = []
    edited = _edited_keys(registered, run.campaign, run.campaign_problems)
    if edited:
        notes.append(
            "campaign.yaml's rule differs from preregistration.json's (" + ", ".join(edited)
            + "): the registration's rule is used"
        )
    elif run.campaign is None:
        notes.append(
            f"campaign.yaml is not a valid campaign for this spec-ab ({run.campaign_problems[0]})"
            ": the registered rule is used; the hypothesis, lane and level order are not shown"
        )
    rule_dict = dict(registered)
    if overrides:
        rule_dict = rl.apply_overrides(registered, overrides)
        if "drift_band" in overrides:
            try:
                band = float(overrides["drift_band"])
            except ValueError:
                raise UsageError(
                    f"--rule drift_band={overrides['drift_band']}: give a fraction, e.g. 0.03"
                ) from None
        notes.append(
            f"{EXPLORATORY}: --rule " + " ".join(f"{k}={v}" for k, v in overrides.items())
        )
    try:
        rule = rl.parse_rule(rule_dict, float(band),
                             guardrail_bands=tuple(reg.guardrail_bands or ()))
    except ValidationError as exc:
        raise ResultsError(f"{path}: the registered rule is not valid ({exc.errors()[0]['msg']})",
                           hint="was it written by a newer spec-ab?") from None
    result = PreparedRule(rule_dict, rule, edited, tuple(notes))
    cache[cache_key] = (frozen, result)
    return result


def _edited_keys(registered: dict[str, Any], frozen: Campaign | None,
                 problems: Sequence[str]) -> tuple[str, ...]:
    if frozen is None:
        if any(p.startswith("preregistration") for p in problems):
            return ("preregistration (no longer valid)",)
        return ()
    now = frozen.preregistration.model_dump(mode="json", by_alias=True)
    # Only what was registered can have been edited: a key the registered rule lacks is a
    # field added by a later spec-ab (filled with its default), not an edit.
    return tuple(k for k in sorted(registered) if _differs(registered[k], now.get(k)))


def _differs(registered: Any, now: Any) -> bool:
    if isinstance(registered, dict) and isinstance(now, dict):
        return any(_differs(v, now.get(k)) for k, v in registered.items())
    if isinstance(registered, list) and isinstance(now, list):  # e.g. guardrails: by item
        return len(registered) != len(now) or any(
            _differs(a, b) for a, b in zip(registered, now, strict=True))
    return bool(registered != now)


def _never_ready(run: RunDir, arms: Sequence[str]) -> tuple[bootfail.NeverReady, ...]:
    """The arms that never became ready, from the journal — read only when some registered
    arm has no row at all in passes.csv (an arm never ready measured nothing), so a
    history of healthy nights is judged without decoding a journal."""
    measured = ({str(a) for a in run.passes["arm"].unique()} if "arm" in run.passes.columns
                else set())
    if all(a in measured for a in arms):
        return ()
    return bootfail.never_ready(run.journal)


def _redone(run: RunDir) -> list[str]:
    """A note per pair measured again, with why each earlier attempt did not count — read
    from the journal only when a row was measured in a later attempt of its pair."""
    attempts = run.passes["pair_attempt"] if "pair_attempt" in run.passes.columns else None
    if attempts is None or not len(attempts) or attempts.to_numpy().max() <= 1:
        return []
    return [f"redone: {line}" for line in redos.redone_pairs(run.journal)]


def _replayed(run: RunDir) -> list[str]:
    """A note for a run that replays schedules (rate levels, traces): that both arms of
    each pair replayed the registered bytes, or what breaks it (`results.replayed`, the
    check `verify` makes) — read from the journal only for such a run."""
    wl = run.passes["workload"] if "workload" in run.passes.columns else None
    registered = run.registration.schedules
    if not registered and (wl is None or not wl.isin(replayed.TIMED).any()):
        return []
    events = run.journal
    found = replayed.check(run.run_dir, registered, events[0] if events else {}, events)
    if found is None:
        return []
    if not found.ok:
        return [f"schedules: {found.text()}"]
    return [f"schedules: both arms of each of the {len(found.pairs)} pair(s) replayed the "
            f"registered bytes ({len(found.registered)} schedule(s), {found.passes} passes; "
            "`spec-ab verify` checks them)"]


def _arms(run: RunDir) -> list[str]:
    arms = run.registration.arm_order
    if len(arms) < 2:
        raise ResultsError(f"{run.run_dir / 'preregistration.json'}: needs control + a candidate")
    return arms


def _guard_cells(run: RunDir) -> list[list[tuple[str, str]]] | None:
    """Each guardrail's registered cells (results schema 3; None: found from the rows;
    `--rule` overrides never touch the guardrails)."""
    levels = run.registration.levels
    return None if levels is None else levels.guardrail_cells()


def _levels(run: RunDir) -> dict[str, list[str]] | None:
    """The levels `*` decision cells stand for, per workload: the registered ones (results
    schema 3), else the levels the frozen campaign configured (None: unknown, use the
    rows)."""
    if run.registration.levels is not None:
        return run.registration.levels.decision_levels()
    if run.campaign is None:
        return None
    return {w: run.campaign.workloads.levels(w) for w in ("knee", "agentfix")}


def _level_order(campaign: Campaign | None) -> list[str]:
    """Knee levels by concurrency, then the agent-fixture classes in file order."""
    if campaign is None:
        return []
    return campaign.workloads.levels("knee") + campaign.workloads.levels("agentfix")


# --------------------------------------------------------------------------- exit codes


def exit_code_for(report: Report, fail_on: Sequence[str]) -> int:
    """4 when any `--fail-on` condition holds for the newest run (`fail_on_held`), else 0."""
    return EXIT_INCOMPLETE if fail_on_held(report, fail_on) else EXIT_OK


def fail_on_held(report: Report, fail_on: Sequence[str]) -> list[str]:
    """Each `--fail-on` condition that holds for the newest run, and where, as the line
    `--fail-on` prints on stderr: "fail-on: loss (agentfix prose)".

    - `loss`: a decision cell of a candidate is labelled `loss`;
    - `keep-default`: the decision is keep-default;
    - `incomplete`: pairs are missing or left out, or the run did not finish;
    - `unstable`: a decision cell is flagged `window-drift`, `high-variance` or (pooled
      lanes) `lanes-disagree`;
    - `undecided`: a sequential design has not decided (continue or inconclusive);
    - `not-preregistered`: `--rule` overrides, or the run's copies disagree.
    """
    check_fail_on(tuple(fail_on))
    run = report.latest
    many = len(run.arms) > 2

    def where(cells: Sequence[oc.Cell]) -> str:
        return ", ".join((f"{c.arm} " if many else "") + c.where for c in cells)

    unstable_flags = {"window-drift", "high-variance", "lanes-disagree"}
    lost = [c for c in run.decision_cells() if c.verdict == "loss"]
    shaky = [c for c in run.decision_cells() if unstable_flags & set(c.flags)]
    v = run.verdict
    held = {
        "loss": where(lost) if lost else None,
        "keep-default": v.reason if run.decision == "keep-default" else None,
        "incomplete": (f"{v.pairs_measured} of {v.pairs_planned} pairs"
                       + ("" if run.complete else ", the run did not finish")
                       if run.incomplete else None),
        "unstable": "; ".join(
            f"{where([c])}: {', '.join(sorted(unstable_flags & set(c.flags)))}"
            for c in shaky) or None,
        "undecided": ", ".join(f"{cv.arm} {cv.sequential.state}" for cv in v.candidates
                               if cv.sequential is not None and not cv.sequential.decided)
                     or None,
        "not-preregistered": run.why_exploratory if run.exploratory else None,
    }
    return [f"fail-on: {cond} ({held[cond]})" for cond in dict.fromkeys(fail_on)
            if held[cond] is not None]
