"""Noticing a dead head: a socket that remembers when the head last sent anything, keepalives
the head must answer, and TCP settings for a silent network."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import paramiko

from driver.ssh.options import SshOptions


class Clocked(socket.socket):
    """The connection's socket, remembering when it last received anything from the head.

    paramiko reads the connection only through ``recv`` (in its transport thread); the time of
    the last byte is what :class:`Watchdog` judges the head by.
    """

    last_received: float

    @classmethod
    def wrap(cls, sock: socket.socket) -> Clocked:
        timeout = sock.gettimeout()
        clocked = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        clocked.settimeout(timeout)
        clocked.last_received = time.monotonic()
        return clocked

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        if data:
            self.last_received = time.monotonic()
        return data


KEEPALIVE_REQUEST = "keepalive@openssh.com"
"""The global request OpenSSH's client sends for ServerAliveInterval; sshd answers it (with a
failure, which is all the answer needed)."""


class Watchdog:
    """Keepalives the head must answer, and a deadline for its silence.

    paramiko's own keepalive asks for no answer, and the kernel of a head whose sshd is frozen
    (overloaded, stopped, swapping) still acknowledges every packet, so neither TCP keepalives
    nor TCP_USER_TIMEOUT ever fire. Here what counts is what the head *sends*: after
    ``keepalive_s`` without a byte from it, ask for an answer (again every ``keepalive_s``);
    after ``dead_after_s`` without one, shut the socket down. paramiko then closes the
    transport and its channels, so whatever waits on the connection fails at once and the
    caller reconnects (or says the job keeps running).
    """

    def __init__(self, transport: paramiko.Transport, sock: Clocked, options: SshOptions) -> None:
        self._transport, self._sock = transport, sock
        self.keepalive_s = max(0.1, options.keepalive_s)
        self.dead_after_s = max(self.keepalive_s, options.dead_after_s)
        self.reason: str | None = None
        self._sending: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="raydriver-ssh-watchdog", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        tick = min(0.5, self.keepalive_s / 4)
        asked = 0.0
        while not self._stop.wait(tick):
            if not self._transport.is_active():
                return
            now = time.monotonic()
            quiet = now - self._sock.last_received
            if quiet >= self.dead_after_s:
                self.reason = (
                    f"the head sent nothing for {self.dead_after_s:g} s, not even an answer to "
                    "a keepalive"
                )
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)
                return
            if quiet >= self.keepalive_s and now - asked >= self.keepalive_s:
                asked = now
                self._ask()

    def _ask(self) -> None:
        """Send the keepalive from a thread of its own, at most one at a time: paramiko's send
        can block (during a rekey, or with the head's receive window full because its sshd is
        frozen mid-upload) until the transport closes, and closing it is this watchdog's job,
        so the deadline must never wait on a send."""
        if self._sending is not None and self._sending.is_alive():
            return  # the last one is still stuck: only the deadline decides now
        self._sending = threading.Thread(
            target=self._send_keepalive, name="raydriver-ssh-keepalive", daemon=True
        )
        self._sending.start()

    def _send_keepalive(self) -> None:
        # Asks for a reply (the point of asking) and blocks this thread, and only this one,
        # until it comes or the transport closes.
        with contextlib.suppress(Exception):
            self._transport.global_request(KEEPALIVE_REQUEST, wait=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def tune_socket(sock: socket.socket, options: SshOptions) -> None:
    """Notice a silent network within ``dead_after_s`` instead of never (laptop sleep, Wi-Fi
    change, a NAT or load balancer dropping an idle flow): TCP keepalives while idle, and a
    user timeout for data the head does not acknowledge (Linux; elsewhere keepalives only)."""
    idle = max(1, int(options.keepalive_s))
    settings = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", idle),
        ("TCP_KEEPCNT", max(1, int(options.dead_after_s // idle))),
        ("TCP_USER_TIMEOUT", int(options.dead_after_s * 1000)),
    ):
        if hasattr(socket, name):
            settings.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in settings:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)
