"""One SSH connection to the head (paramiko): host keys, retries, commands, SFTP and forwards.

Why paramiko and not the ``ssh`` binary: the driver must work the same on a laptop without
OpenSSH's client configured, verify host keys with its own trust-on-first-use store, and forward
ports without leaving an ``ssh -L`` process behind. Everything opened here is closed by
:meth:`SshSession.close` — connection, SFTP, forwards and their threads — including after
errors and Ctrl-C: a session is a context manager, and so is every cluster that holds one.

Host keys: the head's key must match ``~/.ssh/known_hosts`` or the driver's own known_hosts.
A head seen for the first time is trusted once, its fingerprint reported and stored in the
driver's file (``--strict-host-keys`` refuses instead); a key that differs from a stored one is
always refused.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import paramiko

from driver import hostkeys
from driver.address import HeadAddress
from driver.errors import EXIT_USAGE, ConnectionLost, DriverError
from driver.progress import Progress, silent
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


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's format: ``SHA256:`` and unpadded base64, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _key_label(key: paramiko.PKey) -> str:
    name = key.get_name()
    return {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA"}.get(
        name, name.replace("ecdsa-sha2-", "ECDSA-").upper()
    )


class _HostKeyRefused(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class _TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Store a new head's key in the driver's known_hosts and say so; or refuse when strict."""

    def __init__(self, known_hosts: Path, strict: bool, progress: Progress) -> None:
        self.known_hosts, self.strict, self.progress = known_hosts, strict, progress

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey):  # type: ignore[no-untyped-def]
        if self.strict:
            raise _HostKeyRefused(hostname, key)
        hostkeys.add(hostname, [(key.get_name(), key.get_base64())], self.known_hosts)
        self.progress(
            f"first connection to {hostname}: trusting its {_key_label(key)} host key "
            f"{fingerprint(key)} (stored in {self.known_hosts})"
        )


class _Transient(Exception):
    """A failure worth another attempt: the head may still be booting."""


class AccessDenied(DriverError):
    """The admin user may not read a file on the head (permission denied)."""


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str


