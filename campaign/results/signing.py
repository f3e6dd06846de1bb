"""A registration signed before the first boot, with a key the lab already has.

`spec-ab run --sign-key KEY` signs the journal's first line (`registered`: it holds the
SHA-256 of preregistration.json and of the frozen campaign.yaml, `results.chain`) with
OpenSSH's `ssh-keygen -Y sign` under the namespace `spec-ab-registration`, into
`registration.sig`, before any server boots; the digest of the signature is journaled in
the session's `run_start`, so the chain shows the signature existed before the first
`slot_start`. `spec-ab verify RUN --allowed-signers FILE` checks it with
`ssh-keygen -Y verify` (an `allowed_signers` file as for git's ssh signing).
No new dependency: OpenSSH 8.1 or later.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from campaign.errors import PreflightError

NAMESPACE = "spec-ab-registration"
SIG_FILE = "registration.sig"
TIMEOUT_S = 60


def _first_line(run_dir: Path) -> bytes:
    with open(run_dir / "journal.jsonl", "rb") as f:
        return f.readline(1 << 20)


def _ssh_keygen() -> str:
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise PreflightError("ssh-keygen is not installed: signing needs OpenSSH 8.1 or later",
                             hint="install openssh-client, or run without --sign-key")
    return exe


def sign_registration(run_dir: Path, key: Path) -> str:
    """Sign the journal's `registered` line with `key` (a private key, or a public key
    whose private half is in ssh-agent) into `registration.sig`; the signature's SHA-256.
    PreflightError when ssh-keygen cannot sign (nothing has booted yet)."""
    exe = _ssh_keygen()
    if not key.is_file():
        raise PreflightError(f"--sign-key {key}: no such key file",
                             hint="give a private key (or a .pub whose key is in ssh-agent)")
    try:
        res = subprocess.run([exe, "-Y", "sign", "-f", str(key), "-n", NAMESPACE],
                             input=_first_line(run_dir), capture_output=True,
                             timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise PreflightError(f"--sign-key {key}: ssh-keygen did not sign within {TIMEOUT_S} s",
                             hint="a key with a passphrase: load it into ssh-agent and give "
                             "its .pub") from None
    sig = res.stdout
    if res.returncode != 0 or b"BEGIN SSH SIGNATURE" not in sig:
        why = res.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PreflightError(f"--sign-key {key}: ssh-keygen could not sign ("
                             f"{why[-1] if why else f'exit {res.returncode}'})",
                             hint="check the key, or run without --sign-key")
    (run_dir / SIG_FILE).write_bytes(sig)
    return hashlib.sha256(sig).hexdigest()


def signature_digest(run_dir: Path) -> str | None:
    """SHA-256 of registration.sig (None: the run is not signed)."""
    try:
        return hashlib.sha256((run_dir / SIG_FILE).read_bytes()).hexdigest()
    except OSError:
        return None


def check_signature(run_dir: Path, allowed_signers: Path | None,
                    signer: str | None) -> tuple[bool, str]:
    """Is registration.sig a good signature of the `registered` line by an allowed
    signer? (ok, what was found)."""
    sig = run_dir / SIG_FILE
    if not sig.is_file():
        if allowed_signers is None:
            return True, "not signed (spec-ab run --sign-key signs the registration)"
        return False, f"no {SIG_FILE}: the registration was not signed"
    if allowed_signers is None:
        return True, (f"{SIG_FILE} present, not checked: give --allowed-signers FILE to "
                      "check it")
    exe = _ssh_keygen()
    ids = [signer] if signer else _principals(exe, sig, allowed_signers)
    if not ids:
        return False, f"{SIG_FILE} is by no signer of {allowed_signers}"
    message = _first_line(run_dir)
    for who in ids:
        res = subprocess.run([exe, "-Y", "verify", "-f", str(allowed_signers), "-I", who,
                              "-n", NAMESPACE, "-s", str(sig)], input=message,
                             capture_output=True, timeout=TIMEOUT_S, check=False)
        if res.returncode == 0:
            return True, f"the registration is signed by {who} ({SIG_FILE})"
    return False, (f"{SIG_FILE} does not sign journal.jsonl's first line for "
                   f"{', '.join(ids)}: the registration was changed after it was signed")


def _principals(exe: str, sig: Path, allowed: Path) -> list[str]:
    res = subprocess.run([exe, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)],
                         capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    return [p.strip() for p in res.stdout.splitlines() if p.strip()] if res.returncode == 0 else []
