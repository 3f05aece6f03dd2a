"""Ray's own autoscaler drives the worker pools: a node provider for Azure VM scale sets.

Runs on the head only, in ``scaling_mode = "ray"``, inside Ray's autoscaler (the monitor process
that ``ray start --head --autoscaling-config=...`` starts). The provider type is ``external``
with node updaters disabled, as KubeRay does: the autoscaler never SSHes into a node, workers
bootstrap themselves from their cloud-init and join the head. One Ray node type per worker pool
(``AUTOSCALER_POOLS``; each pool one scale set): ``ray.worker.default`` for the default pool
``workers``, ``ray.worker.POOL`` for the others, each with its own min/max and the resources its
workers offer (CPUs and GPUs from the VM size, a ``simulator`` slot per CPU, the pool's own).
Built on Ray's ``BatchingNodeProvider``: each autoscaler round reads every scale set once
(:meth:`ScaleSetProvider.get_node_data`) and writes at most once
(:meth:`ScaleSetProvider.submit_scale_request`):

* more workers of a type wanted: its scale set's capacity is raised (``PATCH sku.capacity``);
* a worker to remove: its Ray node is drained first (Ray's DrainNode, reason
  IDLE_TERMINATION: the GCS refuses it if anything runs there, and then the worker stays), then
  exactly that instance is deleted (``POST .../delete`` with its instance id) — never "the
  newest VM";
* Ray nodes and instances are matched by private IP (the scale set's network interfaces; in
  a Flexible scale set each VM's own interface, which the VM names, and the instance id is the
  VM's name);
* a pool Azure cannot fill is routed around: when Azure answers a capacity raise with an
  allocation or quota failure (:data:`CAPACITY_CODES`), the pool is backed off
  (:func:`backoff_s`: 60 s, doubling at each refusal in a row, at most Ray's
  AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S), its :meth:`ScaleSetProvider.create_node`
  raises Ray's ``NodeLaunchException`` (Azure's code and what it said, since when, until when)
  meanwhile, which Ray's availability tracker records and ``ray status`` shows, and
  :func:`availability_scorer` (Ray's ``RAY_AUTOSCALER_UTILIZATION_SCORER``, which the head's
  bootstrap sets) ranks every pool Ray recorded as unavailable and that is still backed off
  after the pools that can take the demand; Ray's default scorer ignores availability.

Azure is reached with azure-mgmt-compute and the head's managed identity (azure-identity's
``ManagedIdentityCredential`` with the autoscaler identity's client id), whose only roles are on
the pools' scale sets. Writes run in a background thread; the autoscaler backs off
(:meth:`safe_to_scale`) until the previous one ended, and a failed read of any scale set keeps
the last view and stops writes, so an Azure outage never makes the autoscaler act on a wrong
count.

Also a command: ``python azure_vmss_provider.py config --deploy-values FILE --out FILE`` writes
the autoscaler's configuration from the node's deploy-time values (the head's bootstrap runs it).

This file is embedded in the head's cloud-init by ``python -m nodekit render`` and installed into
the node's Python environment; its Azure calls are tested against the rehearsal's stand-in of
Azure Compute (python/nodekit/rehearsal/standins/azure_compute.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # On the head (Ray installed); the config command and the tests' helpers work without.
    from ray.autoscaler.batching_node_provider import (
        BatchingNodeProvider,
        NodeData,
        ScaleRequest,
    )
    from ray.autoscaler.node_launch_exception import NodeLaunchException
    from ray.autoscaler.tags import (
        NODE_KIND_HEAD,
        NODE_KIND_WORKER,
        STATUS_UP_TO_DATE,
        STATUS_UPDATE_FAILED,
    )
except ImportError:  # pragma: no cover
    BatchingNodeProvider = object  # type: ignore[misc,assignment]

logger = logging.getLogger(__name__)

HEAD_TYPE = "ray.head.default"
WORKER_TYPE = "ray.worker.default"
"""The node type of the default pool ``workers`` (the cluster of before pools); another pool's
is ``ray.worker.POOL`` (:func:`node_type`)."""
DEFAULT_POOL = "workers"
HEAD_ID = "head"
SIMULATOR_RESOURCE = "simulator"
"""What every worker offers besides CPU, one per vCPU (its ``ray start --resources``):
python/driver/layout.py's SIMULATOR_RESOURCE, held equal by a test. The autoscaler must know it
to add a worker for a job that asks for it."""
POOL_LABEL = "pool"
"""The label every worker carries with its pool's name: python/driver/layout.py's POOL_LABEL
(the bootstrap's ``ray start --labels``), held equal by a test."""
NETWORK_API = "2024-07-01"
"""api-version of the Network resource provider, which serves a scale set's interfaces."""
DEFAULT_ARM_ENDPOINT = "https://management.azure.com"
MODULE = "azure_vmss_provider.ScaleSetProvider"
"""The provider as the autoscaler's configuration names it (``provider.module``)."""
SCALE_SET_ID_RE = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachineScaleSets/(?P<name>[^/]+)$",
    re.IGNORECASE,
)
VM_SIZE_RE = re.compile(r"^Standard_[A-Za-z]+(?P<cpus>\d+)(?:-(?P<active>\d+))?", re.IGNORECASE)
GPU_SIZES = {
    r"nc(4|8|16)as_t4_v3": 1,
    r"nc64as_t4_v3": 4,
    r"nc24ads_a100_v4": 1,
    r"nc48ads_a100_v4": 2,
    r"nc96ads_a100_v4": 4,
    r"nc40ads_h100_v5": 1,
    r"nc80adis_h100_v5": 2,
    r"nd96(asr_v4|amsr_a100_v4|isr_h100_v5)": 8,
}
"""NVIDIA GPUs of the N-series sizes whose GPUs the nodes support (docs/gpu.md: Turing
and newer for the CUDA 13 torch: NCasT4_v3, NC A100 v4, NC H100 v5, ND A100 v4, NDm A100 v4,
ND H100 v5), by the size's name without ``Standard_``, lower case: what a worker of that size
registers with Ray (``--num-gpus``, the count its own check finds), so the autoscaler plans
with it."""
UNSUPPORTED_GPUS = r"nc\d+r?s_v3|nd\d+r?s_v2|nv"
"""The V100 of NCv3 and NDv2 (older than the CUDA 13 torch supports) and the NV-series' virtual
GPUs (NVIDIA's GRID driver): refused."""


