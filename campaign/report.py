"""`spec-ab report`: results directories → verdicts → a rich table, Markdown, JSON or HTML.

`build_report(run_dirs)` loads each run through the store, checks its frozen rule against
its hash, applies the rule to the tidy table (`verdict.py`) and returns a `Report`;
`render(report, fmt)` turns it into text. Renderers are pure functions of the `Report`
(golden-tested), so the CLI only parses, calls `build_report`, renders and maps
`exit_code_for` to the process's exit code.

Honesty rules the renderers keep: the rule is always shown with its hash; a rule edited in
`campaign.yaml` after registration is ignored (the registered one is used) and said so;
`--rule` overrides mark every output "exploratory, not pre-registered"; pairs left out
are counted; one pair says it has no CI.

Several run directories (a nightly history) are reported side by side: one line per run
with its decision, then the newest run in full. `--fail-on` looks at the newest run only
(older runs are history) and every trigger exits 4 (DESIGN.md's "finished but not as
hoped" code; there is no separate code per trigger).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import pandas as pd
from pydantic import ValidationError
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from campaign import RESULTS_SCHEMA_VERSION, __version__, catalog
from campaign import verdict as vd
from campaign.errors import EXIT_INCOMPLETE, EXIT_OK, ResultsError, UsageError
from campaign.spec import Preregistration
from campaign.store import load_runs, rule_hash

REPORT_SCHEMA_VERSION = 1
"""Version of the JSON report (bumped when a key changes meaning or disappears).
1: first version (decision, rule, cells, guardrails, ranking, runs/history)."""

Format = Literal["table", "markdown", "json", "html"]
FAIL_ON = ("loss", "keep-default", "incomplete")
EXPLORATORY = "EXPLORATORY, not pre-registered"

VERDICT_STYLE = {
    "adopt": "bold green",
    "gain-below-bar": "yellow",
    "within-drift": "dim",
    "loss": "bold red",
    "mixed": "magenta",
    "no-data": "dim",
    "not-applicable": "dim",
}
DECISION_STYLE = {"adopt": "bold green", "keep-default": "bold yellow"}


class RunLike(Protocol):
    """What a report reads of a run (`campaign.store.RunData` has it)."""

    @property
    def run_dir(self) -> Path: ...
    @property
    def run_id(self) -> str: ...
    @property
    def passes(self) -> pd.DataFrame: ...
    @property
    def preregistration(self) -> dict[str, Any]: ...
    @property
    def campaign(self) -> dict[str, Any]: ...
    @property
    def complete(self) -> bool: ...


Loader = Callable[[Path], RunLike]


@dataclass(frozen=True)
class RunReport:
    """One run's verdicts with everything needed to show how they were reached."""

    run_id: str
    run_dir: Path
    campaign: str
    hypothesis: str
    lane: str
    registered_at: str
    complete: bool
    arms: tuple[str, ...]
    rule: vd.Rule
    rule_dict: dict[str, Any]
    rule_sha256: str
    """Hash of the rule actually used (differs from the registered one under overrides)."""
    registered_sha256: str
    overrides: dict[str, str]
    edited_after_registration: tuple[str, ...]
    """Keys of campaign.yaml's rule that differ from the registered rule (then ignored)."""
    verdict: vd.RunVerdict
    aa: vd.BandRecommendation | None = None
    notes: tuple[str, ...] = ()

    @property
    def exploratory(self) -> bool:
        return bool(self.overrides)

    @property
    def decision(self) -> vd.Decision:
        return self.verdict.decision

    @property
    def incomplete(self) -> bool:
        return self.verdict.incomplete or not self.complete

    def decision_cells(self) -> list[vd.Cell]:
        return [c for cv in self.verdict.candidates for c in cv.cells if c.decision_cell]


@dataclass(frozen=True)
class Report:
    runs: tuple[RunReport, ...]
    """Oldest first (by registration time); the last one is the newest."""
    tool_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def latest(self) -> RunReport:
        return self.runs[-1]

    @property
    def exploratory(self) -> bool:
        return any(r.exploratory for r in self.runs)


# --------------------------------------------------------------------------- building


REQUIRED_COLUMNS = ("run", "pair", "arm", "workload", "level", "metric", "value", "valid")


