"""The head's SSH address: ``[USER@]HOST[:PORT]``, checked before anything connects."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from driver import layout
from driver.errors import DriverError

DEFAULT_USER = layout.ADMIN_USER
"""The admin user both stacks create when none is given."""
DEFAULT_SSH_PORT = 22
EXPECTED = "expected [USER@]HOST[:PORT], e.g. azureuser@20.1.2.3 or 20.1.2.3:2222"

_LABEL_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


@dataclass(frozen=True)
class HeadAddress:
    """Where the head's sshd listens and as whom to log in."""

    host: str
    port: int = DEFAULT_SSH_PORT
    user: str = DEFAULT_USER

    def __str__(self) -> str:
        port = "" if self.port == DEFAULT_SSH_PORT else f":{self.port}"
        return f"{self.user}@{self._host()}{port}"

    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def endpoint(self) -> str:
        """``host:port`` for messages."""
        return f"{self._host()}:{self.port}"


def _valid_host(host: str) -> bool:
    """An IP address, or a DNS name whose labels are 1-63 characters (253 in all)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    if ":" in host or len(host) > 253:
        return False
    labels = host.rstrip(".").split(".")
    return all(0 < len(label) <= 63 and _LABEL_RE.match(label) for label in labels)


def parse_head(spec: str, default_user: str = DEFAULT_USER, what: str = "--head") -> HeadAddress:
    """``[user@]host[:port]``; an IPv6 address goes in brackets: ``user@[2001:db8::1]:22``."""
    text = spec.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        raise DriverError(f"{what}: {EXPECTED}, got {spec!r}")
    user, sep, rest = text.rpartition("@")
    if sep and not user:
        raise DriverError(f"{what}: empty user in {spec!r} ({EXPECTED})")
    user = user or default_user
    if not _USER_RE.match(user):
        raise DriverError(f"{what}: {user!r} is not a user name ({EXPECTED})")
    port_text = ""
    if rest.startswith("["):
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise DriverError(f"{what}: {EXPECTED}, got {spec!r}")
        port_text = tail[1:]
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host = rest
    if not host or not _valid_host(host):
        raise DriverError(
            f"{what}: {host!r} is not an IP address or a host name (labels of 1-63 letters, "
            f"digits or '-'; {EXPECTED})"
        )
    port = DEFAULT_SSH_PORT
    if port_text or rest.endswith(":"):
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise DriverError(f"{what}: port must be 1-65535, got {port_text!r} in {spec!r}")
        port = int(port_text)
    return HeadAddress(host=host, port=port, user=user)