CAPACITY_CODES = frozenset(
    {
        "AllocationFailed",
        "OverconstrainedAllocationRequest",
        "ZonalAllocationFailed",
        "SkuNotAvailable",
    }
)
"""Azure's error codes for a capacity raise it cannot serve now (allocation failures, a size
not offered); ``OperationNotAllowed`` counts when its message is about quota
(:func:`capacity_refusal`)."""
BACKOFF_FIRST_S = 60.0
"""How long a pool Azure refused is backed off after the first refusal; doubled at each next
one in a row (:func:`backoff_s`)."""


def backoff_s(refusals: int) -> float:
    """Seconds a pool stays backed off after ``refusals`` refusals in a row: 60, 120, 240, ...,
    at most Ray's AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S (30 min), how long Ray's
    autoscaler keeps a node type's availability record."""
    from ray.autoscaler._private.constants import AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S

    return float(
        min(
            BACKOFF_FIRST_S * 2 ** max(0, refusals - 1),
            AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S,
        )
    )


def capacity_refusal(error: BaseException) -> tuple[str, str] | None:
    """(Azure's code, its message) when ``error`` (azure-core's HttpResponseError, from the
    request or from its long-running operation) says Azure cannot serve the capacity now."""
    odata = getattr(error, "error", None)
    code = str(getattr(odata, "code", "") or "")
    message = " ".join(str(getattr(odata, "message", "") or error).split())
    if code in CAPACITY_CODES or (code == "OperationNotAllowed" and "quota" in message.lower()):
        return code, message
    return None


