"""`spec-ab watch` as a table, Markdown or JSON (HTML with plots: `figures`).

The table and Markdown hold one row per lane, metric and cell: the last value, the last
change (its night and size) and the outliers; then the refused nights and the advice.
JSON holds `changes: [{lane, metric, cell, run, before, after, change, direction}]`
(`run`: the folder of the first night after the change), the series and the refused."""

from __future__ import annotations

import json
from pathlib import Path

from campaign.watch.detect import Finding
from campaign.watch.watching import Watch

JSON_VERSION = 1
HEADER = ("lane", "metric", "cell", "nights", "last", "last change", "outliers")


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def rows(w: Watch) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for f in w.findings:
        s = f.series
        last = next((v for v in reversed(s.values) if v is not None), None)
        if f.changes:
            c = f.changes[-1]
            change = (f"{c.change:+.1%} {f.direction(c)} at "
                      f"{Path(s.nights[c.index].run_dir).name}")
        else:
            change = "none"
        odd = ", ".join(Path(s.nights[o.index].run_dir).name for o in f.outliers) or "none"
        present = sum(v is not None for v in s.values)
        out.append((s.lane, s.metric, s.cell, f"{present}/{len(s.values)}", _num(last),
                    change, odd))
    return out


def notes(w: Watch) -> list[str]:
    """The lines under the table: the changes that fail, the nights left out, the advice."""
    out = []
    for c in w.failing:
        out.append(f"WORSE: lane {c.lane}: {c.metric} at {c.cell} {c.change:+.1%} "
                   f"({_num(c.before)} → {_num(c.after)}) from {Path(c.run).name}, among "
                   f"the newest {w.since} nights")
    for r in w.refused:
        out.append(f"left out (fails `spec-ab verify`): {r.run_dir}: {r.why}")
    out += w.advice()
    if not w.failing:
        out.append(f"no change for the worse among any lane's newest {w.since} nights")
    return out


def render_table(w: Watch) -> str:
    table = [HEADER, *rows(w)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    text = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in table]
    return "\n".join([*text, "", *notes(w)]) + "\n"


def render_markdown(w: Watch) -> str:
    out = ["# spec-ab watch", "", "| " + " | ".join(HEADER) + " |",
           "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows(w)]
    out.append("")
    out += [f"- {line}" for line in notes(w)]
    return "\n".join(out) + "\n"


def _series_doc(f: Finding) -> dict[str, object]:
    s = f.series
    return {"lane": s.lane, "metric": s.metric, "cell": s.cell, "source": s.source,
            "direction": s.direction, "band": s.band,
            "nights": [{"run": n.run_dir, "started": n.started, "value": v}
                       for n, v in zip(s.nights, s.values, strict=True)],
            "changes": [s.nights[c.index].run_dir for c in f.changes],
            "outliers": [s.nights[o.index].run_dir for o in f.outliers]}


def render_json(w: Watch) -> str:
    doc = {"version": JSON_VERSION, "since": w.since,
           "changes": [c.doc() for c in w.changes],
           "failing": [c.doc() for c in w.failing],
           "refused": [{"run": r.run_dir, "why": r.why} for r in w.refused],
           "advice": w.advice(),
           "series": [_series_doc(f) for f in w.findings]}
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"
