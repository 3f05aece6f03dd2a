"""The driver's own known_hosts file: the one writer of its lines.

The driver appends a head's key the first time it connects (trust on first use, ``ssh/trust.py``).
The rehearsal cluster, which creates its head's key itself, records that key when ``rehearse
up`` has booted the head and removes it on ``rehearse down``: the next cluster at the same
address has a new key, and a stale line would make the driver refuse it as a changed key.

Lines are OpenSSH's ``HOST KEYTYPE BASE64`` (``[HOST]:PORT`` for a port other than 22). Every
change holds an exclusive lock on the file, so a driver trusting a head and a rehearsal
rewriting the file never lose each other's lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from driver.settings import known_hosts_file

Key = tuple[str, str]
"""(key type, base64 blob), e.g. ("ssh-ed25519", "AAAAC3...")."""


def default_file() -> Path:
    """The driver's own known_hosts (in ``$RAYDRIVER_HOME`` or its default folder)."""
    return known_hosts_file()


def host_name(host: str, port: int = 22) -> str:
    """How known_hosts names a host: ``HOST`` on port 22, ``[HOST]:PORT`` otherwise."""
    return host if port == 22 else f"[{host}]:{port}"


def read_public_key(text: str) -> Key:
    """An OpenSSH public key line (``TYPE BASE64 [COMMENT]``) as a :data:`Key`."""
    fields = text.split()
    if len(fields) < 2:
        raise ValueError(f"not an OpenSSH public key: {text[:60]!r}")
    return fields[0], fields[1]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[IO[str]]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _names(line: str) -> tuple[set[str], Key | None]:
    """The host names and key of a plain known_hosts line (markers and hashed names: none)."""
    fields = line.split()
    if len(fields) < 3 or line.lstrip().startswith(("#", "@")):
        return set(), None
    return set(fields[0].split(",")), (fields[1], fields[2])


def _rewrite(f: IO[str], keep: Iterable[str], add: Iterable[str] = ()) -> None:
    f.seek(0)
    f.truncate()
    f.writelines(line if line.endswith("\n") else line + "\n" for line in [*keep, *add])
    f.flush()


def add(host: str, keys: Iterable[Key], path: Path | None = None) -> None:
    """Append ``host``'s keys (trust on first use)."""
    with _locked(path or known_hosts_file()) as f:
        f.seek(0, os.SEEK_END)
        f.writelines(f"{host} {kind} {blob}\n" for kind, blob in keys)
        f.flush()


def replace(host: str, keys: Iterable[Key], path: Path | None = None) -> None:
    """Make ``keys`` the only ones known for ``host``: for an address whose machine was just
    created (a rehearsal's head), any earlier key belonged to a machine that is gone."""
    with _locked(path or known_hosts_file()) as f:
        lines = f.read().splitlines()
        keep = [ln for ln in lines if host not in _names(ln)[0]]
        _rewrite(f, keep, [f"{host} {kind} {blob}" for kind, blob in keys])


def remove(host: str, keys: Iterable[Key], path: Path | None = None) -> int:
    """Remove the lines that give ``host`` one of ``keys``; how many went. Other hosts' lines,
    and other keys of ``host``, stay."""
    file = path or known_hosts_file()
    if not file.exists():
        return 0
    wanted = set(keys)
    with _locked(file) as f:
        lines = f.read().splitlines()
        keep = [ln for ln in lines if not (host in (n := _names(ln))[0] and n[1] in wanted)]
        if len(keep) != len(lines):
            _rewrite(f, keep)
        return len(lines) - len(keep)