@dataclass
class Refusal:
    """What Azure last answered a pool's capacity raise, when it refused it."""

    code: str
    message: str
    since: float
    """When the first refusal of this run came (epoch seconds)."""
    last: float
    count: int
    retry_at: float
    """When the pool may be asked again."""

    def describe(self, scale_set: str) -> str:
        def at(t: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

        return (
            f"Azure refused capacity for scale set {scale_set}: {self.code} since {at(self.since)}"
            f" ({self.count} refusal{'s' if self.count != 1 else ''}, last {at(self.last)}); "
            f"next try after {at(self.retry_at)}; Azure said: {self.message}"
        )


_active: list[ScaleSetProvider] = []
"""The provider of this process (Ray's monitor makes one), for :func:`availability_scorer`."""


def availability_scorer(
    node_resources: Any,
    resources: Any,
    node_type: str,
    *,
    node_availability_summary: Any,
) -> tuple[Any, ...] | None:
    """Ray's own utilization score with one criterion in front: whether the pool can be asked
    now. A node type Ray's availability tracker recorded as unavailable (the provider raised
    NodeLaunchException for it) ranks after every other that fits while the provider still
    backs its pool off; once the back-off ends it competes as before. Not forbidden: demand
    only a backed-off pool can serve still picks it (the launch is refused until it ends)."""
    from ray.autoscaler._private.resource_demand_scheduler import _default_utilization_scorer

    score = _default_utilization_scorer(
        node_resources, resources, node_type, node_availability_summary=node_availability_summary
    )
    if score is None:
        return None
    record = node_availability_summary.node_availabilities.get(node_type)
    refused = (
        record is not None
        and not record.is_available
        and any(p.backed_off(node_type) for p in _active)
    )
    return (not refused, *score)


class ProviderError(Exception):
    """A configuration the provider cannot work with (one line, for the bootstrap's log)."""


def parse_scale_set_id(resource_id: str) -> tuple[str, str, str]:
    """(subscription, resource group, name) of a scale set's resource id."""
    m = SCALE_SET_ID_RE.match(resource_id.strip())
    if not m:
        raise ProviderError(
            "the worker scale set id must look like /subscriptions/SUB/resourceGroups/RG/"
            f"providers/Microsoft.Compute/virtualMachineScaleSets/NAME, got {resource_id!r}"
        )
    return m["sub"], m["rg"], m["name"]


def vm_size_cpus(size: str) -> int:
    """vCPUs of an Azure VM size, from its name: the number after the family letters
    (Standard_D4s_v5: 4; a constrained-core size Standard_E8-2s_v5 has 2 active)."""
    m = VM_SIZE_RE.match(size.strip())
    if not m or int(m["active"] or m["cpus"]) < 1:
        raise ProviderError(f"cannot tell the vCPUs of VM size {size!r} (expected Standard_D4s_v5)")
    return int(m["active"] or m["cpus"])


def vm_size_gpus(size: str) -> int:
    """NVIDIA GPUs of an Azure VM size, from its name (:data:`GPU_SIZES`); 0 outside the
    N-series. An N-series size the table does not know, or one whose GPUs the nodes do not
    support, is refused: the autoscaler would plan a GPU worker with the wrong count."""
    name = size.strip().lower().removeprefix("standard_")
    if not name.startswith("n"):
        return 0
    if re.match(UNSUPPORTED_GPUS, name):
        raise ProviderError(
            f"VM size {size!r}: its GPUs (V100, NV-series) do not work on the nodes (docs/gpu.md)"
        )
    for pattern, count in GPU_SIZES.items():
        if re.fullmatch(pattern, name):
            return count
    raise ProviderError(f"VM size {size!r}: an N-series size of unknown GPU count")


# -- Azure -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instance:
    instance_id: str
    name: str
    """The VM's name, e.g. ``ray-workers_3`` (what Scheduled Events call it)."""
    state: str
    """provisioningState: Creating, Updating, Succeeded, Failed, Deleting."""
    ip: str | None
    """Private IP of its primary interface, None until Azure assigned one."""


class ScaleSet:
    """The calls the provider makes to one scale set, through azure-mgmt-compute."""

    def __init__(
        self,
        scale_set_id: str,
        credential: Any,
        endpoint: str = DEFAULT_ARM_ENDPOINT,
        connection_verify: str | bool = True,
        polling_interval: float | None = None,
    ) -> None:
        from azure.mgmt.compute import ComputeManagementClient

        self.subscription, self.group, self.name = parse_scale_set_id(scale_set_id)
        self.id = scale_set_id
        self.endpoint = endpoint.rstrip("/")
        kwargs: dict[str, Any] = {"connection_verify": connection_verify}
        if polling_interval is not None:
            kwargs["polling_interval"] = polling_interval
        self.client = ComputeManagementClient(
            credential,
            self.subscription,
            base_url=self.endpoint,
            credential_scopes=[f"{self.endpoint}/.default"],
            **kwargs,
        )
        self._flexible: bool | None = None

    def capacity(self) -> int:
        vmss = self.client.virtual_machine_scale_sets.get(self.group, self.name)
        self._flexible = vmss.orchestration_mode == "Flexible"  # a str enum
        return int((vmss.sku.capacity if vmss.sku else 0) or 0)

    def flexible(self) -> bool:
        """Flexible orchestration (read once: a scale set's mode cannot change; the stacks
        replace the scale set instead)."""
        if self._flexible is None:
            self.capacity()
        return bool(self._flexible)

    def _get(self, url: str) -> dict[str, Any]:
        # Hand-written on Compute's pipeline: the typed client would add azure-mgmt-network (a
        # large package) to the head's lock for these reads.
        from azure.core.rest import HttpRequest

        response = self.client.send_request(HttpRequest("GET", url))
        response.raise_for_status()
        page: dict[str, Any] = response.json()
        return page

    @staticmethod
    def _primary_ip(nic: dict[str, Any]) -> str | None:
        configs = nic.get("properties", {}).get("ipConfigurations", [])
        primary = [c for c in configs if c.get("properties", {}).get("primary")] or configs
        return primary[0].get("properties", {}).get("privateIPAddress") if primary else None

    def _private_ips(self) -> dict[str, str]:
        """instance id -> private IP of its primary interface (Network's API for scale sets)."""
        url: str | None = (
            f"{self.endpoint}/subscriptions/{self.subscription}/resourceGroups/{self.group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}"
            f"/networkInterfaces?api-version={NETWORK_API}"
        )
        ips: dict[str, str] = {}
        while url:
            page = self._get(url)
            for nic in page.get("value", []):
                props = nic.get("properties", {})
                vm = (props.get("virtualMachine") or {}).get("id", "")
                ip = self._primary_ip(nic)
                if vm and ip and props.get("primary", True):
                    ips[vm.rstrip("/").rsplit("/", 1)[-1]] = ip
            url = page.get("nextLink")
        return ips

    def _flexible_ip(self, vm: Any) -> str | None:
        """A Flexible VM's private IP: its primary network interface is a Network resource of
        its own (the scale set has no interface list), read by the id the VM names."""
        nics = list(vm.network_profile.network_interfaces or []) if vm.network_profile else []
        primary = [n for n in nics if n.primary] or nics
        if not primary or not primary[0].id:
            return None
        from azure.core.rest import HttpRequest

        url = f"{self.endpoint}{primary[0].id}?api-version={NETWORK_API}"
        response = self.client.send_request(HttpRequest("GET", url))
        if response.status_code == 404:  # not made yet, or gone with its VM: no IP
            return None
        response.raise_for_status()
        return self._primary_ip(response.json())

    def instances(self) -> list[Instance]:
        vms = list(self.client.virtual_machine_scale_set_vms.list(self.group, self.name))
        if self.flexible():
            # Flexible: each VM's instance id is its name (Scheduled Events call it so too).
            return [
                Instance(
                    instance_id=str(vm.instance_id),
                    name=str(vm.name),
                    state=str(vm.provisioning_state or ""),
                    ip=self._flexible_ip(vm),
                )
                for vm in vms
            ]
        ips = self._private_ips()
        return [
            Instance(
                instance_id=str(vm.instance_id),
                name=str(vm.name),
                state=str(vm.provisioning_state or ""),
                ip=ips.get(str(vm.instance_id)),
            )
            for vm in vms
        ]

    def set_capacity(self, capacity: int) -> None:
        from azure.mgmt.compute.models import Sku, VirtualMachineScaleSetUpdate

        poller = self.client.virtual_machine_scale_sets.begin_update(
            self.group, self.name, VirtualMachineScaleSetUpdate(sku=Sku(capacity=capacity))
        )
        poller.result()

    def delete(self, instance_ids: list[str]) -> None:
        from azure.mgmt.compute.models import VirtualMachineScaleSetVMInstanceRequiredIDs

        poller = self.client.virtual_machine_scale_sets.begin_delete_instances(
            self.group,
            self.name,
            VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=instance_ids),
        )
        poller.result()


