"""Reading what `python -m driver price` (and `up`, before it asks for a yes) prints: the
table's header line and rows; and a URL on which nothing answers."""

from __future__ import annotations

import re
import socket

HEADER = re.compile(
    r"^Hourly price in (?P<region>\w+) \(USD; Azure retail prices, pay-as-you-go Linux VMs; "
    r"(?:effective (?P<effective>[\d-]+); )?fetched (?P<fetched>[\d-]+ [\d:]+) UTC"
    r"(?P<cached>, cached)?\):$"
)


def rows(stdout: str) -> list[list[str]]:
    """The table's rows (header line excluded), split on runs of two or more spaces."""
    lines = stdout.splitlines()
    assert HEADER.match(lines[0]), lines[0]
    return [re.split(r" {2,}", line.strip()) for line in lines[1:] if line.startswith("  ")]


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/retail/prices"
