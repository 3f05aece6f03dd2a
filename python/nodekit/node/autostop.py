"""Autostop: the head stops an idle cluster (workers to zero, the head deallocated).

``ray-autostop.service`` on the head. Busy: a Ray job PENDING or RUNNING (the Jobs API on the
loopback, with the token; unreadable counts as busy), or an established TCP connection to port
22 (SSH sessions and tunnels). Idle for ``AUTOSTOP_IDLE_MINUTES`` in a row (0: never; only the
idle time is recorded): mode cpu disables every worker pool's autoscale setting; every pool's
scale set's capacity goes to 0 (mode ray: then the head's Ray, its autoscaler, stops and the
capacity is set to 0 again); the head's VM is deallocated. With the head's managed identity and
azure_vmss_provider.py's client. docs/autostop.md
has the whole story; python/nodekit/node/autostop.py is the source.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

IMDS = "http://169.254.169.254"
INSTANCE_API = "2021-02-01"
AUTOSCALE_API = "2022-10-01"
"""api-version of Microsoft.Insights/autoscalesettings."""
COMPUTE_API = "2024-11-01"
BUSY_JOB_STATES = ("PENDING", "RUNNING")
SSH_PORT = 22
TCP_ESTABLISHED = "01"
DEFAULT_INTERVAL_S = 15.0


class AutostopError(Exception):
    """Something the agent cannot work with (one line)."""


# -- what keeps the cluster busy ----------------------------------------------------------------
def busy_jobs(jobs: Any) -> list[str]:
    """The ids of the PENDING or RUNNING jobs in the Jobs API's ``/api/jobs/`` answer (a list
    of job documents; submission jobs and drivers started by ``ray.init`` alike)."""
    if not isinstance(jobs, list):
        raise AutostopError(f"the Jobs API answered something that is not a list: {str(jobs)[:80]}")
    busy = []
    for job in jobs:
        if isinstance(job, dict) and str(job.get("status", "")).upper() in BUSY_JOB_STATES:
            busy.append(str(job.get("submission_id") or job.get("job_id") or "?"))
    return busy


def _hex_address(text: str) -> str:
    """``0100007F`` (IPv4) or a 32-digit IPv6 in /proc/net/tcp6's order, as text."""
    import ipaddress
    import socket
    import struct

    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntoa(struct.pack("<I", struct.unpack(">I", raw)[0]))
    words = struct.unpack("<4I", raw)
    address = ipaddress.IPv6Address(struct.pack(">4I", *words))
    return str(address.ipv4_mapped or address)


def ssh_connections(tables: list[str], port: int = SSH_PORT) -> list[str]:
    """Remote ``address:port`` of each established connection to local ``port``, from the text
    of ``/proc/net/tcp`` and ``/proc/net/tcp6`` (lines ``sl local rem st ...`` with addresses
    as ``HEX:PORT``)."""
    peers = []
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 4 or fields[3] != TCP_ESTABLISHED:
                continue
            try:
                _, local_port = fields[1].split(":")
                remote, remote_port = fields[2].split(":")
                if int(local_port, 16) != port:
                    continue
                peers.append(f"{_hex_address(remote)}:{int(remote_port, 16)}")
            except ValueError:
                continue
    return peers


@dataclass
class Look:
    """One look at the head."""

    jobs: list[str] = field(default_factory=list)
    ssh: list[str] = field(default_factory=list)
    error: str = ""
    """Why the jobs could not be read (then the look counts as busy)."""

    @property
    def busy(self) -> bool:
        return bool(self.jobs or self.ssh or self.error)

    def reason(self) -> str:
        parts = []
        if self.error:
            parts.append(f"cannot read Ray's jobs ({self.error})")
        if self.jobs:
            parts.append(f"job {', '.join(self.jobs)} pending or running")
        if self.ssh:
            parts.append(f"SSH connection from {', '.join(self.ssh)}")
        return "; ".join(parts) or "no job pending or running, no SSH connection"


@dataclass
class Status:
    """The state file's content."""

    idle_minutes: int
    checked_at: float
    idle_since: float | None
    """Since when nothing was busy (None: busy at the last look)."""
    decision: str
    """``busy``, ``idle`` (not long enough), ``stopping``, ``stopped`` or ``failed``."""
    reason: str
    jobs: list[str] = field(default_factory=list)
    ssh: list[str] = field(default_factory=list)
    started_at: float = 0.0
    """When this agent started (the head's boot, give or take)."""
    sizes: dict[str, str] = field(default_factory=dict)
    """``location``, ``head_vm_size``, ``worker_vm_size`` (the driver prices the running VMs)."""

    def idle_seconds(self, now: float) -> float:
        return 0.0 if self.idle_since is None else max(0.0, now - self.idle_since)