def managed_identity(client_id: str) -> Any:
    from azure.identity import ManagedIdentityCredential

    return (
        ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
    )


def system_ca_bundle() -> str | bool:
    """``$REQUESTS_CA_BUNDLE`` if set, else the OS's CA store where there is one (the head
    trusts what its OS trusts), else certifi's."""
    if os.environ.get("REQUESTS_CA_BUNDLE"):
        return os.environ["REQUESTS_CA_BUNDLE"]
    for path in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if Path(path).is_file():
            return path
    return True


# -- Ray -------------------------------------------------------------------------------------
Drain = Callable[[str], "tuple[bool, str]"]
"""``drain(ip) -> (accepted, message)``: drain the Ray node at ``ip`` for removal."""


def gcs_drain(gcs_address: str) -> Drain:
    """Ray's DrainNode with reason IDLE_TERMINATION: the GCS accepts it only for a node with
    nothing running (the autoscaler's idle view may be seconds old); a node not (or no longer)
    in the cluster needs no drain."""

    def drain(ip: str) -> tuple[bool, str]:
        import ray._raylet
        from ray.core.generated import autoscaler_pb2, gcs_pb2

        gcs = ray._raylet.GcsClient(address=gcs_address)  # type: ignore[attr-defined]
        up = gcs_pb2.GcsNodeInfo.ALIVE  # type: ignore[attr-defined]

        def alive() -> list[str]:
            nodes = gcs.get_all_node_info(timeout=10).items()
            return [i.hex() for i, n in nodes if n.node_manager_address == ip and n.state == up]

        found = alive()
        for node_id in found:
            try:
                accepted, message = gcs.drain_node(
                    node_id,
                    autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
                        "DRAIN_NODE_REASON_IDLE_TERMINATION"
                    ),
                    "idle: the autoscaler removes this worker",
                    0,
                )
            except Exception as e:
                # Ray's autoscaler has just shut this raylet down itself (its own drain before
                # it asks the provider): the call is cancelled. Gone from the cluster = drained.
                time.sleep(2)
                if node_id in alive():
                    return False, f"the drain failed and the node is still alive: {e}"
                accepted, message = True, ""
            if not accepted:
                return False, str(message)
        return True, "drained" if found else "not in the Ray cluster"

    return drain


