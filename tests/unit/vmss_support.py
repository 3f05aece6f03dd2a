"""What the node provider's tests share (test_vmss_provider.py, test_vmss_flexible.py): the
fake Azure's names and identities, the handle on the fake Compute and metadata service, a drain
that records (and refuses what is busy), the stacks' AUTOSCALER_POOLS entry and deploy-time
values, one round of Ray's autoscaler as StandardAutoscaler drives the provider, and Ray's own
StandardAutoscaler driving it (RayAutoscaler)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from compute_support import loopback_azure, use_managed_identity
from nodekit.node import azure_vmss_provider as vp
from nodekit.rehearsal.standins.azure_compute import FakeCompute
from nodekit.rehearsal.standins.azure_node import FakeImds

SUB = "00000000-1111-4222-8333-444444444444"
GROUP = "rg-ray"
NAME = "ray-workers"
SCALE_SET_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
    f"/providers/Microsoft.Compute/virtualMachineScaleSets/{NAME}"
)

AUTOSCALER = "aaaaaaaa-0000-4000-8000-000000000001"
"""The head's autoscaler identity: the role on the scale set."""
NODES = "bbbbbbbb-0000-4000-8000-000000000002"
"""The nodes' identity: reads the cluster token, no role on the scale set."""
HEAD_IP = "10.42.1.4"


@dataclass
class Azure:
    compute: FakeCompute
    imds: FakeImds
    ca: Path
    created: list[dict[str, Any]]
    deleted: list[dict[str, Any]]

    def scale_set(self, client_id: str = AUTOSCALER, name: str = NAME) -> vp.ScaleSet:
        return vp.ScaleSet(
            SCALE_SET_ID.replace(f"/{NAME}", f"/{name}"),
            vp.managed_identity(client_id),
            self.compute.url,
            connection_verify=str(self.ca),
        )

    def ips(self, name: str = NAME) -> dict[str, str]:
        return {i["instanceId"]: i["ip"] for i in self.compute.instances(name)}


@contextlib.contextmanager
def head_azure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scale_sets: list[dict[str, Any]]
) -> Iterator[Azure]:
    """The head's view of Azure with ``scale_sets``: the metadata service with both identities,
    Compute that only the autoscaler's may change (each VM created and deleted recorded), and
    azure-identity pointed at them."""
    created: list[dict[str, Any]] = []
    deleted: list[dict[str, Any]] = []
    with loopback_azure(
        tmp_path,
        "ray-head",
        {AUTOSCALER: "p-autoscaler", NODES: "p-nodes"},
        [AUTOSCALER],
        scale_sets,
        on_create=created.append,
        on_delete=deleted.append,
    ) as fakes:
        use_managed_identity(monkeypatch, fakes.imds)
        yield Azure(fakes.compute, fakes.imds, fakes.ca, created, deleted)


class Drains:
    """Records drains; refuses the IPs in ``busy`` as Ray refuses a node with work on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.busy: set[str] = set()

    def __call__(self, ip: str) -> tuple[bool, str]:
        self.calls.append(ip)
        if ip in self.busy:
            return False, "The node is not idle: it has running tasks or actors"
        return True, "drained"


def pool(**over: Any) -> dict[str, Any]:
    """An entry of AUTOSCALER_POOLS, as the stacks write it (the default pool's by default)."""
    return {
        "labels": "",
        "max": 5,
        "min": 0,
        "name": "workers",
        "resources": {},
        "scale_set": NAME,
        "vm_size": "Standard_D4s_v5",
        **over,
    }


def deploy_values(pools: list[dict[str, Any]] | None = None, **over: Any) -> dict[str, str]:
    values = {
        "RAY_HEAD_IP": HEAD_IP,
        "SCALING_MODE": "ray",
        "WORKER_SCALE_SET_ID": SCALE_SET_ID,
        "WORKER_VM_SIZE": "Standard_D4s_v5",
        "AUTOSCALER_POOLS": json.dumps(pools or [pool()], separators=(",", ":")),
        "AUTOSCALER_IDLE_TIMEOUT_MINUTES": "5",
        "AUTOSCALER_CLIENT_ID": AUTOSCALER,
        "ARM_ENDPOINT": "https://management.azure.com",
    }
    values.update({k.upper(): str(v) for k, v in over.items()})
    return values


WRITE_WAIT_S = 120
"""A bound on a hang for the provider's write (Azure's calls to the in-process fake)."""


def autoscaler_round(
    p: vp.ScaleSetProvider,
    launch: int | dict[str, int] = 0,
    terminate: list[str] | tuple[str, ...] = (),
) -> None:
    """What StandardAutoscaler does in one update: read, decide, write once (``launch``: a
    count of default workers, or counts by node type)."""
    from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

    p.non_terminated_nodes({})
    assert p.safe_to_scale()
    for node in terminate:
        p.terminate_node(node)
    launches = launch if isinstance(launch, dict) else {vp.WORKER_TYPE: launch}
    for node_type, count in launches.items():
        if count:
            p.create_node({}, {TAG_RAY_USER_NODE_TYPE: node_type}, count)
    p.post_process()
    p.wait(WRITE_WAIT_S)


class RayAutoscaler:
    """Ray's own StandardAutoscaler (its scheduler, launcher and availability tracker) driving
    provider ``p`` with ``config``, as the head's monitor does; the scorer is loaded by name, as
    the head's bootstrap has Ray do (RAY_AUTOSCALER_UTILIZATION_SCORER)."""

    def __init__(
        self, p: vp.ScaleSetProvider, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from ray.autoscaler._private import autoscaler as ray_autoscaler
        from ray.autoscaler._private.load_metrics import LoadMetrics

        monkeypatch.setenv(
            "RAY_AUTOSCALER_UTILIZATION_SCORER", f"{vp.__name__}.availability_scorer"
        )
        monkeypatch.setattr(ray_autoscaler, "_get_node_provider", lambda *args, **kwargs: p)
        self.p = p
        self.metrics = LoadMetrics()
        self.autoscaler = ray_autoscaler.StandardAutoscaler(
            lambda: json.loads(json.dumps(config)),
            self.metrics,
            gcs_client=None,
            update_interval_s=0,
        )

    def demand(self, cpus: int) -> None:
        """The head reports ``cpus`` pending 1-CPU tasks (and no CPU of its own)."""
        self.metrics.update(
            HEAD_IP,
            b"h" * 28,
            {"CPU": 0, "head": 1},
            {"CPU": 0, "head": 1},
            0,
            waiting_bundles=[{"CPU": 1}] * cpus,
        )

    def rounds(self, n: int) -> None:
        """``n`` of the autoscaler's updates, each waiting for the provider's write."""
        for _ in range(n):
            self.autoscaler.update()
            self.p.wait(WRITE_WAIT_S)

    def published(self) -> dict[str, Any]:
        """The autoscaler's report as Ray's monitor publishes it (asdict of its summary, as
        JSON) and the dashboard serves it (keys in camelCase): what `driver status` reads."""
        from ray.dashboard.utils import to_google_style

        report = json.loads(json.dumps({"autoscaler_report": asdict(self.autoscaler.summary())}))
        return to_google_style(report)
