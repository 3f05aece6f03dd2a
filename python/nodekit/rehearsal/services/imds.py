"""Each node's instance metadata service at 169.254.169.254, inside the node's network
namespace: its identity's tokens, its compute metadata and its scheduled events."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import uuid
from pathlib import Path

from driver import layout
from driver.errors import DriverError
from nodekit.rehearsal import network
from nodekit.rehearsal.services import Context, compute, keyvault, wait_for_port
from nodekit.rehearsal.standins import azure_node
from nodekit.rehearsal.state import Node, State
from nodekit.rehearsal.system import run


def folder(node: Node) -> Path:
    """The node's metadata service's files: config, events, requests, acknowledgements."""
    return Path(node.dir) / "imds"


def start(ctx: Context, node: Node) -> None:
    """The node's metadata service (its namespace exists, its root is mounted); the node
    trusts the Azure stand-ins' CA, as a VM trusts the public CA behind vault.azure.net."""
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
            **_placement(state, node),
            "name": compute.vm_name(state, node),
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ctx.name}/{node.name}")),
            "vmScaleSetName": (
                "" if node.role == "head" else compute.scale_set_name(ctx.name, node.pool)
            ),
            "location": "rehearsal",
            "osType": "Linux",
        },
    }
    (own / "config.json").write_text(json.dumps(config))
    imds = urllib.parse.urlsplit(layout.IMDS_ENDPOINT)
    network.add_address(node, str(imds.hostname))
    pid = ctx.spawn(
        [
            "ip",
            "netns",
            "exec",
            node.netns,
            sys.executable,
            "-m",
            azure_node.__name__,
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
        pid=pid,
    )
    trust_ca(node.root, Path(shared["ca"]))


CA_NAME = "rehearsal-azure"


def trust_ca(root: Path, ca: Path) -> None:
    """Make the system at ``root`` trust the CA ``ca`` as Debian's update-ca-certificates
    would: the certificate in /usr/local/share/ca-certificates, added to the bundle
    /etc/ssl/certs/ca-certificates.crt (Python's ssl, requests, curl read it) and linked in
    /etc/ssl/certs as ``NAME.pem`` and by its subject hash (``HASH.0``, where OpenSSL looks a
    CA up by default: pyarrow's Azure file system, whose wheel brings its own OpenSSL, reads
    only that)."""
    pem = ca.read_text()
    local = root / "usr/local/share/ca-certificates"
    local.mkdir(parents=True, exist_ok=True)
    (local / f"{CA_NAME}.crt").write_text(pem)
    certs = root / "etc/ssl/certs"
    with open(certs / "ca-certificates.crt", "a") as bundle:
        bundle.write(pem)
    link = certs / f"{CA_NAME}.pem"
    if not link.is_symlink():
        link.symlink_to(f"../../../usr/local/share/ca-certificates/{CA_NAME}.crt")
    subject_hash = run(["openssl", "x509", "-noout", "-subject_hash", "-in", str(ca)]).stdout
    for n in range(10):
        hashed = certs / f"{subject_hash.strip()}.{n}"
        if hashed.is_symlink() and os.readlink(hashed) == link.name:
            return
        if not hashed.is_symlink() and not hashed.exists():
            hashed.symlink_to(link.name)
            return
    raise DriverError(f"no free subject-hash link for {ca} in {certs}")


def _placement(state: State, node: Node) -> dict[str, str]:
    """Where Azure says the VM is: subscription, resource group, and the resource id of the
    head's VM or a Flexible pool's (:func:`compute.vm_resource_id`)."""
    sub, group = compute.resource_group(state.name)
    place = {"subscriptionId": sub, "resourceGroupName": group}
    resource_id = compute.vm_resource_id(state, node)
    if resource_id:
        place["resourceId"] = resource_id
    return place


def _state(node: Node) -> azure_node.StateFolder:
    return azure_node.StateFolder(folder(node))


def schedule(node: Node, event_type: str, resources: list[str], not_before_s: float) -> str:
    """A scheduled event for the node (as Azure announces a Terminate); its EventId."""
    events = azure_node.StateFolder(folder(node))
    event_id = str(uuid.uuid4()).upper()
    events.write(
        "events.json",
        [
            *events.read("events.json", []),
            azure_node.scheduled_event(event_id, event_type, resources, not_before_s),
        ],
    )
    events.write("incarnation.json", int(events.read("incarnation.json", 1)) + 1)
    return event_id


def acknowledged(node: Node, event_id: str) -> bool:
    """Whether the node acknowledged (StartRequests) the event."""
    return any(a.get("EventId") == event_id for a in _state(node).lines("acks.jsonl"))
