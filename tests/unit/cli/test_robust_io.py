"""Inputs and outputs that must not crash (issue 26, "Also:").

Each case builds its input under a temporary folder and gives the command to run (`{py}`
is `spec-ab`); it checks the documented exit code (2 usage/results, 3
infrastructure/storage) and fragments of the one message, and that no traceback, no exit 1
and no hang ever happens. Cases about the input run the command in this process
(tests/cli.py); cases about standard output itself (closed, full, a reader that goes away,
an encoding) need real streams and run `python -m campaign` in a shell.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from campaign.results import chain
from campaign.results.store import RunStore
from campaign.run import runner
from tests.cli import invoke
from tests.runs import ROOT, SIM_RUN, TPUT, make_run

DEADLINE_S = 60
SIM_YAML = ROOT / "examples" / "sim-pair.yaml"
LONG = "x" * 300  # over NAME_MAX (255): ENAMETOOLONG
STRING_LINE = b'"finished"\n'
"""A journal line that is valid JSON, names the last event, and is no event at all."""


def _sh(cmd: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `cmd` in bash; {py} is `python -m campaign` (real streams, a real exit)."""
    py = f"{shlex.quote(sys.executable)} -m campaign"
    full = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    full.update({"PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})})
    proc = subprocess.run(["bash", "-c", cmd.format(py=py)], capture_output=True, text=True,
                          timeout=DEADLINE_S, env=full, check=False, errors="replace")
    return proc.returncode, proc.stdout, proc.stderr


def _run_dir(tmp: Path) -> Path:
    return make_run(tmp, {("knee", "c1", TPUT): [(100.0, 112.0), (100.0, 111.0)]},
                    guardrails=[])


def _sim_copy(tmp: Path, journal: bytes | None = None) -> Path:
    """The golden sim run, unfinished: its first journal line, then `journal`."""
    run = tmp / SIM_RUN.name
    shutil.copytree(SIM_RUN, run)
    for f in run.iterdir():
        f.chmod(0o644)
    if journal is not None:
        first = (SIM_RUN / "journal.jsonl").read_bytes().splitlines(keepends=True)[0]
        (run / "journal.jsonl").write_bytes(first + journal)
    return run


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Path], str]
    """Builds the input; returns the shell command."""
    code: int
    fragments: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    streams: bool = False
    """The case is about standard output itself: a real shell, a real process."""


def _replaced(name: str, how: str) -> Callable[[Path], str]:
    """A results file of a run replaced by a FIFO, a link to /dev/zero, a folder or a
    sparse file over its cap; the command reports on the run."""
    def setup(tmp: Path) -> str:
        run = _run_dir(tmp)
        target = run / name
        target.unlink(missing_ok=True)  # make_run writes no manifest
        if how == "fifo":
            os.mkfifo(target)
        elif how == "zero":
            target.symlink_to("/dev/zero")
        elif how == "folder":
            target.mkdir()
        else:  # over the cap, sparse: costs no disk
            with open(target, "wb") as f:
                f.truncate(257 << 20)
        return f"{{py}} report {run}"
    return setup


RUN_START = b'{"t": "2026-11-29T16:11:00Z", "event": "run_start", "pid": 1}\n'


def _pass_line(rows: object = None, **field: object) -> bytes:
    """A `pass` event with one row of the golden run's, `field` changed in it (or `rows`
    instead of its list of rows)."""
    row = {"run": SIM_RUN.name, "pair": 1, "pair_attempt": 1, "arm": "control", "slot": 0,
           "started_at": "2026-11-29T16:10:00Z", "workload": "knee", "level": "c1",
           "metric": TPUT, "value": 100.0, "valid": True, "attempt": 1, "reason": "",
           "log_se": None, **field}
    ev = {"t": "2026-11-29T16:10:30Z", "event": "pass", "rows": [row] if rows is None else rows}
    return json.dumps(ev).encode() + b"\n"


def _resume(journal: bytes) -> Callable[[Path], str]:
    return lambda t: f"{{py}} run --resume {_sim_copy(t, journal)} --dry-run"


