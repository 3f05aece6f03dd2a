"""A fake of the Azure Compute calls the autoscaler's node provider makes on one scale set, over
HTTPS with the real wire format (Azure Resource Manager cannot exist on this machine).

Served for each scale set in ``config.json`` (paths case-insensitive, as ARM matches them;
every request needs ``api-version`` and ``Authorization: Bearer <a token the fake IMDS issued
for the configured audience>`` from an identity in ``writers`` — the one role assignment, on the
scale set — else ARM's 401 ``AuthenticationFailed`` / 403 ``AuthorizationFailed``):

* ``GET /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachineScaleSets/N``
  → the ``VirtualMachineScaleSet`` (``sku {name, tier, capacity}``, ``properties
  {provisioningState, orchestrationMode, upgradePolicy, ...}``; a zonal scale set's ``zones``
  and ``properties.zoneBalance``, as its ``config.json`` entry names them).
* ``PATCH`` (and ``PUT``) of the same path with ``{"sku": {"capacity": C}}`` → 200 with the
  scale set (``provisioningState: Updating``) and the long-running-operation headers
  ``Azure-AsyncOperation`` (``.../locations/L/operations/ID``) and ``Retry-After``; the
  operation's document says ``InProgress`` until every new instance is ``Succeeded``, then
  ``Succeeded``. A larger capacity adds instances (next instance ids, next free private IPs of
  the pool), ``Creating`` until the ``on_create`` hook returns (or at once without one); a
  smaller one removes the newest, as the ``NewestVM`` scale-in rule does. A raise the
  scale set's entry in ``capacity.json`` refuses (:func:`capacity_fault`) is answered as Azure
  answers a capacity raise it cannot serve: allocation failures (``AllocationFailed``,
  ``OverconstrainedAllocationRequest``) as a 200 whose operation ends ``Failed`` with that
  ``error``; a size not offered (``SkuNotAvailable``) and a quota the raise would exceed
  (``OperationNotAllowed``, "...exceeding approved FAMILY Cores quota...") as a synchronous 409.
  A zone out of capacity (the ``capacity.json`` entry :func:`zone_key` names) refuses every
  raise of a scale set in exactly that one zone as Azure does, ``ZonalAllocationFailed`` in the
  operation's ``error``; a raise of a regional scale set, or of one in that zone and others,
  while it is on is refused with a 400 :data:`NOT_PLAYED` (Azure does not publish whether and
  where such a raise is served). Either way nothing is created and the capacity stays as it
  was (the all-or-nothing answer; Azure may also leave instances ``Failed`` after a partial
  allocation, which is not played).
* ``GET .../virtualMachineScaleSets/N/virtualMachines`` → ``{"value": [VirtualMachineScaleSetVM
  {id, name "N_ID", instanceId, zones, properties {provisioningState, vmId, osProfile
  {computerName}, networkProfile {networkInterfaces}}}]}``; ``zones`` only in a zonal scale set:
  one of its zones, in turn by instance id (Azure publishes no placement rule: the fake's own).
* ``GET .../virtualMachineScaleSets/N/networkInterfaces`` (the Network provider's API) →
  ``{"value": [NetworkInterface {id, properties {primary, virtualMachine {id},
  ipConfigurations [{properties {privateIPAddress, primary}}]}}]}``.
* ``POST .../virtualMachineScaleSets/N/delete`` with ``{"instanceIds": [...]}`` → 202 with
  ``Azure-AsyncOperation``, ``Location`` and ``Retry-After``; the instances are ``Deleting``
  (the ``on_delete`` hook runs), then gone, and the capacity drops by their number. An unknown
  instance id: 400 ``InvalidParameter``, nothing deleted.
* ``GET .../locations/L/operations/ID`` → ``{"name", "status": "InProgress"|"Succeeded",
  "startTime", "endTime"}``; ``GET`` of the ``Location`` URL → 202 while it runs, then 200.
* A Flexible scale set (``orchestration_mode`` Flexible in its entry) answers as Azure
  documents Flexible orchestration: ``properties.orchestrationMode`` Flexible with one fault
  domain and no single placement group, overprovisioning or scale-in policy, its
  ``priorityMixPolicy`` and ``skuProfile`` (``sku.name`` Mix); each VM a virtual machine of its
  own whose instance id is its name (``N_`` and 8 hexadecimal characters) and whose network
  interface is a Network resource (``GET .../Microsoft.Network/networkInterfaces/NIC``; the
  scale set's interface list is refused). A raise decides each new VM's priority as Spot
  Priority Mix documents it (:func:`spot_priority_split`: the base count regular first, then
  the percentage above it) and its size from ``mix.json`` (:data:`MIX_FILE`); what Azure does
  not publish is refused with a 400 :data:`NOT_PLAYED` in one line, nothing changed: a split
  that is not a whole number, an Instance Mix size nobody named, a capacity cut other than to 0.
* Virtual machines in ``config.json``'s ``virtual_machines`` (the head; :func:`vm_config`):
  ``GET .../virtualMachines/N`` → the ``VirtualMachine`` (``properties {vmId, hardwareProfile
  {vmSize}, provisioningState}``; with ``$expand=instanceView`` also ``properties.instanceView``);
  ``GET .../virtualMachines/N/instanceView`` → ``{"statuses": [{"code":
  "ProvisioningState/succeeded"}, {"code": "PowerState/running"|"PowerState/deallocating"|
  "PowerState/deallocated"|"PowerState/starting", "displayStatus": "VM running", ...}]}``;
  ``POST .../virtualMachines/N/deallocate`` and ``.../start`` → 202 with ``Azure-AsyncOperation``,
  ``Location`` and ``Retry-After``: the power state is ``deallocating`` (``starting``) until the
  ``on_deallocate`` (``on_start``) hook returns, then ``deallocated`` (``running``). Deallocating
  a deallocated VM, or starting a running one, succeeds at once, as Azure's does.
* Autoscale settings in ``autoscale_settings`` (Microsoft.Insights, api-version 2022-10-01):
  ``GET .../providers/Microsoft.Insights/autoscalesettings/N`` → ``{id, name, location,
  properties {enabled, targetResourceUri, profiles}}``; ``PATCH`` with ``{"properties":
  {"enabled": bool}}`` → 200 with the setting.

State lives in a folder (:class:`StateFolder`): ``config.json`` (what the test sets),
``capacity.json`` (the capacity faults a test switches on, by scale set name or
:func:`zone_key`; empty or absent: none), ``instances.json`` (what the fake made),
``requests.jsonl`` (what arrived), ``refused.jsonl`` (each capacity raise it refused: scale set
and code, and the zone of a zonal refusal). Hooks are callables
in-process or, run as a process, commands given ``INSTANCE_ID``, ``INSTANCE_NAME``,
``PRIVATE_IP`` and ``SCALE_SET`` (the scale set's name) in their environment (the rehearsal
boots or removes a worker container of that scale set's pool there).

    python -m nodekit.rehearsal.standins.azure_compute --bind IP --port 8472 --state DIR \
        --cert C --key K [--on-create CMD] [--on-delete CMD]
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodekit.rehearsal.standins.azure_node import Reply, StateFolder, _Server, verify_token

_VMSS = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute"
    r"/virtualmachinescalesets/(?P<name>[^/]+)(?P<tail>/virtualmachines|/networkinterfaces|/delete)?$",
    re.IGNORECASE,
)
_VM = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute"
    r"/virtualmachines/(?P<name>[^/]+)(?P<tail>/instanceview|/deallocate|/start)?$",
    re.IGNORECASE,
)
_NIC = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.network"
    r"/networkinterfaces/(?P<name>[^/]+)$",
    re.IGNORECASE,
)
_AUTOSCALE = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.insights"
    r"/autoscalesettings/(?P<name>[^/]+)$",
    re.IGNORECASE,
)
POWER_DISPLAY = {
    "running": "VM running",
    "deallocating": "VM deallocating",
    "deallocated": "VM deallocated",
    "starting": "VM starting",
    "stopped": "VM stopped",
}
_OPERATION = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/providers/microsoft\.compute/locations/(?P<loc>[^/]+)"
    r"/operations/(?P<id>[0-9a-f-]+)$",
    re.IGNORECASE,
)

Hook = Callable[[dict[str, Any]], None]

CAPACITY_FILE = "capacity.json"
"""In the fake's state folder: ``{scale set name (lower case) or zone_key(Z): a
capacity_fault(...)}``."""
ALLOCATION_FAULTS = {
    "AllocationFailed": (
        "Allocation failed. We do not have sufficient capacity for the requested VM size in "
        "this region. Read more about improving likelihood of allocation success at "
        "http://aka.ms/allocation-guidance"
    ),
    "OverconstrainedAllocationRequest": (
        "Allocation failed. VM(s) with the following constraints cannot be allocated, because "
        "the condition is too restrictive. Please remove some constraints and try again. "
        "Constraints applied are: VM Size: {sku}."
    ),
    "ZonalAllocationFailed": (
        "Allocation failed. We do not have sufficient capacity for the requested VM size in "
        "this zone. Read more about improving likelihood of allocation success at "
        "http://aka.ms/allocation-guidance"
    ),
}
"""Allocation failures: the capacity raise is accepted (200), its long-running operation ends
``Failed`` with this error (the messages are Azure's, as users report them: Azure/AKS#1272,
vmware-tanzu/community-edition#3963, jenkins-infra/helpdesk#3584; the zonal one
openshift/release#5182, an operation's failure in Azure/ARO-RP#3691)."""
ZONES = ("1", "2", "3")
"""Azure's availability zones of a region, as a scale set's ``zones`` names them."""
REQUEST_FAULTS = {
    "SkuNotAvailable": (
        "The requested VM size for resource 'Following SKUs have failed for Capacity "
        "Restrictions: {sku}' is currently not available in location '{location}'. Please try "
        "another size or deploy to a different location or different zone. See "
        "https://aka.ms/azureskunotavailable for details."
    ),
    "OperationNotAllowed": (
        "Operation could not be completed as it results in exceeding approved {quota} Cores "
        "quota. Additional details - Deployment Model: Resource Manager, Location: {location}, "
        "Current Limit: {limit}, Current Usage: {usage}, Additional Required: {required}, "
        "(Minimum) New Limit Required: {needed}. Submit a request for Quota increase at "
        "https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView "
        "by specifying parameters listed in the 'Details' section for deployment to succeed."
    ),
}
"""Refused when asked: 409 Conflict with this error, before anything is created (the texts are
Azure's: Azure-Samples/azuresandbox#70, Azure/karpenter-provider-azure#192)."""
_QUOTA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9 ]{0,63}$")


