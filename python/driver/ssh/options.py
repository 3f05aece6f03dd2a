"""How to reach the head over SSH: the options every connection is opened with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from driver.settings import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_RETRIES, known_hosts_file

MAX_BACKOFF_S = 15.0
DEFAULT_KEY_FILES = ("id_ed25519", "id_ecdsa", "id_rsa")
"""What paramiko looks for in ~/.ssh when neither -i nor an agent key is accepted."""


@dataclass(frozen=True)
class SshOptions:
    identity: Path | None = None
    """Private key file (``-i``); None means the SSH agent, then ~/.ssh/id_*."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    """Per attempt: TCP connect, SSH banner and authentication each."""
    retries: int = DEFAULT_RETRIES
    """Further attempts after a connection that was refused or timed out (back-off 1, 2, 4 s…)."""
    boot_wait_s: float = 0.0
    """A head VM just started: refusals and timeouts are retried for this long since the first
    attempt, beyond ``retries`` (sshd answers some time after Azure says the VM runs: a loaded
    rehearsal head took longer than the default retries' 7 s)."""
    strict_host_keys: bool = False
    """Refuse a head whose key is not known yet, instead of trusting it once."""
    known_hosts: Path | None = None
    """The driver's own known_hosts (default: in the driver home)."""
    keepalive_s: float = DEFAULT_CONNECT_TIMEOUT_S
    """Ask the head for an answer (an SSH keepalive it must reply to) after this many seconds in
    which it sent nothing."""
    dead_after_s: float = 3 * DEFAULT_CONNECT_TIMEOUT_S
    """Declare the connection dead when the head sends nothing, not even those answers, for this
    long (a frozen sshd whose kernel still acknowledges every packet; a silent network)."""
    system_known_hosts: Path | None = None
    """OpenSSH's file (default: ~/.ssh/known_hosts), read only."""

    def driver_known_hosts(self) -> Path:
        return self.known_hosts or known_hosts_file()

    def user_known_hosts(self) -> Path:
        return self.system_known_hosts or Path("~/.ssh/known_hosts").expanduser()