def build_report(
    run_dirs: Sequence[Path],
    *,
    rule_overrides: dict[str, str] | None = None,
    loader: Loader | None = None,
) -> Report:
    """Load run directories and judge each under its registered rule (or the overrides).

    The newest run (by registration time) is judged in full: every cell of its primary,
    guardrail and descriptive metrics. Older runs of a history are judged on what their
    decision needs (decision and guardrail cells), which keeps a 1,000-night history fast;
    report a run alone to see all of its cells.

    Raises ResultsError (naming the file) for damaged results: a rule that does not match
    its hash, missing columns, a zero or missing value in a decision or guardrail cell.
    """
    if not run_dirs:
        raise UsageError("give at least one run directory", hint="spec-ab report results/<run>")
    if loader is None:
        runs: list[RunLike] = list(load_runs([Path(d) for d in run_dirs]))
    else:
        runs = [loader(Path(d)) for d in run_dirs]
    overrides = dict(rule_overrides or {})
    cache: dict[Any, Any] = {}
    prepared = [_prepare(run, overrides, cache) for run in runs]
    newest = max(range(len(runs)), key=lambda i: (
        str(runs[i].preregistration.get("registered_at", "")), runs[i].run_id))
    shown: set[str] = set(vd.DESCRIPTIVE_METRICS)
    rule_new = prepared[newest][1]
    shown.add(rule_new.metric)
    shown.update(g.metric for g in rule_new.prereg.guardrails)
    frames = []
    for run in runs:
        df = run.passes
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise ResultsError(f"{run.run_dir / 'passes.csv'}: missing columns {missing}")
        if len(df) == 0:
            raise ResultsError(
                f"{run.run_dir / 'passes.csv'}: no measured passes yet",
                hint=f"spec-ab run --resume {run.run_dir}",
            )
        frames.append(df)
    # the directory names the run, whatever its rows say (a copied or renamed run dir)
    all_rows = _stack(frames, [r.run_id for r in runs])
    tables = vd.tidy_tables(_rows_needed(all_rows, runs, prepared, newest, shown))
    out: list[RunReport] = []
    for i, (run, (rule_dict, rule, edited, notes)) in enumerate(
        zip(runs, prepared, strict=True)
    ):
        table = tables.get(run.run_id, vd.RunTable(run=run.run_id))
        arms = _arms(run)
        order = _level_order(run.campaign)
        csv_path = run.run_dir / "passes.csv"
        try:
            verdict = vd.judge_run(table, rule, arms, level_order=order,
                                   metrics=shown if i == newest else ())
        except vd.DataProblem as exc:
            raise ResultsError(f"{csv_path}: {exc}",
                               hint="the file is damaged or the pass never measured it") from None
        aa = None
        if _is_aa(run.campaign, arms):
            try:
                aa = vd.aa_band([c for c in verdict.candidates[0].cells if c.decision_cell])
            except vd.DataProblem:
                aa = None
        prereg = run.preregistration
        out.append(RunReport(
            run_id=run.run_id,
            run_dir=run.run_dir,
            campaign=str(prereg.get("campaign") or run.campaign.get("name", "")),
            hypothesis=str(run.campaign.get("hypothesis", "") or "").strip(),
            lane=str(run.campaign.get("lane", "")),
            registered_at=str(prereg.get("registered_at", "")),
            complete=bool(run.complete),
            arms=tuple(arms),
            rule=rule,
            rule_dict=rule_dict,
            # without overrides the rule used is the registered one (its hash was checked)
            rule_sha256=rule_hash(rule_dict) if overrides else str(prereg["sha256"]),
            registered_sha256=str(prereg["sha256"]),
            overrides=overrides,
            edited_after_registration=edited,
            verdict=verdict,
            aa=aa,
            notes=notes,
        ))
    out.sort(key=lambda r: (r.registered_at, r.run_id))
    return Report(runs=tuple(out))


def _stack(frames: Sequence[pd.DataFrame], run_ids: Sequence[str]) -> pd.DataFrame:
    """The runs' tidy rows as one frame, `run` set from the directory names.

    Column by column with numpy: `pd.concat` of 1,000 small frames spends most of its time
    reconciling their blocks (0.8 s here); the columns are the same in every run."""
    if len(frames) == 1:
        return frames[0].assign(run=run_ids[0])
    cols = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    data = {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in cols if c != "run"}
    data["run"] = np.repeat(np.array(run_ids, dtype=object), [len(f) for f in frames])
    return pd.DataFrame(data)


def _rows_needed(
    rows: pd.DataFrame,
    runs: Sequence[RunLike],
    prepared: Sequence[tuple[dict[str, Any], vd.Rule, Any, Any]],
    newest: int,
    shown: set[str],
) -> pd.DataFrame:
    """The tidy rows the verdicts read: all shown metrics of the newest run; of older runs
    only the decision and guardrail places (vectorised, one mask per distinct rule)."""
    if len(runs) == 1:
        return rows[rows["metric"].isin(shown | set(vd.TOKEN_METRICS))]
    wanted = shown | set(vd.TOKEN_METRICS)
    for _, rule, _, _ in prepared:
        wanted |= {rule.metric, *(g.metric for g in rule.prereg.guardrails)}
    rows = rows[rows["metric"].isin(wanted)]  # cheap hash test first, string compares after
    run_col, metric, workload, level = (rows[c] for c in ("run", "metric", "workload", "level"))
    keep = (run_col == runs[newest].run_id) & metric.isin(shown | set(vd.TOKEN_METRICS))
    groups: dict[int, tuple[vd.Rule, list[str]]] = {}
    for i, (run, (_, rule, _, _)) in enumerate(zip(runs, prepared, strict=True)):
        if i != newest:
            groups.setdefault(id(rule), (rule, []))[1].append(run.run_id)
    for rule, ids in groups.values():
        in_group = run_col.isin(ids)
        places: set[tuple[str, str]] = {
            (d.workload, d.level) for d in rule.prereg.decision_cells}
        for g in rule.prereg.guardrails:
            if g.workload != "*" or g.level != "*":
                places.add((g.workload, g.level))
        places |= {(w, "*") for w, lvl in places if lvl == "all"}  # sizes of a whole sweep
        key_metrics = {rule.metric, *(g.metric for g in rule.prereg.guardrails),
                       *vd.TOKEN_METRICS}
        at_place = pd.Series(False, index=rows.index)
        for w, lvl in places:
            m = pd.Series(True, index=rows.index) if w == "*" else workload == w
            if lvl != "*":
                m &= level == lvl
            at_place |= m
        keep |= in_group & metric.isin(key_metrics) & at_place
    return rows[keep]


