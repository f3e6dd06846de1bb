"""`spec-ab verify` on inputs that are no file spec-ab wrote (a FIFO, a device, a huge
file), a signature deleted after the journal recorded it, and mistyped options: one
message and exit 2, never a hang, a traceback or a reading of tampering."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from campaign.results import signing
from campaign.results.store import RunStore
from tests.cli import invoke
from tests.runs import TPUT, make_run

PAIRS = {("knee", "c1", TPUT): [(100.0, 125.0), (100.0, 124.0)]}
SIG = b"-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "out", PAIRS, guardrails=[])


def _allowed(tmp_path: Path) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text("lab@example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE\n")
    return path


@pytest.mark.parametrize("args", [["--digest", ""], ["--digest", "xyz"],
                                  ["--digest", "abc123"], ["--digest", "sha256:12g4567890ab"]])
def test_a_malformed_digest_is_a_usage_error_not_tampering(run: Path, args: list[str]) -> None:
    res = invoke("verify", str(run), *args)
    assert res.code == 2
    assert "malformed digest (want ≥ 12 hex digits)" in res.stderr
    assert "FAIL" not in res.stdout


def test_a_missing_allowed_signers_file_is_named(run: Path, tmp_path: Path) -> None:
    (run / signing.SIG_FILE).write_bytes(SIG)
    res = invoke("verify", str(run), "--allowed-signers", str(tmp_path / "nonexistent"))
    assert res.code == 2
    assert "--allowed-signers" in res.stderr and "not found" in res.stderr
    assert "no signer" not in res.output


def test_signer_without_allowed_signers_is_refused(run: Path) -> None:
    res = invoke("verify", str(run), "--signer", "lab@example")
    assert res.code == 2 and "--signer needs --allowed-signers" in res.stderr


def test_a_fifo_signature_is_refused_not_waited_on(run: Path) -> None:
    os.mkfifo(run / signing.SIG_FILE)
    res = invoke("verify", str(run), seconds=10)
    assert res.code == 2 and "registration.sig" in res.stderr
    assert "not a regular file" in res.stderr


def test_a_device_signature_is_refused(run: Path) -> None:
    (run / signing.SIG_FILE).symlink_to("/dev/zero")
    res = invoke("verify", str(run), seconds=10)
    assert res.code == 2 and "a device, not a regular file" in res.stderr


def test_a_huge_signature_is_not_read_whole(run: Path) -> None:
    with open(run / signing.SIG_FILE, "wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB that takes no disk
    res = invoke("verify", str(run), seconds=10)
    assert res.code == 2 and "registration.sig" in res.stderr and "KiB" in res.stderr


def test_a_fifo_allowed_signers_is_refused(run: Path, tmp_path: Path) -> None:
    (run / signing.SIG_FILE).write_bytes(SIG)
    fifo = tmp_path / "signers"
    os.mkfifo(fifo)
    res = invoke("verify", str(run), "--allowed-signers", str(fifo), seconds=10)
    assert res.code == 2 and "not a regular file" in res.stderr


def test_a_signature_the_journal_recorded_cannot_be_deleted_unseen(run: Path) -> None:
    (run / signing.SIG_FILE).write_bytes(SIG)
    store = RunStore.open(run)
    store.journal("run_start", pid=1, resumed=False, lane="sim",
                  registration_sig_sha256=signing.signature_digest(run))
    (run / signing.SIG_FILE).unlink()
    res = invoke("verify", str(run))
    assert res.code == 2 and "FAIL signature" in res.stdout
    assert "signature recorded in the journal, file missing" in res.stdout
    assert json.loads((run / "journal.jsonl").read_text().splitlines()[-1])["event"] == \
        "run_start"
