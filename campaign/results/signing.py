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

from campaign.errors import PreflightError, UsageError
from campaign.textfiles import open_regular, read_capped

NAMESPACE = "spec-ab-registration"
SIG_FILE = "registration.sig"
TIMEOUT_S = 60
SIG_CAP = 64 * 1024
"""registration.sig: `ssh-keygen -Y sign` writes well under 1 KiB; more is not a signature."""
SIGNERS_CAP = 1 << 20
"""An allowed_signers file: a line per key, a few hundred bytes each."""


def _first_line(run_dir: Path) -> bytes:
    with open_regular(run_dir / "journal.jsonl", "journal") as f:
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


def read_signature(run_dir: Path) -> bytes | None:
    """registration.sig's bytes (None: the run is not signed). A FIFO, a device or a file
    over `SIG_CAP` is no signature: a ResultsError (exit 2) names it, nothing waits on it
    or reads it whole."""
    try:
        return read_capped(run_dir / SIG_FILE, SIG_CAP, "signature")
    except FileNotFoundError:
        return None


def signature_digest(run_dir: Path) -> str | None:
    """SHA-256 of registration.sig (None: the run is not signed)."""
    sig = read_signature(run_dir)
    return None if sig is None else hashlib.sha256(sig).hexdigest()


def check_allowed_signers(path: Path) -> None:
    """An --allowed-signers file that is there, a regular file and small (UsageError or
    ResultsError, exit 2): ssh-keygen would wait on a FIFO until its timeout, and a
    missing file would read as "no signer"."""
    try:
        read_capped(path, SIGNERS_CAP, "allowed_signers file")
    except FileNotFoundError:
        raise UsageError(f"--allowed-signers {path}: file not found",
                         hint="give the OpenSSH allowed_signers file that names the "
                         "lab's signing keys") from None


def _run_keygen(args: list[str], message: bytes | None = None
                ) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(args, input=message, capture_output=True, timeout=TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        raise PreflightError(f"ssh-keygen did not answer within {TIMEOUT_S} s checking "
                             f"{SIG_FILE}", hint="check the machine's load and run "
                             "spec-ab verify again") from None


def check_signature(run_dir: Path, allowed_signers: Path | None,
                    signer: str | None) -> tuple[bool, str]:
    """Is registration.sig a good signature of the `registered` line by an allowed
    signer? (ok, what was found)."""
    sig = run_dir / SIG_FILE
    if allowed_signers is not None:
        check_allowed_signers(allowed_signers)
    if read_signature(run_dir) is None:  # a FIFO or a device is refused by name
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
        res = _run_keygen([exe, "-Y", "verify", "-f", str(allowed_signers), "-I", who,
                           "-n", NAMESPACE, "-s", str(sig)], message)
        if res.returncode == 0:
            return True, f"the registration is signed by {who} ({SIG_FILE})"
    return False, (f"{SIG_FILE} does not sign journal.jsonl's first line for "
                   f"{', '.join(ids)}: the registration was changed after it was signed")


def _principals(exe: str, sig: Path, allowed: Path) -> list[str]:
    res = _run_keygen([exe, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)])
    if res.returncode != 0:
        return []
    return [p.strip() for p in res.stdout.decode("utf-8", "replace").splitlines() if p.strip()]