def _prepare(
    run: RunLike, overrides: dict[str, str], cache: dict[Any, Any]
) -> tuple[dict[str, Any], vd.Rule, tuple[str, ...], tuple[str, ...]]:
    """The rule to judge a run under: the registered one, checked against its hash.

    Runs of a nightly history share their rule: the parsed result is cached by hash."""
    path = run.run_dir / "preregistration.json"
    prereg = run.preregistration
    for key in ("rule", "sha256", "drift_band", "arms"):
        if key not in prereg:
            raise ResultsError(f"{path}: '{key}' is missing")
    registered = prereg["rule"]
    if not isinstance(registered, dict) or rule_hash(registered) != prereg["sha256"]:
        raise ResultsError(
            f"{path}: the rule does not match its sha256 — the file was changed after "
            "registration, so no verdict can claim to be pre-registered",
            hint="re-run the campaign, or report with --rule overrides (exploratory)",
        )
    band = prereg["drift_band"]
    if not isinstance(band, int | float) or isinstance(band, bool) or not 0 <= band < 1:
        raise ResultsError(f"{path}: drift_band {band!r} is not a fraction in [0, 1)")
    frozen = run.campaign.get("preregistration")
    cache_key = (prereg["sha256"], float(band))
    hit = cache.get(cache_key)
    if hit is not None and hit[0] == frozen:
        return hit[1]  # type: ignore[no-any-return]
    notes: list[str] = []
    edited = _edited_keys(registered, frozen)
    if edited:
        notes.append(
            "campaign.yaml's rule was edited after registration (" + ", ".join(edited)
            + "): the registered rule is used"
        )
    rule_dict = dict(registered)
    if overrides:
        rule_dict = vd.apply_overrides(registered, overrides)
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
        rule = vd.parse_rule(rule_dict, float(band))
    except ValidationError as exc:
        raise ResultsError(f"{path}: the registered rule is not valid ({exc.errors()[0]['msg']})",
                           hint="was it written by a newer spec-ab?") from None
    result = (rule_dict, rule, edited, tuple(notes))
    cache[cache_key] = (frozen, result)
    return result


def _edited_keys(registered: dict[str, Any], frozen: Any) -> tuple[str, ...]:
    if frozen is None:
        frozen = {}
    if not isinstance(frozen, dict):
        return ("preregistration",)
    try:
        now = Preregistration.model_validate(frozen).model_dump(mode="json", by_alias=True)
    except ValidationError:
        return ("preregistration (no longer valid)",)
    # Only what was registered can have been edited: a key the registered rule lacks is a
    # field added by a later spec-ab (filled with its default), not an edit.
    return tuple(k for k in sorted(registered) if _differs(registered[k], now.get(k)))


def _differs(registered: Any, now: Any) -> bool:
    if isinstance(registered, dict) and isinstance(now, dict):
        return any(_differs(v, now.get(k)) for k, v in registered.items())
    return bool(registered != now)


def _arms(run: RunLike) -> list[str]:
    arms = [str(a) for a in run.preregistration.get("arms") or []]
    if "control" in arms:
        arms = ["control", *(a for a in arms if a != "control")]
    if len(arms) < 2:
        raise ResultsError(f"{run.run_dir / 'preregistration.json'}: needs control + a candidate")
    return arms


def _level_order(campaign: dict[str, Any]) -> list[str]:
    wl = campaign.get("workloads") or {}
    order: list[str] = []
    knee = wl.get("knee") or {}
    if isinstance(knee, dict):
        conc = knee.get("concurrency") or [1, 2, 4, 8, 16]
        order += [f"c{c}" for c in sorted(int(c) for c in conc)]
    agent = wl.get("agentfix") or {}
    if isinstance(agent, dict):
        order += [str(k) for k in (agent.get("fixtures") or {})]
    return order


def _is_aa(campaign: dict[str, Any], arms: Sequence[str]) -> bool:
    """An A/A run: every candidate arm changes nothing but its description/warm-up."""
    specs = campaign.get("arms") or {}
    if not isinstance(specs, dict) or len(arms) < 2:
        return False
    for arm in arms[1:]:
        spec = specs.get(arm)
        if not isinstance(spec, dict):
            return False
        if set(spec) - {"description", "warmup"}:
            return False
    return True


# --------------------------------------------------------------------------- exit codes


