"""One authenticated connection to the head: connecting with retries, commands, SFTP, forwards."""

from __future__ import annotations

import contextlib
import errno
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
from driver.ssh.forward import Forward
from driver.ssh.options import DEFAULT_KEY_FILES, MAX_BACKOFF_S, SshOptions
from driver.ssh.terminal import drain, nothing, raw_mode, resize, write_all
from driver.ssh.trust import (
    HostKeyRefused,
    TrustOnFirstUse,
    changed_key_message,
    fingerprint,
    key_label,
    load_host_keys,
)
from driver.ssh.watchdog import Clocked, Watchdog, tune_socket


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
        self._watchdog: Watchdog | None = None
        transport = client.get_transport()
        if options is not None and transport is not None and isinstance(transport.sock, Clocked):
            self._watchdog = Watchdog(transport, transport.sock, options)

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

    def host_key(self) -> tuple[str, str]:
        """The head's host key this connection verified: (type, base64), as known_hosts has it."""
        key = self.transport.get_remote_server_key()
        return key.get_name(), key.get_base64()

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
            out += drain(chan.recv_ready, chan.recv)
            err += drain(chan.recv_stderr_ready, chan.recv_stderr)
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
        restore: Callable[[], None] = nothing
        try:
            if use_pty:
                size = (
                    os.get_terminal_size(out_fd)
                    if os.isatty(out_fd)
                    else os.terminal_size((80, 24))
                )
                chan.get_pty(term=os.environ.get("TERM", "xterm"), width=size[0], height=size[1])
                restore = raw_mode(in_fd, lambda: resize(chan, out_fd))
            if command is None:
                chan.invoke_shell()
            else:
                chan.exec_command(command)
            stdin_open = True
            while True:
                watch: list[Any] = [chan] + ([in_fd] if stdin_open else [])
                ready, _, _ = select.select(watch, [], [], 0.5)
                while chan.recv_ready():
                    write_all(out_fd, chan.recv(65536))
                while chan.recv_stderr_ready():
                    write_all(err_fd, chan.recv_stderr(65536))
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    break
                if stdin_open and in_fd in ready:
                    data = os.read(in_fd, 65536)
                    if data:
                        chan.sendall(data)
                    else:
                        stdin_open = False
                        chan.shutdown_write()
            write_all(out_fd, drain(chan.recv_ready, chan.recv))
            write_all(err_fd, drain(chan.recv_stderr_ready, chan.recv_stderr))
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
        transport = self.transport

        def channel(peer: tuple[str, int]) -> paramiko.Channel:
            return transport.open_channel(
                "direct-tcpip", (remote_host, remote_port), peer, timeout=10
            )

        fwd = Forward(channel, remote_port, local_port)
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

    tune_socket(sock, options)
    sock = Clocked.wrap(sock)
    started = time.monotonic()
    client = paramiko.SSHClient()
    try:
        ours = options.driver_known_hosts()
        load_host_keys(
            client.get_host_keys(), options, hostkeys.host_name(head.host, head.port), progress
        )
        client.set_missing_host_key_policy(
            TrustOnFirstUse(ours, options.strict_host_keys, progress)
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
        raise DriverError(changed_key_message(head, e, options), EXIT_USAGE) from None
    except HostKeyRefused as e:
        _close_client(client)
        raise DriverError(
            f"refusing the head {e.hostname}: its {key_label(e.key)} host key "
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
