"""One SSH connection and Jobs API tunnel kept between commands, as OpenSSH's ControlPersist
keeps a master connection: the client's side (no paramiko here, so a command that finds a kept
connection never loads it).

The first command that needs the Jobs API starts a keeper (:mod:`driver.ssh.keeper`), a process
of its own that opens the connection, waits for the head and checks the Jobs API exactly as a
command does, then listens on a Unix socket and exits after ``--keep-connection`` idle seconds,
or as soon as its connection dies. Later commands ask it for the token and tunnel their HTTP
connections through it, each over a fresh connection to its socket.

What keeps it private and honest:

- The socket (mode 0600) lives in the runtime folder (mode 0700, this user's:
  :func:`driver.settings.runtime_dir`). The token is held in the keeper's memory and handed over
  that socket only; no file anywhere holds it.
- The socket's name is a hash of the head's address, the user, the key file and the host key the
  keeper verified. A command looks only under the names of the keys its known_hosts files give
  that head now, so a different cluster, or a host key that changed (or was removed), never
  finds an old keeper: it starts a new one, which checks the key as any connection does.
- A socket nobody answers on (a keeper that was killed) is removed and replaced; a keeper whose
  reply names another host key than its socket's name is told to stop and not used.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver import hostkeys
from driver.address import HeadAddress
from driver.errors import EXIT_USAGE, ConnectionLost, DriverError
from driver.progress import Progress
from driver.settings import runtime_dir
from driver.ssh.options import SshOptions

PROTOCOL = 1
"""Part of every socket's name: a driver that speaks another protocol never finds this one."""
SPAWN_LOCK = "spawn.lock"
MAX_SOCKET_PATH = 107
"""Linux's limit on a Unix socket's path (sun_path less its terminating NUL)."""
ANSWER_TIMEOUT_S = 10.0
"""How long a keeper may take to answer a request (it answers from memory)."""

Key = tuple[str, str]


def socket_name(head: HeadAddress, identity: Path | None, key: Key) -> str:
    doc = [PROTOCOL, head.user, head.host, head.port, str(identity or ""), *key]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32] + ".sock"


def socket_path(folder: Path, head: HeadAddress, identity: Path | None, key: Key) -> Path:
    path = folder / socket_name(head, identity, key)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise DriverError(
            f"the runtime folder {folder} is too deep for a Unix socket (at most "
            f"{MAX_SOCKET_PATH} bytes in all): set $XDG_RUNTIME_DIR to a shorter folder, or "
            "--keep-connection 0"
        )
    return path


def _names_target(name: str, target: str) -> bool:
    """Does this known_hosts name (plain, or hashed ``|1|SALT|HASH``) name ``target``?"""
    if not name.startswith("|1|"):
        return name == target
    try:
        _, _, salt, digest = name.split("|")
        mac = hmac.new(base64.b64decode(salt), target.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, base64.b64decode(digest))
    except (ValueError, TypeError):
        return False


def keys_in(path: Path, target: str) -> list[Key]:
    """The keys an OpenSSH known_hosts file gives ``target`` (unreadable lines: none)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        if any(_names_target(n, target) for n in fields[0].split(",")):
            found.append((fields[1], fields[2]))
    return found


def expected_keys(head: HeadAddress, options: SshOptions) -> list[Key]:
    """What a connection would check the head against now: the driver's known_hosts wins for
    a head it names (as :func:`driver.ssh.trust.load_host_keys` decides), else the user's."""
    target = hostkeys.host_name(head.host, head.port)
    return keys_in(options.driver_known_hosts(), target) or keys_in(
        options.user_known_hosts(), target
    )


def as_key(value: object) -> Key | None:
    """A key as JSON carries it (``[TYPE, BASE64]``), or None."""
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, str) for v in value)
    ):
        return value[0], value[1]
    return None


def _send(sock: socket.socket, doc: dict[str, Any]) -> None:
    sock.sendall(json.dumps(doc).encode() + b"\n")


def read_line(sock: socket.socket, limit: int = 65536) -> bytes:
    """One ``\\n``-ended line, read a byte at a time: what follows it is the tunnel's, not ours."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise EOFError("the keeper closed the connection")
        line += byte
        if len(line) > limit:
            raise ValueError("the keeper's answer is too long")
    return bytes(line)


def _ask(path: Path, request: dict[str, Any]) -> tuple[socket.socket, dict[str, Any]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        sock.connect(str(path))
        _send(sock, request)
        answer = json.loads(read_line(sock))
        if not isinstance(answer, dict):
            raise ValueError("not a JSON object")
        return sock, answer
    except BaseException:
        sock.close()
        raise


@dataclass(frozen=True)
class Kept:
    """A keeper that answered: its socket, the token it holds and the host key it verified."""

    path: Path
    token: str
    key: Key
    pid: int

    def open_tunnel(self, _peer: object = None) -> socket.socket:
        """A connection through the keeper to the head's Jobs API (a :mod:`forward` opener)."""
        sock, answer = _ask(self.path, {"op": "tunnel"})
        if not answer.get("ok"):
            sock.close()
            raise OSError(f"the kept connection could not tunnel: {answer.get('error')}")
        sock.settimeout(None)
        return sock

    def read_text(self, path: str) -> str | None:
        """A small file of the head's, read over the kept connection (None: no such file)."""
        try:
            sock, answer = _ask(self.path, {"op": "read", "path": path})
        except (OSError, ValueError, EOFError) as e:
            raise ConnectionLost(f"the kept connection did not answer: {e}") from None
        sock.close()
        if "error" in answer:
            raise DriverError(str(answer["error"]))
        text = answer.get("text")
        return text if isinstance(text, str) else None

    def stop(self) -> None:
        """Ask the keeper to close its connection and exit (it may be gone already)."""
        with contextlib.suppress(OSError, ValueError, EOFError):
            sock, _ = _ask(self.path, {"op": "stop"})
            sock.close()