def exit_code_for(report: Report, fail_on: Sequence[str]) -> int:
    """4 when any `--fail-on` condition holds for the newest run, else 0.

    - `loss`: a decision cell of a candidate is labelled `loss`;
    - `keep-default`: the decision is keep-default;
    - `incomplete`: pairs are missing or left out, or the run did not finish.
    """
    for cond in fail_on:
        if cond not in FAIL_ON:
            raise UsageError(f"--fail-on {cond}: choose {', '.join(FAIL_ON)}")
    run = report.latest
    hits = {
        "loss": any(c.verdict == "loss" for c in run.decision_cells()),
        "keep-default": run.decision == "keep-default",
        "incomplete": run.incomplete,
    }
    return EXIT_INCOMPLETE if any(hits[c] for c in fail_on) else EXIT_OK


def summary_lines(report: Report) -> list[str]:
    """A few plain lines for the end of `spec-ab run`."""
    run = report.latest
    v = run.verdict
    head = f"Decision: {v.decision.upper()}"
    if v.adopt_arm and len(run.arms) > 2:
        head += f" ({v.adopt_arm})"
    head += f" — rule {run.rule.prereg.rule}, sha256 {run.rule_sha256[:12]}"
    if run.exploratory:
        head += f" [{EXPLORATORY}]"
    lines = [head]
    for c in run.decision_cells():
        lines.append(
            f"  {c.arm} {c.where} {c.metric}: {vd.pct(c.gain)} "
            f"[pairs {_pairs_text(c)}] {c.verdict}"
            + (f" ({', '.join(c.flags)})" if c.flags else "")
        )
    lines += [f"  - {r}" for r in v.reasons]
    lines += [f"  note: {n}" for n in (*run.notes, *v.notes)]
    return lines


# --------------------------------------------------------------------------- formatting


def fmt_value(value: float | None, metric: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    unit = catalog.METRICS[metric].unit if metric in catalog.METRICS else ""
    if unit == "count":
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.4g}"


def _pairs_text(c: vd.Cell) -> str:
    return " ".join(vd.fmt_gain(p.gain, c.kind) for p in c.pairs) or "—"


def _ci_text(c: vd.Cell) -> str:
    if c.stats is None:
        return "—"
    if c.stats.ci is None:
        return "no CI (1 pair)"
    lo, hi = c.stats.ci
    return f"{vd.fmt_gain(lo, c.kind)} … {vd.fmt_gain(hi, c.kind)}"


def _cell_name(c: vd.Cell) -> str:
    return ("★ " if c.decision_cell else "  ") + f"{c.workload} {c.level}"


def _rule_line(run: RunReport) -> str:
    if run.exploratory:
        src = (f"{EXPLORATORY} — overrides {_overrides_text(run)} on the registered rule "
               f"sha256 {run.registered_sha256[:12]}; used rule sha256 {run.rule_sha256[:12]}")
    else:
        src = f"pre-registered {run.registered_at}, sha256 {run.registered_sha256[:12]}"
    return f"Rule ({src}): {run.rule.describe()}"


def _overrides_text(run: RunReport) -> str:
    return ", ".join(f"{k}={v}" for k, v in run.overrides.items())


def _pairs_line(run: RunReport) -> str:
    v = run.verdict
    state = "complete" if not run.incomplete else "INCOMPLETE"
    return (f"{v.pairs_measured} of {v.pairs_planned} pairs ({run.rule.prereg.order}), "
            f"{state}; arms {', '.join(run.arms)}; lane {run.lane or '?'}")


# --------------------------------------------------------------------------- rich table


WIDE = 130
"""Below this console width the per-cell table folds CI, pairs and flags into one column."""


def table_renderables(report: Report, width: int = 160) -> list[RenderableType]:
    """What `print_table` prints: a history table (several runs), then the newest run."""
    out: list[RenderableType] = []
    if report.exploratory:
        out.append(Text(f"*** {EXPLORATORY} ***", style="bold red"))
    if len(report.runs) > 1:
        out.append(_history_table(report))
        out.append(Text(""))
    out.extend(_run_renderables(report.latest, compact=width < WIDE))
    return out


def print_table(report: Report, console: Console) -> None:
    """Print the report as rich tables to `console` (the terminal format); a narrow
    console gets the compact layout."""
    for r in table_renderables(report, width=console.width):
        console.print(r)


def _guardrails_text(run: RunReport) -> str:
    broken = [g for cv in run.verdict.candidates for g in cv.guardrails if g.broken]
    if not broken:
        return "hold"
    return "broken: " + ", ".join(dict.fromkeys(f"{g.metric} {g.level}" for g in broken))


def _history_table(report: Report) -> Table:
    t = Table(title=f"History: {len(report.runs)} runs", title_justify="left")
    for col in ("run", "registered", "pairs", "decision", "decision cells", "guardrails",
                "flags"):
        t.add_column(col, overflow="fold")
    for run in report.runs:
        cells = "; ".join(
            f"{c.arm + ' ' if len(run.arms) > 2 else ''}{c.level} {vd.pct(c.gain)} {c.verdict}"
            for c in run.decision_cells()
        )
        flags = sorted({f for c in run.decision_cells() for f in c.flags})
        dec = run.decision + (f" ({run.verdict.adopt_arm})" if len(run.arms) > 2
                              and run.verdict.adopt_arm else "")
        if run.exploratory:
            dec += " *"
        t.add_row(run.run_id, run.registered_at[:16], f"{run.verdict.pairs_measured}/"
                  f"{run.verdict.pairs_planned}", Text(dec, style=DECISION_STYLE[run.decision]),
                  cells, _guardrails_text(run), ", ".join(flags) or "—")
    return t


