"""Azure Compute for the workers' scale sets (scaling mode ray) and the head's VM (autostop), on
the bridge over HTTPS with Key Vault's certificate (same address, a CA the nodes trust). One
scale set per worker pool (the default pool ``workers``; with ``rehearse up --gpu-pool-max N``
also ``gpu``), in one resource group. Raising a scale set's capacity or deleting an instance
runs ``nodekit rehearse scale-set create|delete --scale-set NAME`` here, which boots or removes
a worker container of that pool (``Rehearsal.scale_set_create`` / ``scale_set_delete``);
deallocating or starting the head's VM runs ``nodekit rehearse vm deallocate|start``, which
powers its container off (its disk stays) or boots it again (``Rehearsal.vm_deallocate`` /
``vm_start``). Every pool's scale set has the cluster's orchestration mode (``rehearse up
--orchestration-mode``, default Flexible, the stacks' default): a Flexible scale set's VM is a
virtual machine of its own, named ``rh-NAME-POOL_`` and 8 hexadecimal characters, which is
also its instance id (what the hooks get); a Uniform scale set's instance N is
``rh-NAME-POOL_N``."""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from typing import Any

from driver.errors import DriverError
from nodekit import render
from nodekit.rehearsal.services import Context, keyvault, port, wait_for_port
from nodekit.rehearsal.standins import azure_compute
from nodekit.rehearsal.state import BASE_ENV, DEFAULT_POOL, Node, State


def scale_set_name(cluster: str, pool: str = DEFAULT_POOL) -> str:
    """The fake scale set of ``pool`` (``rh-NAME-workers``, ``rh-NAME-gpu``)."""
    return f"rh-{cluster}-{pool}"


def pool_of(cluster: str, scale_set: str) -> str:
    """The pool whose scale set is ``scale_set`` (case-insensitive, as ARM names match)."""
    prefix = f"rh-{cluster}-"
    if not scale_set.lower().startswith(prefix):
        raise ValueError(f"{scale_set!r} is no scale set of rehearsal cluster {cluster!r}")
    return scale_set[len(prefix) :].lower()


def flexible(state: State) -> bool:
    """Whether the cluster's pools are Flexible scale sets (``rehearse up
    --orchestration-mode``)."""
    return state.orchestration_mode == "Flexible"


def instance_id(node: Node) -> str:
    """A worker's instance id in its scale set: Uniform, a number (its name's number for the
    first workers); Flexible, its VM name (:func:`new_instance_id`)."""
    return node.instance_id or node.name.split("-")[-1]


def new_instance_id(state: State, pool: str = DEFAULT_POOL) -> str:
    """The instance id of a worker ``up`` or ``add-worker`` boots into ``pool``: Flexible, a
    new VM name as the fake Compute makes them (``rh-NAME-POOL_`` and 8 hexadecimal
    characters); Uniform, ``""`` (its name's number)."""
    if not flexible(state):
        return ""
    return azure_compute.flexible_vm_name(scale_set_name(state.name, pool))


def vm_name(state: State, node: Node) -> str:
    """The node's VM name, as Azure names it (what its metadata service calls it and its
    Scheduled Events list): the head's ``rh-NAME-head``; a Uniform scale set's instance
    ``SCALESET_N``; a Flexible scale set's VM is a virtual machine of its own, whose name is
    its instance id."""
    if node.role == "head":
        return f"rh-{state.name}-head"
    if flexible(state):
        if not azure_compute.is_flexible_vm_of(
            scale_set_name(state.name, node.pool), node.instance_id
        ):
            raise DriverError(
                f"{node.name} has no VM name of Flexible scale set "
                f"{scale_set_name(state.name, node.pool)} (instance id {node.instance_id!r})"
            )
        return node.instance_id
    return f"{scale_set_name(state.name, node.pool)}_{instance_id(node)}"


def vm_resource_id(state: State, node: Node) -> str:
    """The resource id the node's metadata service says (``compute.resourceId``): the head's
    VM, a Flexible pool's VM (``.../virtualMachines/NAME``, a VM of its own); ``""`` for a
    Uniform pool's instance (not played: nothing on the node reads it)."""
    if node.role == "head":
        return head_vm_id(state.name)
    if not flexible(state):
        return ""
    sub, group = resource_group(state.name)
    return (
        f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute"
        f"/virtualMachines/{vm_name(state, node)}"
    )