def _resume_damaged(edit: Callable[[Path], None]) -> Callable[[Path], str]:
    """An unfinished run whose journal `edit` damages, resumed (a dry run)."""
    def setup(tmp: Path) -> str:
        run = _sim_copy(tmp, b"")
        edit(run / "journal.jsonl")
        return f"{{py}} run --resume {run} --dry-run"
    return setup


def _resume_replaced(how: str) -> Callable[[Path], str]:
    def setup(tmp: Path) -> str:
        run = _sim_copy(tmp)
        (run / "journal.jsonl").unlink()
        if how == "fifo":
            os.mkfifo(run / "journal.jsonl")
        else:
            (run / "journal.jsonl").symlink_to("/dev/zero")
        return f"{{py}} run --resume {run} --dry-run"
    return setup


def _report_twice(second: Callable[[Path], str]) -> Callable[[Path], str]:
    def setup(tmp: Path) -> str:
        run = _run_dir(tmp)
        return f"{{py}} report {run} {second(run)}"
    return setup


def _linked(run: Path) -> str:
    link = run.parent / "link"
    link.symlink_to(run)
    return str(link)


def _loop(tmp: Path) -> Path:
    (tmp / "loop1").symlink_to("loop2")
    (tmp / "loop2").symlink_to("loop1")
    return tmp / "loop1"


def _long_lane(tmp: Path) -> str:
    text = SIM_YAML.read_text(encoding="utf-8").replace("\nlane: sim\n",
                                                        f"\nlane: {'gb300-' * 60}\n")
    assert "gb300-gb300" in text
    campaign = tmp / "long-lane.yaml"
    campaign.write_text(text, encoding="utf-8")
    # the lock is taken before the run directory: past it, the --out loop stops the run
    return f"{{py}} run {campaign} --out {_loop(tmp)} --skip-preflight"


def _html_plots_a_file(tmp: Path) -> str:
    """`-o out/report.html` where out/plots is a regular file: the plots cannot go there."""
    (tmp / "out").mkdir()
    (tmp / "out" / "plots").write_text("not a folder\n")
    return f"{{py}} report {_run_dir(tmp)} -f html -o {tmp / 'out' / 'report.html'}"


def _html_plot_a_folder(tmp: Path) -> str:
    """out/plots/pair-changes.png is a folder: the plot cannot be written there."""
    (tmp / "out" / "plots" / "pair-changes.png").mkdir(parents=True)
    return f"{{py}} report {_run_dir(tmp)} -f html -o {tmp / 'out' / 'report.html'}"


def _plan(*args: str) -> Callable[[Path], str]:
    return lambda t: f"{{py}} plan {SIM_YAML} " + " ".join(shlex.quote(a) for a in args)


