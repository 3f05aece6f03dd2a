"""What the unit tests of the rehearsal share: a cluster as ``rehearse up`` leaves its folder and
state, with no container booted (for its deploy-time values and user data)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from nodekit.rehearsal.cluster import DEFAULT_HTTP_PORT, DEFAULT_SUBNET, Rehearsal
from nodekit.rehearsal.state import Node, State


def unit_cluster(
    base: Path, name: str = "unit", subnet: str = DEFAULT_SUBNET, http_port: int = DEFAULT_HTTP_PORT
) -> Rehearsal:
    """A cluster folder under ``base`` with its token, as ``up`` writes it."""
    r = Rehearsal(name, base=base, subnet=subnet, http_port=http_port)
    r.dir.mkdir(parents=True)
    (r.dir / "token").write_text("t" * 64)
    return r


def unit_state(
    name: str = "unit",
    subnet: str = DEFAULT_SUBNET,
    http_port: int = DEFAULT_HTTP_PORT,
    head_root: str = "/nonexistent",
    **fields: Any,
) -> State:
    """The state of cluster ``name`` on ``subnet``: the bridge's address its first, a head at its
    tenth whose root is ``head_root``; ``fields``: the State's other fields."""
    hosts = list(ipaddress.IPv4Network(subnet).hosts())
    return State(
        name=name,
        subnet=subnet,
        bridge=f"rh-{name}",
        host_ip=str(hosts[0]),
        http_port=http_port,
        ssh_key="k",
        nodes=[Node("head", "head", str(hosts[9]), "ns", "veth", head_root)],
        **fields,
    )
