"""A cluster that autostop stopped: its head's power state, and starting it again.

The head's autostop agent (python/nodekit/node/autostop.py) scales the workers to zero, in
scaling mode ``cpu`` disables the workers' autoscale setting, and deallocates the head. Starting
again is the user's own doing, with the user's own Azure credential (azure-identity's
DefaultAzureCredential, through :class:`driver.arm.ResourceManager`):

1. ``POST {head VM id}/start``, then the operation it names (``Azure-AsyncOperation``) until it
   ends, then the VM's instance view until ``PowerState/running`` (azure-mgmt-compute's
   ``virtual_machines.begin_start`` and ``instance_view``);
2. in mode ``cpu``: ``PATCH {autoscale setting id}`` with ``properties.enabled = true``, for
   every worker pool's setting (each scale set comes back to its setting's minimum; in mode
   ``ray`` Ray's autoscaler adds workers for the jobs that need them).

Waiting for SSH and Ray's Jobs API is the connection's own business (:mod:`driver.remote`
waits for a head that boots).

Which VM: the stacks' outputs (Terraform ``head_vm_id`` / ``autoscale_setting_id``, Bicep
``headVmId`` / ``autoscaleSettingId``; the other pools' settings from ``worker_pools`` /
``workerPools``), or ``$RAYDRIVER_HEAD_VM_ID`` /
``$RAYDRIVER_WORKER_AUTOSCALE_ID`` for a head named by address (the rehearsal's, and any
cluster whose outputs are not at hand). Without either, the driver cannot tell a stopped head
from an unreachable one.

Library code: nothing here prints; ``progress`` gets the lines to show.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from driver import untrusted
from driver.discovery import Target
from driver.errors import DriverError, shaped
from driver.progress import Progress, silent
from driver.settings import HEAD_VM_ID_ENV, WORKER_AUTOSCALE_ID_ENV

COMPUTE_API = "2024-11-01"
"""api-version of the head's Microsoft.Compute/virtualMachines calls (azure-mgmt-compute's)."""
COMPUTE_PACKAGE = "azure-mgmt-compute>=39,<40"
WATCH_S = 0.5
"""How often ``start`` looks whether the SDK's poller has seen the start end."""
AUTOSCALE_API = "2022-10-01"
"""api-version of Microsoft.Insights/autoscalesettings."""
START_TIMEOUT_S = 900.0
STOPPED = ("deallocated", "deallocating", "stopped", "stopping")
"""Power states of a head that is not running (autostop deallocates; ``stopped`` is a VM shut
down from inside, still billed, which ``start`` also brings back)."""
HEAD_VM_OUTPUTS = ("head_vm_id", "headVmId")
AUTOSCALE_OUTPUTS = ("autoscale_setting_id", "autoscaleSettingId")
POOLS_OUTPUTS = ("worker_pools", "workerPools")
"""Every worker pool: Terraform a map by name of ``{autoscale_setting_id, ...}``, Bicep an array
of ``{autoscaleSettingId, ...}``."""
VM_ID_RE = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<group>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachines/[^/]+$",
    re.IGNORECASE,
)
AUTOSCALE_ID_RE = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+"
    r"/providers/Microsoft\.Insights/autoscalesettings/[^/]+$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HeadVm:
    """The ids ``start`` needs: the head's VM and (mode cpu) the workers' autoscale setting."""

    vm_id: str
    autoscale_id: str = ""
    source: str = ""
    more_autoscale_ids: tuple[str, ...] = ()
    """The other worker pools' autoscale settings (mode cpu), enabled after the first."""

    def __post_init__(self) -> None:
        if not VM_ID_RE.match(self.vm_id):
            raise DriverError(
                f"{self.source or 'the head VM id'}: expected /subscriptions/SUB/resourceGroups/"
                f"RG/providers/Microsoft.Compute/virtualMachines/NAME, got {self.vm_id!r}"
            )
        for autoscale_id in (self.autoscale_id, *self.more_autoscale_ids):
            if autoscale_id and not AUTOSCALE_ID_RE.match(autoscale_id):
                raise DriverError(
                    f"{self.source or 'the autoscale setting id'}: expected /subscriptions/SUB/"
                    "resourceGroups/RG/providers/Microsoft.Insights/autoscalesettings/NAME, got "
                    f"{autoscale_id!r}"
                )

    @property
    def subscription(self) -> str:
        m = VM_ID_RE.match(self.vm_id)
        assert m is not None
        return m["sub"]

    @property
    def group(self) -> str:
        m = VM_ID_RE.match(self.vm_id)
        assert m is not None
        return m["group"]

    @property
    def name(self) -> str:
        return self.vm_id.rstrip("/").rsplit("/", 1)[-1]