def hello(path: Path, key: Key) -> Kept | None:
    """The keeper at ``path``, or None where none answers (a stale socket is removed)."""
    try:
        sock, answer = _ask(path, {"op": "hello"})
    except (FileNotFoundError, ConnectionRefusedError):
        # Refused: the socket file outlived its keeper (killed); nothing will ever answer it.
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()
        return None
    except (OSError, ValueError, EOFError):
        return None  # a keeper on its way out (its connection just died)
    sock.close()
    token, pid = str(answer.get("token") or ""), int(answer.get("pid") or 0)
    if as_key(answer.get("key")) != key or not token:
        Kept(path, token, key, pid).stop()  # not the key its name says: never used
        return None
    return Kept(path, token, key, pid)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One command at a time starts a keeper for this user (others then find it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class KeepRequest:
    """What a keeper is started with (on its stdin: nothing secret, nothing on its command line)."""

    head: HeadAddress
    source: str
    options: SshOptions
    idle_s: float
    ready_timeout: float
    reconnect_timeout: float

    def as_json(self, folder: Path) -> str:
        o = self.options
        return json.dumps(
            {
                "head": {"host": self.head.host, "port": self.head.port, "user": self.head.user},
                "source": self.source,
                "options": {
                    "identity": str(o.identity.resolve()) if o.identity else None,
                    "connect_timeout": o.connect_timeout,
                    "retries": o.retries,
                    "boot_wait_s": o.boot_wait_s,
                    "strict_host_keys": o.strict_host_keys,
                    "known_hosts": str(o.driver_known_hosts().resolve()),
                    "system_known_hosts": str(o.user_known_hosts().resolve()),
                    "keepalive_s": o.keepalive_s,
                    "dead_after_s": o.dead_after_s,
                },
                "idle_s": self.idle_s,
                "ready_timeout": self.ready_timeout,
                "reconnect_timeout": self.reconnect_timeout,
                "runtime_dir": str(folder),
            }
        )


def attach(request: KeepRequest, progress: Progress) -> Kept:
    """The kept connection to ``request.head``: the one running, or a new one."""
    folder = runtime_dir()
    head, identity = request.head, request.options.identity

    def running() -> Kept | None:
        for key in expected_keys(head, request.options):
            kept = hello(socket_path(folder, head, identity, key), key)
            if kept is not None:
                return kept
        return None

    found = running()
    if found is not None:
        return found
    with _locked(folder / SPAWN_LOCK):
        return running() or spawn(request, folder, progress)


def spawn(request: KeepRequest, folder: Path, progress: Progress) -> Kept:
    """Start a keeper and relay what it says until it is ready (its progress lines, or the
    error that stopped it, as the command's own)."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, path) if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "driver.ssh.keeper"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        env=env,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answer: dict[str, Any] = {}
    keeper = 0
    try:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(request.as_json(folder).encode())
            proc.stdin.close()
        for line in proc.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue  # not one of its lines (a library's warning): nothing to relay
            if not isinstance(answer, dict):
                answer = {}
            elif "pid" in answer:
                keeper = int(answer["pid"])
            elif "progress" in answer:
                progress(str(answer["progress"]))
            elif "ready" in answer or "error" in answer:
                break
        if "error" in answer:
            message = str(answer["error"])
            if answer.get("lost"):
                raise ConnectionLost(message)
            raise DriverError(message, int(answer.get("exit", EXIT_USAGE)))
        if "ready" not in answer:
            err = proc.stderr.read().decode(errors="replace").strip().splitlines()
            raise DriverError(
                "the connection keeper ended before it was ready"
                + (f": {err[-1][:300]}" if err else "")
                + " (try --keep-connection 0)"
            )
    except BaseException:
        if keeper and "ready" not in answer:
            # Interrupted (Ctrl-C) while the keeper still connects or waits for the head: it
            # would otherwise wait on for a command that is gone.
            with contextlib.suppress(OSError):
                os.kill(keeper, signal.SIGTERM)
        raise
    finally:
        # The keeper's first process only forks the keeper and exits: reap it.
        proc.stdout.close()
        proc.stderr.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=ANSWER_TIMEOUT_S)
    key = as_key(answer.get("key"))
    kept = hello(Path(answer["ready"]), key) if key else None
    if kept is None:
        raise DriverError(f"the connection keeper does not answer at {answer['ready']}")
    return kept


def stop_all(folder: Path | None = None) -> int:
    """Ask every keeper with a socket in the runtime folder to exit; how many answered."""
    stopped = 0
    for path in sorted((folder or runtime_dir()).glob("*.sock")):
        with contextlib.suppress(OSError, ValueError, EOFError):
            sock, answer = _ask(path, {"op": "stop"})
            sock.close()
            stopped += bool(answer.get("ok"))
    return stopped
