"""The private sshd of the SSH tests: a login node on 127.0.0.1 with throwaway keys.

Split out of tests/slurm/conftest.py (which keeps the `sshd` and `version_sshd` fixtures that
use it) so the lab fixtures stay one readable file: this is the part that has nothing to do with
Slurm, only with standing up an sshd goodput's SSH backend can reach and nothing else can.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import free_port
from tests.required import unavailable

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    """A private sshd on 127.0.0.1 with throwaway keys: the login node of the SSH tests."""

    port: int
    known_hosts: Path
    client_key: Path
    other_known_hosts: Path  # the same address with a different host key


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def private_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    import asyncssh

    if not os.access(SSHD, os.X_OK):
        unavailable(f"{SSHD} missing; run `sudo bash scripts/slurm-lab/install.sh --ssh`")
    work = tmp_path_factory.mktemp("sshd")
    host_key, other_key, client_key = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(3))
    host_key.write_private_key(str(work / "host_key"))
    client_key.write_private_key(str(work / "client_key"))
    (work / "host_key").chmod(0o600)
    (work / "client_key").chmod(0o600)
    (work / "authorized_keys").write_bytes(client_key.export_public_key())
    port = free_port()
    (work / "known_hosts").write_bytes(f"[127.0.0.1]:{port} ".encode() + host_key.export_public_key())
    (work / "other_known_hosts").write_bytes(f"[127.0.0.1]:{port} ".encode() + other_key.export_public_key())
    config = work / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {work}/host_key
PidFile {work}/sshd.pid
AuthorizedKeysFile {work}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers root
StrictModes no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTunnel no
LogLevel ERROR
""")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.fail(f"sshd rejects its test config: {check.stderr}", pytrace=False)
    log = (work / "sshd.log").open("w")
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(work / 'sshd.log').read_text()}", pytrace=False)
            time.sleep(0.05)
        yield Sshd(port=port, known_hosts=work / "known_hosts", client_key=work / "client_key",
                   other_known_hosts=work / "other_known_hosts")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
