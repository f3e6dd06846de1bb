"""The HTML report: one self-contained page with the plots embedded as PNG."""

from __future__ import annotations

import base64
import html

from campaign.report import plots
from campaign.report.model import EXPLORATORY, REPORT_SCHEMA_VERSION, Report
from campaign.report.rows import (
    cell_headers,
    cell_rows,
    detail_lines,
    headline,
    history_rows,
    pairs_line,
    ranking_rows,
    rule_line,
)

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.adopt{color:#080;font-weight:bold}.loss{color:#b00;font-weight:bold}
.mixed{color:#909}.gain-below-bar{color:#a60}.within-drift,.no-data{color:#777}
.decision{font-size:1.4em;padding:.4em .8em;border-radius:6px;display:inline-block}
.d-adopt{background:#e3f6e3}.d-keep-default{background:#fff3d6}
.exploratory{background:#fdd;color:#900;padding:.5em;font-weight:bold}
.note{color:#8a5a00}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
"""


def render_html(report: Report) -> str:
    """A self-contained page: the newest run's verdicts, the history, and the plots as
    embedded PNGs (no external files or scripts, so it can be mailed or archived)."""
    e = html.escape
    run = report.latest
    v = run.verdict
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>spec-ab report — {e(run.campaign)}</title><style>{_CSS}</style></head>",
             "<body>"]
    parts.append(f"<p class='decision d-{v.decision}'>{e(headline(run))}</p>")
    if report.exploratory:
        parts.append(f"<p class='exploratory'>{EXPLORATORY}: --rule overrides in use.</p>")
    parts.append("<ul>" + "".join(f"<li>{e(r)}</li>" for r in v.reasons)
                 + "".join(f"<li class='note'>note: {e(n)}</li>"
                           for n in (*run.notes, *v.notes)) + "</ul>")
    parts.append(f"<h1>{e(run.campaign)}</h1>")
    if run.hypothesis:
        parts.append(f"<p><em>Hypothesis:</em> {e(run.hypothesis)}</p>")
    parts.append(f"<p>Run <code>{e(run.run_id)}</code> — {e(pairs_line(run))}</p>")
    parts.append(f"<p>{e(rule_line(run))}</p>")
    if run.aa is not None:
        parts.append(f"<p class='note'>A/A run: {e(run.aa.text)}</p>")
    if len(report.runs) > 1:
        parts.append("<h2>History</h2><table><tr><th>run</th><th>registered</th>"
                     "<th>pairs</th><th>decision</th><th>decision cells</th>"
                     "<th>guardrails</th></tr>")
        for h in history_rows(report):
            parts.append(
                f"<tr><td>{e(h.run_id)}</td><td>{e(h.registered)}</td>"
                f"<td>{h.pairs}</td>"
                f"<td class='{'adopt' if h.decision == 'adopt' else 'gain-below-bar'}'>"
                f"{e(h.decision)}</td><td>{e(h.cells_text(with_arm=False))}</td>"
                f"<td>{e(h.guardrails)}</td></tr>")
        parts.append("</table>")
    for cv in v.candidates:
        parts.append(f"<h2>{e(cv.arm)} vs {e(run.arms[0])}</h2><table><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in cell_headers(run, cv))
                     + "</tr>")
        for row in cell_rows(cv):
            name = ("★ " if row.decision_cell else "") + row.where
            parts.append(
                f"<tr><td>{e(name)}</td><td>{e(row.metric)}</td>"
                f"<td class='n'>{e(row.control)}</td>"
                f"<td class='n'>{e(row.candidate)}</td>"
                f"<td class='n'>{e(row.gain)}</td>"
                f"<td class='n'>{e(row.ci)}</td><td>{e(row.pairs)}{row.left_out}</td>"
                f"<td class='{row.verdict}' title='{e(' | '.join(row.reasons))}'>"
                f"{e(row.verdict)}</td><td>{e(', '.join(row.flags))}</td></tr>")
        parts.append("</table>")
        if cv.guardrails:
            parts.append("<p>Guardrails:</p><ul>" + "".join(
                f"<li class='{'loss' if g.broken else ''}'>{'✗' if g.broken else '✓'} "
                f"{e(g.reason)}</li>" for g in cv.guardrails) + "</ul>")
        detail = detail_lines(cv)
        if detail:
            parts.append("<p>Decision cells, in detail:</p><ul>" + "".join(
                f"<li>{e(where)}: {e(r)}</li>" for where, r in detail) + "</ul>")
    if len(v.candidates) > 1:
        parts.append("<h2>Ranking</h2><table><tr><th>rank</th><th>arm</th><th>decision</th>"
                     "<th>mean gain</th><th>worst cell</th></tr>" + "".join(
                         f"<tr><td>{rank}</td><td>{e(arm)}</td><td>{e(dec)}</td>"
                         f"<td class='n'>{gain}</td><td class='n'>{worst}"
                         "</td></tr>" for rank, arm, dec, gain, worst in ranking_rows(run))
                     + "</table>")
    parts.append("<h2>Plots</h2>")
    for title, png in plots.figures(run):
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><figcaption>{e(title)}</figcaption>"
                     f"<img alt='{e(title)}' src='data:image/png;base64,{b64}'></figure>")
    parts.append(f"<p><small>spec-ab {e(report.tool_version)} · report schema "
                 f"{REPORT_SCHEMA_VERSION}</small></p></body></html>")
    return "\n".join(parts) + "\n"


render = render_html
