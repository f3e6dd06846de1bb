"""A standard output that fails, handled in process (`cli.streams`, and `cli.main` that
uses it) with fake streams: closed (exit 3 before anything runs), full or broken (ENOSPC,
EIO: one line naming the cause and its hint, exit 3), a reader that went away (EPIPE: the
rest is discarded quietly and the command keeps its own exit code), and an encoding that
cannot spell the output (escapes, not a crash). tests/unit/cli/test_robust_io.py checks
the same through real streams in subprocesses; these tests pin each step's behaviour.

`streams` points fd 1 at /dev/null once stdout has failed; here `sys.__stdout__` is a
stand-in whose fd is a temporary file, so the test can see it silenced and pytest's own
fd 1 is left alone."""

from __future__ import annotations

import errno
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from campaign.cli import main, streams
from campaign.errors import EXIT_INFRA, StorageError
from tests.runs import TPUT, make_run


class Failing(io.TextIOBase):
    """A stdout that fails with `code`: its writes after the first `ok_writes` (and then
    its flushes too), or, `on_flush`, only its flushes."""

    def __init__(self, code: int, *, ok_writes: int = 0, on_flush: bool = False) -> None:
        self.code, self.ok_writes, self.on_flush = code, ok_writes, on_flush
        self.kept: list[str] = []
        self.flushes = 0

    def _fail(self) -> None:
        raise OSError(self.code, os.strerror(self.code))

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def write(self, text: str) -> int:
        if not self.on_flush and len(self.kept) >= self.ok_writes:
            self._fail()
        self.kept.append(text)
        return len(text)

    def flush(self) -> None:
        self.flushes += 1
        if self.on_flush or (self.ok_writes and len(self.kept) >= self.ok_writes):
            self._fail()


class Fd1:
    """Stands for sys.__stdout__: its fd is a temporary file's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

    def fileno(self) -> int:
        return self.fd

    def silenced(self) -> bool:
        """Does a write on the fd now go nowhere?"""
        os.write(self.fd, b"after\n")
        return self.path.read_bytes() == b""


@pytest.fixture()
def fd1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fd1]:
    stand_in = Fd1(tmp_path / "fd1")
    monkeypatch.setattr(sys, "__stdout__", stand_in)
    yield stand_in
    os.close(stand_in.fd)


class Stderr:
    """What was written on sys.stderr so far (pytest sets sys.stderr again when a test
    starts, so a stand-in set by a fixture would not be the one written to)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.text = ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


@pytest.fixture()
def stderr(capsys: pytest.CaptureFixture[str]) -> Stderr:
    return Stderr(capsys)


def _exit_code(exc: pytest.ExceptionInfo[SystemExit]) -> object:
    return exc.value.code


# --------------------------------------------------------------------------- prepare


def test_a_closed_stdout_is_refused_before_anything_runs(
        monkeypatch: pytest.MonkeyPatch, stderr: Stderr) -> None:
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(SystemExit) as exc:
        streams.prepare()
    assert _exit_code(exc) == EXIT_INFRA == 3
    lines = stderr.getvalue().splitlines()
    assert lines == ["error: standard output is closed (spec-ab was started with >&-)",
                     f"  → {streams.HINT}"]


