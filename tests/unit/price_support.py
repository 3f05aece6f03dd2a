"""Reading what `python -m driver price` (and `up`, before it asks for a yes) prints: the
table's header line and rows, the cluster storage's lines; and a URL on which nothing answers."""

from __future__ import annotations

import re
import socket

HEADER = re.compile(
    r"^Hourly price in (?P<region>\w+) \(USD; Azure retail prices, pay-as-you-go Linux VMs; "
    r"(?:effective (?P<effective>[\d-]+); )?fetched (?P<fetched>[\d-]+ [\d:]+) UTC"
    r"(?P<cached>, cached)?\):$"
)


def _block(lines: list[str]) -> list[list[str]]:
    """The indented lines that follow the first one, split on runs of two or more spaces."""
    found = []
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        found.append(re.split(r" {2,}", line.strip()))
    return found


def rows(stdout: str) -> list[list[str]]:
    """The table's rows (header line excluded), split on runs of two or more spaces."""
    lines = stdout.splitlines()
    assert HEADER.match(lines[0]), lines[0]
    return _block(lines)


STORAGE_HEADER = (
    "Cluster storage (the results storage account: Standard StorageV2, Hot LRS), billed apart "
    "from the cluster: it outlives it."
)


def storage(stdout: str) -> dict[str, str]:
    """The cluster storage's lines: what -> its price ("0.0208 per GB-month", "not found")."""
    lines = stdout.splitlines()
    start = lines.index(STORAGE_HEADER)
    return dict((label, value) for label, value in _block(lines[start:]))


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/retail/prices"
