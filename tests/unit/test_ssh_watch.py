"""The SSH connection's own judgement, without a head: which host key a head is checked
against, and the watchdog that declares a silent head dead."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import paramiko

from driver.ssh import trust, watchdog
from driver.ssh.options import SshOptions


def test_the_drivers_own_key_wins_over_an_old_hashed_entry_in_the_users_file(
    tmp_path: Path,
) -> None:
    """`rehearse up` replaces a re-created head's key in the driver's known_hosts; a plain `ssh`
    to the old head left a hashed line (Debian's HashKnownHosts) in ~/.ssh/known_hosts, which
    paramiko cannot override by name: it must not make the new head read as a changed key."""
    old = paramiko.RSAKey.generate(2048)
    new = paramiko.RSAKey.generate(2048)
    other = paramiko.RSAKey.generate(2048)
    host = "10.213.0.10"
    user = tmp_path / "user_known_hosts"
    hashed = paramiko.HostKeys.hash_host(host)
    user.write_text(f"{hashed} ssh-rsa {old.get_base64()}\n20.1.2.3 ssh-rsa {other.get_base64()}\n")
    ours = tmp_path / "driver_known_hosts"
    ours.write_text(f"{host} ssh-rsa {new.get_base64()}\n")
    options = SshOptions(known_hosts=ours, system_known_hosts=user)
    keys = paramiko.HostKeys()
    trust.load_host_keys(keys, options, host, lambda _m: None)
    assert keys.lookup(host)["ssh-rsa"] == new
    assert keys.lookup("20.1.2.3")["ssh-rsa"] == other  # the user's other hosts still count
    # A head the driver's file does not know is checked against the user's file as before.
    fresh = paramiko.HostKeys()
    unknown = SshOptions(known_hosts=tmp_path / "none", system_known_hosts=user)
    trust.load_host_keys(fresh, unknown, host, lambda _m: None)
    assert fresh.lookup(host)["ssh-rsa"] == old


STUCK_S = 300
"""How long a stuck keepalive holds its thread: far beyond the deadline, so that a watchdog
that waited on it shows (the bound on ``took`` below)."""


class _StuckTransport:
    """A transport whose send blocks until it is closed, as paramiko's does during a rekey or
    with the head's receive window full (its sshd frozen mid-upload)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.sends = 0

    def is_active(self) -> bool:
        return not self.closed.is_set()

    def global_request(self, _kind: str, wait: bool = True) -> None:
        self.sends += 1
        self.closed.wait(STUCK_S)


def test_a_keepalive_stuck_in_paramiko_does_not_stop_the_deadline() -> None:
    here, head = socket.socketpair()
    clocked = watchdog.Clocked.wrap(here)
    transport = _StuckTransport()
    # The keepalive is asked for after 0.2 s; the deadline comes at 2 s (with room for a loaded
    # machine to have sent it by then), and many more asks in between find it still stuck.
    options = SshOptions(keepalive_s=0.2, dead_after_s=2.0)
    dog = watchdog.Watchdog(transport, clocked, options)  # type: ignore[arg-type]
    started = time.monotonic()
    try:
        head.settimeout(STUCK_S / 2)
        assert head.recv(1) == b""  # the watchdog shut the connection down: EOF on the head's end
        took = time.monotonic() - started
    finally:
        transport.closed.set()
        dog.stop()
        head.close()
        clocked.close()
    assert transport.sends == 1  # one keepalive in flight at a time, however long it is stuck
    assert dog.reason is not None and "sent nothing for 2 s" in dog.reason
    assert took < STUCK_S / 2  # the deadline did not wait for the stuck send