_PENDING_STATES = {"creating": "creating VM", "updating": "updating VM"}


class ScaleSetProvider(BatchingNodeProvider):
    """Ray's ``external`` node provider for the worker pools' Uniform VM scale sets, one Ray
    node type each.

    ``provider_config``: ``pools`` (each ``node_type``, ``scale_set_id``, ``max_workers``),
    ``head_ip``, ``identity_client_id``, ``arm_endpoint`` (optional), ``max_workers`` (all pools
    together), and Ray's ``disable_node_updaters``, ``disable_launch_config_check``,
    ``foreground_node_launch`` (all true). ``scale_sets`` (tests): node type -> its scale set.
    """

    def __init__(
        self,
        provider_config: dict[str, Any],
        cluster_name: str,
        scale_sets: dict[str, ScaleSet] | None = None,
        drain: Drain | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(provider_config, cluster_name)
        self.clock = clock
        self.refusals: dict[str, Refusal] = {}
        """Node type -> Azure's refusal of its pool's last capacity raise (none once one
        succeeds)."""
        _active[:] = [self]
        self.head_ip = str(provider_config["head_ip"])
        pools = list(provider_config["pools"])
        self.max_workers = int(provider_config.get("max_workers", 1000))
        self.pool_max = {str(p["node_type"]): int(p["max_workers"]) for p in pools}
        if scale_sets is None:
            credential = managed_identity(str(provider_config.get("identity_client_id", "")))
            endpoint = str(provider_config.get("arm_endpoint") or DEFAULT_ARM_ENDPOINT)
            verify = system_ca_bundle()
            scale_sets = {
                str(p["node_type"]): ScaleSet(
                    str(p["scale_set_id"]), credential, endpoint, connection_verify=verify
                )
                for p in pools
            }
        self.scale_sets = scale_sets
        self.drain = drain or gcs_drain(f"{self.head_ip}:{provider_config.get('gcs_port', 6379)}")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vmss")
        self._write: Future[None] | None = None
        self._lock = threading.Lock()
        self._instance_ids: dict[str, tuple[str, str]] = {}
        """Node id (the VM's name) -> (its node type, its instance id), from the last read."""
        self._deleting: set[tuple[str, str]] = set()
        """(node type, instance id) this provider deleted that Azure may still list."""
        self._last: dict[str, NodeData] | None = None
        self._read_failed = False
        self.kept: list[str] = []
        """Node ids whose drain Ray refused (something ran there): not deleted."""

    # -- reads -------------------------------------------------------------------------------
    def get_node_data(self) -> dict[str, NodeData]:
        head = NodeData(
            kind=NODE_KIND_HEAD, type=HEAD_TYPE, ip=self.head_ip, status=STATUS_UP_TO_DATE
        )
        listing: dict[str, list[Instance]] = {}
        for node_type, scale_set in self.scale_sets.items():
            try:
                listing[node_type] = scale_set.instances()
            except Exception as e:
                # Never raise to the autoscaler: it gives up (and its monitor exits, taking the
                # head's Ray down) after a few errors in its lifetime. Keep the last view (at
                # first, the head alone) and write nothing until every read works again: right
                # after deployment the identity's roles may still be propagating.
                self._read_failed = True
                logger.warning(
                    "ScaleSetProvider: cannot list the instances of %s: %s", scale_set.name, e
                )
                return dict(self._last) if self._last is not None else {HEAD_ID: head}
        self._read_failed = False
        data: dict[str, NodeData] = {HEAD_ID: head}
        listed: set[tuple[str, str]] = set()
        ids: dict[str, tuple[str, str]] = {}
        with self._lock:
            for node_type, instances in listing.items():
                for inst in instances:
                    key = (node_type, inst.instance_id)
                    listed.add(key)
                    ids[inst.name] = key
                    state = inst.state.lower()
                    if key in self._deleting or state == "deleting":
                        continue
                    if state == "succeeded":
                        status = STATUS_UP_TO_DATE
                    elif state == "failed":
                        status = STATUS_UPDATE_FAILED
                    else:
                        status = _PENDING_STATES.get(state, f"vm {state or 'pending'}")
                    data[inst.name] = NodeData(
                        kind=NODE_KIND_WORKER, type=node_type, ip=inst.ip, status=status
                    )
            self._deleting &= listed
        self._instance_ids = ids
        self._last = data
        return data

    def safe_to_scale(self) -> bool:
        """Not while the previous write runs, nor on a view that could not be refreshed."""
        busy = self._write is not None and not self._write.done()
        return not busy and not self._read_failed

    # -- capacity refusals --------------------------------------------------------------------
    def backed_off(self, node_type: str) -> bool:
        with self._lock:
            refusal = self.refusals.get(node_type)
        return refusal is not None and self.clock() < refusal.retry_at

    def create_node(
        self, node_config: dict[str, Any], tags: dict[str, str], count: int
    ) -> dict[str, Any] | None:
        """As BatchingNodeProvider's (the count joins the next scale request), except for a
        pool backed off after Azure refused it: Ray's NodeLaunchException, which its launcher
        records in the availability tracker (and ``ray status`` shows)."""
        from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

        node_type = tags[TAG_RAY_USER_NODE_TYPE]
        if self.backed_off(node_type):
            with self._lock:
                refusal = self.refusals[node_type]
            raise NodeLaunchException(
                refusal.code, refusal.describe(self.scale_sets[node_type].name), None
            )
        return super().create_node(node_config, tags, count)

    def _refused(self, node_type: str, code: str, message: str) -> None:
        now = self.clock()
        with self._lock:
            before = self.refusals.get(node_type)
            count = before.count + 1 if before else 1
            self.refusals[node_type] = refusal = Refusal(
                code=code,
                message=message,
                since=before.since if before else now,
                last=now,
                count=count,
                retry_at=now + backoff_s(count),
            )
        logger.warning("ScaleSetProvider: %s", refusal.describe(self.scale_sets[node_type].name))

    # -- writes ------------------------------------------------------------------------------
    def submit_scale_request(self, scale_request: ScaleRequest) -> None:
        current = {t: 0 for t in self.scale_sets}
        for node in self.node_data_dict.values():
            if node.kind == NODE_KIND_WORKER and node.type in current:
                current[node.type] += 1
        victims: dict[str, dict[str, str]] = {t: {} for t in self.scale_sets}
        for name in sorted(scale_request.workers_to_delete):
            if name in self._instance_ids:
                node_type, instance_id = self._instance_ids[name]
                victims[node_type][name] = instance_id
        plans: dict[str, tuple[int, dict[str, str], dict[str, str | None]]] = {}
        for node_type in self.scale_sets:
            desired = int(scale_request.desired_num_workers.get(node_type, 0))
            ids = victims[node_type]
            if not ids and desired == current[node_type]:
                continue  # nothing for this pool
            ips = {n: self.node_data_dict[n].ip for n in ids if n in self.node_data_dict}
            plans[node_type] = (desired, ids, ips)
        with self._lock:  # gone from get_node_data at once (BatchingNodeProvider's contract)
            self._deleting |= {(t, i) for t, (_, ids, _) in plans.items() for i in ids.values()}
        self._write = self._executor.submit(self._apply, plans)

    def _apply(self, plans: dict[str, tuple[int, dict[str, str], dict[str, str | None]]]) -> None:
        """Each pool's part in turn; one pool's failure does not keep the others from theirs."""
        failed: Exception | None = None
        for node_type, (desired, ids, ips) in plans.items():
            try:
                self._apply_pool(node_type, desired, ids, ips)
            except Exception as e:
                logger.exception("ScaleSetProvider: the scale request for %s failed", node_type)
                with self._lock:
                    self._deleting -= {(node_type, i) for i in ids.values()}
                failed = failed or e
        if failed is not None:
            raise failed

    def _apply_pool(
        self, node_type: str, desired: int, ids: dict[str, str], ips: dict[str, str | None]
    ) -> None:
        scale_set = self.scale_sets[node_type]
        to_delete = []
        for name, instance_id in ids.items():
            ip = ips.get(name)
            accepted, message = self.drain(ip) if ip else (True, "no IP yet")
            if accepted:
                logger.info("ScaleSetProvider: deleting %s (%s): %s", name, ip, message)
                to_delete.append(instance_id)
            else:
                logger.warning("ScaleSetProvider: keeping %s (%s): %s", name, ip, message)
                self.kept.append(name)
                desired += 1
                with self._lock:
                    self._deleting.discard((node_type, instance_id))
        if to_delete:
            scale_set.delete(to_delete)
        desired = max(0, min(desired, self.pool_max[node_type], self.max_workers))
        capacity = scale_set.capacity()
        if desired > capacity:
            logger.info(
                "ScaleSetProvider: raising the capacity of %s from %d to %d",
                scale_set.name,
                capacity,
                desired,
            )
            try:
                scale_set.set_capacity(desired)
            except Exception as e:
                refusal = capacity_refusal(e)
                if refusal is None:
                    raise
                # Azure's answer, not a fault: the pool is backed off, the others go on.
                self._refused(node_type, *refusal)
                return
            with self._lock:
                self.refusals.pop(node_type, None)
        elif desired < capacity:
            # A lower capacity alone lets Azure choose whom to remove (the scale-in rule):
            # workers leave only by name, drained first.
            logger.info(
                "ScaleSetProvider: %d workers wanted in %s, %d there: removing none that was "
                "not named",
                desired,
                scale_set.name,
                capacity,
            )

    def wait(self, timeout: float | None = None) -> None:
        """Until the last write ended (tests, and a clean shutdown)."""
        if self._write is not None:
            self._write.result(timeout)


# -- the autoscaler's configuration ------------------------------------------------------------
POOL_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,9}$")
SCALE_SET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def node_type(pool: str) -> str:
    """Ray's node type of a worker pool: ``ray.worker.default`` for the default pool
    ``workers`` (as before pools), ``ray.worker.POOL`` for another."""
    return WORKER_TYPE if pool == DEFAULT_POOL else f"ray.worker.{pool}"