MIX_FILE = "mix.json"
"""In the fake's state folder: ``{scale set name (lower case): VM size}``, the size Azure's
Instance Mix would give the next instances of that scale set. Azure decides it from prices and
capacity it does not publish (LowestPrice, CapacityOptimized): the test says it, the fake does
not guess; a raise of an Instance Mix scale set without it is refused (:data:`NOT_PLAYED`)."""
NOT_PLAYED = "NotPlayedByTheFake"
"""The code of the fake's 400 answer to a request whose outcome Azure does not publish (which
VMs a capacity cut removes from a Flexible scale set, a Spot Priority Mix split that is not a
whole number, an Instance Mix size nobody chose): refused, nothing changed. Azure has no such
code; the provider treats it as any other error."""


def spot_priority_split(mix: dict[str, int], capacity: int) -> int | None:
    """How many of ``capacity`` VMs Spot Priority Mix makes regular, as Azure documents it: the
    first ``baseRegularPriorityCount`` VMs regular, then ``regularPriorityPercentageAboveBase``
    percent of those above the base (its example: base 10, 50 %, 30 VMs: 10 + 10 regular, 10
    Spot). None when that percentage of the VMs above the base is not a whole number: Azure
    publishes no rounding."""
    base = int(mix.get("baseRegularPriorityCount", 0))
    percent = int(mix.get("regularPriorityPercentageAboveBase", 0))
    above = max(0, capacity - base)
    if above * percent % 100:
        return None
    return min(capacity, base) + above * percent // 100


def zone_key(zone: str) -> str:
    """The ``capacity.json`` key of zone ``zone``'s fault (no scale set name has a space)."""
    if zone not in ZONES:
        raise ValueError(f"zone {zone!r}: one of {', '.join(ZONES)}")
    return f"zone {zone}"