def _output(outputs: Mapping[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        value = outputs.get(name)
        if isinstance(value, dict):
            value = value.get("value")
        if isinstance(value, str) and value:
            return value
    return ""


def _pool_autoscale_ids(outputs: Mapping[str, Any], first: str) -> tuple[str, ...]:
    """The worker pools' autoscale setting ids but ``first``, in the outputs' order."""
    for name in POOLS_OUTPUTS:
        value = outputs.get(name)
        if isinstance(value, dict) and "value" in value:
            value = value["value"]  # as `terraform output -json` and ARM give an output
        pools = list(value.values()) if isinstance(value, dict) else value
        if not isinstance(pools, list):
            continue
        found = [
            str(pool.get("autoscale_setting_id") or pool.get("autoscaleSettingId") or "")
            for pool in pools
            if isinstance(pool, dict)
        ]
        return tuple(i for i in found if i and i.lower() != first.lower())
    return ()


def from_outputs(outputs: Mapping[str, Any], where: str) -> HeadVm | None:
    """The ids in a stack's outputs (None: the stack has no head VM id output)."""
    vm = _output(outputs, HEAD_VM_OUTPUTS)
    if not vm:
        return None
    first = _output(outputs, AUTOSCALE_OUTPUTS)
    return HeadVm(
        vm, first, f"{HEAD_VM_OUTPUTS[0]} of {where}", _pool_autoscale_ids(outputs, first)
    )


def head_vm(target: Target, env: Mapping[str, str]) -> HeadVm | None:
    """The head VM of the cluster ``target`` found: ``$RAYDRIVER_HEAD_VM_ID`` first, else the
    stack's outputs ``target`` was found in (not read again); None for local Ray or a head
    known by address only."""
    if target.is_local:
        return None
    if env.get(HEAD_VM_ID_ENV, "").strip():
        return HeadVm(
            env[HEAD_VM_ID_ENV].strip(),
            env.get(WORKER_AUTOSCALE_ID_ENV, "").strip(),
            f"${HEAD_VM_ID_ENV}",
        )
    if target.outputs:
        return from_outputs(target.outputs, target.stack)
    return None


class Arm(Protocol):
    """What :class:`driver.arm.ResourceManager` offers."""

    base: str

    def client(self, kind: Callable[..., Any], **settings: Any) -> Any: ...

    def call(self, what: str, send: Callable[[], Any], timeout: float | None = None) -> Any: ...

    def request(
        self, method: str, url: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 202)
    ) -> tuple[int, dict[str, str], Any]: ...


def _compute(arm: Arm) -> Any:
    """azure-mgmt-compute's client on ``arm``'s connection (its VMs at :data:`COMPUTE_API`)."""
    try:
        from azure.mgmt.compute import ComputeManagementClient
    except ImportError:
        raise DriverError(
            f"starting a stopped head needs azure-mgmt-compute: pip install '{COMPUTE_PACKAGE}'"
        ) from None
    return arm.client(ComputeManagementClient)


def power_state(arm: Arm, vm: HeadVm) -> str:
    """``running``, ``deallocated``, ``starting``, ... from the VM's instance view."""
    vms = _compute(arm).virtual_machines
    view = arm.call(
        f"GET {arm.base}{vm.vm_id}/instanceView",
        lambda: vms.instance_view(vm.group, vm.name, api_version=COMPUTE_API),
    )
    with shaped(f"the instance view of {vm.name}"):
        for status in (view or {}).get("statuses", []):
            code = str(status.get("code", ""))
            if code.startswith("PowerState/"):
                return untrusted.shown(code.split("/", 1)[1], 40)
    return "unknown"


def start(
    arm: Arm,
    vm: HeadVm,
    progress: Progress = silent,
    timeout: float = START_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Start the head VM and wait until it runs; then enable the autoscale setting (mode cpu)."""
    deadline = clock() + timeout
    progress(f"Starting the head VM {vm.name} (with your Azure credential)")
    vms = _compute(arm).virtual_machines
    what = f"POST {arm.base}{vm.vm_id}/start"
    # azure-core's poller follows the start's Azure-AsyncOperation in a thread of its own; this
    # one looks at it every WATCH_S, against its own clock.
    poller = arm.call(what, lambda: vms.begin_start(vm.group, vm.name, api_version=COMPUTE_API))
    while True:
        try:  # raises what ended the poller's thread: a start that failed, a refused poll
            arm.call(what, lambda: poller.wait(WATCH_S), WATCH_S + untrusted.MAX_RETRY_AFTER_S)
        except DriverError as e:
            raise DriverError(f"starting the head VM {vm.name}: {e}") from None
        if poller.done():
            break
        if clock() > deadline:
            raise DriverError(f"the head VM {vm.name} did not start within {timeout:.0f} s")
    while (state := power_state(arm, vm)) != "running":
        if clock() > deadline:
            raise DriverError(
                f"the head VM {vm.name} is {state}, not running, after {timeout:.0f} s"
            )
        sleep(2.0)
    progress(f"The head VM {vm.name} runs")
    for autoscale_id in (vm.autoscale_id, *vm.more_autoscale_ids):
        if not autoscale_id:
            continue
        # Hand-written: azure-mgmt-monitor's typed client would bring azure-common and all of
        # Azure Monitor's models to a laptop for this one PATCH.
        arm.request(
            "PATCH",
            f"{arm.base}{autoscale_id}?api-version={AUTOSCALE_API}",
            {"properties": {"enabled": True}},
            ok=(200,),
        )
        if autoscale_id == vm.autoscale_id:
            progress("Enabled the workers' autoscale setting again (workers return to its minimum)")
        else:
            name = autoscale_id.rstrip("/").rsplit("/", 1)[-1]
            progress(f"Enabled the worker pool's autoscale setting {name} again")
