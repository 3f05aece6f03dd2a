"""One SSH connection kept between commands (driver.ssh.kept), against the real sshd and Ray head
of headhost.py: the head's sshd logs in the first command alone, the next ones reuse that
connection, no file holds the token, and a keeper that was killed or went idle is replaced
without a word. The keeper's own life cycle without a head: tests/unit/test_kept_connection.py."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from driver.address import HeadAddress
from driver.ssh import kept
from driver.ssh.options import SshOptions
from headhost import SSH_USER, HeadHost, driver_env, keygen
from support import FIXTURES, error_lines, run_driver

KEEP_S = 300.0
"""Longer than any of these tests: only what the test does ends a keeper."""
GONE_S = 60.0
"""A bound on a hang for a keeper to be gone (its poll is 0.5 s; the head's kernel takes in
the close a moment later)."""


def _logins(head: HeadHost) -> int:
    """The logins the head's sshd accepted from this machine so far (LogLevel VERBOSE)."""
    assert head.sshd is not None
    return head.sshd.log.read_text().count(f"Accepted publickey for root from {head.host_ip} ")


def _ours(head: HeadHost) -> list[str]:
    return sorted(p for p in head.ssh_peers() if p.startswith(f"{head.host_ip}:"))


def _folder(home: Path) -> Path:
    return Path(driver_env(home)["XDG_RUNTIME_DIR"]) / "raydriver"


@pytest.fixture
def home(tmp_path: Path, head_host: HeadHost) -> Iterator[Path]:
    """A driver home that trusts the shared head; no keeper of its outlives the test."""
    assert head_host.sshd is not None
    (tmp_path / "user-home").mkdir()
    (tmp_path / "known_hosts").write_text(head_host.sshd.known_hosts_line)
    yield tmp_path
    if _folder(tmp_path).is_dir():
        kept.stop_all(_folder(tmp_path))


def drive(
    head: HeadHost, home: Path, *args: str, keep: float = KEEP_S
) -> subprocess.CompletedProcess[str]:
    verb, *rest = args
    return run_driver(verb, *head.cli_args, *rest, home=home, env=driver_env(home, keep))


def _wait_until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GONE_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_second_command_reuses_the_first_ones_connection_and_no_file_holds_the_token(
    head_host: HeadHost, home: Path
) -> None:
    logins, peers = _logins(head_host), _ours(head_host)
    r = drive(head_host, home, "list")
    assert r.returncode == 0, r.stderr
    assert _logins(head_host) == logins + 1
    [kept_peer] = set(_ours(head_host)) - set(peers)  # the keeper's: it outlived the command
    r = drive(
        head_host,
        home,
        "submit",
        "--submission-id",
        "kept-1",
        str(FIXTURES / "jobs" / "succeed.py"),
    )
    assert r.returncode == 0, r.stderr
    for args in (("list", "--json"), ("status", "kept-1"), ("logs", "kept-1"), ("status",)):
        r = drive(head_host, home, *args)
        assert r.returncode == 0, (args, r.stderr)
    assert "kept-1: SUCCEEDED" in drive(head_host, home, "status", "kept-1").stdout
    # The head's sshd let one client in for all of them, and it is the same TCP connection.
    assert _logins(head_host) == logins + 1
    assert kept_peer in _ours(head_host)
    folder = _folder(home)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    [sock] = folder.glob("*.sock")
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    token = head_host.token.encode()
    for root in (folder, home):
        for file in root.rglob("*"):
            if file.is_file():
                assert token not in file.read_bytes(), file
    # Stopped, it goes with its connection and its socket.
    assert kept.stop_all(folder) == 1
    _wait_until("the keeper's connection to close", lambda: kept_peer not in _ours(head_host))
    assert not sock.exists()


def test_a_killed_keeper_is_replaced_and_an_idle_one_goes(head_host: HeadHost, home: Path) -> None:
    peers = _ours(head_host)
    r = drive(head_host, home, "list")
    assert r.returncode == 0, r.stderr
    [sock] = _folder(home).glob("*.sock")
    options = SshOptions(known_hosts=home / "known_hosts", system_known_hosts=home / "none")
    [key] = kept.expected_keys(HeadAddress(head_host.ip, 22, SSH_USER), options)
    first = kept.hello(sock, key)
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    _wait_until("the killed keeper's connection to close", lambda: _ours(head_host) == peers)
    assert sock.is_socket()  # left behind, answered by nobody
    logins = _logins(head_host)
    # Idle 30 s: long enough for the hello below on a loaded machine (with 3 s the keeper had
    # gone before it, at a load of 28), short enough to watch it go.
    r = drive(head_host, home, "list", "--json", keep=30)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ""  # replaced without a word (the jobs go to stdout as JSON)
    assert _logins(head_host) == logins + 1
    second = kept.hello(sock, key)
    assert second is not None and second.pid != first.pid
    # This one was started with 30 idle seconds: it goes by itself, socket and connection.
    _wait_until("the idle keeper to exit", lambda: not sock.exists())
    _wait_until("its connection to close", lambda: _ours(head_host) == peers)


def test_a_head_whose_key_is_not_the_known_one_is_refused_and_nothing_is_kept(
    head_host: HeadHost, home: Path, tmp_path: Path
) -> None:
    """The keeper checks the host key as a command does: a mismatch is the command's own
    one-line refusal, and no socket is left for a later command to find."""
    kind, blob = keygen(tmp_path / "impostor").with_name("impostor.pub").read_text().split()[:2]
    (home / "known_hosts").write_text(f"{head_host.ip} {kind} {blob}\n")
    logins = _logins(head_host)
    r = drive(head_host, home, "list")
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line.startswith(f"error: REFUSING the head {head_host.ip}:22: its host key changed")
    assert list(_folder(home).glob("*.sock")) == []
    assert _logins(head_host) == logins  # refused before logging in