def node_name(state: State, pool: str, instance_id: str) -> str:
    """The worker container a scale set's instance is: Uniform, the default pool's instance N
    ``worker-N+1`` (node 0 is the head), another pool's ``POOL-N``; Flexible, ``worker-`` (the
    default pool) or ``POOL-`` and its VM name's 8 hexadecimal characters."""
    if flexible(state):
        return f"{'worker' if pool == DEFAULT_POOL else pool}-{instance_id.rsplit('_', 1)[-1]}"
    if pool == DEFAULT_POOL:
        return f"worker-{int(instance_id) + 1}"
    return f"{pool}-{instance_id}"


def scale_set_id(cluster: str, pool: str = DEFAULT_POOL) -> str:
    """The fake scale set of ``pool`` (all in the cluster's one resource group)."""
    subscription = uuid.uuid5(uuid.NAMESPACE_DNS, f"rehearsal/{cluster}")
    return (
        f"/subscriptions/{subscription}/resourceGroups/rh-{cluster}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{scale_set_name(cluster, pool)}"
    )


def resource_group(cluster: str) -> tuple[str, str]:
    """(subscription, resource group) of the rehearsal's fake resources."""
    # Imported here: the provider's module loads Ray's autoscaler (0.5 s a command).
    from nodekit.node.azure_vmss_provider import parse_scale_set_id

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


HOOK_ARGS = '--scale-set "$SCALE_SET" --instance-id "$INSTANCE_ID" --ip "$PRIVATE_IP"'
"""What the fake's hooks pass to ``rehearse scale-set create|delete`` (its environment)."""


def writers(state: State) -> list[str]:
    """Who may change the scale set and the head's VM: the head's autoscaler identity (scaling
    mode ray), else the nodes' identity (the identity autostop uses in mode cpu)."""
    return [state.autoscaler_client_id or state.identity_client_id]


def arm_endpoint(state: State) -> str:
    return f"https://{state.host_ip}:{port(state, 'compute')}"


def scale_sets(state: State, pools: dict[str, tuple[str, list[str]]]) -> list[dict[str, Any]]:
    """The fake Compute's scale set of each pool of ``pools`` (name -> (VM size, addresses)),
    in the cluster's orchestration mode; its new instances get its addresses not in use."""
    sub, group = resource_group(state.name)
    used = {n.ip for n in state.nodes}
    return [
        azure_compute.scale_set_config(
            sub,
            group,
            scale_set_name(state.name, pool),
            [ip for ip in addresses if ip not in used],
            sku=size,
            location="rehearsal",
            orchestration_mode=state.orchestration_mode,
        )
        for pool, (size, addresses) in pools.items()
    ]


def first_instances(
    state: State, workers: list[Node], pools: dict[str, tuple[str, list[str]]]
) -> dict[str, list[dict[str, Any]]]:
    """The fake Compute's ``instances.json`` for the workers ``up`` boots: each its pool's
    scale set's instance, by its instance id (a Flexible VM's name, with its place in creation
    order; a Uniform instance id is its own)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        scale_set_name(state.name, pool).lower(): [
            {
                "instanceId": instance_id(n),
                "ip": n.ip,
                "state": "Succeeded",
                "created": now,
                **({"ordinal": int(n.name.split("-")[-1])} if flexible(state) else {}),
            }
            for n in workers
            if n.pool == pool
        ]
        for pool in pools
    }


def start(ctx: Context, workers: list[Node], pools: dict[str, tuple[str, list[str]]]) -> None:
    """Compute with a scale set per pool of ``pools`` (name -> (VM size, addresses)) whose
    instances are ``workers`` (each in its node's pool); a pool's new instances get its
    addresses not in use. Key Vault runs (its TLS and token key are used)."""
    state = ctx.state
    folder = ctx.azure_dir / "compute"
    folder.mkdir(parents=True)
    sub, group = resource_group(ctx.name)
    config = azure_compute.compute_config(
        keyvault.token_key(ctx.azure_dir),
        arm_endpoint(state),
        writers(state),
        scale_sets(state, pools),
        [azure_compute.vm_config(sub, group, f"rh-{ctx.name}-head", location="rehearsal")],
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "instances.json").write_text(json.dumps(first_instances(state, workers, pools)))
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
            "-m",
            azure_compute.__name__,
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
            f"{hook} create {HOOK_ARGS}",
            "--on-delete",
            f"{hook} delete {HOOK_ARGS}",
            "--on-deallocate",
            f"{vm_hook} deallocate",
            "--on-start",
            f"{vm_hook} start",
        ],
        ctx.azure_dir / "compute.log",
    )
    wait_for_port(ctx.host, compute_port, "the rehearsal's Azure Compute", pid=pid)
