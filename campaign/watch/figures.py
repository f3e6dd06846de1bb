"""`spec-ab watch --format html`: the table, and one plot per series (matplotlib, Agg) that
marks each change point (a dashed line at its first night, the means before and after)
and each outlier (a red ring); gaps are gaps. One file: the plots are embedded PNGs."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from campaign.watch.detect import Finding
from campaign.watch.text import HEADER, notes, rows
from campaign.watch.watching import Watch


def figure(f: Finding) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    s = f.series
    fig = Figure(figsize=(8, 2.6))
    ax = fig.add_subplot()
    xs = [i for i, v in enumerate(s.values) if v is not None]
    ax.plot(range(len(s.values)), [float("nan") if v is None else v for v in s.values],
            marker=".", linewidth=1, color="#1f77b4", label="control, nightly median")
    edges = [0, *(c.index for c in f.changes), len(s.values)]
    for k, c in enumerate(f.changes):
        ax.axvline(c.index - 0.5, color="#d62728" if f.direction(c) == "worse" else
                   "#2ca02c", linestyle="--", linewidth=1.2,
                   label="change point" if k == 0 else None)
        ax.hlines([c.before], edges[k], c.index - 0.5, color="#7f7f7f", linewidth=1)
        ax.hlines([c.after], c.index - 0.5, edges[k + 2] - 1, color="#7f7f7f", linewidth=1)
    if f.outliers:
        ax.scatter([o.index for o in f.outliers], [o.value for o in f.outliers], s=80,
                   facecolors="none", edgecolors="#d62728", label="outlier")
    ax.set_title(s.label + ("" if s.source == s.cell else f" (measured at {s.source})"),
                 fontsize=9)
    ax.set_xlabel(f"night ({len(xs)} measured of {len(s.values)})", fontsize=8)
    ax.set_ylabel(s.metric, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="best")
    return fig


def png(f: Finding) -> bytes:
    buf = io.BytesIO()
    figure(f).savefig(buf, format="png", dpi=90, bbox_inches="tight",
                      metadata={"Software": None})
    return buf.getvalue()


def render_html(w: Watch) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                   for r in rows(w))
    items = "".join(f"<li>{e(line)}</li>" for line in notes(w))
    figs = "".join(
        f'<figure><img alt="{e(f.series.label)}" src="data:image/png;base64,'
        f'{base64.b64encode(png(f)).decode()}"></figure>' for f in w.findings)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>spec-ab watch"
            "</title><style>body{font-family:sans-serif}td,th{padding:2px 8px;"
            "text-align:left}</style></head><body><h1>spec-ab watch</h1>"
            f"<table><tr>{head}</tr>{body}</table><ul>{items}</ul>{figs}</body></html>\n")