CASES = [
    # 1. a journal line that is JSON but no event, or a torn multi-byte character
    Case("resume-journal-line-42", _resume(b"42\n"), 2,
         ("journal.jsonl: line 2 is not an event (42)", "spec-ab report",
          "restore journal.jsonl from a backup")),
    Case("resume-journal-line-42-in-the-middle", _resume(b"42\n" + RUN_START), 2,
         ("journal.jsonl: line 2 is not an event (42)",)),
    Case("resume-journal-not-utf8-in-the-middle",
         _resume(b'{"t": "2026-11-29T16:10:00Z", "event": "run_start", "host": "\xff"}\n'
                 + RUN_START), 2, ("journal.jsonl: line 2 is not an event (not UTF-8)",)),
    Case("resume-journal-torn-utf8", _resume(b'{"t": "2026-11-29T16:10:00Z", "x": "\xc3'), 0,
         ("dry run: nothing was started",)),
    Case("resume-journal-string-line", _resume(b'"finished"\n'), 2,
         ("journal.jsonl: line 2 is not an event (\"finished\")",)),
    Case("resume-journal-pass-rows-text", _resume(_pass_line(rows="oops")), 2,
         ("journal.jsonl: line 2: the pass event's rows are text (\"oops\"), not a list",)),
    Case("resume-journal-pass-pair-text", _resume(_pass_line(pair="one")), 2,
         ("journal.jsonl: line 2: row 1 (of 1) of the pass event cannot be read (pair is "
          "text (\"one\"), not an integer)",)),
    Case("resume-journal-deleted", _resume_damaged(Path.unlink), 2,
         ("journal.jsonl is missing", "passes.csv cannot be trusted without it",
          "restore journal.jsonl")),
    Case("resume-journal-emptied", _resume_damaged(lambda p: p.write_bytes(b"")), 2,
         ("journal.jsonl: line 1 is not the run's registered event (the file is empty)",
          "cannot be trusted")),
    Case("report-journal-string-finished",
         lambda t: f"{{py}} report {_sim_copy(t, STRING_LINE)}", 0, ("Decision:",)),
    # 2. results files that are not regular files, or far too big
    Case("resume-journal-fifo", _resume_replaced("fifo"), 2,
         ("journal.jsonl: the journal.jsonl is a pipe (FIFO), not a regular file",)),
    Case("resume-journal-dev-zero", _resume_replaced("zero"), 2,
         ("journal.jsonl: the journal.jsonl is a device",)),
    Case("journal-fifo", _replaced("journal.jsonl", "fifo"), 2,
         ("journal.jsonl: the journal is a pipe (FIFO), not a regular file",)),
    Case("journal-dev-zero", _replaced("journal.jsonl", "zero"), 2,
         ("journal.jsonl: the journal is a device",)),
    Case("journal-folder", _replaced("journal.jsonl", "folder"), 2,
         ("journal.jsonl: the journal is a folder",)),
    Case("journal-over-cap", _replaced("journal.jsonl", "big"), 2,
         ("the journal is over 256 MiB",)),
    Case("passes-fifo", _replaced("passes.csv", "fifo"), 2, ("passes.csv", "pipe (FIFO)")),
    Case("passes-dev-zero", _replaced("passes.csv", "zero"), 2, ("passes.csv", "a device")),
    Case("passes-over-cap", _replaced("passes.csv", "big"), 2, ("over 256 MiB",)),
    Case("manifest-dev-zero", _replaced("manifest.json", "zero"), 2,
         ("manifest.json: the manifest is a device",)),
    Case("manifest-fifo", _replaced("manifest.json", "fifo"), 2, ("manifest.json", "FIFO")),
    Case("manifest-over-cap", _replaced("manifest.json", "big"), 2, ("over 16 MiB",)),
    Case("frozen-campaign-dev-zero", _replaced("campaign.yaml", "zero"), 2,
         ("campaign.yaml: the frozen campaign.yaml is a device",)),
    Case("frozen-campaign-fifo", _replaced("campaign.yaml", "fifo"), 2,
         ("campaign.yaml", "FIFO")),
    Case("registration-over-cap", _replaced("preregistration.json", "big"), 2,
         ("preregistration.json",)),
    # a registration that is no file used to read as "missing"
    Case("registration-dev-zero", _replaced("preregistration.json", "zero"), 2,
         ("preregistration.json: the preregistration is a device, not a regular file",
          "replace it with the file spec-ab wrote")),
    Case("registration-fifo", _replaced("preregistration.json", "fifo"), 2,
         ("preregistration.json: the preregistration is a pipe (FIFO), not a regular file",)),
    Case("registration-folder", _replaced("preregistration.json", "folder"), 2,
         ("preregistration.json: the preregistration is a folder, not a regular file",)),
    # 3. paths the system refuses: exit 3 with the path and the fix
    Case("run-out-symlink-loop", lambda t: f"{{py}} run {SIM_YAML} --out {_loop(t)} "
         "--skip-preflight", 3, ("cannot write the run directory", "loop1",
                                 "Too many levels of symbolic links", "pick another --out")),
    Case("run-out-name-too-long", lambda t: f"{{py}} run {SIM_YAML} --out {t / LONG} "
         "--skip-preflight", 3, ("cannot write the run directory", "File name too long")),
    Case("lock-long-lane", _long_lane, 3, ("cannot write the run directory",
                                           "Too many levels of symbolic links")),
    Case("lock-dir-missing-parent", lambda t: f"{{py}} run {SIM_YAML} --out {t} "
         "--skip-preflight", 3, ("cannot take the lane lock in /proc/spec-ab-nope",
                                 "SPECAB_LOCK_DIR=/proc/spec-ab-nope", "writable folder"),
         env=(("SPECAB_LOCK_DIR", "/proc/spec-ab-nope/locks"),)),
    Case("lock-dir-under-a-file", lambda t: f"{{py}} run {SIM_YAML} --out {t} "
         "--skip-preflight", 3,
         ("cannot take the lane lock", "Not a directory", "point SPECAB_LOCK_DIR"),
         env=(("SPECAB_LOCK_DIR", "/dev/null/locks"),)),
    Case("lock-dir-read-only", lambda t: f"{{py}} run {SIM_YAML} --out {t} --skip-preflight",
         3, ("cannot take the lane lock in /proc", "point SPECAB_LOCK_DIR"),
         env=(("SPECAB_LOCK_DIR", "/proc"),)),
    Case("report-output-proc", lambda t: f"{{py}} report {_run_dir(t)} -o /proc/x.html", 3,
         ("--output /proc/x.html: cannot write", "writable file")),
    Case("report-output-loop", lambda t: f"{{py}} report {_run_dir(t)} -o {_loop(t)}", 3,
         ("cannot write (Too many levels of symbolic links)",)),
    Case("report-output-too-long", lambda t: f"{{py}} report {_run_dir(t)} -o {t / LONG}",
         3, ("File name too long",)),
    # HTML writes its plots into a folder beside the file: checked as the file is
    Case("report-html-plots-proc", lambda t: f"{{py}} report {_run_dir(t)} -f html "
         "-o /proc/x.html", 3,
         ("--output /proc/x.html: cannot make the plots folder /proc/plots "
          "(No such file or directory)", "not under /proc or /sys")),
    Case("report-html-plots-a-file", _html_plots_a_file, 3,
         ("cannot make the plots folder", "out/plots (a file is in its place)")),
    Case("report-html-plot-a-folder", _html_plot_a_folder, 3,
         ("cannot write the plot file", "out/plots/pair-changes.png (Is a directory)")),
    # 4. plan's numbers: the valid range
    Case("plan-sims-1e9", _plan("--sims", "1000000000"), 2, ("give 100 to 100,000",)),
    Case("plan-sims-1e9-text", _plan("--sims", "1e9"), 2, ("--sims",)),
    Case("plan-sims-0", _plan("--sims", "0"), 2, ("--sims 0: out of range",)),
    Case("plan-sims-negative", _plan("--sims", "-1"), 2, ("--sims -1: out of range",)),
    Case("plan-effect-huge", _plan("--effect", "1e308"), 2,
         ("--effect 1e308: out of range", "from -90% to 900%")),
    Case("plan-effect-nan", _plan("--effect", "nan"), 2, ("--effect nan: out of range",)),
    Case("plan-effect-inf", _plan("--effect", "inf"), 2, ("--effect inf: out of range",)),
    Case("plan-effect-minus-100", _plan("--effect", "-100%"), 2, ("-90% to 900%",)),
    Case("plan-drift-negative", _plan("--drift", "-5%"), 2,
         ("--drift -5%: out of range", "from 0% to 50%")),
    Case("plan-invalid-rate-150", _plan("--invalid-rate", "150%"), 2,
         ("--invalid-rate 150%: out of range", "0% to 100% (excluded)")),
    # 5. standard output that fails
    Case("stdout-closed", lambda t: f"{{py}} report {_run_dir(t)} >&-", 3,
         ("standard output is closed",), streams=True),
    Case("stdout-full", lambda t: f"{{py}} report {_run_dir(t)} >/dev/full", 3,
         ("cannot write to standard output: No space left on device",), streams=True),
    Case("stdout-full-json", lambda t: f"{{py}} report {_run_dir(t)} -f json >/dev/full", 3,
         ("cannot write to standard output",), streams=True),
    Case("stdout-full-plan-json", lambda t: f"{{py}} plan {SIM_YAML} --sims 100 "
         "--format json >/dev/full", 3, ("cannot write to standard output",), streams=True),
    Case("stdout-full-help", lambda t: "{py} --help >/dev/full", 3,
         ("cannot write to standard output",), streams=True),
    Case("stdout-ascii", lambda t: f"{{py}} report {_run_dir(t)}", 0,
         ("Decision: ADOPT", "spec-ab report"), env=(("PYTHONIOENCODING", "ascii"),), streams=True),
    Case("stdout-ascii-markdown", lambda t: f"{{py}} report {_run_dir(t)} -f markdown", 0,
         ("# Decision: ADOPT",), env=(("PYTHONIOENCODING", "ascii"),), streams=True),
    Case("stdout-broken-pipe-plan", lambda t: f"set -o pipefail; {{py}} plan {SIM_YAML} "
         "--sims 100 | head -1", 0, ("plan sim-adaptive",), streams=True),
    Case("stdout-broken-pipe-report", lambda t: f"set -o pipefail; {{py}} report "
         f"{_run_dir(t)} -f markdown | head -1", 0, ("# Decision",), streams=True),
    # `| true`: the reader is gone before the first line; the command still finishes
    Case("stdout-reader-gone-run", lambda t: f"set -o pipefail; {{py}} run {SIM_YAML} "
         "--dry-run | true", 0, streams=True),
    Case("stdout-reader-gone-plan", lambda t: f"set -o pipefail; {{py}} plan {SIM_YAML} "
         "--sims 100 | true", 0, streams=True),
    Case("stdout-reader-gone-report-json", lambda t: f"set -o pipefail; {{py}} report "
         f"{_run_dir(t)} -f json | true", 0, streams=True),
    # 6. one run given twice
    Case("report-run-twice", _report_twice(str), 2, ("is given twice",)),
    Case("report-run-twice-slash", _report_twice(lambda r: f"{r}/"), 2, ("is given twice",)),
    Case("report-run-twice-symlink", _report_twice(_linked), 2,
         ("is given twice (as", "link)", "give each run directory once")),
]


