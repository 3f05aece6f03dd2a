"""Azure Compute for the workers' scale set (scaling mode ray) and the head's VM (autostop), on
the bridge over HTTPS with Key Vault's certificate (same address, a CA the nodes trust). Raising
the scale set's capacity or deleting an instance runs ``nodekit rehearse scale-set
create|delete`` here, which boots or removes a worker container (``Rehearsal.scale_set_create``
/ ``scale_set_delete``); deallocating or starting the head's VM runs ``nodekit rehearse vm
deallocate|start``, which powers its container off (its disk stays) or boots it again
(``Rehearsal.vm_deallocate`` / ``vm_start``)."""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid

from nodekit import render
from nodekit.node.azure_vmss_provider import parse_scale_set_id
from nodekit.rehearsal.services import Context, fakes, keyvault, port, wait_for_port
from nodekit.rehearsal.state import BASE_ENV, Node, State


def scale_set_name(cluster: str) -> str:
    return f"rh-{cluster}-workers"


def instance_id(node: Node) -> str:
    """A worker's instance id in the scale set (its name's number for the first workers)."""
    return node.instance_id or node.name.split("-")[-1]


def vm_name(cluster: str, node: Node) -> str:
    """The node's VM name, as Azure names a scale set's instances (``SCALESET_N``)."""
    if node.role == "head":
        return f"rh-{cluster}-head"
    return f"{scale_set_name(cluster)}_{instance_id(node)}"


def scale_set_id(cluster: str) -> str:
    """The fake scale set the rehearsal's workers belong to."""
    subscription = uuid.uuid5(uuid.NAMESPACE_DNS, f"rehearsal/{cluster}")
    return (
        f"/subscriptions/{subscription}/resourceGroups/rh-{cluster}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{scale_set_name(cluster)}"
    )


def resource_group(cluster: str) -> tuple[str, str]:
    """(subscription, resource group) of the rehearsal's fake resources."""
    sub, group, _ = parse_scale_set_id(scale_set_id(cluster))
    return sub, group


def head_vm_id(cluster: str) -> str:
    """The head's fake VM resource id (what its metadata service says, what autostop
    deallocates and the driver starts)."""
    sub, group = resource_group(cluster)
    return (
        f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute"
        f"/virtualMachines/rh-{cluster}-head"
    )


def writers(state: State) -> list[str]:
    """Who may change the scale set and the head's VM: the head's autoscaler identity (scaling
    mode ray), else the nodes' identity (the identity autostop uses in mode cpu)."""
    return [state.autoscaler_client_id or state.identity_client_id]


def arm_endpoint(state: State) -> str:
    return f"https://{state.host_ip}:{port(state, 'compute')}"


def start(ctx: Context, workers: list[Node], pool: list[str]) -> None:
    """Compute with one scale set whose instances are ``workers``; new instances get the
    addresses of ``pool`` not in use. Key Vault runs (its TLS and token key are used)."""
    sys.path.insert(0, str(render.repo_root() / "tests" / "fakes"))
    fake_path = fakes.path(fakes.COMPUTE_FAKE)
    compute = fakes.load(fakes.COMPUTE_FAKE, "rehearsal_azure_compute")
    state = ctx.state
    folder = ctx.azure_dir / "compute"
    folder.mkdir(parents=True)
    sub, group, name = parse_scale_set_id(scale_set_id(ctx.name))
    used = {n.ip for n in state.nodes}
    config = compute.compute_config(
        keyvault.token_key(ctx.azure_dir),
        arm_endpoint(state),
        writers(state),
        [
            compute.scale_set_config(
                sub, group, name, [ip for ip in pool if ip not in used], location="rehearsal"
            )
        ],
        [compute.vm_config(sub, group, f"rh-{ctx.name}-head", location="rehearsal")],
    )
    (folder / "config.json").write_text(json.dumps(config))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    instances = [
        {"instanceId": instance_id(n), "ip": n.ip, "state": "Succeeded", "created": now}
        for n in workers
    ]
    (folder / "instances.json").write_text(json.dumps({name.lower(): instances}))
    hook = shlex.join(
        [sys.executable, "-m", "nodekit", "rehearse", "scale-set", "--name", ctx.name]
    )
    vm_hook = shlex.join([sys.executable, "-m", "nodekit", "rehearse", "vm", "--name", ctx.name])
    cert, cert_key = keyvault.tls(ctx.azure_dir)
    compute_port = ctx.port("compute")
    pid = ctx.spawn(
        [
            "env",
            f"{render.REPO_ENV}={render.repo_root()}",
            f"{BASE_ENV}={ctx.base}",
            sys.executable,
            str(fake_path),
            "--bind",
            ctx.host,
            "--port",
            str(compute_port),
            "--state",
            str(folder),
            "--cert",
            str(cert),
            "--key",
            str(cert_key),
            "--on-create",
            f'{hook} create --instance-id "$INSTANCE_ID" --ip "$PRIVATE_IP"',
            "--on-delete",
            f'{hook} delete --instance-id "$INSTANCE_ID" --ip "$PRIVATE_IP"',
            "--on-deallocate",
            f"{vm_hook} deallocate",
            "--on-start",
            f"{vm_hook} start",
        ],
        ctx.azure_dir / "compute.log",
    )
    wait_for_port(ctx.host, compute_port, "the rehearsal's Azure Compute", pid=pid)