def capacity_fault(code: str, quota: str = "", limit: int = 0, zone: str = "") -> dict[str, Any]:
    """An entry of ``capacity.json``: every capacity raise of that scale set refused with
    ``code`` (an allocation failure, or ``SkuNotAvailable``); with ``OperationNotAllowed`` the
    raises that would take the scale set's vCPUs (instances x the size's) over ``limit`` of
    quota ``quota`` (``standardDSv5Family``, ``LowPriority`` for Spot). ``ZonalAllocationFailed``
    needs ``zone`` and goes under :func:`zone_key`: zone ``zone`` out of capacity."""
    fault: dict[str, Any] = {"code": code}
    if (code == "ZonalAllocationFailed") != bool(zone):
        raise ValueError("a zone fault is ZonalAllocationFailed with zone (1, 2 or 3), and only it")
    if zone:
        zone_key(zone)
        fault["zone"] = zone
    elif code == "OperationNotAllowed":
        if not _QUOTA_NAME.match(quota) or type(limit) is not int or limit < 0:
            raise ValueError("a quota fault needs quota (a quota's name) and limit (vCPUs >= 0)")
        fault.update(quota=quota, limit=limit)
    elif code not in ALLOCATION_FAULTS and code not in REQUEST_FAULTS:
        raise ValueError(
            f"capacity fault {code!r}: the fake plays "
            f"{', '.join(sorted([*ALLOCATION_FAULTS, *REQUEST_FAULTS]))}"
        )
    return fault


ORCHESTRATION_MODES = ("Flexible", "Uniform")
"""A scale set's orchestration modes, as Azure spells them (``properties.orchestrationMode``)."""
FLEXIBLE_VM_NAME = re.compile(r"^(?P<scale_set>.+)_[0-9a-f]{8}$")
"""A Flexible scale set's VM name (its instance id): the scale set's name, ``_`` and 8
hexadecimal characters (the fake's form of Azure's ``NAME_`` and 8 characters)."""


def flexible_vm_name(scale_set: str) -> str:
    """A new VM's name in Flexible scale set ``scale_set`` (which is also its instance id)."""
    return f"{scale_set}_{uuid.uuid4().hex[:8]}"


def is_flexible_vm_of(scale_set: str, name: str) -> bool:
    """Whether ``name`` is a VM name of Flexible scale set ``scale_set`` (ARM names match
    case-insensitively)."""
    m = FLEXIBLE_VM_NAME.match(name)
    return m is not None and m["scale_set"].lower() == scale_set.lower()


