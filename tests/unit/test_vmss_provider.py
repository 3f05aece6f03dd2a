"""The autoscaler's node provider for the workers' scale set (python/nodekit/node/
azure_vmss_provider.py): its Azure calls go through the real azure-mgmt-compute client and the
real azure-identity managed identity credential to the fakes of Azure Compute
(tests/fakes/azure_compute.py) and of the instance metadata service (tests/fakes/azure_node.py),
over HTTPS; its Ray side is Ray's own BatchingNodeProvider and config validation."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver import layout
from fakes.azure_compute import (
    FakeCompute,
    compute_config,
    scale_set_config,
    subnet_pool,
)
from fakes.azure_node import FakeImds, imds_config, tls_certificate
from nodekit.node import azure_vmss_provider as vp

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

    def scale_set(self, client_id: str = AUTOSCALER) -> vp.ScaleSet:
        return vp.ScaleSet(
            SCALE_SET_ID,
            vp.managed_identity(client_id),
            self.compute.url,
            connection_verify=str(self.ca),
        )

    def ips(self) -> dict[str, str]:
        return {i["instanceId"]: i["ip"] for i in self.compute.instances(NAME)}


@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Azure]:
    key = secrets.token_bytes(32)
    ca, cert, cert_key = tls_certificate(tmp_path, "127.0.0.1")
    imds = FakeImds(tmp_path / "imds").start()
    imds.state.write(
        "config.json",
        imds_config(key, "ray-head", {AUTOSCALER: "p-autoscaler", NODES: "p-nodes"}),
    )
    created: list[dict[str, Any]] = []
    deleted: list[dict[str, Any]] = []
    compute = FakeCompute(
        tmp_path / "compute",
        cert,
        cert_key,
        on_create=created.append,
        on_delete=deleted.append,
    ).start()
    compute.state.write(
        "config.json",
        compute_config(
            key,
            compute.url,
            [AUTOSCALER],
            [scale_set_config(SUB, GROUP, NAME, subnet_pool("10.42.1.0/24", 6, 20))],
        ),
    )
    # azure-identity's managed identity credential asks the IMDS at this host instead of
    # 169.254.169.254; no other credential source may be picked up from the environment.
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.url)
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET"):
        monkeypatch.delenv(name, raising=False)
    yield Azure(compute, imds, ca, created, deleted)
    compute.stop()
    imds.stop()


# -- the Azure calls -------------------------------------------------------------------------
def test_capacity_up_creates_instances_with_private_ips(azure: Azure) -> None:
    s = azure.scale_set()
    assert s.capacity() == 0
    assert s.instances() == []
    s.set_capacity(3)
    assert s.capacity() == 3
    got = s.instances()
    assert [(i.instance_id, i.name, i.state) for i in got] == [
        ("0", f"{NAME}_0", "Succeeded"),
        ("1", f"{NAME}_1", "Succeeded"),
        ("2", f"{NAME}_2", "Succeeded"),
    ]
    assert {i.instance_id: i.ip for i in got} == azure.ips()
    assert sorted(c["ip"] for c in azure.created) == ["10.42.1.6", "10.42.1.7", "10.42.1.8"]
    # What went over the wire: the real client's PATCH of sku.capacity, then the operation polls.
    requests = azure.compute.state.lines("requests.jsonl")
    patch = [r for r in requests if r["method"] == "PATCH"]
    assert len(patch) == 1 and patch[0]["path"].endswith(f"/virtualMachineScaleSets/{NAME}")
    assert any("/operations/" in r["path"] for r in requests)
    assert all(r["authorization"] for r in requests)


def test_delete_removes_exactly_the_named_instance(azure: Azure) -> None:
    s = azure.scale_set()
    s.set_capacity(3)
    s.delete(["1"])
    assert [i.instance_id for i in s.instances()] == ["0", "2"]
    assert s.capacity() == 2
    assert [d["instanceId"] for d in azure.deleted] == ["1"]
    posts = [r for r in azure.compute.state.lines("requests.jsonl") if r["method"] == "POST"]
    assert [p["path"].rsplit("/", 1)[-1] for p in posts] == ["delete"]


def test_unknown_instance_is_an_error_and_deletes_nothing(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set()
    s.set_capacity(2)
    with pytest.raises(HttpResponseError, match="not an active"):
        s.delete(["1", "7"])
    assert [i.instance_id for i in s.instances()] == ["0", "1"]


def test_an_identity_without_the_role_is_refused(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set(client_id=NODES)
    with pytest.raises(HttpResponseError, match="AuthorizationFailed"):
        s.set_capacity(1)
    assert azure.compute.instances(NAME) == []


# -- the provider, as Ray's autoscaler calls it ------------------------------------------------
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


def provider(azure: Azure, drains: Drains, max_workers: int = 5) -> vp.ScaleSetProvider:
    config = vp.autoscaling_config(deploy_values(autoscaler_max_workers=max_workers))["provider"]
    return vp.ScaleSetProvider(config, "unit", scale_set=azure.scale_set(), drain=drains)


def deploy_values(**over: Any) -> dict[str, str]:
    values = {
        "RAY_HEAD_IP": HEAD_IP,
        "SCALING_MODE": "ray",
        "WORKER_SCALE_SET_ID": SCALE_SET_ID,
        "WORKER_VM_SIZE": "Standard_D4s_v5",
        "AUTOSCALER_MIN_WORKERS": "0",
        "AUTOSCALER_MAX_WORKERS": "5",
        "AUTOSCALER_IDLE_TIMEOUT_MINUTES": "5",
        "AUTOSCALER_CLIENT_ID": AUTOSCALER,
        "ARM_ENDPOINT": "https://management.azure.com",
    }
    values.update({k.upper(): str(v) for k, v in over.items()})
    return values


WRITE_WAIT_S = 120
"""A bound on a hang for the provider's write (Azure's calls to the in-process fake)."""


def autoscaler_round(p: vp.ScaleSetProvider, launch: int = 0, terminate: list[str] = ()) -> None:
    """What StandardAutoscaler does in one update: read, decide, write once."""
    from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

    p.non_terminated_nodes({})
    assert p.safe_to_scale()
    for node in terminate:
        p.terminate_node(node)
    if launch:
        p.create_node({}, {TAG_RAY_USER_NODE_TYPE: vp.WORKER_TYPE}, launch)
    p.post_process()
    p.wait(WRITE_WAIT_S)


def test_provider_scales_out_and_reports_nodes_by_private_ip(azure: Azure) -> None:
    from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND

    p = provider(azure, Drains())
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID]
    assert p.internal_ip(vp.HEAD_ID) == HEAD_IP
    autoscaler_round(p, launch=2)
    nodes = p.non_terminated_nodes({})
    assert nodes == [vp.HEAD_ID, f"{NAME}_0", f"{NAME}_1"]
    assert p.node_tags(vp.HEAD_ID)[TAG_RAY_NODE_KIND] == NODE_KIND_HEAD
    assert p.node_tags(f"{NAME}_1")[TAG_RAY_NODE_KIND] == NODE_KIND_WORKER
    assert p.node_tags(f"{NAME}_1")["ray-node-status"] == "up-to-date"
    assert {p.internal_ip(n) for n in nodes[1:]} == set(azure.ips().values())
    assert p.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_WORKER}) == nodes[1:]


def test_provider_drains_then_deletes_exactly_that_instance(azure: Azure) -> None:
    drains = Drains()
    p = provider(azure, drains)
    autoscaler_round(p, launch=3)
    victim = f"{NAME}_1"
    p.non_terminated_nodes({})
    ip = p.internal_ip(victim)
    p.terminate_node(victim)
    p.post_process()
    # Gone from the autoscaler's view at once, while Azure still deletes it.
    assert victim not in p.non_terminated_nodes({})
    p.wait(WRITE_WAIT_S)
    assert drains.calls == [ip]
    assert sorted(azure.ips()) == ["0", "2"]  # not the newest (2): the one named
    assert [d["instanceId"] for d in azure.deleted] == ["1"]
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID, f"{NAME}_0", f"{NAME}_2"]


def test_a_worker_ray_refuses_to_drain_is_kept(azure: Azure) -> None:
    drains = Drains()
    p = provider(azure, drains)
    autoscaler_round(p, launch=2)
    p.non_terminated_nodes({})
    busy, idle = f"{NAME}_0", f"{NAME}_1"
    drains.busy = {p.internal_ip(busy)}
    autoscaler_round(p, terminate=[busy, idle])
    assert p.kept == [busy]
    assert sorted(azure.ips()) == ["0"]
    assert azure.compute.capacity(NAME) == 1
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID, busy]


def test_capacity_is_never_lowered_without_naming_the_instance(azure: Azure) -> None:
    """A smaller capacity alone would let Azure pick (NewestVM): the provider only deletes by id."""
    p = provider(azure, Drains())
    autoscaler_round(p, launch=2)
    p.non_terminated_nodes({})
    p.scale_request.desired_num_workers[vp.WORKER_TYPE] = 0
    p.scale_change_needed = True
    p.post_process()
    p.wait(WRITE_WAIT_S)
    assert sorted(azure.ips()) == ["0", "1"]


def test_max_workers_caps_the_capacity(azure: Azure) -> None:
    p = provider(azure, Drains(), max_workers=2)
    autoscaler_round(p, launch=5)
    assert azure.compute.capacity(NAME) == 2


def test_an_azure_outage_keeps_the_last_view_and_stops_writes(azure: Azure) -> None:
    p = provider(azure, Drains())
    autoscaler_round(p, launch=1)
    before = p.non_terminated_nodes({})
    azure.compute.state.write(
        "faults.json",
        {
            "GET " + f"/subscriptions/{SUB}/resourceGroups/{GROUP}/providers/"
            f"Microsoft.Compute/virtualMachineScaleSets/{NAME}/virtualMachines": {"status": 503}
        },
    )
    assert p.non_terminated_nodes({}) == before
    assert not p.safe_to_scale()
    azure.compute.state.write("faults.json", {})
    p.non_terminated_nodes({})
    assert p.safe_to_scale()


def test_writes_wait_for_the_previous_one(azure: Azure) -> None:
    gate = threading.Event()
    # A VM that takes its time: until the test has looked (not a fixed 10 s, which a loaded
    # machine could spend before the test looks).
    azure.compute.on_create = lambda info: gate.wait(600)
    p = provider(azure, Drains())
    try:
        p.non_terminated_nodes({})
        from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

        p.create_node({}, {TAG_RAY_USER_NODE_TYPE: vp.WORKER_TYPE}, 1)
        p.post_process()
        deadline = time.monotonic() + WRITE_WAIT_S
        while not azure.compute.instances(NAME):
            assert time.monotonic() < deadline, "the scale set never got the instance"
            time.sleep(0.05)
        p.non_terminated_nodes({})
        assert not p.safe_to_scale()
        assert p.node_tags(f"{NAME}_0")["ray-node-status"] == "creating VM"
    finally:
        gate.set()
    p.wait(WRITE_WAIT_S)
    p.non_terminated_nodes({})
    assert p.safe_to_scale()
    assert p.node_tags(f"{NAME}_0")["ray-node-status"] == "up-to-date"


# -- the autoscaler's configuration ----------------------------------------------------------
def test_config_is_what_ray_accepts(tmp_path: Path) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = vp.autoscaling_config(deploy_values(autoscaler_min_workers=0), head_num_cpus=0)
    validate_config(config)
    prepared = prepare_config(config)
    worker = prepared["available_node_types"][vp.WORKER_TYPE]
    # What a worker's `ray start` offers (cloud-init: one simulator slot per vCPU).
    assert worker["resources"] == {"CPU": 4, layout.SIMULATOR_RESOURCE: 4}
    assert vp.SIMULATOR_RESOURCE == layout.SIMULATOR_RESOURCE
    # The pool's own resources (RAY_RESOURCES) over the simulator slots, as its workers offer.
    pooled = vp.autoscaling_config(deploy_values(ray_resources='{"simulator": 2, "big": 1}'))
    validate_config(pooled)
    assert pooled["available_node_types"][vp.WORKER_TYPE]["resources"] == {
        "CPU": 4,
        layout.SIMULATOR_RESOURCE: 2,
        "big": 1,
    }
    with pytest.raises(vp.ProviderError, match="RAY_RESOURCES must be a JSON object"):
        vp.autoscaling_config(deploy_values(ray_resources='["simulator"]'))
    assert (worker["min_workers"], worker["max_workers"]) == (0, 5)
    assert prepared["idle_timeout_minutes"] == 5
    provider_config = prepared["provider"]
    assert provider_config["type"] == "external"
    assert provider_config["module"] == vp.MODULE
    for key in ("disable_node_updaters", "disable_launch_config_check", "foreground_node_launch"):
        assert provider_config[key] is True
    # The command the head's bootstrap runs writes the same.
    values = tmp_path / "deploy.json"
    values.write_text(json.dumps(deploy_values(autoscaler_min_workers=0)))
    out = tmp_path / "autoscaler.yaml"
    assert vp.main(["config", "--deploy-values", str(values), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == config


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"min_workers": "-1"}, "AUTOSCALER_MIN_WORKERS must be a whole number"),
        ({"max_workers": "0"}, "AUTOSCALER_MAX_WORKERS must be a whole number >= 1"),
        ({"min_workers": "3", "max_workers": "2"}, "is above AUTOSCALER_MAX_WORKERS"),
        ({"idle_timeout_minutes": "0"}, "AUTOSCALER_IDLE_TIMEOUT_MINUTES must be"),
        ({"worker_scale_set_id": "ray-workers"}, "the worker scale set id must look like"),
        ({"worker_vm_size": "D4s_v5"}, "cannot tell the vCPUs"),
    ],
)
def test_bad_values_are_one_clear_error(
    over: dict[str, str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = {
        ("autoscaler_" + k if k.endswith(("workers", "minutes")) else k): v for k, v in over.items()
    }
    with pytest.raises(vp.ProviderError, match=message):
        vp.autoscaling_config(deploy_values(**over))
    values = tmp_path / "deploy.json"
    values.write_text(json.dumps(deploy_values(**over)))
    out = tmp_path / "autoscaler.yaml"
    assert vp.main(["config", "--deploy-values", str(values), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("size", "cpus"),
    [
        ("Standard_D4s_v5", 4),
        ("Standard_F72s_v2", 72),
        ("Standard_HB120rs_v3", 120),
        ("Standard_E8-2s_v5", 2),
        ("standard_d2as_v5", 2),
    ],
)
def test_vm_size_cpus(size: str, cpus: int) -> None:
    assert vp.vm_size_cpus(size) == cpus


def test_an_outage_from_the_start_shows_the_head_alone_and_writes_nothing(azure: Azure) -> None:
    """Right after deployment the autoscaler identity's role may not have propagated: Azure
    answers 403. The provider never raises (Ray's autoscaler gives up after a few errors)."""
    from azure.core.exceptions import HttpResponseError

    config = vp.autoscaling_config(deploy_values())["provider"]
    p = vp.ScaleSetProvider(config, "unit", scale_set=azure.scale_set(NODES), drain=Drains())
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID]
    assert not p.safe_to_scale()
    with pytest.raises(HttpResponseError, match="AuthorizationFailed"):
        azure.scale_set(NODES).instances()
