"""`verdict.tidy.cell_sort_key`: the order every verdict, guardrail and report lists cells
in — knee, agent fixtures, then the open-loop workloads (issue 41): rate levels by their
offered rate (not by name), the capacity cell after them, session classes, traces."""

from __future__ import annotations

from campaign.verdict import tidy as td


def test_new_workloads_sort_after_knee_and_agentfix_rates_by_rate() -> None:
    cells = [("trace", "burst"), ("sessions", "shell"), ("rate", "capacity"),
             ("rate", "r16"), ("rate", "r0.5"), ("rate", "r4"), ("agentfix", "prose"),
             ("knee", "c16"), ("knee", "c4"), ("rate", "r2")]
    got = sorted(cells, key=lambda c: td.cell_sort_key((*c, "ttft_p99")))
    assert got == [("knee", "c4"), ("knee", "c16"), ("agentfix", "prose"),
                   ("rate", "r0.5"), ("rate", "r2"), ("rate", "r4"), ("rate", "r16"),
                   ("rate", "capacity"), ("sessions", "shell"), ("trace", "burst")]