def _run_renderables(run: RunReport, *, compact: bool = False) -> list[RenderableType]:
    out: list[RenderableType] = [
        Text(f"spec-ab report — {run.campaign} — {run.run_id}", style="bold"),
        Text(_pairs_line(run)),
        Text(_rule_line(run)),
    ]
    for n in run.notes:
        out.append(Text(f"note: {n}", style="yellow"))
    for cv in run.verdict.candidates:
        conf = f"{run.rule.prereg.confidence:.0%} CI"
        title = f"{cv.arm} vs {run.arms[0]}   (★ = pre-registered decision cell)"
        if compact:
            # narrow terminals: cell and metric stacked, CI / pairs / flags stacked
            t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False, show_lines=False)
            t.add_column("cell · metric", no_wrap=True)
            t.add_column("gain", justify="right", no_wrap=True)
            t.add_column("verdict", no_wrap=True)
            t.add_column(f"{conf} · pairs · flags", overflow="fold")
            for c in cv.cells:
                detail = f"{_ci_text(c)}\npairs {_pairs_text(c)}"
                if c.left_out:
                    detail += f" (+{len(c.left_out)} left out)"
                if c.flags:
                    detail += "\n" + ", ".join(c.flags)
                t.add_row(f"{_cell_name(c)}\n  {c.metric}", vd.fmt_gain(c.gain, c.kind),
                          Text(c.verdict, style=VERDICT_STYLE[c.verdict]), detail)
                t.add_row()
            out.append(t)
            _guardrail_lines(out, run, cv)
            continue
        t = Table(title=title, title_justify="left")
        for col, just, wrap in (
            ("cell", "left", False), ("metric", "left", False), (run.arms[0], "right", False),
            (cv.arm, "right", False), ("gain", "right", False), (conf, "right", False),
            ("pairs", "left", True), ("verdict", "left", False), ("flags", "left", True),
        ):
            t.add_column(col, justify=just, overflow="fold",  # type: ignore[arg-type]
                         no_wrap=not wrap)
        for c in cv.cells:
            t.add_row(
                _cell_name(c), c.metric, fmt_value(c.control, c.metric),
                fmt_value(c.candidate, c.metric), vd.fmt_gain(c.gain, c.kind), _ci_text(c),
                _pairs_text(c) + (f" (+{len(c.left_out)} left out)" if c.left_out else ""),
                Text(c.verdict, style=VERDICT_STYLE[c.verdict]), "\n".join(c.flags),
            )
        out.append(t)
        _guardrail_lines(out, run, cv)
    if len(run.verdict.candidates) > 1:
        out.append(_ranking_table(run))
    v = run.verdict
    dec = Text("Decision: ")
    dec.append(v.decision.upper() + (f" ({v.adopt_arm})" if v.adopt_arm and len(run.arms) > 2
                                     else ""), style=DECISION_STYLE[v.decision])
    if run.exploratory:
        dec.append(f"  [{EXPLORATORY}]", style="bold red")
    out.append(dec)
    for r in v.reasons:
        out.append(Text(f"  - {r}"))
    for n in v.notes:
        out.append(Text(f"  note: {n}", style="yellow"))
    if run.aa is not None:
        out.append(Text(f"A/A run: {run.aa.text}", style="cyan"))
    return out


def _guardrail_lines(out: list[RenderableType], run: RunReport, cv: vd.CandidateVerdict) -> None:
    if cv.guardrails:
        out.append(Text("Guardrails:"))
        for g in cv.guardrails:
            out.append(Text(f"  {'✗' if g.broken else '✓'} {g.reason}",
                            style="red" if g.broken else ""))
    flagged = [(c, r) for c in cv.cells for r in c.reasons[1:] if c.decision_cell]
    if flagged:
        out.append(Text("Decision cells, in detail:"))
        for c, r in flagged:
            out.append(Text(f"  {c.where}: {r}"))


def _ranking_table(run: RunReport) -> Table:
    t = Table(title="Ranking of candidates", title_justify="left")
    for col in ("rank", "arm", "decision", "mean gain (decision cells)", "worst cell"):
        t.add_column(col)
    for r in run.verdict.ranking:
        t.add_row(str(r.rank), r.arm, Text(r.decision, style=DECISION_STYLE[r.decision]),
                  vd.pct(r.gain), vd.pct(r.worst))
    return t


def render_table(report: Report, width: int = 160) -> str:
    """The terminal table as plain text (what golden tests pin)."""
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(Group(*table_renderables(report, width=width)))
    return console.export_text()


