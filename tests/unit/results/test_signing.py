"""A registration signed before the first boot with the lab's ssh key (`ssh-keygen -Y`),
checked by `spec-ab verify --allowed-signers`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from campaign.cli import app
from campaign.errors import PreflightError
from campaign.results import signing
from campaign.results.store import RunStore
from campaign.run.runner import _signed
from tests.runs import TPUT, make_run

PAIRS = {("knee", "c1", TPUT): [(100.0, 125.0), (100.0, 124.0)]}

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None and not os.environ.get("CI"),
                                reason="needs ssh-keygen (apt install openssh-client)")


@pytest.fixture()
def key(tmp_path: Path) -> tuple[Path, Path]:
    """(private key, allowed_signers naming it lab@example)."""
    k = tmp_path / "keys" / "id_ed25519"
    k.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab", "-f", str(k)],
                   check=True)
    allowed = k.parent / "allowed_signers"
    allowed.write_text(f"lab@example {k.with_suffix('.pub').read_text()}")
    return k, allowed


def _signed_run(tmp_path: Path, key: Path, *, before_boot: bool = True) -> Path:
    run = make_run(tmp_path / "out", PAIRS, guardrails=[])
    store = RunStore.open(run)
    if not before_boot:
        store.journal("run_start", pid=1, resumed=False, lane="sim")
    signing.sign_registration(run, key)
    store.journal("run_start", pid=1, resumed=False, lane="sim", **_signed(run))
    store.journal("slot_start", pair=1, arm="control")
    return run


def _verify(run: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["verify", str(run), *args])
    return res.exit_code, res.output


def test_a_signed_registration_verifies(tmp_path: Path, key: tuple[Path, Path]) -> None:
    run = _signed_run(tmp_path, key[0])
    assert (run / signing.SIG_FILE).read_text().startswith("-----BEGIN SSH SIGNATURE")
    code, out = _verify(run, "--allowed-signers", str(key[1]))
    assert code == 0, out
    assert "signed by lab@example (registration.sig), before the first boot" in out
    code, out = _verify(run, "--allowed-signers", str(key[1]), "--signer", "someone@else")
    assert code == 2 and "FAIL signature" in out


def test_a_registered_line_changed_after_signing_fails(tmp_path: Path,
                                                       key: tuple[Path, Path]) -> None:
    run = _signed_run(tmp_path, key[0])
    path = run / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"lane": "sim"', b'"lane": "gb300"')
    path.chmod(0o644)
    path.write_bytes(b"".join(lines))
    code, out = _verify(run, "--allowed-signers", str(key[1]))
    assert code == 2 and "FAIL signature" in out and "changed after it was signed" in out


def test_a_signature_made_after_the_first_boot_is_not_pre_registration(
        tmp_path: Path, key: tuple[Path, Path]) -> None:
    run = _signed_run(tmp_path, key[0], before_boot=False)
    code, out = _verify(run, "--allowed-signers", str(key[1]))
    assert code == 2 and "does not record registration.sig before the first boot" in out


def test_an_unsigned_run_fails_only_when_a_signature_is_asked_for(
        tmp_path: Path, key: tuple[Path, Path]) -> None:
    run = make_run(tmp_path, PAIRS, guardrails=[])
    code, out = _verify(run)
    assert code == 0 and "not signed" in out
    code, out = _verify(run, "--allowed-signers", str(key[1]))
    assert code == 2 and "the registration was not signed" in out


def test_a_key_that_cannot_sign_is_refused_before_anything_boots(tmp_path: Path) -> None:
    run = make_run(tmp_path, PAIRS, guardrails=[])
    with pytest.raises(PreflightError, match="no such key file"):
        signing.sign_registration(run, tmp_path / "missing")
    bad = tmp_path / "not-a-key"
    bad.write_text("hello\n")
    with pytest.raises(PreflightError, match="ssh-keygen could not sign"):
        signing.sign_registration(run, bad)
    assert not (run / signing.SIG_FILE).exists()


def test_sign_key_with_resume_is_a_usage_error(tmp_path: Path, key: tuple[Path, Path]) -> None:
    run = make_run(tmp_path, PAIRS, guardrails=[])
    res = CliRunner().invoke(app, ["run", "--resume", str(run), "--sign-key", str(key[0])])
    assert res.exit_code == 2 and "--sign-key signs a new registration" in res.output


def test_a_signed_run_torn_by_a_crash_still_verifies(tmp_path: Path,
                                                    key: tuple[Path, Path]) -> None:
    """A crash mid-line leaves `{...` unterminated: the signature check reads the
    journal's events as every reader does (the torn line left out), not line by line."""
    run = _signed_run(tmp_path, key[0])
    with open(run / "journal.jsonl", "ab") as f:
        f.write(b'{"t": "t9", "event": "pass", "rows": [1, 2')
    code, out = _verify(run, "--allowed-signers", str(key[1]))
    assert "Traceback" not in out and "before the first boot" in out
    assert code == 0, out
