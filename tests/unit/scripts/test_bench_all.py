"""`scripts/bench-all --check` fails on a bar that is over, from a fake bench result (the
kept logs it reads with --from-logs), and `--write-docs` puts the table in its block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.runs import ROOT

OK_REPORT = """report over 1000 runs: 3,059 cells, decisions {'adopt': 1000, 'keep-default': 0}
| runs | total s | per run (ms) | peak MB | MB per 1,000 runs |
|---|---|---|---|---|
| 1,000 | 2.47 | 2.471 | 763 | 560 |
bar: fresh process, 1,000 runs: total 2.47 s vs 3.0 s → 0.82× of the bar (OK)
(bench-all: exit 0 in 40 s: scripts/bench-report)
"""
OVER_REPORT = OK_REPORT.replace("2.47 s vs 3.0 s → 0.82× of the bar (OK)",
                                "3.40 s vs 3.0 s → 1.13× of the bar (OVER)").replace(
                                    "exit 0 in", "exit 1 in")
AA_OUTSIDE = """bar: A/A band measured on the decision cell(s) ±4.1% vs registered drift band ±3.0% → 1.37× of the band (within: no)
(bench-all: exit 0 in 500 s: scripts/bench-aa)
"""  # noqa: E501  (as the script prints it; exit 0 on purpose: the line alone must fail it)


def bench_all(log_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench-all"), "--from-logs",
                           "--log-dir", str(log_dir), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def logs(tmp_path: Path, **by_script: str) -> Path:
    d = tmp_path / "bench-results"
    d.mkdir()
    for name, text in by_script.items():
        (d / f"{name.replace('_', '-')}.txt").write_text(text, encoding="utf-8")
    return d


def test_check_passes_when_every_bar_is_met(tmp_path: Path) -> None:
    proc = bench_all(logs(tmp_path, bench_report=OK_REPORT), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every bar met" in proc.stdout
    assert "| bench-report | report over 1000 runs" in proc.stdout
    assert "|  | 1,000 · 2.47 · 2.471 · 763 · 560 |" in proc.stdout  # the scale row


def test_check_fails_on_a_bar_that_is_over_and_names_it(tmp_path: Path) -> None:
    proc = bench_all(logs(tmp_path, bench_report=OVER_REPORT), "--check")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tail = proc.stdout.split("over the bar:", 1)[1]
    assert "bench-report: bar: fresh process, 1,000 runs: total 3.40 s" in tail
    assert "(OVER)" in tail


def test_check_fails_on_a_bar_line_even_when_the_script_exited_zero(tmp_path: Path) -> None:
    proc = bench_all(logs(tmp_path, bench_report=OK_REPORT, bench_aa=AA_OUTSIDE), "--check")
    assert proc.returncode == 1, proc.stdout
    tail = proc.stdout.split("over the bar:", 1)[1]
    assert "bench-aa:" in tail and "within: no" in tail and "bench-report" not in tail


def test_write_docs_replaces_only_the_marked_block(tmp_path: Path) -> None:
    doc = tmp_path / "plan.md"
    doc.write_text("# Plan\nbefore\n<!-- bench:table:start -->\nold table\n"
                   "<!-- bench:table:end -->\nafter\n", encoding="utf-8")
    proc = bench_all(logs(tmp_path, bench_report=OK_REPORT), "--write-docs", "--docs",
                     str(doc))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = doc.read_text(encoding="utf-8")
    assert "old table" not in text
    assert text.startswith("# Plan\nbefore\n<!-- bench:table:start -->\nLatest figures (")
    assert text.endswith("<!-- bench:table:end -->\nafter\n")
    assert "| bench-report | report over 1000 runs" in text
    assert "`.venv/bin/python scripts/bench-report`" in text


def test_write_docs_refuses_a_file_without_the_block(tmp_path: Path) -> None:
    doc = tmp_path / "plan.md"
    doc.write_text("# Plan\n", encoding="utf-8")
    proc = bench_all(logs(tmp_path, bench_report=OK_REPORT), "--write-docs", "--docs",
                     str(doc))
    assert proc.returncode != 0
    assert "no <!-- bench:table:start -->" in proc.stderr
    assert doc.read_text(encoding="utf-8") == "# Plan\n"


def test_args_for_a_script_that_is_not_a_benchmark_is_refused(tmp_path: Path) -> None:
    proc = bench_all(logs(tmp_path, bench_report=OK_REPORT), "--args", "bench-reprot=--x")
    assert proc.returncode == 2
    assert "'bench-reprot' is not one of the benchmarks" in proc.stderr
    proc = bench_all(tmp_path / "bench-results", "--args", "bench-report")
    assert proc.returncode == 2 and "give SCRIPT='ARGS'" in proc.stderr