# --------------------------------------------------------------------------- markdown


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def render_markdown(report: Report) -> str:
    lines: list[str] = []
    if report.exploratory:
        lines += [f"> **{EXPLORATORY}**: these verdicts use `--rule` overrides.", ""]
    if len(report.runs) > 1:
        lines += [f"## History ({len(report.runs)} runs)", "",
                  "| run | registered | pairs | decision | decision cells | guardrails |",
                  "|---|---|---|---|---|---|"]
        for run in report.runs:
            cells = "; ".join(f"{c.level} {vd.pct(c.gain)} {c.verdict}"
                              for c in run.decision_cells())
            lines.append(f"| {run.run_id} | {run.registered_at[:16]} | "
                         f"{run.verdict.pairs_measured}/{run.verdict.pairs_planned} | "
                         f"**{run.decision}** | {_md_escape(cells)} | "
                         f"{_md_escape(_guardrails_text(run))} |")
        lines.append("")
    run = report.latest
    v = run.verdict
    lines += [f"# {run.campaign}: **{v.decision}**"
              + (f" ({v.adopt_arm})" if v.adopt_arm and len(run.arms) > 2 else ""), ""]
    if run.hypothesis:
        lines += [f"_Hypothesis:_ {run.hypothesis}", ""]
    lines += [f"- Run: `{run.run_id}` — {_pairs_line(run)}",
              f"- {_rule_line(run)}", ""]
    for n in run.notes:
        lines.append(f"> note: {n}")
    if run.notes:
        lines.append("")
    lines += ["## Decision", ""]
    lines += [f"- {_md_escape(r)}" for r in v.reasons]
    lines += [f"- note: {_md_escape(n)}" for n in v.notes]
    lines.append("")
    for cv in v.candidates:
        conf = f"{run.rule.prereg.confidence:.0%} CI"
        lines += [f"## {cv.arm} vs {run.arms[0]}", "",
                  f"| cell | metric | {run.arms[0]} | {cv.arm} | gain | {conf} | pairs | "
                  "verdict | flags |",
                  "|---|---|---:|---:|---:|---:|---|---|---|"]
        for c in cv.cells:
            name = f"**{c.workload} {c.level}** ★" if c.decision_cell else f"{c.workload} {c.level}"
            left = f" (+{len(c.left_out)} left out)" if c.left_out else ""
            lines.append(
                f"| {name} | {c.metric} | {fmt_value(c.control, c.metric)} | "
                f"{fmt_value(c.candidate, c.metric)} | {vd.fmt_gain(c.gain, c.kind)} | "
                f"{_ci_text(c)} | {_pairs_text(c)}{left} | {c.verdict} | "
                f"{', '.join(c.flags)} |"
            )
        lines += ["", "★ pre-registered decision cell.", ""]
        if cv.guardrails:
            lines += ["Guardrails:", ""]
            lines += [f"- {'✗' if g.broken else '✓'} {g.reason}" for g in cv.guardrails]
            lines.append("")
        detail = [(c, r) for c in cv.cells if c.decision_cell for r in c.reasons[1:]]
        if detail:
            lines += ["Decision cells, in detail:", ""]
            lines += [f"- {c.where}: {_md_escape(r)}" for c, r in detail]
            lines.append("")
    if len(v.candidates) > 1:
        lines += ["## Ranking", "", "| rank | arm | decision | mean gain | worst cell |",
                  "|---:|---|---|---:|---:|"]
        lines += [f"| {r.rank} | {r.arm} | {r.decision} | {vd.pct(r.gain)} | {vd.pct(r.worst)} |"
                  for r in v.ranking]
        lines.append("")
    if run.aa is not None:
        lines += [f"A/A run: {run.aa.text}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- JSON


def _num(x: float | None) -> float | None:
    """9 significant digits: exact enough for any use, stable across libm versions."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return float(f"{x:.9g}")


def cell_dict(c: vd.Cell) -> dict[str, Any]:
    s = c.stats
    return {
        "workload": c.workload,
        "level": c.level,
        "metric": c.metric,
        "arm": c.arm,
        "unit": catalog.METRICS[c.metric].unit if c.metric in catalog.METRICS else "",
        "direction": c.direction,
        "kind": c.kind,
        "decision_cell": c.decision_cell,
        "n": 0 if s is None else s.n,
        "control": _num(c.control),
        "candidate": _num(c.candidate),
        "gain": _num(c.gain),
        "ci": None if s is None or s.ci is None else [_num(s.ci[0]), _num(s.ci[1])],
        "ci_note": (None if s is None or s.ci is not None
                    else "one pair: no confidence interval"),
        "confidence": None if s is None else s.confidence,
        "pairs": [{"pair": p.pair, "control": _num(p.control), "candidate": _num(p.candidate),
                   "gain": _num(p.gain)} for p in c.pairs],
        "left_out": [{"pair": lo.pair, "arm": lo.arm, "reason": lo.reason} for lo in c.left_out],
        "verdict": c.verdict,
        "flags": list(c.flags),
        "reasons": list(c.reasons),
        "holm": None if c.holm is None else {
            "m": c.holm.m, "p": _num(c.holm.p), "p_adjusted": _num(c.holm.p_adjusted),
            "lower_bound": _num(c.holm.lower_bound)},
        "control_trend": _num(c.control_trend),
    }


def run_dict(run: RunReport) -> dict[str, Any]:
    v = run.verdict
    return {
        "decision": v.decision,
        "adopt_arm": v.adopt_arm,
        "reasons": list(v.reasons),
        "notes": [*run.notes, *v.notes],
        "exploratory": run.exploratory,
        "rule": {
            **run.rule_dict,
            "drift_band_used": _num(run.rule.band),
            "sha256": run.rule_sha256,
            "registered_sha256": run.registered_sha256,
            "pre_registered": not run.exploratory,
            "overrides": dict(run.overrides),
            "edited_after_registration": list(run.edited_after_registration),
            "text": run.rule.describe(),
        },
        "cells": [cell_dict(c) for cv in v.candidates for c in cv.cells],
        "guardrails": [
            {"arm": cv.arm, "metric": g.metric, "workload": g.workload, "level": g.level,
             "max_worsening": g.max_worsening, "absolute": g.absolute,
             "worsening": _num(g.worsening), "broken": g.broken, "reason": g.reason}
            for cv in v.candidates for g in cv.guardrails
        ],
        "candidates": [
            {"arm": cv.arm, "decision": cv.decision, "reasons": list(cv.reasons),
             "window_stable": cv.window_stable, "mean_gain": _num(cv.score)}
            for cv in v.candidates
        ],
        "ranking": [
            {"rank": r.rank, "arm": r.arm, "decision": r.decision, "mean_gain": _num(r.gain),
             "worst_gain": _num(r.worst)} for r in v.ranking
        ],
        "run": {
            "run_id": run.run_id,
            "run_dir": str(run.run_dir),
            "campaign": run.campaign,
            "lane": run.lane,
            "registered_at": run.registered_at,
            "arms": list(run.arms),
            "complete": run.complete,
            "incomplete": run.incomplete,
            "pairs_measured": v.pairs_measured,
            "pairs_planned": v.pairs_planned,
            "pairs_left_out": v.left_out,
            "window_stable": v.window_stable,
        },
        "aa": None if run.aa is None else {
            "recommended_drift_band": run.aa.band, "n": run.aa.n, "rms": _num(run.aa.rms),
            "largest": _num(run.aa.largest), "text": run.aa.text},
    }


def to_dict(report: Report) -> dict[str, Any]:
    """The JSON report: DESIGN.md's contract (`decision`, `rule`, `cells`, ...) for the
    newest run at the top level; with several runs also `history`, one summary per run
    (oldest first) with its decision, decision cells and broken guardrails."""
    latest = run_dict(report.latest)
    out: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "results_schema_version": RESULTS_SCHEMA_VERSION,
        "tool": "spec-ab",
        "tool_version": report.tool_version,
        "run_ids": [r.run_id for r in report.runs],
        **latest,
        "exploratory": report.exploratory,
    }
    if len(report.runs) > 1:
        # older runs as summaries: a 1,000-night history stays a readable size
        out["history"] = [history_dict(r) for r in report.runs]
    return out


def history_dict(run: RunReport) -> dict[str, Any]:
    v = run.verdict
    return {
        "run_id": run.run_id,
        "run_dir": str(run.run_dir),
        "registered_at": run.registered_at,
        "decision": v.decision,
        "adopt_arm": v.adopt_arm,
        "exploratory": run.exploratory,
        "incomplete": run.incomplete,
        "window_stable": v.window_stable,
        "rule_sha256": run.rule_sha256,
        "reasons": list(v.reasons),
        "notes": [*run.notes, *v.notes],
        "decision_cells": [
            {"arm": c.arm, "workload": c.workload, "level": c.level, "metric": c.metric,
             "gain": _num(c.gain), "ci": None if c.ci is None else [_num(c.ci[0]),
                                                                    _num(c.ci[1])],
             "pairs": [_num(p.gain) for p in c.pairs], "verdict": c.verdict,
             "flags": list(c.flags)}
            for c in run.decision_cells()
        ],
        "guardrails_broken": [g.reason for cv in v.candidates for g in cv.guardrails
                              if g.broken],
    }


def render_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- HTML


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.adopt{color:#080;font-weight:bold}.loss{color:#b00;font-weight:bold}
.mixed{color:#909}.gain-below-bar{color:#a60}.within-drift,.no-data,.not-applicable{color:#777}
.decision{font-size:1.4em;padding:.4em .8em;border-radius:6px;display:inline-block}
.d-adopt{background:#e3f6e3}.d-keep-default{background:#fff3d6}
.exploratory{background:#fdd;color:#900;padding:.5em;font-weight:bold}
.note{color:#8a5a00}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
"""


def render_html(report: Report) -> str:
    """A self-contained page: the newest run's verdicts, the history, and the plots as
    embedded PNGs (no external files or scripts, so it can be mailed or archived)."""
    from campaign import plots

    e = html.escape
    run = report.latest
    v = run.verdict
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>spec-ab report — {e(run.campaign)}</title><style>{_CSS}</style></head>",
             "<body>"]
    if report.exploratory:
        parts.append(f"<p class='exploratory'>{EXPLORATORY}: --rule overrides in use.</p>")
    parts.append(f"<h1>{e(run.campaign)}</h1>")
    if run.hypothesis:
        parts.append(f"<p><em>Hypothesis:</em> {e(run.hypothesis)}</p>")
    label = v.decision.upper() + (f" ({v.adopt_arm})" if v.adopt_arm and len(run.arms) > 2
                                  else "")
    parts.append(f"<p class='decision d-{v.decision}'>Decision: {e(label)}</p>")
    parts.append("<ul>" + "".join(f"<li>{e(r)}</li>" for r in v.reasons)
                 + "".join(f"<li class='note'>note: {e(n)}</li>"
                           for n in (*run.notes, *v.notes)) + "</ul>")
    parts.append(f"<p>Run <code>{e(run.run_id)}</code> — {e(_pairs_line(run))}</p>")
    parts.append(f"<p>{e(_rule_line(run))}</p>")
    if run.aa is not None:
        parts.append(f"<p class='note'>A/A run: {e(run.aa.text)}</p>")
    if len(report.runs) > 1:
        parts.append("<h2>History</h2><table><tr><th>run</th><th>registered</th>"
                     "<th>pairs</th><th>decision</th><th>decision cells</th>"
                     "<th>guardrails</th></tr>")
        for r in report.runs:
            cells = "; ".join(f"{c.level} {vd.pct(c.gain)} {c.verdict}"
                              for c in r.decision_cells())
            parts.append(
                f"<tr><td>{e(r.run_id)}</td><td>{e(r.registered_at[:16])}</td>"
                f"<td>{r.verdict.pairs_measured}/{r.verdict.pairs_planned}</td>"
                f"<td class='{'adopt' if r.decision == 'adopt' else 'gain-below-bar'}'>"
                f"{e(r.decision)}</td><td>{e(cells)}</td><td>{e(_guardrails_text(r))}</td></tr>")
        parts.append("</table>")
    for cv in v.candidates:
        conf = f"{run.rule.prereg.confidence:.0%} CI"
        parts.append(f"<h2>{e(cv.arm)} vs {e(run.arms[0])}</h2><table><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in (
                         "cell", "metric", run.arms[0], cv.arm, "gain", conf, "pairs",
                         "verdict", "flags"))
                     + "</tr>")
        for c in cv.cells:
            name = ("★ " if c.decision_cell else "") + f"{c.workload} {c.level}"
            parts.append(
                f"<tr><td>{e(name)}</td><td>{e(c.metric)}</td>"
                f"<td class='n'>{e(fmt_value(c.control, c.metric))}</td>"
                f"<td class='n'>{e(fmt_value(c.candidate, c.metric))}</td>"
                f"<td class='n'>{e(vd.fmt_gain(c.gain, c.kind))}</td>"
                f"<td class='n'>{e(_ci_text(c))}</td><td>{e(_pairs_text(c))}"
                f"{f' (+{len(c.left_out)} left out)' if c.left_out else ''}</td>"
                f"<td class='{c.verdict}' title='{e(' | '.join(c.reasons))}'>{e(c.verdict)}</td>"
                f"<td>{e(', '.join(c.flags))}</td></tr>")
        parts.append("</table>")
        if cv.guardrails:
            parts.append("<p>Guardrails:</p><ul>" + "".join(
                f"<li class='{'loss' if g.broken else ''}'>{'✗' if g.broken else '✓'} "
                f"{e(g.reason)}</li>" for g in cv.guardrails) + "</ul>")
        detail = [(c, r) for c in cv.cells if c.decision_cell for r in c.reasons[1:]]
        if detail:
            parts.append("<p>Decision cells, in detail:</p><ul>" + "".join(
                f"<li>{e(c.where)}: {e(r)}</li>" for c, r in detail) + "</ul>")
    if len(v.candidates) > 1:
        parts.append("<h2>Ranking</h2><table><tr><th>rank</th><th>arm</th><th>decision</th>"
                     "<th>mean gain</th><th>worst cell</th></tr>" + "".join(
                         f"<tr><td>{r.rank}</td><td>{e(r.arm)}</td><td>{e(r.decision)}</td>"
                         f"<td class='n'>{vd.pct(r.gain)}</td><td class='n'>{vd.pct(r.worst)}"
                         "</td></tr>" for r in v.ranking) + "</table>")
    parts.append("<h2>Plots</h2>")
    for title, png in plots.figures(run):
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><figcaption>{e(title)}</figcaption>"
                     f"<img alt='{e(title)}' src='data:image/png;base64,{b64}'></figure>")
    parts.append(f"<p><small>spec-ab {e(report.tool_version)} · report schema "
                 f"{REPORT_SCHEMA_VERSION}</small></p></body></html>")
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------- dispatch


def render(report: Report, fmt: Format, *, width: int = 160) -> str:
    """The report as text in one of the formats (`table` is plain text, no colours)."""
    if fmt == "table":
        return render_table(report, width=width)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        return render_html(report)
    raise UsageError(f"--format {fmt}: choose table, markdown, json or html")


# --------------------------------------------------------------------------- A/A


def recommend_band(run_dir: Path, *, loader: Loader | None = None) -> vd.BandRecommendation:
    """The drift band an A/A run measured (control against an identical control)."""
    rep = build_report([run_dir], loader=loader)
    run = rep.latest
    cells = [c for c in run.verdict.candidates[0].cells if c.decision_cell]
    try:
        return vd.aa_band(cells)
    except vd.DataProblem as exc:
        raise ResultsError(f"{run_dir / 'passes.csv'}: {exc}") from None
