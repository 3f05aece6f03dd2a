"""The local terminal for ``ssh``: raw mode, window size, and writing what the head sends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import paramiko


def nothing() -> None:
    pass


def drain(ready: Callable[[], bool], recv: Callable[[int], bytes]) -> bytes:
    data = bytearray()
    while ready():
        data += recv(65536)
    return bytes(data)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def resize(chan: paramiko.Channel, fd: int) -> None:
    with contextlib.suppress(OSError, paramiko.SSHException):
        cols, rows = os.get_terminal_size(fd)
        chan.resize_pty(width=cols, height=rows)


def raw_mode(fd: int, on_resize: Callable[[], None]) -> Callable[[], None]:
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
