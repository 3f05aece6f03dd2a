"""The kept connection's life cycle (driver.ssh.kept, driver.ssh.keeper), without a head: a
keeper serving a real Unix socket for a backend whose "Jobs API" is an echo server on this
machine. tests/system/test_kept_connection.py runs the same against a real sshd and Ray."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from driver.address import HeadAddress
from driver.errors import ConnectionLost, DriverError
from driver.settings import XDG_RUNTIME_ENV, runtime_dir
from driver.ssh import kept
from driver.ssh.keeper import Keeper, listen
from driver.ssh.options import SshOptions

HEAD = HeadAddress("10.232.0.4", 22, "azureuser")
KEY = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIJustOneKeyForTheseTests")
OTHER_KEY = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAnotherHeadsKeyEntirely")
TOKEN = "token-" + "x" * 40
BOUND_S = 10.0
"""How long a keeper may take to notice what it watches (it polls every 0.05 s here)."""


class Echo:
    """A TCP server that sends back what it gets: the Jobs API as far as tunnels can tell."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.listener.close()


class Backend:
    """What the keeper keeps, in memory: its "connection" is the echo server."""

    def __init__(self, echo: Echo, key: kept.Key = KEY) -> None:
        self.token, self.key, self.echo = TOKEN, key, echo
        self.connected = True
        self.api_down: str | None = None
        self.channels = 0
        self.closed = False
        self.files = {"/var/lib/ray-cluster/autostop.json": '{"idle_s": 12}'}

    def alive(self) -> bool:
        return self.connected

    def unreachable(self) -> str | None:
        return self.api_down

    def open_channel(self) -> socket.socket:
        self.channels += 1
        return socket.create_connection(("127.0.0.1", self.echo.port))

    def read_text(self, path: str) -> str | None:
        if path == "/root/secret":
            raise DriverError(f"root may not read {path} on the head (permission denied)")
        return self.files.get(path)

    def close(self) -> None:
        self.closed = True