def autoscaler_pools(values: dict[str, str]) -> list[dict[str, Any]]:
    """The worker pools Ray's autoscaler plans with: ``AUTOSCALER_POOLS``, a JSON list of
    ``{"name", "scale_set", "vm_size", "min", "max", "resources", "labels"}`` (``labels``:
    ``key=value,...``, the pool's RAY_LABELS). Each pool checked, with what each of its workers
    offers Ray as its bootstrap starts Ray: ``resources`` the size's CPUs and GPUs, one
    simulator slot per CPU, then the pool's own resources over those; ``labels`` ``pool=NAME``
    and the pool's."""
    text = values.get("AUTOSCALER_POOLS", "")
    try:
        entries = json.loads(text)
    except ValueError:
        entries = None
    if not isinstance(entries, list) or not entries:
        raise ProviderError(f"AUTOSCALER_POOLS must be a JSON list of worker pools, got {text!r}")
    pools = []
    for e in entries:
        e = e if isinstance(e, dict) else {}
        name, low, high = e.get("name"), e.get("min"), e.get("max")
        where = f"AUTOSCALER_POOLS: pool {name!r}"
        resources, labels = e.get("resources", {}), e.get("labels", "")
        pairs = [p.partition("=") for p in labels.split(",")] if isinstance(labels, str) else []
        if not isinstance(name, str) or not POOL_NAME_RE.match(name):
            raise ProviderError(f"{where}: the name must be 1-10 of a-z, 0-9 and '-'")
        if not SCALE_SET_NAME_RE.match(str(e.get("scale_set"))):
            raise ProviderError(f"{where}: scale_set must be a scale set's name")
        if type(low) is not int or type(high) is not int or not 0 <= low <= high or high < 1:
            raise ProviderError(
                f"{where}: min and max must be whole numbers, 0 <= min <= max, 1 <= max"
            )
        if not isinstance(resources, dict) or not all(
            type(v) in (int, float) and v >= 0 for v in resources.values()
        ):
            raise ProviderError(f"{where}: resources must be a JSON object of numbers")
        if not isinstance(labels, str) or (labels and not all(k and v for k, _, v in pairs)):
            raise ProviderError(f"{where}: labels must be key=value pairs")
        try:
            cpus, gpus = vm_size_cpus(str(e.get("vm_size"))), vm_size_gpus(str(e.get("vm_size")))
        except ProviderError as error:
            raise ProviderError(f"{where}: {error}") from None
        gpu = {"GPU": gpus} if gpus else {}
        pools.append(
            {
                "name": name,
                "scale_set": e["scale_set"],
                "min": low,
                "max": high,
                "resources": {"CPU": cpus, **gpu, SIMULATOR_RESOURCE: cpus, **resources},
                "labels": {POOL_LABEL: name, **{k: v for k, _, v in pairs if labels}},
            }
        )
    for key in ("name", "scale_set"):
        if len({p[key].lower() for p in pools}) != len(pools):
            raise ProviderError(f"AUTOSCALER_POOLS: two pools with the same {key}")
    return pools