def test_an_encoding_that_cannot_spell_the_output_writes_escapes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw_out, raw_err = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(raw_out, encoding="ascii")
    err = io.TextIOWrapper(raw_err, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    streams.prepare()
    assert isinstance(sys.stdout, streams.GuardedStdout)
    assert sys.stdout.encoding == "ascii"  # the stream's own attributes show through
    print("Decision: ADOPT … ±3% → ok")
    sys.stderr.write("warning: – here\n")
    sys.stdout.flush()
    sys.stderr.flush()
    assert raw_out.getvalue() == b"Decision: ADOPT \\u2026 \\xb13% \\u2192 ok\n"
    assert raw_err.getvalue() == b"warning: \\u2013 here\n"
    guarded = sys.stdout
    streams.prepare()  # a second prepare does not wrap twice
    assert sys.stdout is guarded


# --------------------------------------------------------------------------- GuardedStdout


@pytest.mark.parametrize(("code", "cause"), [(errno.ENOSPC, "No space left on device"),
                                             (errno.EIO, "Input/output error")])
def test_a_write_that_fails_is_a_storage_error_naming_the_cause(
        fd1: Fd1, code: int, cause: str) -> None:
    out = streams.GuardedStdout(Failing(code, ok_writes=1))
    assert out.write("12345") == 5
    with pytest.raises(streams.StdoutError) as exc:
        out.write("678")
    assert isinstance(exc.value, StorageError) and exc.value.exit_code == EXIT_INFRA
    assert exc.value.message == f"cannot write to standard output: {cause}"
    assert exc.value.hint == streams.HINT
    assert fd1.silenced()  # the interpreter's last flush cannot fail again
    with pytest.raises(streams.StdoutError):
        out.writelines(["a", "b"])


def test_a_reader_that_went_away_discards_the_rest_quietly(fd1: Fd1) -> None:
    stream = Failing(errno.EPIPE, ok_writes=1)
    out = streams.GuardedStdout(stream)
    out.writelines(["line1\n", "line2\n", "line3\n"])  # no exception: discarded
    assert out.write("more") == 4
    out.flush()
    assert stream.kept == ["line1\n"]  # what the reader had before it went
    assert fd1.silenced()


def test_a_flush_that_fails(fd1: Fd1) -> None:
    gone = Failing(errno.EPIPE, on_flush=True)
    streams.GuardedStdout(gone).flush()  # a reader gone: quiet, and flushed once more
    assert gone.flushes == 2
    with pytest.raises(streams.StdoutError, match="No space left on device"):
        streams.GuardedStdout(Failing(errno.ENOSPC, on_flush=True)).flush()
    assert fd1.silenced()


# --------------------------------------------------------------------------- finish


def test_finish_keeps_the_commands_exit_code(monkeypatch: pytest.MonkeyPatch,
                                             stderr: Stderr) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", streams.GuardedStdout(out))
    for code in (0, 2, 4, None, "a message"):
        with pytest.raises(SystemExit) as exc:
            streams.finish(code)
        assert _exit_code(exc) == code
    assert stderr.getvalue() == ""


def _finish_when_the_last_flush_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> object:
    """`finish(0)`'s exit code when stdout's last flush fails with `code`."""
    monkeypatch.setattr(sys, "stdout", streams.GuardedStdout(Failing(code, on_flush=True)))
    with pytest.raises(SystemExit) as exc:
        streams.finish(0)
    return _exit_code(exc)


def test_finish_after_a_reader_went_away_is_the_commands_exit(
        monkeypatch: pytest.MonkeyPatch, stderr: Stderr, fd1: Fd1) -> None:
    code = _finish_when_the_last_flush_fails(monkeypatch, errno.EPIPE)
    assert code == 0 and stderr.getvalue() == ""  # not 141, not a message


def test_finish_when_the_last_flush_fails_is_exit_3_with_one_message(
        monkeypatch: pytest.MonkeyPatch, stderr: Stderr, fd1: Fd1) -> None:
    assert _finish_when_the_last_flush_fails(monkeypatch, errno.ENOSPC) == EXIT_INFRA
    assert stderr.getvalue().splitlines() == [
        "error: cannot write to standard output: No space left on device",
        f"  → {streams.HINT}"]


def test_finish_with_a_failure_already_caught(monkeypatch: pytest.MonkeyPatch,
                                              stderr: Stderr) -> None:
    failure = streams.StdoutError("cannot write to standard output: Input/output error",
                                  hint=streams.HINT)
    with pytest.raises(SystemExit) as exc:
        streams.finish(None, failure)
    assert _exit_code(exc) == EXIT_INFRA
    assert stderr.getvalue().startswith("error: cannot write to standard output: "
                                        "Input/output error\n")
    monkeypatch.setattr(sys, "stdout", None)  # nothing to flush: the code stands
    with pytest.raises(SystemExit) as exc:
        streams.finish(0)
    assert _exit_code(exc) == 0


def test_a_message_to_a_missing_or_broken_stderr_is_dropped_not_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    streams._say("nobody hears this")
    monkeypatch.setattr(sys, "stderr", Failing(errno.EIO))
    streams._say("nor this")
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    streams._say("nor this (ValueError: I/O operation on closed file)")


# --------------------------------------------------------------------------- spec-ab


def _spec_ab(monkeypatch: pytest.MonkeyPatch, stdout: object, *args: str) -> object:
    """`spec-ab ARGS` through `campaign.cli.main` with `stdout` as the standard output;
    its exit code."""
    monkeypatch.setattr(sys, "argv", ["spec-ab", *args])
    monkeypatch.setattr(sys, "stdout", stdout)
    with pytest.raises(SystemExit) as exc:
        main()
    return _exit_code(exc)


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "results", {("knee", "c1", TPUT): [(100.0, 112.0),
                                                                  (100.0, 111.0)]},
                    guardrails=[])


def test_spec_ab_report_to_a_full_disk_exits_3_with_one_message_and_its_hint(
        monkeypatch: pytest.MonkeyPatch, stderr: Stderr, fd1: Fd1,
        run_dir: Path) -> None:
    code = _spec_ab(monkeypatch, Failing(errno.ENOSPC), "report", str(run_dir))
    assert code == EXIT_INFRA
    err = stderr.getvalue()
    assert err.splitlines() == [
        "error: cannot write to standard output: No space left on device",
        f"  → {streams.HINT}"], err
    assert "Traceback" not in err


def test_spec_ab_report_to_a_reader_that_keeps_one_line_exits_0(
        monkeypatch: pytest.MonkeyPatch, stderr: Stderr, fd1: Fd1,
        run_dir: Path) -> None:
    """`spec-ab report RUN -f markdown | head -1`: the reader has its line, the report
    still exits 0 (docs/reading-a-report.md), nothing is said."""
    out = Failing(errno.EPIPE, ok_writes=1)
    code = _spec_ab(monkeypatch, out, "report", str(run_dir), "-f", "markdown")
    assert code == 0, stderr.getvalue()
    assert out.kept[0].startswith("# Decision")
    assert stderr.getvalue() == ""


def test_spec_ab_report_on_a_healthy_stdout(monkeypatch: pytest.MonkeyPatch,
                                            stderr: Stderr, run_dir: Path) -> None:
    out = io.StringIO()
    assert _spec_ab(monkeypatch, out, "report", str(run_dir), "-f", "markdown") == 0
    assert out.getvalue().startswith("# Decision")