def _in_process(cmd: str, env: dict[str, str]) -> tuple[int, str, str]:
    """`{py} ARGS` (no shell syntax) through the CLI in this process."""
    words = shlex.split(cmd)
    assert words[0] == "{py}" and not set(words) & {"|", ">", ">&-", ";"}, cmd
    result = invoke(*words[1:], env=env)
    return result.code, result.stdout, result.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_robust(tmp_path: Path, case: Case) -> None:
    cmd = case.setup(tmp_path)
    run = _sh if case.streams else _in_process
    code, out, err = run(cmd, dict(case.env))
    both = out + err
    assert "Traceback" not in both, both
    assert "Exception ignored" not in both, both
    assert code == case.code, f"exit {code}, expected {case.code}:\n{both}"
    flat = " ".join(both.split())
    for fragment in case.fragments:
        assert " ".join(fragment.split()) in flat, f"{fragment!r} not in:\n{both}"
    if code in (2, 3) and case.id.startswith(("stdout-closed", "stdout-full")):
        # one message and its hint, after what a plan longer than the default table says
        # it is doing (the demo registers more pairs than the default table's 8)
        said = [line for line in err.strip().splitlines()
                if not line.startswith("plan: simulating ")]
        assert len(said) == 2, err


def test_ids_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


def _resumable(tmp: Path) -> Path:
    """An unfinished run whose pairs are all done: a resume measures nothing (no server,
    no AIPerf), rebuilds passes.csv, journals its session and finishes."""
    run = make_run(tmp, {("knee", "c1", TPUT): [(100.0, 112.0), (100.0, 111.0)]},
                   guardrails=[], complete=False)
    (run / "t").mkdir()  # what the frozen campaign names, beside it
    (run / "t" / "tokenizer.json").write_text("{}")
    for name in ("s.jsonl", "p.jsonl"):
        (run / name).write_text('{"text": "ls"}\n')
    store = RunStore.open(run)
    for pair in (1, 2):
        store.journal("pair_start", pair=pair, pair_attempt=1, redo=False)
        store.journal("pair_done", pair=pair, pair_attempt=1, invalid_passes=[])
    return run


