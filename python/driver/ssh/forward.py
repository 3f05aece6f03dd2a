"""Local listeners tunnelled to the head (``ssh -L`` without a process).

What a connection is tunnelled through is the caller's: a direct-tcpip channel of the SSH
connection (:meth:`driver.ssh.session.SshSession.forward`), or a connection to the kept
connection's socket (:mod:`driver.ssh.kept`). Both are socket-like (``recv``, ``sendall``,
``close``, ``fileno`` for ``select``), so one pump serves them; this module needs no paramiko.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from driver.errors import DriverError

Opener = Callable[[tuple[str, int]], Any]
"""Opens the far end for one local connection (given its peer address): a socket-like object.
Any exception it raises is a failure of that connection alone."""


class Forward:
    """A local listener whose connections are each tunnelled through what ``opener`` opens.

    One accept thread, one pump thread per connection; :meth:`close` stops and joins them all.
    """

    def __init__(self, opener: Opener, remote_port: int, local_port: int = 0) -> None:
        self._opener = opener
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        self.failures: list[str] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(("127.0.0.1", local_port))
            self._listener.listen(64)
        except OSError as e:
            self._listener.close()
            raise DriverError(f"cannot listen on 127.0.0.1:{local_port}: {e.strerror}") from None
        self.local_port: int = self._listener.getsockname()[1]
        # close() writes here to wake the accept loop at once instead of at its next poll.
        self._wake_r, self._wake_w = socket.socketpair()
        self._accepter = threading.Thread(
            target=self._accept_loop, name=f"raydriver-forward-{remote_port}", daemon=True
        )
        self._accepter.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._listener, self._wake_r], [], [], 1.0)
            except (OSError, ValueError):
                return
            if self._listener not in ready:
                continue
            try:
                sock, peer = self._listener.accept()
            except OSError:
                continue
            try:
                chan = self._opener(peer)
            except Exception as e:  # paramiko's SSHException, EOFError, OSError: this one fails
                self.failures.append(str(e) or type(e).__name__)
                sock.close()
                continue
            pump = threading.Thread(
                target=self._pump, args=(sock, chan), name="raydriver-forward-conn", daemon=True
            )
            with self._lock:
                if self._stop.is_set():
                    chan.close()
                    sock.close()
                    return
                self._threads.add(pump)
                self._sockets.add(sock)
            pump.start()

    def _pump(self, sock: socket.socket, chan: Any) -> None:
        try:
            pump(sock, chan, self._stop)
        finally:
            with self._lock:
                self._sockets.discard(sock)
                self._threads.discard(threading.current_thread())

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._accepter.join(timeout=5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        with self._lock:
            threads = list(self._threads)
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout=5)


def pump(a: Any, b: Any, stop: threading.Event) -> None:
    """Copy bytes both ways between two socket-like ends until either closes (or ``stop``);
    then close both."""
    try:
        while not stop.is_set():
            ready, _, _ = select.select([a, b], [], [], 0.2)
            if a in ready:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
            if b in ready:
                data = b.recv(65536)
                if not data:
                    break
                a.sendall(data)
    except Exception:  # either end gone (OSError, paramiko's SSHException, EOFError)
        pass
    finally:
        for end in (b, a):
            with contextlib.suppress(Exception):
                end.close()
