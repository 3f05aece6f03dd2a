"""The rehearsal cluster's network: one bridge on the host, one network namespace per node.

The host holds the subnet's first address on the bridge (``rh-NAME``), where the services of
:mod:`nodekit.rehearsal.services` listen; node N has the subnet's address 10 + N (the head is
node 0) on the ``eth0`` of its namespace (``rh-NAME-head``, ``rh-NAME-wN``), the other end of a
veth pair (``rh-NAME-N``) on the bridge. There is no NAT and no route out. Every name carries
the cluster's prefix, so :func:`remove_all` finds what a lost state file no longer lists.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable

from driver.errors import DriverError
from nodekit.rehearsal.state import Node
from nodekit.rehearsal.system import run

MAX_NODES = 51
"""The head and at most 50 workers: node addresses .10 to .60 of the subnet."""

Record = Callable[[str], None]
"""Notes an item (``link:NAME``, ``netns:NAME``) in the state before it is created."""


def prefix(cluster: str) -> str:
    """Every bridge, namespace and link of ``cluster`` starts with this (the bridge's name)."""
    return f"rh-{cluster}"


def host_ip(subnet: ipaddress.IPv4Network) -> str:
    return str(next(subnet.hosts()))


def node_ip(subnet: ipaddress.IPv4Network, index: int) -> str:
    return str(list(subnet.hosts())[9 + index])


def node_index(subnet: ipaddress.IPv4Network, ip: str) -> int:
    """The index of the node at ``ip`` (:func:`node_ip`'s inverse)."""
    index = int(ipaddress.IPv4Address(ip)) - int(subnet.network_address) - 10
    if not 0 <= index < MAX_NODES:
        raise DriverError(f"{ip} is no node address of {subnet}")
    return index


def bake_ip(subnet: ipaddress.IPv4Network) -> str:
    """The container that bakes the node image: the address below the head's."""
    return str(list(subnet.hosts())[8])


def worker_pool(subnet: ipaddress.IPv4Network) -> list[str]:
    """Every address a worker (nodes 1 to 50) may have."""
    return [str(h) for h in list(subnet.hosts())[10:60]]


def node_netns(cluster: str, role: str, index: int) -> str:
    return f"{prefix(cluster)}-{'head' if role == 'head' else f'w{index}'}"


def node_veth(cluster: str, index: int) -> str:
    return f"{prefix(cluster)}-{index}"


def check_subnet_free(subnet: ipaddress.IPv4Network) -> None:
    """Refuse a subnet that overlaps a route of the host (another network, another cluster)."""
    routes = run(["ip", "-4", "-o", "route", "show"], what="ip route").stdout
    for line in routes.splitlines():
        dest = line.split()[0]
        if dest == "default":
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_network(dest, strict=False).overlaps(subnet):
                raise DriverError(
                    f"subnet {subnet} overlaps the host route '{line.strip()}': "
                    "choose another with --subnet"
                )


def create_bridge(bridge: str, address: str, prefixlen: int, record: Record) -> None:
    record(f"link:{bridge}")
    run(["ip", "link", "add", bridge, "type", "bridge"], what="creating the bridge")
    run(
        ["ip", "addr", "add", f"{address}/{prefixlen}", "dev", bridge],
        what="addressing the bridge",
    )
    run(["ip", "link", "set", bridge, "up"], what="raising the bridge")


def attach_node(node: Node, bridge: str, prefixlen: int, record: Record) -> None:
    """The node's namespace, with ``eth0`` at its address on the bridge and ``lo`` up."""
    record(f"netns:{node.netns}")
    run(["ip", "netns", "add", node.netns], what=f"creating netns {node.netns}")
    record(f"link:{node.veth}")
    run(
        [
            "ip",
            "link",
            "add",
            node.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            node.netns,
        ],
        what=f"creating the veth pair of {node.name}",
    )
    run(["ip", "link", "set", node.veth, "master", bridge, "up"], what="bridging")
    run(
        ["ip", "-n", node.netns, "addr", "add", f"{node.ip}/{prefixlen}", "dev", "eth0"],
        what=f"addressing {node.name}",
    )
    run(["ip", "-n", node.netns, "link", "set", "eth0", "up"], what="raising eth0")
    run(["ip", "-n", node.netns, "link", "set", "lo", "up"], what="raising lo")


def add_address(node: Node, address: str) -> None:
    """One more address (``/32``) on the node's ``lo`` (the metadata service's)."""
    run(
        ["ip", "-n", node.netns, "addr", "add", f"{address}/32", "dev", "lo"],
        what=f"the metadata address of {node.name}",
    )


def cut(node: Node) -> None:
    """The node's network goes silent: the bridge's end of its link down."""
    run(["ip", "link", "set", node.veth, "down"], what=f"cutting the network of {node.name}")


def detach_node(node: Node) -> None:
    """The node's namespace and link, if they are there."""
    run(["ip", "netns", "del", node.netns], check=False)
    run(["ip", "link", "del", node.veth], check=False)


def remove_all(cluster: str) -> list[str]:
    """Every namespace and link with the cluster's prefix; what went."""
    removed = []
    pre = prefix(cluster)
    for ns in run(["ip", "netns", "list"], what="ip netns").stdout.split("\n"):
        ns = ns.split(" ")[0]
        if ns.startswith(pre + "-"):
            run(["ip", "netns", "del", ns], what=f"deleting netns {ns}")
            removed.append(f"netns {ns}")
    links = run(["ip", "-o", "link", "show"], what="ip link").stdout
    for line in links.splitlines():
        link = line.split(":")[1].strip().split("@")[0]
        if link == pre or link.startswith(pre + "-"):
            run(["ip", "link", "del", link], check=False)
            removed.append(f"link {link}")
    return removed