class SshSession:
    """An authenticated connection to the head. Use :meth:`connect`; always :meth:`close`."""

    def __init__(
        self, head: HeadAddress, client: paramiko.SSHClient, options: SshOptions | None = None
    ) -> None:
        self.head = head
        self._client = client
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_opening: threading.Thread | None = None
        self._forwards: list[Forward] = []
        self._watchdog: _Watchdog | None = None
        transport = client.get_transport()
        if options is not None and transport is not None and isinstance(transport.sock, _Clocked):
            self._watchdog = _Watchdog(transport, transport.sock, options)

    @property
    def lost_because(self) -> str | None:
        """Why the watchdog gave the connection up (None while it has not)."""
        return self._watchdog.reason if self._watchdog is not None else None

    def __enter__(self) -> SshSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connecting ------------------------------------------------------------------------
    @classmethod
    def connect(
        cls, head: HeadAddress, options: SshOptions, progress: Progress = silent
    ) -> SshSession:
        """Connect with retries and back-off for refusals and timeouts (a VM still booting).

        Authentication and host-key failures are not retried: waiting does not fix them.
        """
        if options.identity is not None and not options.identity.is_file():
            raise DriverError(f"-i: no such key file: {options.identity} (expected a private key)")
        attempts = max(0, options.retries) + 1
        delay = 1.0
        started = time.monotonic()
        reason = ""
        attempt = 0
        while True:
            attempt += 1
            try:
                return cls(head, _connect_once(head, options, progress), options)
            except _Transient as e:
                reason = str(e)
            elapsed = time.monotonic() - started
            if attempt < attempts:
                progress(
                    f"cannot reach {head.endpoint} yet ({reason}); retry {attempt} of "
                    f"{attempts - 1} in {delay:.0f} s"
                )
            elif elapsed + delay <= options.boot_wait_s:
                progress(
                    f"cannot reach {head.endpoint} yet ({reason}); the VM was just started: "
                    f"again in {delay:.0f} s (for {options.boot_wait_s:.0f} s at most)"
                )
            else:
                break
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
        raise ConnectionLost(
            f"cannot reach the head {head.endpoint} over SSH after {attempt} attempt"
            f"{'s' if attempt > 1 else ''} in {elapsed:.0f} s: {reason} — expected sshd "
            "there (is the VM running, and does its network security group allow SSH from "
            "your IP?)"
        )

    # -- commands --------------------------------------------------------------------------
    @property
    def transport(self) -> paramiko.Transport:
        t = self._client.get_transport()
        if t is None or not t.is_active():
            why = f" ({self.lost_because})" if self.lost_because else ""
            raise ConnectionLost(f"the SSH connection to {self.head.endpoint} was lost{why}")
        return t

    def alive(self) -> bool:
        t = self._client.get_transport()
        return t is not None and t.is_active()

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run one command on the head; collect its output and exit status."""
        try:
            chan = self.transport.open_session(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise DriverError(f"cannot run a command on {self.head.endpoint}: {e}") from None
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError
                select.select([chan], [], [], 0.2)
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    break
            out += _drain(chan.recv_ready, chan.recv)
            err += _drain(chan.recv_stderr_ready, chan.recv_stderr)
            status = chan.recv_exit_status()
        except TimeoutError:
            raise DriverError(
                f"command on {self.head.endpoint} did not finish within {timeout:.0f} s"
            ) from None
        finally:
            chan.close()
        return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def interactive(
        self,
        command: str | None,
        stdin: IO[bytes] | IO[str],
        stdout: IO[bytes] | IO[str],
        stderr: IO[bytes] | IO[str],
    ) -> int:
        """A shell (``command`` None) or one command with the caller's terminal; its exit code.

        Like ``ssh``: a pseudo-terminal (and raw local mode) only for a shell on a terminal;
        a command or piped input runs without one, so output stays byte-exact.
        """
        chan = self.transport.open_session()
        in_fd, out_fd, err_fd = stdin.fileno(), stdout.fileno(), stderr.fileno()
        use_pty = command is None and os.isatty(in_fd)
        restore: Callable[[], None] = _nothing
        try:
            if use_pty:
                size = (
                    os.get_terminal_size(out_fd)
                    if os.isatty(out_fd)
                    else os.terminal_size((80, 24))
                )
                chan.get_pty(term=os.environ.get("TERM", "xterm"), width=size[0], height=size[1])
                restore = _raw_mode(in_fd, lambda: _resize(chan, out_fd))
            if command is None:
                chan.invoke_shell()
            else:
                chan.exec_command(command)
            stdin_open = True
            while True:
                watch: list[Any] = [chan] + ([in_fd] if stdin_open else [])
                ready, _, _ = select.select(watch, [], [], 0.5)
                while chan.recv_ready():
                    _write_all(out_fd, chan.recv(65536))
                while chan.recv_stderr_ready():
                    _write_all(err_fd, chan.recv_stderr(65536))
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    break
                if stdin_open and in_fd in ready:
                    data = os.read(in_fd, 65536)
                    if data:
                        chan.sendall(data)
                    else:
                        stdin_open = False
                        chan.shutdown_write()
            _write_all(out_fd, _drain(chan.recv_ready, chan.recv))
            _write_all(err_fd, _drain(chan.recv_stderr_ready, chan.recv_stderr))
            return chan.recv_exit_status()
        finally:
            restore()
            chan.close()

    # -- files -----------------------------------------------------------------------------
    def prefetch_sftp(self) -> None:
        """Start opening SFTP in the background.

        Opening it starts a process on the head, which costs a few hundred milliseconds of
        pure waiting; a caller with CPU work to do meanwhile (importing Ray) overlaps the two.
        :meth:`sftp` picks the result up; :meth:`close` waits for the thread.
        """
        if self._sftp is None and self._sftp_opening is None:
            self._sftp_opening = threading.Thread(
                target=self._open_sftp_quietly, name="raydriver-sftp-open", daemon=True
            )
            self._sftp_opening.start()

    def _open_sftp_quietly(self) -> None:
        # A failure here is reported by sftp(), which tries again in the caller's thread.
        with contextlib.suppress(Exception):
            self._sftp = self._client.open_sftp()

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp_opening is not None:
            self._sftp_opening.join()
            self._sftp_opening = None
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except (paramiko.SSHException, OSError, EOFError) as e:
                if not self.alive():
                    raise ConnectionLost(
                        f"the SSH connection to {self.head.endpoint} was lost: {e}"
                    ) from None
                raise DriverError(
                    f"cannot open SFTP on {self.head.endpoint}: {e} (expected the sftp "
                    "subsystem, on by default in sshd)"
                ) from None
        return self._sftp

    def read_text(self, path: str, denied_hint: str = "") -> str | None:
        """A small file's text, or None if it does not exist. Other errors are DriverErrors."""
        try:
            with self.sftp().open(path, "r") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return None
        except PermissionError:
            raise AccessDenied(
                f"{self.head.user} may not read {path} on the head (permission denied)"
                + (f": {denied_hint}" if denied_hint else "")
            ) from None
        except (OSError, EOFError, paramiko.SSHException) as e:
            if isinstance(e, OSError) and e.errno == errno.ENOENT:
                return None
            if not self.alive() or isinstance(e, EOFError | socket.timeout):
                raise ConnectionLost(
                    f"lost the SSH connection to {self.head.endpoint} while reading {path}: "
                    f"{e or type(e).__name__}"
                ) from None
            raise DriverError(f"cannot read {path} on the head: {e}") from None

    # -- port forwarding -------------------------------------------------------------------
    def reachable(self, remote_port: int, remote_host: str = "127.0.0.1") -> str | None:
        """None if something listens on the head's ``remote_host:remote_port``, else why not."""
        try:
            chan = self.transport.open_channel(
                "direct-tcpip", (remote_host, remote_port), ("127.0.0.1", 0), timeout=10
            )
        except paramiko.ChannelException as e:
            return e.text or "connect failed"
        except (paramiko.SSHException, EOFError, OSError) as e:
            return str(e) or type(e).__name__
        chan.close()
        return None

    def forward(
        self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> Forward:
        """Listen on 127.0.0.1:``local_port`` (0: any free port) and tunnel to the head."""
        fwd = Forward(self.transport, remote_host, remote_port, local_port)
        self._forwards.append(fwd)
        return fwd

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close forwards, SFTP and the connection, and wait for their threads to end."""
        if self._watchdog is not None:
            self._watchdog.stop()
        for fwd in self._forwards:
            fwd.close()
        self._forwards.clear()
        if self._sftp_opening is not None:
            # Closing the connection makes a pending open fail at once.
            with contextlib.suppress(Exception):
                self._client.close()
            self._sftp_opening.join(timeout=10)
            self._sftp_opening = None
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        _close_client(self._client)


def _close_client(client: paramiko.SSHClient) -> None:
    transport = client.get_transport()
    if transport is not None:
        # Wake paramiko's reader thread now rather than at its next 0.1 s poll.
        with contextlib.suppress(OSError, AttributeError):
            transport.sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        client.close()
    # paramiko's close() does not always wait for its reader thread; do, so none outlives us.
    if transport is not None and transport is not threading.current_thread():
        transport.join(timeout=5)


class _Clocked(socket.socket):
    """The connection's socket, remembering when it last received anything from the head.

    paramiko reads the connection only through ``recv`` (in its transport thread); the time of
    the last byte is what :class:`_Watchdog` judges the head by.
    """

    last_received: float

    @classmethod
    def wrap(cls, sock: socket.socket) -> _Clocked:
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


class _Watchdog:
    """Keepalives the head must answer, and a deadline for its silence.

    paramiko's own keepalive asks for no answer, and the kernel of a head whose sshd is frozen
    (overloaded, stopped, swapping) still acknowledges every packet, so neither TCP keepalives
    nor TCP_USER_TIMEOUT ever fire. Here what counts is what the head *sends*: after
    ``keepalive_s`` without a byte from it, ask for an answer (again every ``keepalive_s``);
    after ``dead_after_s`` without one, shut the socket down. paramiko then closes the
    transport and its channels, so whatever waits on the connection fails at once and the
    caller reconnects (or says the job keeps running).
    """

    def __init__(self, transport: paramiko.Transport, sock: _Clocked, options: SshOptions) -> None:
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
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_GLOBAL_REQUEST)
        m.add_string(KEEPALIVE_REQUEST)
        m.add_boolean(True)  # want a reply: the point of asking
        # Transport.global_request(wait=False) would ask for no reply, and wait=True blocks
        # until one comes; _send_user_message is what paramiko's channels send with.
        with contextlib.suppress(Exception):
            self._transport._send_user_message(m)  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def _tune_socket(sock: socket.socket, options: SshOptions) -> None:
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


def load_host_keys(
    keys: paramiko.HostKeys, options: SshOptions, target: str, progress: Progress
) -> None:
    """The keys the head ``target`` (known_hosts' name for it) is checked against: the driver's
    own known_hosts, then the user's ~/.ssh/known_hosts for every host the driver's file does
    not name. The driver's file wins for a head it knows: ``rehearse up`` replaces a re-created
    head's key there, and an old entry in the user's file (hashed ones too, which paramiko
    cannot override by name) would otherwise read as a changed key."""
    _add_known_hosts(keys, options.driver_known_hosts(), progress)
    skip = target if keys.lookup(target) is not None else None
    _add_known_hosts(keys, options.user_known_hosts(), progress, skip=skip)


def _names(hostname: str, target: str) -> bool:
    """Does this known_hosts name (plain or hashed ``|1|salt|hash``) name ``target``?"""
    if hostname.startswith("|1|"):
        return paramiko.HostKeys.hash_host(target, hostname) == hostname
    return hostname == target


def _add_known_hosts(
    keys: paramiko.HostKeys, path: Path, progress: Progress, skip: str | None = None
) -> None:
    """Add the readable entries of an OpenSSH known_hosts file (less those naming ``skip``);
    say how many lines were not readable.

    paramiko's own loader stops with a traceback at the first malformed line; one bad line in a
    user's ~/.ssh/known_hosts must not keep the driver from every head.
    """
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    bad = 0
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        except Exception:  # paramiko's InvalidHostKey is no SSHException: any malformed line
            entry = None
        if entry is None:
            bad += 1
            continue
        for host in entry.hostnames:
            if skip is not None and _names(host, skip):
                continue
            keys.add(host, entry.key.get_name(), entry.key)
    if bad:
        progress(f"skipped {bad} unreadable line{'s' if bad > 1 else ''} in {path}")


def _connect_once(head: HeadAddress, options: SshOptions, progress: Progress) -> paramiko.SSHClient:
    timeout = options.connect_timeout
    try:
        sock = socket.create_connection((head.host, head.port), timeout=timeout)
    except socket.gaierror as e:
        raise DriverError(
            f"cannot resolve the head's name {head.host!r}: {e.strerror} (expected an IP "
            "address or a DNS name)"
        ) from None
    except ConnectionRefusedError:
        raise _Transient("connection refused") from None
    except TimeoutError:
        raise _Transient(f"no answer within {timeout:.0f} s") from None
    except OSError as e:
        raise _Transient(e.strerror or str(e)) from None

    _tune_socket(sock, options)
    sock = _Clocked.wrap(sock)
    started = time.monotonic()
    client = paramiko.SSHClient()
    try:
        ours = options.driver_known_hosts()
        load_host_keys(
            client.get_host_keys(), options, hostkeys.host_name(head.host, head.port), progress
        )
        client.set_missing_host_key_policy(
            _TrustOnFirstUse(ours, options.strict_host_keys, progress)
        )
        client.connect(
            head.host,
            port=head.port,
            username=head.user,
            sock=sock,
            key_filename=str(options.identity) if options.identity else None,
            allow_agent=options.identity is None,
            look_for_keys=options.identity is None,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
        # Keepalives (SshSession's watchdog) cross a quiet connection every keepalive_s, so a
        # silent network also trips the socket's user timeout, and Azure's idle timeout never
        # sees the connection idle.
        return client
    except paramiko.BadHostKeyException as e:
        _close_client(client)
        raise DriverError(_changed_key_message(head, e, options), EXIT_USAGE) from None
    except _HostKeyRefused as e:
        _close_client(client)
        raise DriverError(
            f"refusing the head {e.hostname}: its {_key_label(e.key)} host key "
            f"{fingerprint(e.key)} is not in {options.user_known_hosts()} or "
            f"{options.driver_known_hosts()} and --strict-host-keys is on (check the "
            "fingerprint, then add the key or connect once without --strict-host-keys)"
        ) from None
    except paramiko.PasswordRequiredException:
        _close_client(client)
        raise DriverError(
            f"the key {options.identity} is protected by a passphrase: load it into your SSH "
            f"agent (ssh-add {options.identity}) and leave out -i"
        ) from None
    except paramiko.AuthenticationException:
        _close_client(client)
        raise DriverError(
            f"the head {head.endpoint} refused {_tried_keys(options)} for user {head.user}: "
            "expected the key the cluster was deployed with (-i FILE) and the admin user "
            "(USER@HOST)"
        ) from None
    except paramiko.SSHException as e:
        stalled = _stalled_handshake(client, str(e), time.monotonic() - started, timeout)
        _close_client(client)
        text = str(e)
        if stalled:
            raise _Transient(stalled) from None
        if "No authentication methods available" in text:
            raise DriverError(
                f"no SSH key to offer to {head.endpoint}: expected -i FILE, a key in your SSH "
                f"agent, or one of ~/.ssh/{{{','.join(DEFAULT_KEY_FILES)}}}"
            ) from None
        if "banner" in text.lower() or "session not active" in text.lower():
            raise _Transient(f"SSH handshake failed: {' '.join(text.split())[:120]}") from None
        raise DriverError(
            f"SSH to {head.endpoint} failed: {' '.join(text.split())[:200]}"
        ) from None
    except (EOFError, ConnectionError, TimeoutError, OSError) as e:
        _close_client(client)
        raise _Transient(
            f"connection dropped during the SSH handshake ({e or type(e).__name__})"
        ) from None
    except BaseException:
        _close_client(client)
        with contextlib.suppress(OSError):
            sock.close()
        raise


def _stalled_handshake(client: paramiko.SSHClient, text: str, took: float, timeout: float) -> str:
    """Why the handshake did not finish, when waiting may help: a port that accepts TCP but
    sends no SSH banner (an overloaded or frozen sshd, one still starting) or a key exchange
    that did not finish in time. "" when the head answered and refused (say, no common
    algorithm): waiting does not fix that.

    paramiko gives up on the negotiation after ``timeout``, the same moment its transport gives
    up on the banner, so either may be what it reports ("No existing session" when the
    negotiation's clock wins).
    """
    transport = client.get_transport()
    if transport is None:
        return ""
    if not transport.remote_version:
        if took < timeout * 0.9:
            return "the head closed the connection before sending an SSH banner"
        return f"no SSH banner within {timeout:g} s (sshd overloaded, frozen or still starting?)"
    if not transport.initial_kex_done and text in ("No existing session", "Negotiation failed."):
        return f"the SSH key exchange did not finish within {timeout:g} s"
    return ""


def _tried_keys(options: SshOptions) -> str:
    if options.identity:
        return f"the key {options.identity}"
    found = [f"~/.ssh/{n}" for n in DEFAULT_KEY_FILES if Path(f"~/.ssh/{n}").expanduser().is_file()]
    agent = "the SSH agent's keys" if os.environ.get("SSH_AUTH_SOCK") else ""
    offered = [x for x in [agent, *found] if x]
    return ("the keys " + ", ".join(offered)) if offered else "every key offered"


def _changed_key_message(
    head: HeadAddress,
    e: paramiko.BadHostKeyException,
    options: SshOptions,
) -> str:
    name = head.host if head.port == 22 else f"[{head.host}]:{head.port}"
    where = options.driver_known_hosts()
    system = options.user_known_hosts()
    keys = paramiko.HostKeys()
    _add_known_hosts(keys, system, lambda _: None)
    if keys.lookup(name) is not None:
        where = system
    return (
        f"REFUSING the head {head.endpoint}: its host key changed — expected "
        f"{_key_label(e.expected_key)} {fingerprint(e.expected_key)} (from {where}), got "
        f"{_key_label(e.key)} {fingerprint(e.key)}. If the head was redeployed, remove the old "
        f"key with `ssh-keygen -R '{name}' -f {where}`; otherwise someone may be intercepting "
        "the connection"
    )


# -- terminal helpers for `ssh` ------------------------------------------------------------------
def _nothing() -> None:
    pass


def _drain(ready: Callable[[], bool], recv: Callable[[int], bytes]) -> bytes:
    data = bytearray()
    while ready():
        data += recv(65536)
    return bytes(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _resize(chan: paramiko.Channel, fd: int) -> None:
    with contextlib.suppress(OSError, paramiko.SSHException):
        cols, rows = os.get_terminal_size(fd)
        chan.resize_pty(width=cols, height=rows)


def _raw_mode(fd: int, on_resize: Callable[[], None]) -> Callable[[], None]:
    """Put the local terminal in raw mode (keys go to the head as typed); return the undo."""
    import signal
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    old_handler = signal.signal(signal.SIGWINCH, lambda *_: on_resize())

    def restore() -> None:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, old_handler)

    return restore


# -- forwarding ----------------------------------------------------------------------------------
class Forward:
    """A local listener whose connections are tunnelled to the head as direct-tcpip channels.

    One accept thread, one pump thread per connection; :meth:`close` stops and joins them all.
    """

    def __init__(
        self,
        transport: paramiko.Transport,
        remote_host: str,
        remote_port: int,
        local_port: int = 0,
    ) -> None:
        self._transport = transport
        self.remote = (remote_host, remote_port)
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
                chan = self._transport.open_channel("direct-tcpip", self.remote, peer, timeout=10)
            except (paramiko.SSHException, EOFError, OSError) as e:
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

    def _pump(self, sock: socket.socket, chan: paramiko.Channel) -> None:
        try:
            while not self._stop.is_set():
                watched: list[Any] = [sock, chan]
                ready, _, _ = select.select(watched, [], [], 0.2)
                if sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in ready:
                    data = chan.recv(65536)
                    if not data:
                        break
                    sock.sendall(data)
        except (OSError, ValueError, paramiko.SSHException, EOFError):
            pass
        finally:
            chan.close()
            with contextlib.suppress(OSError):
                sock.close()
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