def scale_set_config(
    subscription: str,
    group: str,
    name: str,
    ip_pool: list[str],
    sku: str = "Standard_D4s_v5",
    location: str = "westeurope",
    zones: list[str] | None = None,
    zone_balance: bool = False,
    orchestration_mode: str = "Uniform",
    spot: bool = False,
    priority_mix: dict[str, int] | None = None,
    instance_mix: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A scale set for ``compute_config``; ``zones``: its availability zones (none: regional),
    ``zone_balance``: kept strictly even across them (the stacks' pool settings);
    ``orchestration_mode`` Uniform or Flexible; ``spot``: its VMs' priority Spot; for Flexible
    only, ``priority_mix`` (Spot: ``{"baseRegularPriorityCount", "regularPriorityPercentage
    AboveBase"}``, Azure's priorityMixPolicy) and ``instance_mix`` (``{"vmSizes": [...],
    "allocationStrategy"}``, Azure's skuProfile with the sizes by name). What Azure refuses is
    refused here, in one line."""
    if orchestration_mode not in ORCHESTRATION_MODES:
        raise ValueError(f"orchestration_mode {orchestration_mode!r}: Uniform or Flexible")
    if orchestration_mode != "Flexible" and (priority_mix is not None or instance_mix is not None):
        raise ValueError("Spot Priority Mix and Instance Mix need a Flexible scale set")
    if priority_mix is not None and not spot:
        raise ValueError("Spot Priority Mix needs a Spot scale set (priority Spot)")
    if instance_mix is not None and not 2 <= len(instance_mix.get("vmSizes", [])) <= 5:
        raise ValueError("Instance Mix needs 2-5 VM sizes in vmSizes")
    return {
        "subscription": subscription,
        "group": group,
        "name": name,
        "sku": sku,
        "location": location,
        "ip_pool": ip_pool,
        "zones": list(zones or []),
        "zone_balance": bool(zone_balance),
        "orchestration_mode": orchestration_mode,
        "spot": bool(spot),
        "priority_mix": priority_mix,
        "instance_mix": instance_mix,
    }


def _flexible(s: dict[str, Any]) -> bool:
    return s.get("orchestration_mode") == "Flexible"


def _nic_name(i: dict[str, Any]) -> str:
    """A Flexible VM's network interface's name: the fake's own (Azure publishes no rule; the
    provider reads the id from the VM)."""
    return f"{i['instanceId']}-primary"


def vm_config(
    subscription: str,
    group: str,
    name: str,
    size: str = "Standard_D4s_v5",
    location: str = "westeurope",
) -> dict[str, Any]:
    """A virtual machine (the head) for ``compute_config``'s ``virtual_machines``."""
    return {
        "subscription": subscription,
        "group": group,
        "name": name,
        "size": size,
        "location": location,
    }


def autoscale_config(
    subscription: str, group: str, name: str, target: str, enabled: bool = True
) -> dict[str, Any]:
    """An Azure Monitor autoscale setting for ``compute_config``'s ``autoscale_settings``."""
    return {
        "subscription": subscription,
        "group": group,
        "name": name,
        "target": target,
        "enabled": enabled,
    }


def compute_config(
    token_key: bytes,
    audience: str,
    writers: list[str],
    scale_sets: list[dict[str, Any]],
    virtual_machines: list[dict[str, Any]] | None = None,
    autoscale_settings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``config.json``: who may write (client ids with the role on the scale sets, the VMs
    and the autoscale settings), the token audience (the Resource Manager endpoint the client
    signs in for), the scale sets, VMs and autoscale settings."""
    return {
        "token_key": token_key.hex(),
        "audience": audience,
        "writers": writers,
        "scale_sets": scale_sets,
        "virtual_machines": virtual_machines or [],
        "autoscale_settings": autoscale_settings or [],
    }


def _error(status: int, code: str, message: str) -> Reply:
    return status, {"error": {"code": code, "message": message}}, {}


class FakeCompute(_Server):
    """Azure Compute (and Network's scale-set interface list) for the scale sets in config.json."""

    def __init__(
        self,
        state: Path | StateFolder,
        cert: Path,
        key: Path,
        bind: str = "127.0.0.1",
        port: int = 0,
        on_create: Hook | None = None,
        on_delete: Hook | None = None,
        on_deallocate: Hook | None = None,
        on_start: Hook | None = None,
    ) -> None:
        folder = state if isinstance(state, StateFolder) else StateFolder(state)
        super().__init__(bind, port, folder, (cert, key))
        self.on_create = on_create
        self.on_delete = on_delete
        self.on_deallocate = on_deallocate
        self.on_start = on_start
        self._mutex = threading.RLock()
        self._operations: dict[str, dict[str, Any]] = {}

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    # -- state -------------------------------------------------------------------------------
    def instances(self, name: str) -> list[dict[str, Any]]:
        with self._mutex:
            return list(self.state.read("instances.json", {}).get(name.lower(), []))

    def _save(self, name: str, instances: list[dict[str, Any]]) -> None:
        data = self.state.read("instances.json", {})
        data[name.lower()] = instances
        self.state.write("instances.json", data)

    def _set_state(self, name: str, instance_id: str, state: str | None) -> None:
        """Change one instance's provisioningState; None removes it."""
        with self._mutex:
            instances = self.instances(name)
            if state is None:
                instances = [i for i in instances if i["instanceId"] != instance_id]
            else:
                for i in instances:
                    if i["instanceId"] == instance_id:
                        i["state"] = state
            self._save(name, instances)

    def capacity(self, name: str) -> int:
        return len([i for i in self.instances(name) if i["state"] != "Deleting"])

    # -- requests ----------------------------------------------------------------------------
    def route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> Reply:
        if "api-version" not in query:
            return _error(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
        config = self.state.read("config.json", {})
        auth = headers.get("Authorization", "")
        claims = verify_token(
            bytes.fromhex(config["token_key"]), auth.removeprefix("Bearer ").strip()
        )
        if claims is None or claims.get("aud") != config.get("audience"):
            return _error(
                401,
                "AuthenticationFailed",
                "Authentication failed. The 'Authorization' header is missing or invalid."
                if not auth
                else "The access token is invalid or has another audience.",
            )
        if m := _OPERATION.match(path):
            return self._operation(m["id"], query.get("monitor") == "true")
        if vm := _VM.match(path):
            return self._vm_route(config, claims, method, path, query, vm)
        if setting := _AUTOSCALE.match(path):
            return self._autoscale_route(config, claims, method, path, body, setting)
        if nic := _NIC.match(path):
            return self._nic_route(config, claims, method, path, nic)
        m = _VMSS.match(path)
        scale_set = None
        if m:
            for s in config.get("scale_sets", []):
                if (s["subscription"].lower(), s["group"].lower(), s["name"].lower()) == (
                    m["sub"].lower(),
                    m["rg"].lower(),
                    m["name"].lower(),
                ):
                    scale_set = s
        if not m or scale_set is None:
            return _error(
                404,
                "ResourceNotFound",
                f"The Resource '{path}' was not found.",
            )
        if claims.get("appid") not in config.get("writers", []):
            action = {
                "GET": "read",
                "PATCH": "write",
                "PUT": "write",
                "POST": "delete/action",
            }.get(method, method.lower())
            return _error(
                403,
                "AuthorizationFailed",
                f"The client with object id '{claims.get('oid')}' does not have authorization "
                f"to perform action 'Microsoft.Compute/virtualMachineScaleSets/{action}' over "
                f"scope '{path}' or the scope is invalid.",
            )
        tail = (m["tail"] or "").lower()
        with self._mutex:
            if tail == "" and method == "GET":
                return 200, self._scale_set_doc(scale_set, "Succeeded"), {}
            if tail == "" and method in ("PATCH", "PUT"):
                return self._update(scale_set, body)
            if tail == "/virtualmachines" and method == "GET":
                return (
                    200,
                    {
                        "value": [
                            self._vm_doc(scale_set, i) for i in self.instances(scale_set["name"])
                        ]
                    },
                    {},
                )
            if tail == "/networkinterfaces" and method == "GET" and _flexible(scale_set):
                # A Flexible scale set's VMs have network interfaces of their own (Network's
                # networkInterfaces API), not the scale set's list. Azure's answer to this call
                # is not published: refused, not guessed.
                return _error(
                    400,
                    NOT_PLAYED,
                    "A Flexible scale set has no scale-set network interface list: read each "
                    "VM's interfaces (properties.networkProfile.networkInterfaces).",
                )
            if tail == "/networkinterfaces" and method == "GET":
                return (
                    200,
                    {
                        "value": [
                            self._nic_doc(scale_set, i) for i in self.instances(scale_set["name"])
                        ]
                    },
                    {},
                )
            if tail == "/delete" and method == "POST":
                return self._delete(scale_set, body)
        return _error(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    # -- virtual machines (the head) and autoscale settings -------------------------------------
    @staticmethod
    def _find(items: list[dict[str, Any]], m: re.Match[str]) -> dict[str, Any] | None:
        key = (m["sub"].lower(), m["rg"].lower(), m["name"].lower())
        for item in items:
            if (item["subscription"].lower(), item["group"].lower(), item["name"].lower()) == key:
                return item
        return None

    @staticmethod
    def _forbidden(claims: dict[str, Any], action: str, path: str) -> Reply:
        return _error(
            403,
            "AuthorizationFailed",
            f"The client with object id '{claims.get('oid')}' does not have authorization "
            f"to perform action '{action}' over scope '{path}' or the scope is invalid.",
        )

    def power_state(self, name: str) -> str:
        """A VM's power state: running (the default), deallocating, deallocated, starting."""
        with self._mutex:
            return str(self.state.read("power.json", {}).get(name.lower(), "running"))

    def _set_power(self, name: str, power: str) -> None:
        with self._mutex:
            data = self.state.read("power.json", {})
            data[name.lower()] = power
            self.state.write("power.json", data)

    def _vm_id(self, vm: dict[str, Any]) -> str:
        return (
            f"/subscriptions/{vm['subscription']}/resourceGroups/{vm['group']}"
            f"/providers/Microsoft.Compute/virtualMachines/{vm['name']}"
        )

    def _instance_view(self, vm: dict[str, Any]) -> dict[str, Any]:
        power = self.power_state(vm["name"])
        now = datetime.datetime.now(datetime.timezone.utc).isoformat()
        return {
            "computerName": vm["name"],
            "statuses": [
                {
                    "code": "ProvisioningState/succeeded",
                    "level": "Info",
                    "displayStatus": "Provisioning succeeded",
                    "time": now,
                },
                {
                    "code": f"PowerState/{power}",
                    "level": "Info",
                    "displayStatus": POWER_DISPLAY.get(power, power),
                },
            ],
        }

    def _machine_doc(self, vm: dict[str, Any], expand: bool) -> dict[str, Any]:
        vm_id = self._vm_id(vm)
        props: dict[str, Any] = {
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, vm_id)),
            "hardwareProfile": {"vmSize": vm["size"]},
            "provisioningState": "Succeeded",
        }
        if expand:
            props["instanceView"] = self._instance_view(vm)
        return {
            "id": vm_id,
            "name": vm["name"],
            "type": "Microsoft.Compute/virtualMachines",
            "location": vm["location"],
            "properties": props,
        }

    def _vm_route(
        self,
        config: dict[str, Any],
        claims: dict[str, Any],
        method: str,
        path: str,
        query: dict[str, str],
        m: re.Match[str],
    ) -> Reply:
        vm = self._find(config.get("virtual_machines", []), m)
        if vm is None:
            return _error(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachines/{m['name']}' under resource "
                f"group '{m['rg']}' was not found.",
            )
        tail = (m["tail"] or "").lower()
        if claims.get("appid") not in config.get("writers", []):
            action = {"": "read", "/instanceview": "instanceView/read"}.get(
                tail, f"{tail.lstrip('/')}/action"
            )
            return self._forbidden(claims, f"Microsoft.Compute/virtualMachines/{action}", path)
        if method == "GET" and tail == "":
            return 200, self._machine_doc(vm, query.get("$expand") == "instanceView"), {}
        if method == "GET" and tail == "/instanceview":
            return 200, self._instance_view(vm), {}
        if method == "POST" and tail in ("/deallocate", "/start"):
            return self._power(vm, tail.lstrip("/"))
        return _error(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _power(self, vm: dict[str, Any], action: str) -> Reply:
        going, done, hook = (
            ("deallocating", "deallocated", self.on_deallocate)
            if action == "deallocate"
            else ("starting", "running", self.on_start)
        )
        with self._mutex:
            before = self.power_state(vm["name"])
            if before not in (done, going):
                self._set_power(vm["name"], going)
                self._spawn(self._power_hook, vm, done, hook)
        site = {
            "subscription": vm["subscription"],
            "location": vm["location"],
        }
        return 202, "", self._start_operation(site, lambda: self.power_state(vm["name"]) == done)

    def _power_hook(self, vm: dict[str, Any], done: str, hook: Hook | None) -> None:
        if hook is not None:
            try:
                hook({"name": vm["name"], "group": vm["group"], "power": done})
            except Exception as e:
                self.state.append("hooks.jsonl", {done: vm["name"], "error": str(e)})
        self._set_power(vm["name"], done)

    def autoscale_enabled(self, name: str) -> bool | None:
        """The setting's ``enabled`` (None: no such setting)."""
        config = self.state.read("config.json", {})
        for s in config.get("autoscale_settings", []):
            if s["name"].lower() == name.lower():
                return bool(s["enabled"])
        return None

    def _autoscale_route(
        self,
        config: dict[str, Any],
        claims: dict[str, Any],
        method: str,
        path: str,
        body: bytes,
        m: re.Match[str],
    ) -> Reply:
        setting = self._find(config.get("autoscale_settings", []), m)
        if setting is None:
            return _error(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Insights/autoscalesettings/{m['name']}' under "
                f"resource group '{m['rg']}' was not found.",
            )
        if claims.get("appid") not in config.get("writers", []):
            action = "read" if method == "GET" else "write"
            return self._forbidden(claims, f"Microsoft.Insights/autoscaleSettings/{action}", path)
        if method == "PATCH":
            try:
                enabled = json.loads(body)["properties"]["enabled"]
            except (ValueError, KeyError, TypeError):
                return _error(400, "InvalidRequestContent", "The request content was invalid.")
            if not isinstance(enabled, bool):
                return _error(400, "InvalidRequestContent", "properties.enabled must be a boolean.")
            with self._mutex:
                config = self.state.read("config.json", {})
                found = self._find(config.get("autoscale_settings", []), m)
                assert found is not None
                found["enabled"] = enabled
                self.state.write("config.json", config)
                setting = found
        elif method != "GET":
            return _error(405, "MethodNotAllowed", f"{method} is not supported on {path}")
        setting_id = (
            f"/subscriptions/{setting['subscription']}/resourceGroups/{setting['group']}"
            f"/providers/Microsoft.Insights/autoscalesettings/{setting['name']}"
        )
        return (
            200,
            {
                "id": setting_id,
                "name": setting["name"],
                "type": "Microsoft.Insights/autoscaleSettings",
                "location": "westeurope",
                "properties": {
                    "name": setting["name"],
                    "enabled": setting["enabled"],
                    "targetResourceUri": setting["target"],
                    "profiles": [],
                },
            },
            {},
        )

    def _nic_route(
        self,
        config: dict[str, Any],
        claims: dict[str, Any],
        method: str,
        path: str,
        m: re.Match[str],
    ) -> Reply:
        """A Flexible scale set's VM's network interface (Network's API, a resource of its own
        in the scale set's resource group)."""
        for s in config.get("scale_sets", []):
            if not _flexible(s) or (s["subscription"].lower(), s["group"].lower()) != (
                m["sub"].lower(),
                m["rg"].lower(),
            ):
                continue
            for i in self.instances(s["name"]):
                if _nic_name(i).lower() == m["name"].lower():
                    if claims.get("appid") not in config.get("writers", []):
                        return self._forbidden(
                            claims, "Microsoft.Network/networkInterfaces/read", path
                        )
                    if method != "GET":
                        break
                    return 200, self._nic_doc(s, i), {}
        return _error(404, "ResourceNotFound", f"The Resource '{path}' was not found.")

    # -- documents ---------------------------------------------------------------------------
    @staticmethod
    def _scale_set_id(s: dict[str, Any]) -> str:
        return (
            f"/subscriptions/{s['subscription']}/resourceGroups/{s['group']}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{s['name']}"
        )

    def _scale_set_doc(self, s: dict[str, Any], state: str) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self._scale_set_id(s),
            "name": s["name"],
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": s["location"],
            "sku": {"name": s["sku"], "tier": "Standard", "capacity": self.capacity(s["name"])},
            "properties": {
                "provisioningState": state,
                "orchestrationMode": "Uniform",
                "overprovision": False,
                "singlePlacementGroup": True,
                "upgradePolicy": {"mode": "Manual"},
                "scaleInPolicy": {"rules": ["NewestVM"], "forceDeletion": False},
                "uniqueId": str(uuid.uuid5(uuid.NAMESPACE_URL, self._scale_set_id(s))),
                "virtualMachineProfile": {"priority": "Spot" if s.get("spot") else "Regular"},
            },
        }
        if _flexible(s):  # as the stacks deploy one (infra/bicep/modules/workers.bicep)
            props = doc["properties"]
            for key in ("overprovision", "scaleInPolicy"):
                del props[key]
            props.update(
                orchestrationMode="Flexible", singlePlacementGroup=False, platformFaultDomainCount=1
            )
            if s.get("priority_mix"):
                props["priorityMixPolicy"] = dict(s["priority_mix"])
            if s.get("instance_mix"):
                mix = s["instance_mix"]
                doc["sku"] = {"name": "Mix", "capacity": self.capacity(s["name"])}
                props["skuProfile"] = {
                    "vmSizes": [{"name": v} for v in mix["vmSizes"]],
                    "allocationStrategy": mix.get("allocationStrategy", "LowestPrice"),
                }
        zones = s.get("zones") or []
        if zones:  # Azure leaves both out of a regional scale set
            doc["zones"] = list(zones)
            doc["properties"]["zoneBalance"] = bool(s.get("zone_balance"))
        return doc

    @staticmethod
    def _ordinal(i: dict[str, Any]) -> int:
        """The instance's place in creation order (a Uniform instance id is its number)."""
        return int(i.get("ordinal", i["instanceId"]))

    def _vm_doc(self, s: dict[str, Any], i: dict[str, Any]) -> dict[str, Any]:
        zones = s.get("zones") or []
        placed = {"zones": [zones[self._ordinal(i) % len(zones)]]} if zones else {}
        if _flexible(s):
            # A Flexible scale set's VM is a virtual machine of its own: its instance id is its
            # name, {scale set}_{8 hexadecimal characters}; its interface a Network resource.
            group = f"/subscriptions/{s['subscription']}/resourceGroups/{s['group']}/providers"
            vm_id = f"{group}/Microsoft.Compute/virtualMachines/{i['instanceId']}"
            return {
                **placed,
                "id": vm_id,
                "name": i["instanceId"],
                "type": "Microsoft.Compute/virtualMachines",
                "location": s["location"],
                "instanceId": i["instanceId"],
                "sku": {"name": i.get("size", s["sku"])},
                "properties": {
                    "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, vm_id)),
                    "provisioningState": i["state"],
                    "timeCreated": i["created"],
                    "hardwareProfile": {"vmSize": i.get("size", s["sku"])},
                    "osProfile": {"computerName": f"{s['name'][:9]}{self._ordinal(i):06x}"},
                    "networkProfile": {
                        "networkInterfaces": [
                            {
                                "id": f"{group}/Microsoft.Network/networkInterfaces/{_nic_name(i)}",
                                "properties": {"primary": True},
                            }
                        ]
                    },
                },
            }
        vm_id = f"{self._scale_set_id(s)}/virtualMachines/{i['instanceId']}"
        return {
            **placed,
            "id": vm_id,
            "name": f"{s['name']}_{i['instanceId']}",
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            "location": s["location"],
            "instanceId": i["instanceId"],
            "sku": {"name": s["sku"], "tier": "Standard"},
            "properties": {
                "latestModelApplied": True,
                "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, vm_id)),
                "provisioningState": i["state"],
                "timeCreated": i["created"],
                "osProfile": {"computerName": f"{s['name'][:9]}{int(i['instanceId']):06x}"},
                "networkProfile": {
                    "networkInterfaces": [{"id": f"{vm_id}/networkInterfaces/primary"}]
                },
            },
        }

    def _nic_doc(self, s: dict[str, Any], i: dict[str, Any]) -> dict[str, Any]:
        if _flexible(s):
            group = f"/subscriptions/{s['subscription']}/resourceGroups/{s['group']}/providers"
            vm_id = f"{group}/Microsoft.Compute/virtualMachines/{i['instanceId']}"
            nic_id = f"{group}/Microsoft.Network/networkInterfaces/{_nic_name(i)}"
            name = _nic_name(i)
        else:
            vm_id = f"{self._scale_set_id(s)}/virtualMachines/{i['instanceId']}"
            nic_id = f"{vm_id}/networkInterfaces/primary"
            name = "primary"
        return {
            "id": nic_id,
            "name": name,
            "properties": {
                "provisioningState": "Succeeded",
                "primary": True,
                "virtualMachine": {"id": vm_id},
                "ipConfigurations": [
                    {
                        "id": f"{nic_id}/ipConfigurations/primary",
                        "name": "primary",
                        "properties": {
                            "privateIPAddress": i["ip"],
                            "privateIPAllocationMethod": "Dynamic",
                            "primary": True,
                        },
                    }
                ],
            },
        }

    # -- long-running operations -------------------------------------------------------------
    def _start_operation(
        self, s: dict[str, Any], done: Callable[[], bool], error: dict[str, str] | None = None
    ) -> dict[str, str]:
        """An operation's headers; with ``error`` it has ended ``Failed`` with that error."""
        op = str(uuid.uuid4())
        self._operations[op] = {
            "done": done,
            "start": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "error": error,
        }
        base = (
            f"{self.url}/subscriptions/{s['subscription']}/providers/Microsoft.Compute"
            f"/locations/{s['location']}/operations/{op}"
        )
        return {
            "Azure-AsyncOperation": f"{base}?api-version=2024-11-01",
            "Location": f"{base}?monitor=true&api-version=2024-11-01",
            "Retry-After": "1",
        }

    def _operation(self, op: str, monitor: bool) -> Reply:
        entry = self._operations.get(op)
        if entry is None:
            return _error(404, "NotFound", f"Operation {op} was not found.")
        finished = bool(entry["done"]())
        failed = entry.get("error")
        if monitor:
            if failed:
                return 200, {"status": "Failed", "error": failed}, {}
            return (200, "", {}) if finished else (202, "", {"Retry-After": "1"})
        doc: dict[str, Any] = {
            "name": op,
            "status": "Failed" if failed else "Succeeded" if finished else "InProgress",
            "startTime": entry["start"],
        }
        if failed:
            doc["error"] = failed
        if finished:
            doc["endTime"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return 200, doc, {}
        return 200, doc, {"Retry-After": "1"}

    # -- writes ------------------------------------------------------------------------------
    def _update(self, s: dict[str, Any], body: bytes) -> Reply:
        try:
            capacity = int(json.loads(body)["sku"]["capacity"])
        except (ValueError, KeyError, TypeError):
            return _error(400, "InvalidRequestContent", "The request content was invalid.")
        if capacity < 0 or capacity > 1000:
            return _error(400, "InvalidParameter", f"Capacity {capacity} is out of range.")
        instances = self.instances(s["name"])
        alive = [i for i in instances if i["state"] != "Deleting"]
        created: list[str] = []
        if capacity > len(alive):
            refused = self._capacity_fault(s, len(alive), capacity - len(alive))
            if refused is not None and refused[0] != 200:  # 409 (400 not played, 500 bad fault)
                return refused
            if refused is not None:  # an allocation failure: accepted, then the operation fails
                headers = self._start_operation(s, lambda: True, refused[1]["error"])
                headers.pop("Location")
                return 200, self._scale_set_doc(s, "Updating"), headers
            used = {i["ip"] for i in instances}
            free = [ip for ip in s["ip_pool"] if ip not in used]
            need = capacity - len(alive)
            if need > len(free):
                return _error(
                    409,
                    "SubnetIsFull",
                    f"The subnet has {len(free)} free addresses, {need} are needed.",
                )
            chosen = self._flexible_choices(s, alive, capacity)
            if isinstance(chosen, str):  # what Azure decides unpublished: refused, in one line
                return _error(400, NOT_PLAYED, chosen)
            next_id = max([self._ordinal(i) for i in instances] + [-1]) + 1
            for n in range(need):
                inst = {
                    "instanceId": str(next_id + n),
                    "ip": free[n],
                    "state": "Creating",
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                }
                if _flexible(s):
                    inst.update(
                        instanceId=flexible_vm_name(s["name"]),
                        ordinal=next_id + n,
                        **chosen[n],
                    )
                instances.append(inst)
                created.append(inst["instanceId"])
            self._save(s["name"], instances)
            for instance_id in created:
                self._spawn(self._create, s, instance_id)
        elif capacity < len(alive) and _flexible(s) and capacity > 0:
            # Flexible has no scale-in rule: which VMs Azure removes on a cut is not published
            # (with Spot Priority Mix it keeps the split). To zero, all go.
            return _error(
                400,
                NOT_PLAYED,
                f"Which {len(alive) - capacity} of the {len(alive)} VMs of Flexible scale set "
                f"{s['name']} Azure removes on a capacity cut is not published: delete them "
                "by name (POST .../delete), or cut to 0.",
            )
        elif capacity < len(alive):  # scale-in rule NewestVM (Flexible: to 0, all)
            newest = sorted(alive, key=self._ordinal)[capacity:]
            self._remove(s, [i["instanceId"] for i in newest])
            created = []

        def done() -> bool:
            states = {i["instanceId"]: i["state"] for i in self.instances(s["name"])}
            return all(states.get(i) in ("Succeeded", "Failed") for i in created) and not any(
                v == "Deleting" for v in states.values()
            )

        headers = self._start_operation(s, done)
        headers.pop("Location")
        return 200, self._scale_set_doc(s, "Updating"), headers

    def _flexible_choices(
        self, s: dict[str, Any], alive: list[dict[str, Any]], capacity: int
    ) -> list[dict[str, str]] | str:
        """Each new VM's priority and size, in creation order, as Azure documents the choice
        (Spot Priority Mix: regular VMs first up to the split at the new capacity, then Spot),
        or why the fake does not play it (one line). Uniform scale sets: [] (nothing to say)."""
        if not _flexible(s):
            return []
        need = capacity - len(alive)
        priority = "Spot" if s.get("spot") else "Regular"
        priorities = [priority] * need
        if s.get("priority_mix"):
            regular = spot_priority_split(s["priority_mix"], capacity)
            if regular is None:
                mix = s["priority_mix"]
                return (
                    f"Spot Priority Mix of {s['name']} at {capacity} VMs: "
                    f"{mix.get('regularPriorityPercentageAboveBase', 0)} % of the VMs above "
                    f"the base of {mix.get('baseRegularPriorityCount', 0)} is not a whole "
                    "number, and Azure publishes no rounding."
                )
            have = sum(1 for i in alive if i.get("priority") == "Regular")
            add = min(need, max(0, regular - have))
            priorities = ["Regular"] * add + ["Spot"] * (need - add)
        size = s["sku"]
        if s.get("instance_mix"):
            sizes = s["instance_mix"]["vmSizes"]
            size = self.state.read(MIX_FILE, {}).get(s["name"].lower(), "")
            if size not in sizes:
                return (
                    f"Instance Mix of {s['name']}: which of {', '.join(sizes)} Azure picks "
                    f"({s['instance_mix'].get('allocationStrategy', 'LowestPrice')}) depends on "
                    f"prices and capacity it does not publish: name it in {MIX_FILE}."
                )
        return [{"priority": p, "size": size} for p in priorities]

    def _capacity_fault(self, s: dict[str, Any], alive: int, need: int) -> Reply | None:
        """The answer to a raise of ``need`` instances the scale set's ``capacity.json`` entry
        or a zone fault refuses (a 409 for a request fault, a 200 whose body is the operation's
        error for an allocation failure, a 400 :data:`NOT_PLAYED` for a zone fault Azure's
        answer to is not published), None when it goes ahead; each refusal logged."""
        faults = self.state.read(CAPACITY_FILE, {})
        fault = faults.get(s["name"].lower())
        zones = list(s.get("zones") or [])
        if not fault:
            out = [z for z in ZONES if faults.get(zone_key(z))]
            if zones and zones == out[:1]:
                fault = faults[zone_key(zones[0])]
            elif out and (not zones or set(out) & set(zones)):
                return _error(
                    400,
                    NOT_PLAYED,
                    f"Zone {', '.join(out)} out of capacity: how Azure answers a raise of "
                    f"{s['name']} (zones: {', '.join(zones) or 'none, regional'}) is not "
                    "published; only a scale set in exactly that one zone is played.",
                )
            else:
                return None
        code = fault.get("code") if isinstance(fault, dict) else None
        try:
            capacity_fault(
                str(code), fault.get("quota", ""), fault.get("limit", 0), fault.get("zone", "")
            )
        except (ValueError, AttributeError) as e:
            return _error(500, "InternalServerError", f"the fake's {CAPACITY_FILE}: {e}")
        if fault.get("zone") and zones != [fault["zone"]]:
            return _error(
                500, "InternalServerError", f"the fake's {CAPACITY_FILE}: a zone fault under "
                f"{s['name']} (zones: {', '.join(zones) or 'none'}); put it under zone_key"
            )  # fmt: skip
        words = {"sku": s["sku"], "location": s["location"]}
        logged = {"scale_set": s["name"], "code": code}
        if fault.get("zone"):
            logged["zone"] = fault["zone"]
        if code in ALLOCATION_FAULTS:
            self.state.append("refused.jsonl", logged)
            message = ALLOCATION_FAULTS[code].format(**words)
            return 200, {"error": {"code": code, "message": message}}, {}
        if code == "OperationNotAllowed":
            from nodekit.node.azure_vmss_provider import vm_size_cpus

            cpus = vm_size_cpus(s["sku"])
            usage, required = alive * cpus, need * cpus
            if usage + required <= fault["limit"]:
                return None
            words.update(
                quota=fault["quota"],
                limit=fault["limit"],
                usage=usage,
                required=required,
                needed=usage + required,
            )
        self.state.append("refused.jsonl", logged)
        return _error(409, str(code), REQUEST_FAULTS[str(code)].format(**words))

    def _delete(self, s: dict[str, Any], body: bytes) -> Reply:
        try:
            ids = [str(i) for i in json.loads(body)["instanceIds"]]
        except (ValueError, KeyError, TypeError):
            return _error(400, "InvalidRequestContent", "The request content was invalid.")
        known = {i["instanceId"] for i in self.instances(s["name"])}
        unknown = [i for i in ids if i not in known]
        if unknown or not ids:
            return _error(
                400,
                "InvalidParameter",
                f"The provided instanceId {','.join(unknown) or '(none)'} is not an active "
                "Virtual Machine Scale Set VM instanceId.",
            )
        self._remove(s, ids)

        def done() -> bool:
            return not ({i["instanceId"] for i in self.instances(s["name"])} & set(ids))

        return 202, "", self._start_operation(s, done)

    def _remove(self, s: dict[str, Any], ids: list[str]) -> None:
        for instance_id in ids:
            self._set_state(s["name"], instance_id, "Deleting")
            self._spawn(self._destroy, s, instance_id)

    def _spawn(self, fn: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=fn, args=args, daemon=True).start()

    def _hook_info(self, s: dict[str, Any], instance_id: str) -> dict[str, Any]:
        inst = next((i for i in self.instances(s["name"]) if i["instanceId"] == instance_id), {})
        return {
            "instanceId": instance_id,
            "name": instance_id if _flexible(s) else f"{s['name']}_{instance_id}",
            "ip": inst.get("ip", ""),
            "scale_set": s["name"],
        }

    def _create(self, s: dict[str, Any], instance_id: str) -> None:
        state = "Succeeded"
        if self.on_create is not None:
            try:
                self.on_create(self._hook_info(s, instance_id))
            except Exception as e:
                self.state.append("hooks.jsonl", {"create": instance_id, "error": str(e)})
                state = "Failed"
        self._set_state(s["name"], instance_id, state)

    def _destroy(self, s: dict[str, Any], instance_id: str) -> None:
        if self.on_delete is not None:
            try:
                self.on_delete(self._hook_info(s, instance_id))
            except Exception as e:
                self.state.append("hooks.jsonl", {"delete": instance_id, "error": str(e)})
        self._set_state(s["name"], instance_id, None)


def subnet_pool(subnet: str, first: int, count: int) -> list[str]:
    """``count`` addresses of ``subnet`` from its ``first``-th host on."""
    net = ipaddress.ip_network(subnet)
    return [str(net.network_address + first + n) for n in range(count)]


def _command_hook(command: str) -> Hook:
    def hook(info: dict[str, Any]) -> None:
        env = dict(
            os.environ,
            INSTANCE_ID=info["instanceId"],
            INSTANCE_NAME=info["name"],
            PRIVATE_IP=info["ip"],
            SCALE_SET=info["scale_set"],
        )
        subprocess.run(["/bin/sh", "-c", command], env=env, check=True, timeout=1800)

    return hook


def _vm_hook(command: str) -> Hook:
    def hook(info: dict[str, Any]) -> None:
        env = dict(os.environ, VM_NAME=info["name"])
        subprocess.run(["/bin/sh", "-c", command], env=env, check=True, timeout=1800)

    return hook


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--cert", type=Path, required=True)
    p.add_argument("--key", type=Path, required=True)
    p.add_argument("--on-create", help="shell command run when an instance is created")
    p.add_argument("--on-delete", help="shell command run when an instance is deleted")
    p.add_argument("--on-deallocate", help="shell command run when a VM is deallocated")
    p.add_argument("--on-start", help="shell command run when a VM is started")
    args = p.parse_args(argv)
    server = FakeCompute(
        args.state,
        args.cert,
        args.key,
        args.bind,
        args.port,
        on_create=_command_hook(args.on_create) if args.on_create else None,
        on_delete=_command_hook(args.on_delete) if args.on_delete else None,
        on_deallocate=_vm_hook(args.on_deallocate) if args.on_deallocate else None,
        on_start=_vm_hook(args.on_start) if args.on_start else None,
    )

    def stop(*_: Any) -> None:
        threading.Thread(target=server.httpd.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"serving compute on {args.bind}:{server.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
