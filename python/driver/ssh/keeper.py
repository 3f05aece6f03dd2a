"""The keeper: a process of its own that holds one SSH connection to a head and tunnels the Jobs
API for the commands that follow (the client's side, and why: :mod:`driver.ssh.kept`).

``python -m driver.ssh.keeper`` reads a :class:`~driver.ssh.kept.KeepRequest` on stdin, forks
(so the command that started it reaps its first process at once), connects as a command does
(:class:`~driver.remote.RemoteCluster`: retries, host keys, readiness, token, Jobs API check),
says so in JSON lines on stdout, closes its standard streams and serves its socket until
idle, stopped, or its connection is gone.

The socket speaks one JSON line per connection:

- ``{"op": "hello"}`` → ``{"key": [TYPE, BASE64], "token": ..., "pid": ...}`` once the Jobs API
  still accepts a connection there (one round trip to the head), else ``{"ok": false, ...}``
  and the keeper exits
- ``{"op": "tunnel"}`` → ``{"ok": true}``, then the connection is the Jobs API's
- ``{"op": "read", "path": P}`` → ``{"text": ...}`` (null: no such file) or ``{"error": ...}``:
  a small file of the head's (autostop's state, the storage settings)
- ``{"op": "stop"}`` → ``{"ok": true}``, and the keeper exits
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from driver.ssh.forward import pump
from driver.ssh.kept import ANSWER_TIMEOUT_S, Key, read_line

POLL_S = 0.5


class Backend(Protocol):
    """What the keeper keeps: one connection, the token, the Jobs API behind it."""

    token: str
    key: Key

    def alive(self) -> bool: ...

    def unreachable(self) -> str | None:
        """Why the Jobs API does not answer on the head now (None: it does)."""

    def open_channel(self) -> Any:
        """A socket-like connection to the head's Jobs API."""

    def read_text(self, path: str) -> str | None:
        """A small file's text on the head (None: no such file); DriverError if unreadable."""

    def close(self) -> None: ...


