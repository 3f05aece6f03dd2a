"""Each node's instance metadata service at 169.254.169.254, inside the node's network
namespace: its identity's tokens, its compute metadata and its scheduled events."""

from __future__ import annotations

import json
import sys
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from driver import layout
from nodekit.rehearsal import network
from nodekit.rehearsal.services import Context, compute, fakes, keyvault, wait_for_port
from nodekit.rehearsal.state import Node


def folder(node: Node) -> Path:
    """The node's metadata service's files: config, events, requests, acknowledgements."""
    return Path(node.dir) / "imds"


def start(ctx: Context, node: Node) -> None:
    """The node's metadata service (its namespace exists, its root is mounted); the node
    trusts the Azure stand-ins' CA, as a VM trusts the public CA behind vault.azure.net."""
    fake_path = fakes.path(fakes.NODE_FAKE)
    shared = keyvault.shared(ctx.azure_dir)
    state = ctx.state
    own = folder(node)
    own.mkdir(parents=True)
    config = {
        "token_key": shared["token_key"],
        "identities": {
            state.identity_client_id: f"principal-{ctx.name}",
            # scaling mode ray: the autoscaler identity is attached to the head only.
            **(
                {state.autoscaler_client_id: f"principal-{ctx.name}-autoscaler"}
                if node.role == "head" and state.autoscaler_client_id
                else {}
            ),
        },
        "compute": {
            **_placement(ctx.name, node),
            "name": compute.vm_name(ctx.name, node),
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ctx.name}/{node.name}")),
            "vmScaleSetName": "" if node.role == "head" else compute.scale_set_name(ctx.name),
            "location": "rehearsal",
            "osType": "Linux",
        },
    }
    (own / "config.json").write_text(json.dumps(config))
    imds = urllib.parse.urlsplit(layout.IMDS_ENDPOINT)
    network.add_address(node, str(imds.hostname))
    ctx.spawn(
        [
            "ip",
            "netns",
            "exec",
            node.netns,
            sys.executable,
            str(fake_path),
            "imds",
            "--bind",
            str(imds.hostname),
            "--port",
            str(imds.port or 80),
            "--state",
            str(own),
        ],
        own / "imds.log",
    )
    wait_for_port(
        str(imds.hostname),
        imds.port or 80,
        f"the metadata service of {node.name}",
        netns=node.netns,
    )
    ca = Path(shared["ca"]).read_text()
    local = node.root / "usr/local/share/ca-certificates"
    local.mkdir(parents=True, exist_ok=True)
    (local / "rehearsal-azure.crt").write_text(ca)
    with open(node.root / "etc/ssl/certs/ca-certificates.crt", "a") as bundle:
        bundle.write(ca)


def _placement(cluster: str, node: Node) -> dict[str, str]:
    """Where Azure says the VM is: subscription, resource group, and the head's resource id."""
    sub, group = compute.resource_group(cluster)
    place = {"subscriptionId": sub, "resourceGroupName": group}
    if node.role == "head":
        place["resourceId"] = compute.head_vm_id(cluster)
    return place


def _state(node: Node) -> Any:
    return fakes.node_fake().StateFolder(folder(node))


def schedule(node: Node, event_type: str, resources: list[str], not_before_s: float) -> str:
    """A scheduled event for the node (as Azure announces a Terminate); its EventId."""
    fake = fakes.node_fake()
    events = fake.StateFolder(folder(node))
    event_id = str(uuid.uuid4()).upper()
    events.write(
        "events.json",
        [
            *events.read("events.json", []),
            fake.scheduled_event(event_id, event_type, resources, not_before_s),
        ],
    )
    events.write("incarnation.json", int(events.read("incarnation.json", 1)) + 1)
    return event_id


def acknowledged(node: Node, event_id: str) -> bool:
    """Whether the node acknowledged (StartRequests) the event."""
    return any(a.get("EventId") == event_id for a in _state(node).lines("acks.jsonl"))