def test_a_resume_sets_a_torn_last_line_aside_and_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash cut the journal's last line inside a UTF-8 character: the resume keeps its
    bytes in journal.jsonl.torn-1 beside the journal, says so on one line of stderr, and
    goes on from the whole lines before it; the chain holds."""
    monkeypatch.setattr(runner, "refuse_leftovers", lambda *a, **k: None)  # no engine
    run = _resumable(tmp_path)
    journal = run / "journal.jsonl"
    whole = journal.read_bytes()
    torn = b'{"t": "2026-11-29T16:10:00Z", "event": "pass", "rows": [{"arm": "caf\xc3'
    with open(journal, "ab") as f:
        f.write(torn)
    lines = whole.count(b"\n")
    result = invoke("run", "--resume", str(run), "--skip-preflight")
    assert result.code == 0, result.output
    (said,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    flat = " ".join(result.stderr.split())
    assert f"journal.jsonl: the last line (line {lines + 1}) is torn" in flat, said
    assert f"set aside in {run / 'journal.jsonl.torn-1'}" in flat, said
    assert (run / "journal.jsonl.torn-1").read_bytes() == torn
    after = journal.read_bytes()
    assert after.startswith(whole) and torn not in after
    assert all(json.loads(ln) for ln in after.splitlines())  # whole lines only
    walk = chain.walk(after)
    assert walk.chained and walk.breaks == () and walk.damaged == ()
    kinds = [json.loads(ln)["event"] for ln in after.splitlines()[lines:]]
    assert kinds == ["run_start", "finished"]
    assert json.loads(after.splitlines()[lines])["torn_set_aside"] == "journal.jsonl.torn-1"
    assert invoke("verify", str(run)).code == 0


def test_a_resume_goes_past_only_a_torn_line_the_chain_shows_a_crash_left(
        tmp_path: Path) -> None:
    """Before a resume set a torn last line aside, the next append ended it with a newline
    and chained to it: the chain shows it was written as it is (a crash), so a resume goes
    on. A line the chain does not vouch for is damage: refused, naming it."""
    run = _resumable(tmp_path)
    journal = run / "journal.jsonl"
    with open(journal, "ab") as f:
        f.write(b'{"t": "2026-11-29T16:10:00Z", "event": "pa')  # a crash
    RunStore.open(run).journal("run_start", pid=1)  # ends the torn line, chains to it
    assert invoke("run", "--resume", str(run), "--dry-run").code == 0
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:-2], b"42\n", *lines[-2:]]))  # before the torn one
    result = invoke("run", "--resume", str(run), "--dry-run")
    assert result.code == 2, result.output
    flat = " ".join(result.stderr.split())
    assert f"journal.jsonl: line {len(lines) - 1} is not an event (42) — a resume" in flat


def test_the_plots_folder_check_leaves_nothing_behind(tmp_path: Path) -> None:
    """The plots folder is made to check it, and removed again: a report refused after
    the check (here a --rule without =) leaves no empty plots/ beside the output."""
    (tmp_path / "out").mkdir()
    run = str(_run_dir(tmp_path))
    res = invoke("report", run, "-f", "html", "-o",
                 str(tmp_path / "out" / "report.html"), "--rule", "margin")
    assert res.code == 2 and "--rule margin" in res.stderr
    assert list((tmp_path / "out").iterdir()) == []
    res = invoke("report", run, "-f", "html", "-o",
                 str(tmp_path / "out" / "report.html"))
    assert res.code == 0, res.output
    assert (tmp_path / "out" / "plots" / "pair-changes.svg").is_file()


def test_a_resume_dry_run_says_what_it_would_do_with_a_torn_line(tmp_path: Path) -> None:
    """`run --resume --dry-run` of a journal whose last line a crash tore says the resume
    would set it aside, and changes nothing (the line stays, no .torn file is made)."""
    run = _resumable(tmp_path)
    journal = run / "journal.jsonl"
    with open(journal, "ab") as f:
        f.write(b'{"t": "2026-11-29T16:10:00Z", "event": "pa')
    before = journal.read_bytes()
    lines = before.count(b"\n") + 1
    result = invoke("run", "--resume", str(run), "--dry-run")
    assert result.code == 0, result.output
    flat = " ".join(result.stderr.split())
    assert f"journal.jsonl: the last line (line {lines}) is torn" in flat, result.stderr
    assert "--dry-run changes nothing" in flat
    assert journal.read_bytes() == before
    assert not list(run.glob("journal.jsonl.torn-*"))