def autoscaling_config(values: dict[str, str], head_num_cpus: int = 0) -> dict[str, Any]:
    """Ray's autoscaler configuration from the node's deploy-time values: one node type per
    worker pool of ``AUTOSCALER_POOLS``, in the scale sets' subscription and resource group
    (``WORKER_SCALE_SET_ID``'s)."""
    text = values.get("AUTOSCALER_IDLE_TIMEOUT_MINUTES", "")
    if not text.isdigit() or int(text) < 1:
        raise ProviderError(
            f"AUTOSCALER_IDLE_TIMEOUT_MINUTES must be a whole number >= 1, got {text!r}"
        )
    idle = int(text)
    subscription, group, _ = parse_scale_set_id(values.get("WORKER_SCALE_SET_ID", ""))
    pools = autoscaler_pools(values)
    max_workers = sum(p["max"] for p in pools)
    prefix = f"/subscriptions/{subscription}/resourceGroups/{group}"
    return {
        "cluster_name": pools[0]["scale_set"],
        "max_workers": max_workers,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle,
        "provider": {
            "type": "external",
            "module": MODULE,
            "pools": [
                {
                    "node_type": node_type(p["name"]),
                    "scale_set_id": (
                        f"{prefix}/providers/Microsoft.Compute/virtualMachineScaleSets/"
                        f"{p['scale_set']}"
                    ),
                    "max_workers": p["max"],
                }
                for p in pools
            ],
            "head_ip": values["RAY_HEAD_IP"],
            "identity_client_id": values.get("AUTOSCALER_CLIENT_ID", ""),
            "arm_endpoint": values.get("ARM_ENDPOINT") or DEFAULT_ARM_ENDPOINT,
            "max_workers": max_workers,
            # As KubeRay: nodes bootstrap themselves, the autoscaler never SSHes into one.
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "foreground_node_launch": True,
            # A worker takes minutes to boot and join; the scale set's health extension and
            # Ray's own node failure detection look after lost ones.
            "worker_liveness_check": False,
        },
        "auth": {},
        "available_node_types": {
            HEAD_TYPE: {
                "resources": {"CPU": head_num_cpus, "head": 1},
                "node_config": {},
                "max_workers": 0,
            },
            **{
                node_type(p["name"]): {
                    "resources": p["resources"],
                    "labels": p["labels"],
                    "node_config": {},
                    "min_workers": p["min"],
                    "max_workers": p["max"],
                }
                for p in pools
            },
        },
        "head_node_type": HEAD_TYPE,
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("config", help="write the autoscaler's configuration (JSON, valid YAML)")
    c.add_argument("--deploy-values", type=Path, required=True)
    c.add_argument("--head-num-cpus", type=int, default=0)
    c.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        values = json.loads(args.deploy_values.read_text())
        config = autoscaling_config(values, args.head_num_cpus)
    except (OSError, ValueError, ProviderError, KeyError) as e:
        print(f"azure_vmss_provider: {e}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(config, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