def listen(path: Path) -> socket.socket:
    """A Unix socket only this user may connect to (0600 from its first moment)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(64)
    return sock


class Keeper:
    """Serves ``listener`` for ``backend`` until idle for ``idle_s``, stopped, or the backend's
    connection is gone; then removes its socket (if it is still its own) and closes."""

    def __init__(
        self,
        listener: socket.socket,
        path: Path,
        backend: Backend,
        idle_s: float,
        poll_s: float = POLL_S,
    ) -> None:
        self.listener, self.path, self.backend = listener, path, backend
        self.idle_s, self.poll_s = idle_s, poll_s
        self._inode = path.stat().st_ino
        self._lock = threading.Lock()
        self._busy = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._threads: set[threading.Thread] = set()

    def stop(self) -> None:
        """Safe from a signal handler or another thread."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def serve(self) -> str:
        """Why it ended: ``idle``, ``stopped`` or ``lost`` (the connection to the head)."""
        why = "stopped"
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self.listener, self._wake_r], [], [], self.poll_s)
                if not self.backend.alive():
                    why = "lost"
                    break
                if self.listener in ready:
                    with contextlib.suppress(OSError):
                        conn, _ = self.listener.accept()
                        self._start(conn)
                with self._lock:
                    idle = self._busy == 0 and time.monotonic() - self._last >= self.idle_s
                if idle:
                    why = "idle"
                    break
        finally:
            self._close()
        return why

    def _start(self, conn: socket.socket) -> None:
        with self._lock:
            self._busy += 1
        t = threading.Thread(target=self._handle, args=(conn,), name="keeper-conn", daemon=True)
        self._threads.add(t)
        t.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(ANSWER_TIMEOUT_S)
            request = json.loads(read_line(conn))
            op = request.get("op") if isinstance(request, dict) else None
            if op == "hello":
                why = self.backend.unreachable()
                if why is not None:
                    # Ray went away behind a live connection: the command starts a new keeper,
                    # whose full check says what is wrong as a command would.
                    self._answer(conn, {"ok": False, "error": why})
                    self.stop()
                    return
                key, token = list(self.backend.key), self.backend.token
                self._answer(conn, {"key": key, "token": token, "pid": os.getpid()})
            elif op == "tunnel":
                try:
                    chan = self.backend.open_channel()
                except Exception as e:  # paramiko's ChannelException, SSHException, OSError
                    self._answer(conn, {"ok": False, "error": str(e) or type(e).__name__})
                    return
                self._answer(conn, {"ok": True})
                conn.settimeout(None)
                pump(conn, chan, self._stop)
            elif op == "read":
                from driver.errors import DriverError

                try:
                    text = self.backend.read_text(str(request.get("path")))
                except DriverError as e:
                    self._answer(conn, {"error": e.message})
                else:
                    self._answer(conn, {"text": text})
            elif op == "stop":
                self._answer(conn, {"ok": True})
                self.stop()
            else:
                self._answer(conn, {"ok": False, "error": f"unknown request {op!r}"})
        except (OSError, ValueError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._busy -= 1
                self._last = time.monotonic()
            self._threads.discard(threading.current_thread())

    @staticmethod
    def _answer(conn: socket.socket, doc: dict[str, Any]) -> None:
        conn.sendall(json.dumps(doc).encode() + b"\n")

    def _close(self) -> None:
        # The socket goes first, so no command connects to a keeper on its way out; a newer
        # keeper's socket at the same path (after ours was found stale) stays.
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()
        self._stop.set()
        for sock in (self.listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        for t in list(self._threads):
            t.join(timeout=5)
        self.backend.close()


class RemoteBackend:
    """A :class:`~driver.remote.RemoteCluster` whose Jobs API has been checked."""

    def __init__(self, cluster: Any, token: str) -> None:
        from driver import layout

        self.cluster, self.token = cluster, token
        self.key: Key = cluster.session.host_key()
        self._remote = ("127.0.0.1", layout.RAY_DASHBOARD_PORT)

    def alive(self) -> bool:
        return bool(self.cluster.alive())

    def unreachable(self) -> str | None:
        why = self.cluster.session.reachable(self._remote[1], self._remote[0])
        return None if why is None else str(why)

    def open_channel(self) -> Any:
        return self.cluster.session.transport.open_channel(
            "direct-tcpip", self._remote, ("127.0.0.1", 0), timeout=ANSWER_TIMEOUT_S
        )

    def read_text(self, path: str) -> str | None:
        return self.cluster.session.read_text(path)

    def close(self) -> None:
        self.cluster.close()


def _say(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _open(config: dict[str, Any]) -> tuple[Keeper, Path]:
    from driver.address import HeadAddress
    from driver.remote import RemoteCluster
    from driver.ssh.kept import hello, socket_path
    from driver.ssh.options import SshOptions

    raw = dict(config["options"])
    for name in ("identity", "known_hosts", "system_known_hosts"):
        raw[name] = Path(raw[name]) if raw.get(name) else None
    options = SshOptions(**raw)
    head = HeadAddress(**config["head"])
    cluster = RemoteCluster(
        head,
        config["source"],
        options,
        lambda message: _say({"progress": message}),
        ready_timeout=config["ready_timeout"],
        reconnect_timeout=config["reconnect_timeout"],
    )
    try:
        fwd, token = cluster.open_tunnel()
        fwd.close()  # the check went through it; commands reach the API through the socket
        backend = RemoteBackend(cluster, token)
        path = socket_path(Path(config["runtime_dir"]), head, options.identity, backend.key)
        if hello(path, backend.key) is not None:
            raise FileExistsError(path, backend.key)  # started twice: the other one serves
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # hello found nothing answering there
        listener = listen(path)
    except BaseException:
        cluster.close()
        raise
    return Keeper(listener, path, backend, float(config["idle_s"])), path


def main() -> int:
    if os.fork() > 0:
        os._exit(0)  # the starting command reaps this one; the keeper lives on, unparented
    from driver.errors import ConnectionLost, DriverError

    _say({"pid": os.getpid()})  # for a command interrupted before the keeper is ready

    config = json.loads(sys.stdin.read())
    try:
        keeper, path = _open(config)
    except FileExistsError as e:
        _say({"ready": str(e.args[0]), "key": list(e.args[1])})
        return 0
    except ConnectionLost as e:
        _say({"error": e.message, "exit": e.exit_code, "lost": True})
        return 1
    except DriverError as e:
        _say({"error": e.message, "exit": e.exit_code})
        return 1
    except Exception as e:  # the command shows it in one line rather than losing it
        _say({"error": f"the connection keeper failed: {type(e).__name__}: {e}", "exit": 2})
        return 1
    _say({"ready": str(path), "key": list(keeper.backend.key)})
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    signal.signal(signal.SIGTERM, lambda *_: keeper.stop())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the terminal that started it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    keeper.serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
