"""A private sshd on 127.0.0.1 that plays the second GB10 box (`docker_host: ssh://…`).

The fixture `sshbox` (session scope, imported by conftest) starts `sshd -D -f <own config>`
on a free loopback port with a generated host key and client key, registers the host alias
`spec-ab-box2` in root's ~/.ssh/config (OpenSSH reads `~` from the password database, not
$HOME) and yields an `SSHBox`. Root's ~/.ssh/config and known_hosts are backed up and
restored byte for byte afterwards, also when the set-up fails half-way.

Every ssh session goes through a forced command that appends the command it runs to
`SSHBox.sessions_log` before running it: on this one machine both docker endpoints are
the same engine, so that log is what proves a call really went through ssh
(`docker system dial-stdio` is what the docker SDK runs on the far side).

Needs root and Debian's openssh-server (`scripts/install-test-deps` installs it). Outside
CI the tests skip with that command; with CI=true a missing sshd is first installed with
it, and a failure to start is a test failure, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.runs import ROOT, free_port

ALIAS = "spec-ab-box2"
URL = f"ssh://{ALIAS}"
MARK_BEGIN = "# >>> spec-ab test sshbox (removed after the tests) >>>"
MARK_END = "# <<< spec-ab test sshbox <<<"


def find_sshd() -> str | None:
    return shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/sbin/sshd") if os.access(p, os.X_OK)), None)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class SSHBox:
    """The running sshd; `stop()` takes the "box" away (sessions too), `start()` brings it
    back on the same port with the same keys."""

    sshd: str
    folder: Path
    port: int
    alias: str = ALIAS
    url: str = URL
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def config(self) -> Path:
        return self.folder / "sshd_config"

    @property
    def sessions_log(self) -> Path:
        return self.folder / "sessions.log"

    @property
    def identity(self) -> Path:
        return self.folder / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def sessions(self) -> list[str]:
        """Every command run through this sshd so far, oldest first."""
        if not self.sessions_log.exists():
            return []
        return self.sessions_log.read_text().splitlines()

    def dial_count(self) -> int:
        return sum("docker system dial-stdio" in line for line in self.sessions())

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # already serving
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir
        self.proc = subprocess.Popen(
            [self.sshd, "-D", "-f", str(self.config), "-E", str(self.folder / "sshd.log")],
            start_new_session=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not _port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.folder / "sshd.log")
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"sshd did not start (exit {self.proc.poll()}): {text}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGKILL sshd and every session it serves (each connection is its own process,
        which outlives a killed listener): what a powered-off box looks like from here."""
        if self.proc is None:
            return
        try:
            procs = [psutil.Process(self.proc.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.NoSuchProcess:
            procs = []
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        psutil.wait_procs(procs, timeout=10)
        deadline = time.monotonic() + 10
        while _port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                    "-f", str(path)], check=True, stdin=subprocess.DEVNULL)


def _write_box_files(box: SSHBox) -> None:
    folder = box.folder
    _keygen(folder / "host_ed25519", "spec-ab-test-host")
    _keygen(box.identity, "spec-ab-test-client")
    wrapper = folder / "session"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "${{SSH_ORIGINAL_COMMAND:-<shell>}}" >> {box.sessions_log}\n'
        'if [ -n "$SSH_ORIGINAL_COMMAND" ]; then exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"; fi\n'
        "exec /bin/sh -l\n")
    wrapper.chmod(0o755)
    pub = (folder / "id_ed25519.pub").read_text().strip()
    (folder / "authorized_keys").write_text(f'command="{wrapper}" {pub}\n')
    host_pub = (folder / "host_ed25519.pub").read_text().split()
    box.known_hosts.write_text(f"[127.0.0.1]:{box.port} {host_pub[0]} {host_pub[1]}\n")
    box.config.write_text(
        f"Port {box.port}\n"
        "ListenAddress 127.0.0.1\n"
        f"HostKey {folder / 'host_ed25519'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PidFile {folder / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "MaxStartups 200\n"
        "MaxSessions 200\n"
        "LogLevel VERBOSE\n")


def _host_block(box: SSHBox) -> str:
    return (f"{MARK_BEGIN}\n"
            f"Host {box.alias}\n"
            "    HostName 127.0.0.1\n"
            f"    Port {box.port}\n"
            "    User root\n"
            f"    IdentityFile {box.identity}\n"
            "    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {box.known_hosts}\n"
            "    StrictHostKeyChecking yes\n"
            f"{MARK_END}\n\n")


@contextlib.contextmanager
def root_ssh_config(block: str) -> Iterator[Path]:
    """Put `block` first in root's ~/.ssh/config (first match wins in ssh_config); put
    config and known_hosts back exactly as they were afterwards, whatever happens."""
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    ssh_dir = home / ".ssh"
    made_dir = not ssh_dir.exists()
    saved: dict[Path, tuple[bytes, int] | None] = {}
    for name in ("config", "known_hosts"):
        path = ssh_dir / name
        saved[path] = (path.read_bytes(), path.stat().st_mode) if path.exists() else None
    try:
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        config = ssh_dir / "config"
        old = saved[config]
        config.write_bytes(block.encode() + (old[0] if old else b""))
        config.chmod(0o600)
        yield config
    finally:
        for path, was in saved.items():
            if was is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(was[0])
                path.chmod(was[1] & 0o7777)
        if made_dir:
            shutil.rmtree(ssh_dir, ignore_errors=True)


def _ensure_sshd(in_ci: bool) -> str | None:
    sshd = find_sshd()
    if sshd is None and in_ci and os.geteuid() == 0:
        subprocess.run([str(ROOT / "scripts" / "install-test-deps")], check=False)
        sshd = find_sshd()
    return sshd


@pytest.fixture(scope="session")
def sshbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHBox]:
    from tests.runs import IN_CI, require

    how = "scripts/install-test-deps (as root: openssh-server, dockerd, the sim image)"
    require(os.geteuid() == 0, "root (the loopback ssh box logs in as root)", f"sudo {how}")
    sshd = _ensure_sshd(IN_CI)
    require(sshd is not None, "sshd (Debian's openssh-server)", how)
    assert sshd is not None
    folder = tmp_path_factory.mktemp("sshbox")
    folder.chmod(0o700)
    box = SSHBox(sshd=sshd, folder=folder, port=free_port())
    _write_box_files(box)
    with root_ssh_config(_host_block(box)):
        box.start()
        try:
            probe = subprocess.run(["ssh", "-o", "BatchMode=yes", box.alias, "echo ok"],
                                   capture_output=True, text=True, timeout=30, check=False,
                                   stdin=subprocess.DEVNULL)
            assert probe.stdout.strip() == "ok", f"ssh {box.alias} failed: {probe.stderr}"
            yield box
        finally:
            box.stop()