class Running:
    """A keeper serving in a thread; ``why`` once it ended."""

    def __init__(self, path: Path, backend: Backend, idle_s: float = 60.0) -> None:
        self.path, self.backend = path, backend
        self.keeper = Keeper(listen(path), path, backend, idle_s, poll_s=0.05)
        self.why: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.why = self.keeper.serve()

    def ended(self) -> str | None:
        self.thread.join(BOUND_S)
        return self.why


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder whose sockets' paths fit Linux's 108 bytes (pytest's tmp_path may not)."""
    base = Path(tempfile.mkdtemp(prefix="kc-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def runtime(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(XDG_RUNTIME_ENV, str(short_dir))
    return runtime_dir()


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.close()


def _options(tmp_path: Path, *keys: kept.Key) -> SshOptions:
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{HEAD.host} {t} {b}\n" for t, b in keys))
    return SshOptions(known_hosts=known, system_known_hosts=tmp_path / "none")


def _request(options: SshOptions) -> kept.KeepRequest:
    return kept.KeepRequest(HEAD, "--head", options, 60.0, 1.0, 1.0)


def _no_spawn(*_a: object) -> kept.Kept:
    raise AssertionError("started a keeper although one was running")


def test_a_second_command_reuses_the_running_keeper_and_tunnels_through_it(
    tmp_path: Path, runtime: Path, echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kept.socket_path(runtime, HEAD, None, KEY)
    running = Running(path, Backend(echo))
    monkeypatch.setattr(kept, "spawn", _no_spawn)
    options = _options(tmp_path, KEY)
    first = kept.attach(_request(options), lambda _m: None)
    second = kept.attach(_request(options), lambda _m: None)
    assert first == second and first.token == TOKEN and first.key == KEY
    assert first.pid == os.getpid()  # the keeper's process (here this one)
    with first.open_tunnel() as tunnel:
        tunnel.sendall(b"GET /api/version\r\n")
        assert tunnel.recv(100) == b"GET /api/version\r\n"
    assert running.backend.channels == 1
    # The small files `status` reads come over it too, errors as the command's own.
    assert first.read_text("/var/lib/ray-cluster/autostop.json") == '{"idle_s": 12}'
    assert first.read_text("/no/such/file") is None
    with pytest.raises(DriverError, match=r"^root may not read /root/secret on the head"):
        first.read_text("/root/secret")
    first.stop()
    assert running.ended() == "stopped"
    assert not path.exists() and running.backend.closed


def test_an_idle_keeper_exits_but_not_while_a_tunnel_is_open(runtime: Path, echo: Echo) -> None:
    path = kept.socket_path(runtime, HEAD, None, KEY)
    running = Running(path, Backend(echo), idle_s=0.5)
    found = kept.hello(path, KEY)
    assert found is not None
    tunnel = found.open_tunnel()
    time.sleep(1.5)  # three idle periods with a tunnel open: it stays
    assert running.why is None and path.is_socket()
    tunnel.sendall(b"still here")
    assert tunnel.recv(100) == b"still here"
    tunnel.close()
    assert running.ended() == "idle"
    assert not path.exists()
    assert kept.hello(path, KEY) is None


def test_a_keeper_whose_connection_died_goes_and_the_next_command_starts_another(
    tmp_path: Path, runtime: Path, echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kept.socket_path(runtime, HEAD, None, KEY)
    running = Running(path, Backend(echo))
    running.backend.connected = False
    assert running.ended() == "lost" and not path.exists()
    started: list[kept.KeepRequest] = []

    def spawn(request: kept.KeepRequest, folder: Path, _p: object) -> kept.Kept:
        started.append(request)
        return kept.Kept(folder / "new.sock", TOKEN, KEY, 1)

    monkeypatch.setattr(kept, "spawn", spawn)
    assert kept.attach(_request(_options(tmp_path, KEY)), lambda _m: None).pid == 1
    assert len(started) == 1


def test_a_keeper_whose_jobs_api_is_gone_is_not_used_and_goes(runtime: Path, echo: Echo) -> None:
    """Ray stopped behind a live connection: the command gets no token from the keeper (and
    starts another, whose full check says what is wrong)."""
    path = kept.socket_path(runtime, HEAD, None, KEY)
    running = Running(path, Backend(echo))
    assert kept.hello(path, KEY) is not None
    running.backend.api_down = "Connection refused"
    assert kept.hello(path, KEY) is None
    assert running.ended() == "stopped" and not path.exists()


def test_a_stale_socket_is_removed_and_replaced(
    tmp_path: Path, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper killed with SIGKILL leaves its socket file: nobody answers there, ever."""
    path = kept.socket_path(runtime, HEAD, None, KEY)
    listen(path).close()
    assert path.is_socket()
    assert kept.hello(path, KEY) is None
    assert not path.exists()
    listen(path).close()  # and attach gets past it to a new keeper
    spawned: list[Path] = []
    monkeypatch.setattr(
        kept, "spawn", lambda r, folder, p: spawned.append(folder) or kept.Kept(path, "t", KEY, 2)
    )
    assert kept.attach(_request(_options(tmp_path, KEY)), lambda _m: None).pid == 2
    assert spawned == [runtime] and not path.exists()


def test_a_changed_host_key_or_another_head_never_reuses_a_keeper(
    tmp_path: Path, runtime: Path, echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = Running(kept.socket_path(runtime, HEAD, None, KEY), Backend(echo))
    spawned: list[kept.KeepRequest] = []
    monkeypatch.setattr(
        kept, "spawn", lambda r, f, p: spawned.append(r) or kept.Kept(f / "x", "t", OTHER_KEY, 3)
    )
    # known_hosts now names another key for the head (redeployed, the new key accepted)
    kept.attach(_request(_options(tmp_path, OTHER_KEY)), lambda _m: None)
    # another head, or another user on it, with the same key
    other_head = kept.KeepRequest(
        HeadAddress("10.232.0.5", 22, "azureuser"), "--head", _options(tmp_path, KEY), 60, 1, 1
    )
    kept.attach(other_head, lambda _m: None)
    # no key known for the head at all (removed with ssh-keygen -R)
    kept.attach(_request(_options(tmp_path)), lambda _m: None)
    assert len(spawned) == 3
    assert running.why is None  # the old keeper was not used, nor disturbed
    running.keeper.stop()
    assert running.ended() == "stopped"


def test_a_keeper_that_verified_another_key_than_its_name_says_is_refused(
    runtime: Path, echo: Echo
) -> None:
    path = kept.socket_path(runtime, HEAD, None, KEY)
    running = Running(path, Backend(echo, key=OTHER_KEY))
    assert kept.hello(path, KEY) is None
    assert running.ended() == "stopped" and not path.exists()


def test_the_socket_and_its_folder_are_the_users_alone(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, echo: Echo
) -> None:
    monkeypatch.setenv(XDG_RUNTIME_ENV, str(short_dir))
    folder = short_dir / "raydriver"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert runtime_dir() == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # made private again
    path = kept.socket_path(folder, HEAD, None, KEY)
    running = Running(path, Backend(echo))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    running.keeper.stop()
    running.ended()
    # Nothing under the folder holds the token (the socket hands it out; no file keeps it).
    for file in folder.rglob("*"):
        if file.is_file():
            assert TOKEN.encode() not in file.read_bytes()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_runtime_folder_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "run"
    (base / "raydriver").mkdir(parents=True, mode=0o700)
    os.chown(base / "raydriver", 65534, 65534)
    monkeypatch.setenv(XDG_RUNTIME_ENV, str(base))
    with pytest.raises(DriverError, match=r"raydriver is not a folder of yours: remove it"):
        runtime_dir()


def test_a_socket_path_too_long_for_linux_is_a_clear_error(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    with pytest.raises(DriverError, match="too deep for a Unix socket"):
        kept.socket_path(deep, HEAD, None, KEY)


def test_expected_keys_read_plain_and_hashed_names_and_the_drivers_file_wins(
    tmp_path: Path,
) -> None:
    user = tmp_path / "user_known_hosts"
    hashed = paramiko.HostKeys.hash_host(HEAD.host)
    user.write_text(f"# a comment\n{hashed} {OTHER_KEY[0]} {OTHER_KEY[1]}\nbroken line\n")
    ours = tmp_path / "driver_known_hosts"
    options = SshOptions(known_hosts=ours, system_known_hosts=user)
    assert kept.expected_keys(HEAD, options) == [OTHER_KEY]  # the user's, hashed
    ours.write_text(f"10.0.0.1,{HEAD.host} {KEY[0]} {KEY[1]}\n")
    assert kept.expected_keys(HEAD, options) == [KEY]  # the driver's file names it: it wins
    on_port = HeadAddress(HEAD.host, 2222, HEAD.user)
    assert kept.expected_keys(on_port, options) == []  # [host]:2222 is another name
    # the name carries the key: a changed key is another socket
    assert kept.socket_name(HEAD, None, KEY) != kept.socket_name(HEAD, None, OTHER_KEY)


def test_a_keeper_that_cannot_connect_says_why_as_the_command_would(
    tmp_path: Path, runtime: Path
) -> None:
    """The keeper is a process of its own: what stops it reaches the command as its own
    one-line error (here: nothing listens on the port), with the progress lines before it."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    head = HeadAddress("127.0.0.1", port, "azureuser")
    options = SshOptions(
        known_hosts=tmp_path / "known_hosts",
        system_known_hosts=tmp_path / "none",
        retries=1,
        connect_timeout=2.0,
    )
    said: list[str] = []
    request = kept.KeepRequest(head, "--head", options, 60.0, 1.0, 1.0)
    with pytest.raises(ConnectionLost) as e:
        kept.spawn(request, runtime, said.append)
    assert e.value.message.startswith(
        f"cannot reach the head 127.0.0.1:{port} over SSH after 2 attempts"
    )
    assert said == [f"cannot reach 127.0.0.1:{port} yet (connection refused); retry 1 of 1 in 1 s"]
    assert list(runtime.glob("*.sock")) == []


def test_a_command_interrupted_while_its_keeper_connects_takes_the_keeper_with_it(
    tmp_path: Path, runtime: Path
) -> None:
    """Ctrl-C while the keeper still tries the head: it must not try on for a command that is
    gone. The head here accepts TCP and never speaks, so the keeper retries every second, each
    try a new connection, until it is stopped."""
    silent = socket.create_server(("127.0.0.1", 0))
    head = HeadAddress("127.0.0.1", silent.getsockname()[1], "azureuser")
    options = SshOptions(
        known_hosts=tmp_path / "known_hosts",
        system_known_hosts=tmp_path / "none",
        retries=20,
        connect_timeout=1.0,
    )

    def interrupt(message: str) -> None:
        raise KeyboardInterrupt

    request = kept.KeepRequest(head, "--head", options, 60.0, 1.0, 1.0)
    held = []
    try:
        with pytest.raises(KeyboardInterrupt):
            kept.spawn(request, runtime, interrupt)
        silent.settimeout(0.2)
        tries = 0
        deadline = time.monotonic() + 5  # the keeper's retries would bring 2 or more by then
        while time.monotonic() < deadline:
            try:
                held.append(silent.accept()[0])
                tries += 1
            except TimeoutError:
                pass
        assert tries <= 1  # at most the try under way when it was stopped
    finally:
        for conn in held:
            conn.close()
        silent.close()