def decide(previous: Status | None, look: Look, now: float, idle_minutes: int) -> Status:
    """The next status: busy resets the idle clock; idle for ``idle_minutes`` in a row says
    ``stopping``. The clock starts with the agent (at boot), never from an earlier boot's file."""
    started = previous.started_at if previous else now
    sizes = previous.sizes if previous else {}
    if look.busy:
        return Status(
            idle_minutes, now, None, "busy", look.reason(), look.jobs, look.ssh, started, sizes
        )
    since = previous.idle_since if previous and previous.idle_since is not None else now
    if idle_minutes > 0 and now - since >= idle_minutes * 60:
        return Status(idle_minutes, now, since, "stopping", look.reason(), [], [], started, sizes)
    return Status(idle_minutes, now, since, "idle", look.reason(), [], [], started, sizes)


# -- the head's own view ------------------------------------------------------------------------
def read_jobs(url: str, token: str, timeout: float = 10.0) -> list[str]:
    req = urllib.request.Request(
        f"{url.rstrip('/')}/api/jobs/", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return busy_jobs(json.loads(r.read()))
    except (OSError, ValueError) as e:
        raise AutostopError(f"{url}: {e}") from None


def read_ssh(paths: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> list[str]:
    tables = []
    for path in paths:
        try:
            tables.append(Path(path).read_text())
        except OSError:
            continue
    return ssh_connections(tables)


def instance_metadata(imds: str = IMDS, timeout: float = 10.0) -> dict[str, Any]:
    """This VM's compute metadata (``subscriptionId``, ``resourceGroupName``, ``name``,
    ``resourceId``)."""
    req = urllib.request.Request(
        f"{imds}/metadata/instance/compute?api-version={INSTANCE_API}",
        headers={"Metadata": "true"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        doc = json.loads(r.read())
    if not isinstance(doc, dict):
        raise AutostopError("the metadata service's compute document is not an object")
    return doc


def vm_resource_id(compute: dict[str, Any]) -> str:
    if compute.get("resourceId"):
        return str(compute["resourceId"])
    try:
        return (
            f"/subscriptions/{compute['subscriptionId']}/resourceGroups/"
            f"{compute['resourceGroupName']}/providers/Microsoft.Compute/virtualMachines/"
            f"{compute['name']}"
        )
    except KeyError as e:
        raise AutostopError(f"the metadata service did not say the VM's {e.args[0]}") from None


# -- stopping -------------------------------------------------------------------------------------
class Cloud(Protocol):
    def set_autoscale(self, name: str, enabled: bool) -> None: ...
    def scale_to_zero(self, name: str) -> None: ...
    def deallocate(self, vm_id: str) -> None: ...


class Azure:
    """The three writes, through the node provider's Azure client (azure-mgmt-compute's typed
    operations and pipeline, the managed identity, the OS's CA store)."""

    def __init__(self, scale_set: Any) -> None:
        self.scale_set = scale_set
        """An ``azure_vmss_provider.ScaleSet`` (its client, subscription, group, endpoint)."""

    @classmethod
    def on_head(cls, scale_set_id: str, client_id: str, endpoint: str) -> Azure:
        # On the head this file lies next to azure_vmss_provider.py (not a package there).
        vp = importlib.import_module("azure_vmss_provider")
        return cls(
            vp.ScaleSet(
                scale_set_id,
                vp.managed_identity(client_id),
                endpoint or vp.DEFAULT_ARM_ENDPOINT,
                connection_verify=vp.system_ca_bundle(),
            )
        )

    def _send(self, method: str, path: str, api: str, body: Any = None) -> Any:
        # Hand-written for the autoscale settings only: azure-mgmt-monitor's typed client would
        # add azure-common and all of Azure Monitor's models to the head's lock for one PATCH.
        from azure.core.rest import HttpRequest

        url = f"{self.scale_set.endpoint}{path}?api-version={api}"
        response = self.scale_set.client.send_request(HttpRequest(method, url, json=body))
        response.raise_for_status()
        return response

    def set_autoscale(self, name: str, enabled: bool) -> None:
        s = self.scale_set
        path = (
            f"/subscriptions/{s.subscription}/resourceGroups/{s.group}"
            f"/providers/Microsoft.Insights/autoscalesettings/{name}"
        )
        self._send("PATCH", path, AUTOSCALE_API, {"properties": {"enabled": enabled}})

    def scale_to_zero(self, name: str) -> None:
        """Capacity 0 for the scale set ``name`` in the first pool's resource group."""
        from azure.mgmt.compute.models import Sku, VirtualMachineScaleSetUpdate

        s = self.scale_set
        update = VirtualMachineScaleSetUpdate(sku=Sku(capacity=0))
        s.client.virtual_machine_scale_sets.begin_update(s.group, name, update).result()

    def deallocate(self, vm_id: str) -> None:
        # Accepted (202) is all this VM lives to see: the deallocation stops it, so its
        # operation is not followed (polling=False).
        parts = vm_id.strip("/").split("/")
        if len(parts) != 8 or parts[6].lower() != "virtualmachines":
            raise AutostopError(
                f"expected /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/"
                f"virtualMachines/NAME, got {vm_id!r}"
            )
        group, name = parts[3], parts[7]
        vms = self.scale_set.client.virtual_machines
        vms.begin_deallocate(group, name, api_version=COMPUTE_API, polling=False)


def scale_set_names(values: dict[str, str]) -> list[str]:
    """Every worker pool's scale set (``WORKER_SCALE_SETS``)."""
    names = values.get("WORKER_SCALE_SETS", "").split()
    if not names:
        raise AutostopError("WORKER_SCALE_SETS names no scale set")
    return names


def stop_cluster(
    values: dict[str, str],
    vm_id: str,
    cloud: Cloud,
    stop_ray: Callable[[], None],
    start_ray: Callable[[], None],
    log: Callable[[str], None],
) -> None:
    """Every worker pool to zero, then the head deallocated. Mode cpu: the pools' autoscale
    settings go off first (they would bring workers back). Mode ray: the workers go while the
    head's Ray still runs (their Terminate watchers drain through it and finish at once), then
    the head's Ray stops (its autoscaler could launch workers again) and the capacity is set to
    0 once more, for any worker it launched meanwhile. On a failure the cluster is left as it
    was, running: Ray starts again, every autoscale setting turned off is on again (each one
    tried), and the error is raised."""
    mode = values.get("SCALING_MODE", "cpu")
    autoscales = values.get("WORKER_AUTOSCALE_NAME", "").split() if mode != "ray" else []
    scale_sets = scale_set_names(values)
    stopped_ray = False
    disabled: list[str] = []

    def empty_pools() -> None:
        for name in scale_sets:
            log(f"setting the capacity of the workers' scale set {name} to 0")
            cloud.scale_to_zero(name)

    try:
        for name in autoscales:
            log(f"disabling the workers' autoscale setting {name}")
            disabled.append(name)  # a PATCH that failed may still have taken effect
            cloud.set_autoscale(name, False)
        empty_pools()
        if mode == "ray":
            log("stopping the head's Ray (its autoscaler would launch workers again)")
            stop_ray()
            stopped_ray = True
            log("setting the capacities to 0 again (a worker Ray launched meanwhile goes too)")
            empty_pools()
        log(f"deallocating this head ({vm_id})")
        cloud.deallocate(vm_id)
    except Exception as e:
        log(f"stopping failed ({type(e).__name__}: {e}); leaving the cluster running")
        if stopped_ray:
            start_ray()
        for name in disabled:
            log(f"enabling the workers' autoscale setting {name} again")
            try:
                cloud.set_autoscale(name, True)
            except Exception as again:
                log(f"enabling {name} failed ({again})")
        raise


# -- the service ----------------------------------------------------------------------------------
def idle_minutes_of(values: dict[str, str]) -> int:
    text = values.get("AUTOSTOP_IDLE_MINUTES", "")
    if not text.isdigit():
        raise AutostopError(f"AUTOSTOP_IDLE_MINUTES must be a whole number, got {text!r}")
    return int(text)


def write_status(path: Path, status: Status) -> None:
    doc = asdict(status)
    doc["checked_at_utc"] = _utc(status.checked_at)
    doc["idle_since_utc"] = _utc(status.idle_since) if status.idle_since else None
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.chmod(0o644)
    tmp.replace(path)


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


class Agent:
    def __init__(
        self,
        values: dict[str, str],
        state: Path,
        log_file: Path,
        look: Callable[[], Look],
        stop: Callable[[], None],
        clock: Callable[[], float] = time.time,
        sizes: dict[str, str] | None = None,
    ) -> None:
        self.idle_minutes = idle_minutes_of(values)
        self.sizes = sizes or {}
        self.state = state
        self.log_file = log_file
        self._look = look
        self._stop = stop
        self._clock = clock
        self.status: Status | None = None

    def log(self, message: str) -> None:
        line = f"{_utc(self._clock())} autostop: {message}"
        print(line, flush=True)
        with open(self.log_file, "a") as f:
            f.write(line + "\n")

    def once(self) -> Status:
        previous = self.status
        status = decide(previous, self._look(), self._clock(), self.idle_minutes)
        status.sizes = self.sizes
        if previous is None or (previous.decision, previous.reason) != (
            status.decision,
            status.reason,
        ):
            verdict = {
                "busy": "not stopping",
                "idle": f"idle; stops after {self.idle_minutes} idle minute(s)"
                if self.idle_minutes
                else "idle; autostop is off (AUTOSTOP_IDLE_MINUTES 0)",
                "stopping": f"idle for {status.idle_seconds(status.checked_at) / 60:.1f} "
                "minute(s): stopping the cluster",
            }[status.decision]
            self.log(f"{status.reason}: {verdict}")
        self.status = status
        write_status(self.state, status)
        if status.decision == "stopping":
            try:
                self._stop()
            except Exception as e:
                status.decision, status.reason = "failed", f"the stop failed: {e}"
                status.idle_since = None
                self.log(f"{status.reason}; trying again after another idle period")
            else:
                status.decision = "stopped"
                self.log("the head's deallocation was accepted: the cluster is stopping")
            write_status(self.state, status)
        return status


def _systemctl(action: str, unit: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(["systemctl", action, unit], check=True, timeout=120)

    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--deploy-values", type=Path, required=True)
    p.add_argument("--token", type=Path, required=True, help="the cluster token's file")
    p.add_argument("--jobs-url", required=True, help="the Jobs API on the head's loopback")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--ray-service", default="ray-head.service")
    p.add_argument("--imds", default=IMDS)
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S)
    args = p.parse_args(argv)
    try:
        values = json.loads(args.deploy_values.read_text())
        minutes = idle_minutes_of(values)
    except (OSError, ValueError, AutostopError) as e:
        print(f"autostop: {e}", file=sys.stderr)
        return 2
    sizes = {"worker_vm_size": values.get("WORKER_VM_SIZE", "")}
    try:
        compute = instance_metadata(args.imds)
        sizes |= {
            "location": compute.get("location", ""),
            "head_vm_size": compute.get("vmSize", ""),
        }
    except (OSError, ValueError, AutostopError) as e:
        print(f"autostop: the metadata service did not say this VM's size: {e}", flush=True)

    def look() -> Look:
        result = Look(ssh=read_ssh())
        try:
            result.jobs = read_jobs(args.jobs_url, args.token.read_text().strip())
        except (OSError, AutostopError) as e:
            result.error = str(e)
        return result

    def stop() -> None:
        client_id = values.get("AUTOSCALER_CLIENT_ID") or values.get("IDENTITY_CLIENT_ID", "")
        vm_id = vm_resource_id(instance_metadata(args.imds))
        cloud = Azure.on_head(
            values["WORKER_SCALE_SET_ID"], client_id, values.get("ARM_ENDPOINT", "")
        )
        stop_cluster(
            values,
            vm_id,
            cloud,
            _systemctl("stop", args.ray_service),
            _systemctl("start", args.ray_service),
            agent.log,
        )

    agent = Agent(values, args.state, args.log, look, stop, sizes=sizes)
    agent.log(
        f"started: stops the cluster after {minutes} idle minute(s)"
        if minutes
        else "started: autostop is off (AUTOSTOP_IDLE_MINUTES 0); recording idle time only"
    )
    while True:
        status = agent.once()
        if status.decision == "stopped":
            # The head goes down; should it not, the next look starts a new idle period.
            time.sleep(max(args.interval, 60))
            agent.status = None
            continue
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
