"""The HTML report: one self-contained page with the plots embedded as PNG."""

from __future__ import annotations

import base64
import html

from campaign.report import plots
from campaign.report.model import EXPLORATORY, REPORT_SCHEMA_VERSION, Report, RunReport
from campaign.report.rows import (
    collapsed_lines,
    decision_headers,
    decision_lines,
    decision_rows,
    detail_lines,
    guardrail_summary,
    headline,
    history_rows,
    lane_lines,
    lead_lines,
    metric_with_unit,
    other_cell_groups,
    other_headers,
    pairs_line,
    ranking_rows,
    rule_line,
    whose_decision,
)
from campaign.report.turns import HEADERS as TURN_HEADERS

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.adopt,td.inconclusive,td.gain-below-bar,td.within-drift,td.loss,td.mixed,td.unclear,
td.no-data,td.better,td.worse,td.no-clear-change{white-space:nowrap}
.better{color:#080}.worse{color:#b00}.no-clear-change,.inconclusive{color:#555}
.adopt{color:#080;font-weight:bold}.loss{color:#b00;font-weight:bold}
.mixed{color:#909}li.unclear{color:#a60}.gain-below-bar{color:#a60}.within-drift,.no-data,.not-applicable{color:#777}
.decision{font-size:1.4em;font-weight:normal;margin:0 0 .5em;padding:.4em .8em;
border-radius:6px;display:inline-block}
.d-adopt{background:#e3f6e3}.d-keep-default{background:#fff3d6}
.exploratory{background:#fdd;color:#900;padding:.5em;font-weight:bold}
.note{color:#8a5a00}figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
"""


def render_html(report: Report, png: list[tuple[str, str, bytes]] | None = None) -> str:
    """A self-contained page: the newest run's decision, decision cells and guardrails,
    the history, the other cells by workload and the plots as embedded PNGs (no external
    files or scripts, so it can be mailed or archived). `png`: figures already drawn."""
    e = html.escape
    run = report.latest
    lead = "".join(f"<p class='loss'>{e(line)}</p>" for line in lead_lines(run))
    # an arm that never booted is said in the page's first 3 lines: the style on one line
    css = _CSS.replace("\n", "") if lead else _CSS
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             f"<title>spec-ab report — {e(run.campaign)}</title><style>{css}</style></head>",
             "<body>" + lead]
    parts += _decision_html(report)
    parts += _history_html(report)
    parts += _run_html(run)
    parts.append("<h2>Plots</h2>")
    for name, title, data in plots.pngs(report) if png is None else png:
        b64 = base64.b64encode(data).decode("ascii")
        parts.append(f"<figure id='plot-{e(name)}'><figcaption>{e(title)}</figcaption>"
                     f"<img alt='{e(title)}' src='data:image/png;base64,{b64}'></figure>")
    parts.append(f"<p><small>spec-ab {e(report.tool_version)} · report schema "
                 f"{REPORT_SCHEMA_VERSION}</small></p></body></html>")
    return "\n".join(parts) + "\n"


def _decision_html(report: Report) -> list[str]:
    """The decision, its reasons, the decision cells, the lanes and the guardrails."""
    e = html.escape
    run = report.latest
    v = run.verdict
    # the page's one h1: the decision, what the page is for (the campaign is an h2 below)
    parts = [f"<h1 class='decision d-{v.decision}'>{e(headline(run))}</h1>"]
    whose = whose_decision(report)
    if whose:
        parts.append(f"<p class='whose'>{e(whose)}</p>")
    if report.exploratory:
        parts.append(f"<p class='exploratory'>{EXPLORATORY}: "
                     f"{html.escape(report.why_exploratory)}.</p>")
    parts.append("<ul>" + "".join(
        f"<li class='note'>{e(line)}</li>" if line.startswith("note:")
        else f"<li>{e(line[2:])}</li>" for line in decision_lines(run)) + "</ul>")
    parts.append("<h2>Decision cells</h2><table><tr>"
                 + "".join(f"<th>{e(h)}</th>" for h in decision_headers(run)) + "</tr>")
    for r in decision_rows(run):
        parts.append(
            f"<tr><td>★ {e(r.cell)}</td><td class='n'>{e(r.control)}</td>"
            f"<td class='n'>{e(r.candidate)}</td><td class='n'>{e(r.change)}</td>"
            f"<td class='n'>{e(r.ci)}</td><td>{e(r.pairs)}</td>"
            f"<td class='{r.label}'>{e(r.verdict)}</td><td>{e(', '.join(r.flags))}</td></tr>")
    parts.append("</table>")
    lanes = lane_lines(run)
    if lanes:
        parts.append("<p>Lanes (shards pooled into this verdict):</p><ul>" + "".join(
            f"<li class='{'loss' if 'DISAGREE' in line else ''}'>{e(line)}</li>"
            for line in lanes) + "</ul>")
    shown, held = guardrail_summary(run)
    stops = any(line.stops for line in shown)
    parts.append(f"<p class='{'loss' if stops else ''}'>Guardrails: {e(held)}</p>")
    if shown:
        parts.append("<ul>" + "".join(
            f"<li class='{'loss' if line.stops else 'unclear'}'>{line.mark} {e(line.text)}</li>"
            for line in shown) + "</ul>")
    detail = [d for cv in v.candidates for d in detail_lines(cv)]
    if detail:
        parts.append("<p>Decision cells, in detail:</p><ul>" + "".join(
            f"<li>{e(where)}: {e(r)}</li>" for where, r in detail) + "</ul>")
    return parts


def _history_html(report: Report) -> list[str]:
    """One row per run of a history (nothing for one run)."""
    if len(report.runs) <= 1:
        return []
    e = html.escape
    parts = ["<h2>History</h2><table><tr><th>run</th><th>registered</th>"
             "<th>pairs</th><th>decision</th><th>decision cells</th>"
             "<th>guardrails</th></tr>"]
    for h in history_rows(report):
        parts.append(
            f"<tr><td>{e(h.run_id)}</td><td>{e(h.registered)}</td>"
            f"<td>{h.pairs}</td>"
            f"<td class='{'adopt' if h.decision == 'adopt' else 'gain-below-bar'}'>"
            f"{e(h.decision)}</td><td>{e(h.cells_text(with_arm=False))}</td>"
            f"<td>{e(h.guardrails)}</td></tr>")
    parts.append("</table>")
    return parts


def _run_html(run: RunReport) -> list[str]:
    """The newest run: its campaign, rule, the other cells by workload and the ranking."""
    e = html.escape
    v = run.verdict
    parts = [f"<h2>Campaign {e(run.campaign)}</h2>"]
    if run.hypothesis:
        parts.append(f"<p><em>Hypothesis:</em> {e(run.hypothesis)}</p>")
    parts.append(f"<p>Run <code>{e(run.run_id)}</code> — {e(pairs_line(run))}</p>")
    parts.append(f"<p>{e(rule_line(run))}</p>")
    parts += [f"<p class='no-data'>{e(line)}</p>" for line in collapsed_lines(run)]
    if run.aa is not None:
        parts += [f"<p class='note'>A/A run: {e(line)}</p>" for line in run.aa.lines]
    if run.rate_sweep is not None:
        parts.append("<h3>Rate sweep</h3><ul>" + "".join(
            f"<li>{e(line)}</li>" for line in run.rate_sweep.lines()) + "</ul>")
    if run.session_turns is not None:
        for arm, turn_rows in run.session_turns.arms:
            parts.append(f"<h3>{e(run.session_turns.title(arm))}</h3><table><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in TURN_HEADERS) + "</tr>"
                         + "".join("<tr>" + "".join(
                             f"<td{'' if i == 0 else ' class=n'}>{e(c)}</td>"
                             for i, c in enumerate(r.cells())) + "</tr>" for r in turn_rows)
                         + "</table>")
    for cv in v.candidates:
        for title, rows in other_cell_groups(run, cv):
            parts.append(f"<h3>{e(title)}: {e(cv.arm)} vs {e(run.arms[0])}</h3><table><tr>"
                         + "".join(f"<th>{e(h)}</th>" for h in other_headers(run, cv))
                         + "</tr>")
            for row in rows:
                parts.append(
                    f"<tr><td>{e(row.where)}</td><td>{e(metric_with_unit(row.metric))}</td>"
                    f"<td class='n'>{e(row.control)}</td>"
                    f"<td class='n'>{e(row.candidate)}</td>"
                    f"<td class='n'>{e(row.gain)}</td>"
                    f"<td class='n'>{e(row.ci)}</td><td>{e(row.pairs)}{row.left_out}</td>"
                    f"<td class='{row.label}' title='{e(' | '.join(row.reasons))}'>"
                    f"{e(row.verdict)}</td><td>{e(', '.join(row.flags))}</td></tr>")
            parts.append("</table>")
    if len(v.candidates) > 1:
        parts.append("<h2>Ranking</h2><table><tr><th>rank</th><th>arm</th><th>decision</th>"
                     "<th>mean gain</th><th>worst cell</th></tr>" + "".join(
                         f"<tr><td>{rank}</td><td>{e(arm)}</td><td>{e(dec)}</td>"
                         f"<td class='n'>{gain}</td><td class='n'>{worst}"
                         "</td></tr>" for rank, arm, dec, gain, worst in ranking_rows(run))
                     + "</table>")
    return parts


def render(report: Report) -> str:
    return render_html(report)
