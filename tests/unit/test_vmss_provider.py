"""The autoscaler's node provider for the workers' scale set (python/nodekit/node/
azure_vmss_provider.py): its Azure calls go through the real azure-mgmt-compute client and the
real azure-identity managed identity credential to the fakes of Azure Compute
(python/nodekit/rehearsal/standins/azure_compute.py) and of the instance metadata service
(python/nodekit/rehearsal/standins/azure_node.py), over HTTPS; its Ray side is Ray's own
BatchingNodeProvider and config validation."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver import layout
from driver.cli.jobs import refused_lines
from driver.jobs import ClusterStatus
from nodekit import render
from nodekit.node import azure_vmss_provider as vp
from nodekit.rehearsal.standins.azure_compute import (
    CAPACITY_FILE,
    capacity_fault,
    scale_set_config,
    subnet_pool,
    zone_key,
)
from vmss_support import (
    GROUP,
    HEAD_IP,
    NAME,
    NODES,
    SCALE_SET_ID,
    SUB,
    WRITE_WAIT_S,
    Azure,
    Drains,
    RayAutoscaler,
    autoscaler_round,
    deploy_values,
    head_azure,
    pool,
)

GPU = "ray-gpu"
ZONAL = "ray-zonal"
"""A second pool's scale set: GPU workers (Standard_NC4as_T4_v3)."""
GPU_TYPE = "ray.worker.gpu"
SPOT = "ray-spot"
"""A third pool's scale set: CPU workers of the default pool's size, the pool Ray prefers when
the two tie (its node type ``ray.worker.spot`` sorts after ``ray.worker.default``)."""
SPOT_TYPE = "ray.worker.spot"


@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Azure]:
    scale_sets = [
        scale_set_config(SUB, GROUP, NAME, subnet_pool("10.42.1.0/24", 6, 20)),
        scale_set_config(
            SUB, GROUP, GPU, subnet_pool("10.42.1.0/24", 40, 10), "Standard_NC4as_T4_v3"
        ),
        scale_set_config(SUB, GROUP, SPOT, subnet_pool("10.42.1.0/24", 60, 10)),
        scale_set_config(
            SUB, GROUP, ZONAL, subnet_pool("10.42.1.0/24", 80, 10), zones=["1", "3"],
            zone_balance=True,
        ),
    ]  # fmt: skip
    with head_azure(tmp_path, monkeypatch, scale_sets) as azure:
        yield azure


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


def test_a_zonal_scale_set_says_its_zones_and_each_instance_its_own(azure: Azure) -> None:
    """A pool with zones (the stacks' worker_pools zones): the scale set's zones and zone
    balance as Azure's model carries them, through the real client; a regional one has none."""
    s = azure.scale_set(name=ZONAL)
    s.set_capacity(3)
    vmss = s.client.virtual_machine_scale_sets.get(GROUP, ZONAL)
    assert (vmss.zones, vmss.zone_balance) == (["1", "3"], True)
    vms = s.client.virtual_machine_scale_set_vms.list(GROUP, ZONAL)
    assert sorted((vm.instance_id, tuple(vm.zones)) for vm in vms) == [
        ("0", ("1",)), ("1", ("3",)), ("2", ("1",))
    ]  # fmt: skip
    regional = azure.scale_set()
    regional.set_capacity(1)
    vmss = regional.client.virtual_machine_scale_sets.get(GROUP, NAME)
    assert vmss.zones is None and vmss.zone_balance is None
    assert [vm.zones for vm in regional.client.virtual_machine_scale_set_vms.list(GROUP, NAME)] == [
        None
    ]


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
def provider(azure: Azure, drains: Drains, max_workers: int = 5) -> vp.ScaleSetProvider:
    config = vp.autoscaling_config(deploy_values(pools=[pool(max=max_workers)]))["provider"]
    return vp.ScaleSetProvider(
        config, "unit", scale_sets={vp.WORKER_TYPE: azure.scale_set()}, drain=drains
    )


def two_pools(azure: Azure, drains: Drains) -> vp.ScaleSetProvider:
    """Spot CPU workers (the default pool) and a GPU pool, each its own scale set."""
    config = vp.autoscaling_config(deploy_values(pools=[pool(), GPU_POOL]))["provider"]
    scale_sets = {vp.WORKER_TYPE: azure.scale_set(), GPU_TYPE: azure.scale_set(name=GPU)}
    return vp.ScaleSetProvider(config, "unit", scale_sets=scale_sets, drain=drains)


GPU_POOL = pool(
    name="gpu",
    scale_set=GPU,
    vm_size="Standard_NC4as_T4_v3",
    max=2,
    labels="accelerator=t4",
)


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


# -- two pools: a scale set each ----------------------------------------------------------------
def test_two_pools_raise_each_scale_set_for_its_node_type(azure: Azure) -> None:
    from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

    p = two_pools(azure, Drains())
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID]
    autoscaler_round(p, launch={GPU_TYPE: 1})
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (0, 1)
    autoscaler_round(p, launch={vp.WORKER_TYPE: 2})
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (2, 1)
    autoscaler_round(p, launch={vp.WORKER_TYPE: 1, GPU_TYPE: 1})
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (3, 2)
    # Every instance with its pool's node type, at its private IP.
    nodes = p.non_terminated_nodes({})
    assert nodes == [vp.HEAD_ID, f"{NAME}_0", f"{NAME}_1", f"{NAME}_2", f"{GPU}_0", f"{GPU}_1"]
    types = {n: p.node_tags(n)[TAG_RAY_USER_NODE_TYPE] for n in nodes[1:]}
    assert types == {
        **{f"{NAME}_{i}": vp.WORKER_TYPE for i in range(3)},
        **{f"{GPU}_{i}": GPU_TYPE for i in range(2)},
    }
    assert p.internal_ip(f"{GPU}_1") == azure.ips(GPU)["1"]
    # Each pool's max caps its own scale set (the GPU pool's is 2).
    autoscaler_round(p, launch={GPU_TYPE: 3})
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (3, 2)
    # A round that asks nothing of a pool writes nothing there (it reads its instances only).
    seen = len(azure.compute.state.lines("requests.jsonl"))
    autoscaler_round(p, launch={vp.WORKER_TYPE: 1})
    gpu_calls = [
        (r["method"], r["path"].rsplit("/", 1)[-1])
        for r in azure.compute.state.lines("requests.jsonl")[seen:]
        if f"/virtualMachineScaleSets/{GPU}" in r["path"]
    ]
    assert gpu_calls and all(
        call in (("GET", "virtualMachines"), ("GET", "networkInterfaces")) for call in gpu_calls
    )
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (4, 2)


def test_two_pools_delete_exactly_the_named_instance_of_the_right_scale_set(azure: Azure) -> None:
    drains = Drains()
    p = two_pools(azure, drains)
    autoscaler_round(p, launch={vp.WORKER_TYPE: 3, GPU_TYPE: 2})
    # The same instance id (1) in both scale sets: only the GPU pool's goes.
    p.non_terminated_nodes({})
    ip = p.internal_ip(f"{GPU}_1")
    autoscaler_round(p, terminate=[f"{GPU}_1"])
    assert drains.calls == [ip]
    assert sorted(azure.ips(GPU)) == ["0"]
    assert sorted(azure.ips(NAME)) == ["0", "1", "2"]
    assert [(d["scale_set"], d["instanceId"]) for d in azure.deleted] == [(GPU, "1")]
    # One of each in one round: each from its own scale set.
    autoscaler_round(p, terminate=[f"{NAME}_0", f"{GPU}_0"])
    assert sorted(azure.ips(NAME)) == ["1", "2"]
    assert azure.ips(GPU) == {}
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID, f"{NAME}_1", f"{NAME}_2"]


def test_each_pool_scales_to_zero_on_its_own(azure: Azure) -> None:
    p = two_pools(azure, Drains())
    autoscaler_round(p, launch={vp.WORKER_TYPE: 2, GPU_TYPE: 1})
    autoscaler_round(p, terminate=[f"{GPU}_0"])
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (2, 0)
    autoscaler_round(p, terminate=[f"{NAME}_0", f"{NAME}_1"])
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (0, 0)
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID]
    # ... and grows again from zero.
    autoscaler_round(p, launch={GPU_TYPE: 1})
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (0, 1)


def test_an_outage_of_one_pool_keeps_the_last_view_of_all_and_stops_writes(
    azure: Azure,
) -> None:
    p = two_pools(azure, Drains())
    autoscaler_round(p, launch={vp.WORKER_TYPE: 1, GPU_TYPE: 1})
    before = p.non_terminated_nodes({})
    assert before == [vp.HEAD_ID, f"{NAME}_0", f"{GPU}_0"]
    azure.compute.state.write(
        "faults.json",
        {
            "GET " + f"/subscriptions/{SUB}/resourceGroups/{GROUP}/providers/"
            f"Microsoft.Compute/virtualMachineScaleSets/{GPU}/virtualMachines": {"status": 503}
        },
    )
    azure.compute._set_state(NAME, "0", None)  # gone meanwhile: not seen until all reads work
    assert p.non_terminated_nodes({}) == before
    assert not p.safe_to_scale()
    azure.compute.state.write("faults.json", {})
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID, f"{GPU}_0"]
    assert p.safe_to_scale()


def test_a_drain_ray_refuses_keeps_that_pools_worker(azure: Azure) -> None:
    drains = Drains()
    p = two_pools(azure, drains)
    autoscaler_round(p, launch={vp.WORKER_TYPE: 1, GPU_TYPE: 1})
    p.non_terminated_nodes({})
    drains.busy = {p.internal_ip(f"{GPU}_0")}
    autoscaler_round(p, terminate=[f"{GPU}_0", f"{NAME}_0"])
    assert p.kept == [f"{GPU}_0"]
    assert (azure.compute.capacity(NAME), azure.compute.capacity(GPU)) == (0, 1)
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID, f"{GPU}_0"]


# -- the autoscaler's configuration ----------------------------------------------------------
def test_config_is_what_ray_accepts(tmp_path: Path) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = vp.autoscaling_config(deploy_values(), head_num_cpus=0)
    validate_config(config)
    prepared = prepare_config(config)
    worker = prepared["available_node_types"][vp.WORKER_TYPE]
    # What a worker's `ray start` offers (cloud-init: one simulator slot per vCPU).
    assert worker["resources"] == {"CPU": 4, layout.SIMULATOR_RESOURCE: 4}
    assert worker["labels"] == {layout.POOL_LABEL: "workers"}
    assert vp.SIMULATOR_RESOURCE == layout.SIMULATOR_RESOURCE
    # The label the node types promise is the one each worker's `ray start --labels` gives.
    assert vp.POOL_LABEL == layout.POOL_LABEL
    bootstrap = render.document_files((render.rendered_dir() / "worker.yaml").read_text())[
        "/usr/local/sbin/ray-cluster-bootstrap"
    ]
    assert f'RAY_WORKER_LABELS="{layout.POOL_LABEL}=$WORKER_POOL' in bootstrap
    # The pool's own resources (its RAY_RESOURCES) over the simulator slots, as its workers offer.
    pooled = vp.autoscaling_config(
        deploy_values(pools=[pool(resources={"simulator": 2, "big": 1})])
    )
    validate_config(pooled)
    assert pooled["available_node_types"][vp.WORKER_TYPE]["resources"] == {
        "CPU": 4,
        layout.SIMULATOR_RESOURCE: 2,
        "big": 1,
    }
    assert (worker["min_workers"], worker["max_workers"]) == (0, 5)
    assert prepared["idle_timeout_minutes"] == 5
    provider_config = prepared["provider"]
    assert provider_config["type"] == "external"
    assert provider_config["module"] == vp.MODULE
    assert provider_config["pools"] == [
        {"node_type": vp.WORKER_TYPE, "scale_set_id": SCALE_SET_ID, "max_workers": 5}
    ]
    for key in ("disable_node_updaters", "disable_launch_config_check", "foreground_node_launch"):
        assert provider_config[key] is True
    # The command the head's bootstrap runs writes the same.
    values = tmp_path / "deploy.json"
    values.write_text(json.dumps(deploy_values()))
    out = tmp_path / "autoscaler.yaml"
    assert vp.main(["config", "--deploy-values", str(values), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == config


def test_two_pools_are_two_node_types_ray_accepts() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    cpu = pool(min=1, max=20, resources={"simulator": 2}, vm_size="Standard_F8s_v2")
    config = vp.autoscaling_config(deploy_values(pools=[cpu, GPU_POOL]))
    validate_config(config)
    types = prepare_config(config)["available_node_types"]
    assert sorted(types) == [vp.HEAD_TYPE, vp.WORKER_TYPE, GPU_TYPE]
    assert types[vp.WORKER_TYPE]["resources"] == {"CPU": 8, layout.SIMULATOR_RESOURCE: 2}
    assert (types[vp.WORKER_TYPE]["min_workers"], types[vp.WORKER_TYPE]["max_workers"]) == (1, 20)
    # The GPU pool: its size's CPUs and GPU, a simulator slot per CPU (as its workers' ray start
    # offers them), its labels after pool=gpu, its own bounds.
    assert types[GPU_TYPE]["resources"] == {"CPU": 4, "GPU": 1, layout.SIMULATOR_RESOURCE: 4}
    assert types[GPU_TYPE]["labels"] == {"pool": "gpu", "accelerator": "t4"}
    assert (types[GPU_TYPE]["min_workers"], types[GPU_TYPE]["max_workers"]) == (0, 2)
    assert config["max_workers"] == 22
    assert [
        (p["node_type"], p["scale_set_id"].rsplit("/", 1)[-1]) for p in config["provider"]["pools"]
    ] == [
        (vp.WORKER_TYPE, NAME),
        (GPU_TYPE, GPU),
    ]
    # Another first pool keeps its own type name; only "workers" is ray.worker.default.
    other = vp.autoscaling_config(deploy_values(pools=[pool(name="cpu"), GPU_POOL]))
    assert sorted(other["available_node_types"]) == [vp.HEAD_TYPE, "ray.worker.cpu", GPU_TYPE]


def plan(
    config: dict[str, Any], demands: list[dict[str, float]], existing: dict[str, int] | None = None
) -> dict[str, int]:
    """The node types Ray's autoscaler launches for ``demands`` (its own planner and scorer)."""
    from functools import partial

    from ray.autoscaler._private.node_provider_availability_tracker import (
        NodeAvailabilitySummary,
    )
    from ray.autoscaler._private.resource_demand_scheduler import (
        _default_utilization_scorer,
        get_nodes_for,
    )
    from ray.autoscaler._private.util import prepare_config

    types = prepare_config(config)["available_node_types"]
    scorer = partial(
        _default_utilization_scorer,
        node_availability_summary=NodeAvailabilitySummary(node_availabilities={}),
    )
    to_add, residual = get_nodes_for(types, existing or {}, vp.HEAD_TYPE, 100, demands, scorer)
    assert residual == []
    return dict(to_add)


def test_ray_plans_gpu_demand_on_the_gpu_pool_and_cpu_demand_on_the_cpu_pool() -> None:
    config = vp.autoscaling_config(deploy_values(pools=[pool(), GPU_POOL]))
    assert plan(config, [{"CPU": 1, "GPU": 1}]) == {GPU_TYPE: 1}
    assert plan(config, [{"GPU": 1}] * 2) == {GPU_TYPE: 2}
    # CPU-only and simulator demand: the CPU pool, although GPU nodes offer CPUs and simulator
    # slots too (Ray's AUTOSCALER_CONSERVE_GPU_NODES, on by default).
    assert plan(config, [{"CPU": 1}] * 6) == {vp.WORKER_TYPE: 2}
    assert plan(config, [{"CPU": 1, layout.SIMULATOR_RESOURCE: 1}] * 3) == {vp.WORKER_TYPE: 1}
    assert plan(config, [{"CPU": 1, "GPU": 1}, {"CPU": 4}]) == {GPU_TYPE: 1, vp.WORKER_TYPE: 1}
    # Ray prefers, it does not forbid: with the CPU pool at its max, CPU demand that fits
    # nowhere else goes to the GPU pool (Ray's behaviour, kept; docs/pools.md).
    assert plan(config, [{"CPU": 4}], existing={vp.WORKER_TYPE: 5}) == {GPU_TYPE: 1}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"autoscaler_idle_timeout_minutes": "0"}, "AUTOSCALER_IDLE_TIMEOUT_MINUTES must be"),
        ({"worker_scale_set_id": "ray-workers"}, "the worker scale set id must look like"),
        ({"autoscaler_pools": ""}, "AUTOSCALER_POOLS must be a JSON list of worker pools"),
        ({"autoscaler_pools": "[]"}, "AUTOSCALER_POOLS must be a JSON list of worker pools"),
        ({"pools": [pool(min=-1)]}, "pool 'workers': min and max must be whole numbers"),
        ({"pools": [pool(max=0)]}, "pool 'workers': min and max must be whole numbers"),
        ({"pools": [pool(min=3, max=2)]}, "pool 'workers': min and max must be whole numbers"),
        ({"pools": [pool(vm_size="D4s_v5")]}, "pool 'workers': cannot tell the vCPUs"),
        ({"pools": [pool(resources=["simulator"])]}, "resources must be a JSON object of numbers"),
        ({"pools": [pool(labels="a=1,b")]}, "labels must be key=value pairs"),
        ({"pools": [pool(name="GPU")]}, "the name must be 1-10 of a-z, 0-9 and"),
        ({"pools": [pool(scale_set="a/b")]}, "scale_set must be a scale set's name"),
        ({"pools": [pool(), pool(scale_set="x")]}, "two pools with the same name"),
        ({"pools": [pool(), pool(name="x")]}, "two pools with the same scale_set"),
        (
            {"pools": [pool(vm_size="Standard_NC6s_v3")]},
            "pool 'workers': VM size 'Standard_NC6s_v3': its GPUs (V100, NV-series) do not work",
        ),
        (
            {"pools": [pool(vm_size="Standard_NG8ads_V620_v1")]},
            "an N-series size of unknown GPU count",
        ),
    ],
)
def test_bad_values_are_one_clear_error(
    over: dict[str, Any], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(vp.ProviderError, match=re.escape(message)):
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


@pytest.mark.parametrize(
    ("size", "gpus"),
    [
        ("Standard_D4s_v5", 0),
        ("Standard_F8s_v2", 0),
        ("Standard_HB120rs_v3", 0),
        ("Standard_NC4as_T4_v3", 1),
        ("Standard_NC16as_T4_v3", 1),
        ("Standard_NC64as_T4_v3", 4),
        ("standard_nc24ads_a100_v4", 1),
        ("Standard_NC96ads_A100_v4", 4),
        ("Standard_NC40ads_H100_v5", 1),
        ("Standard_NC80adis_H100_v5", 2),
        ("Standard_ND96asr_v4", 8),
        ("Standard_ND96amsr_A100_v4", 8),
        ("Standard_ND96isr_H100_v5", 8),
    ],
)
def test_vm_size_gpus(size: str, gpus: int) -> None:
    assert vp.vm_size_gpus(size) == gpus


@pytest.mark.parametrize(
    ("size", "message"),
    [
        ("Standard_NC24rs_v3", "its GPUs (V100, NV-series)"),
        ("Standard_ND40rs_v2", "its GPUs (V100, NV-series)"),
        ("Standard_NV36ads_A10_v5", "its GPUs (V100, NV-series)"),
        ("Standard_NC32as_T4_v3", "an N-series size of unknown GPU count"),
        ("Standard_NC8as_T4_v4", "an N-series size of unknown GPU count"),
    ],
)
def test_gpu_sizes_the_nodes_do_not_support_are_refused(size: str, message: str) -> None:
    with pytest.raises(vp.ProviderError, match=re.escape(message)):
        vp.vm_size_gpus(size)


def test_an_outage_from_the_start_shows_the_head_alone_and_writes_nothing(azure: Azure) -> None:
    """Right after deployment the autoscaler identity's role may not have propagated: Azure
    answers 403. The provider never raises (Ray's autoscaler gives up after a few errors)."""
    from azure.core.exceptions import HttpResponseError

    config = vp.autoscaling_config(deploy_values())["provider"]
    p = vp.ScaleSetProvider(
        config, "unit", scale_sets={vp.WORKER_TYPE: azure.scale_set(NODES)}, drain=Drains()
    )
    assert p.non_terminated_nodes({}) == [vp.HEAD_ID]
    assert not p.safe_to_scale()
    with pytest.raises(HttpResponseError, match="AuthorizationFailed"):
        azure.scale_set(NODES).instances()


# -- capacity Azure refuses: said, backed off, routed around ------------------------------------
def refuse(azure: Azure, name: str, fault: dict[str, Any] | None) -> None:
    """Switch the fake's capacity fault for one scale set on (``fault``) or off (None)."""
    faults = azure.compute.state.read(CAPACITY_FILE, {})
    faults.pop(name.lower(), None)
    if fault is not None:
        faults[name.lower()] = fault
    azure.compute.state.write(CAPACITY_FILE, faults)


@pytest.mark.parametrize(
    ("fault", "status", "said"),
    [
        (capacity_fault("AllocationFailed"), 200, "We do not have sufficient capacity"),
        (
            capacity_fault("OverconstrainedAllocationRequest"),
            200,
            "the condition is too restrictive",
        ),
        (capacity_fault("SkuNotAvailable"), 409, "Capacity Restrictions: Standard_D4s_v5"),
        (
            capacity_fault("OperationNotAllowed", "LowPriority", 4),
            409,
            "exceeding approved LowPriority Cores quota. Additional details - Deployment Model: "
            "Resource Manager, Location: westeurope, Current Limit: 4, Current Usage: 4, "
            "Additional Required: 8, (Minimum) New Limit Required: 12.",
        ),
    ],
)
def test_the_fake_refuses_a_capacity_raise_as_azure_does_and_creates_nothing(
    azure: Azure, fault: dict[str, Any], status: int, said: str
) -> None:
    """Through the real azure-mgmt-compute client: an allocation failure is a 200 whose
    long-running operation ends Failed with Azure's code (the client raises from its poll); a
    size not offered and a quota the raise would exceed are a 409. The capacity stays, no
    instance is made, the hooks never run."""
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set()
    s.set_capacity(1)
    refuse(azure, NAME, fault)
    with pytest.raises(HttpResponseError) as raised:
        s.set_capacity(3)
    assert raised.value.status_code == status
    assert vp.capacity_refusal(raised.value) == (fault["code"], raised.value.error.message)
    assert said in raised.value.error.message
    assert s.capacity() == 1
    assert [i.instance_id for i in s.instances()] == ["0"]
    assert len(azure.created) == 1
    assert azure.compute.state.lines("refused.jsonl") == [
        {"scale_set": NAME, "code": fault["code"]}
    ]
    # Lifted: the next raise goes through.
    refuse(azure, NAME, None)
    s.set_capacity(3)
    assert s.capacity() == 3 and len(azure.created) == 3


def test_a_quota_refuses_only_what_goes_over_it(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set()
    refuse(azure, NAME, capacity_fault("OperationNotAllowed", "standardDSv5Family", 8))
    s.set_capacity(2)  # 2 x 4 vCPUs: within the 8
    with pytest.raises(HttpResponseError, match="Current Usage: 8, Additional Required: 4"):
        s.set_capacity(3)
    assert s.capacity() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ZonalAllocationFailed",), "a zone fault is ZonalAllocationFailed with zone"),
        (("QuotaExceeded",), "the fake plays AllocationFailed"),
        (("OperationNotAllowed", "", 4), "a quota fault needs quota"),
        (("OperationNotAllowed", "LowPriority", -1), "a quota fault needs quota"),
    ],
)
def test_the_fake_refuses_faults_azure_does_not_publish_for_it(
    args: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        capacity_fault(*args)


def test_capacity_refusal_tells_azures_capacity_answers_from_other_errors() -> None:
    from azure.core.exceptions import HttpResponseError

    def error(code: str, message: str) -> HttpResponseError:
        e = HttpResponseError(message=message)
        e.error = type("E", (), {"code": code, "message": message})()  # type: ignore[assignment]
        return e

    assert vp.capacity_refusal(error("ZonalAllocationFailed", "zone 2")) == (
        "ZonalAllocationFailed",
        "zone 2",
    )
    quota = "Operation could not be completed as it results in exceeding approved X Cores quota."
    assert vp.capacity_refusal(error("OperationNotAllowed", quota)) == (
        "OperationNotAllowed",
        quota,
    )
    assert (
        vp.capacity_refusal(error("OperationNotAllowed", "The scale set is being deleted")) is None
    )
    assert vp.capacity_refusal(error("AuthorizationFailed", "no role")) is None
    assert vp.capacity_refusal(RuntimeError("boom")) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def spot_and_workers(azure: Azure, clock: Clock) -> tuple[dict[str, Any], vp.ScaleSetProvider]:
    """Two CPU pools of one size: ``spot`` (Ray prefers it, by name, when they tie) and the
    default pool ``workers``; the autoscaler's configuration and the provider on the fake."""
    config = vp.autoscaling_config(deploy_values(pools=[pool(), pool(name="spot", scale_set=SPOT)]))
    config["cluster_name"] = "unit"
    scale_sets = {vp.WORKER_TYPE: azure.scale_set(), SPOT_TYPE: azure.scale_set(name=SPOT)}
    p = vp.ScaleSetProvider(
        config["provider"], "unit", scale_sets=scale_sets, drain=Drains(), clock=clock
    )
    return config, p


def test_a_refused_pool_is_backed_off_and_create_node_says_so(azure: Azure) -> None:
    from ray.autoscaler.node_launch_exception import NodeLaunchException

    clock = Clock()
    _, p = spot_and_workers(azure, clock)
    refuse(azure, SPOT, capacity_fault("AllocationFailed"))
    autoscaler_round(p, launch={SPOT_TYPE: 1})  # no exception: Azure's answer, recorded
    assert azure.compute.capacity(SPOT) == 0 and azure.created == []
    refusal = p.refusals[SPOT_TYPE]
    assert (refusal.code, refusal.count, refusal.retry_at) == (
        "AllocationFailed",
        1,
        clock.now + 60,
    )
    p.non_terminated_nodes({})
    with pytest.raises(NodeLaunchException) as raised:
        p.create_node({}, {"ray-user-node-type": SPOT_TYPE}, 1)
    assert raised.value.category == "AllocationFailed"
    assert raised.value.description.startswith(
        f"Azure refused capacity for scale set {SPOT}: AllocationFailed since 2027-01-15T08:00:00Z"
    )
    assert "next try after 2027-01-15T08:01:00Z" in raised.value.description
    assert "We do not have sufficient capacity" in raised.value.description
    assert not p.scale_change_needed  # nothing joined the scale request
    # The other pool is asked as before.
    autoscaler_round(p, launch={vp.WORKER_TYPE: 1})
    assert azure.compute.capacity(NAME) == 1
    # Past the back-off Azure is asked again; a second refusal doubles it (first refusal kept).
    clock.now += 61
    autoscaler_round(p, launch={SPOT_TYPE: 1})
    refusal = p.refusals[SPOT_TYPE]
    assert (refusal.count, refusal.since, refusal.retry_at) == (2, clock.now - 61, clock.now + 120)
    assert [vp.backoff_s(n) for n in (1, 2, 3, 5, 6, 20)] == [60, 120, 240, 960, 1800, 1800]
    # Capacity back: the raise succeeds and the refusal is forgotten.
    refuse(azure, SPOT, None)
    clock.now += 121
    autoscaler_round(p, launch={SPOT_TYPE: 1})
    assert azure.compute.capacity(SPOT) == 1 and SPOT_TYPE not in p.refusals


def test_rays_autoscaler_routes_demand_around_a_refused_pool_and_back(
    azure: Azure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's own StandardAutoscaler (its scheduler, launcher and availability tracker) with the
    provider on the fake: CPU demand Ray places on the spot pool; Azure refuses it; the demand
    lands on the default pool; capacity back, new demand goes to the spot pool again."""
    # Ray's scheduler loads its scorer by name when the autoscaler starts (the head's bootstrap
    # sets the variable to layout.AUTOSCALER_SCORER, the module as the head imports it).
    module = vp.MODULE.rsplit(".", 1)[0]  # the provider's module, as the head imports it
    assert f"{module}.{vp.availability_scorer.__name__}" == layout.AUTOSCALER_SCORER
    clock = Clock()
    config, p = spot_and_workers(azure, clock)
    ray = RayAutoscaler(p, config, monkeypatch)
    demand, rounds, autoscaler = ray.demand, ray.rounds, ray.autoscaler

    def unavailable() -> dict[str, Any]:
        summary = autoscaler.node_provider_availability_tracker.summary()
        return {
            t: r.unavailable_node_information
            for t, r in summary.node_availabilities.items()
            if not r.is_available
        }

    # Without a refusal Ray prefers the spot pool for CPU demand.
    demand(4)
    refuse(azure, SPOT, capacity_fault("AllocationFailed"))
    rounds(1)
    assert SPOT_TYPE in p.refusals and azure.compute.capacity(SPOT) == 0
    # Ray is told (NodeLaunchException: its tracker), then places the demand on the other pool.
    rounds(2)
    assert (azure.compute.capacity(SPOT), azure.compute.capacity(NAME)) == (0, 1)
    info = unavailable()[SPOT_TYPE]
    assert info.category == "AllocationFailed"
    assert f"scale set {SPOT}" in info.description
    # What `driver status` shows of it: the report as the dashboard serves it.
    published = ray.published()
    status = ClusterStatus(text="", autoscaler=published, autoscaler_error=None, nodes=[])
    assert [(r["node_type"], r["category"]) for r in status.refused_pools()] == [
        (SPOT_TYPE, "AllocationFailed")
    ]
    assert refused_lines(status) == [
        "Pools Azure refused (their demand goes to the other pools meanwhile):",
        f"  {SPOT_TYPE}: {info.description}",
    ]
    assert "next try after" in info.description and "since" in info.description
    # Nothing half-created: no spot instance, no hook ran for one; one refusal only.
    assert azure.compute.instances(SPOT) == []
    assert {c["scale_set"] for c in azure.created} == {NAME}
    assert azure.compute.state.lines("refused.jsonl") == [
        {"scale_set": SPOT, "code": "AllocationFailed"}
    ]
    # More demand while the spot pool is backed off: the default pool again, no Azure call
    # to the spot pool.
    demand(8)
    rounds(2)
    assert (azure.compute.capacity(SPOT), azure.compute.capacity(NAME)) == (0, 2)
    assert len(azure.compute.state.lines("refused.jsonl")) == 1
    # Capacity back, the back-off over: new demand lands on the spot pool again.
    refuse(azure, SPOT, None)
    clock.now += vp.backoff_s(1) + 1
    demand(12)
    rounds(2)
    assert (azure.compute.capacity(SPOT), azure.compute.capacity(NAME)) == (1, 2)
    assert SPOT_TYPE not in p.refusals and SPOT_TYPE not in unavailable()


# -- a zone out of capacity ------------------------------------------------------------------
ZONE1 = "ray-zone1"
"""A pool's scale set pinned to zone 1; its node type ``ray.worker.zone1`` is the one Ray
prefers when it ties with the default pool's (the same size, pinned to zone 2)."""
ZONE1_TYPE = "ray.worker.zone1"


@pytest.fixture
def zoned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Azure]:
    """Two scale sets of one size, one in zone 1 and the default pool's in zone 2; one in zones
    1 and 3; one regional."""
    scale_sets = [
        scale_set_config(SUB, GROUP, ZONE1, subnet_pool("10.42.1.0/24", 6, 10), zones=["1"]),
        scale_set_config(SUB, GROUP, NAME, subnet_pool("10.42.1.0/24", 20, 10), zones=["2"]),
        scale_set_config(SUB, GROUP, ZONAL, subnet_pool("10.42.1.0/24", 40, 10), zones=["1", "3"]),
        scale_set_config(SUB, GROUP, SPOT, subnet_pool("10.42.1.0/24", 60, 10)),
    ]
    with head_azure(tmp_path, monkeypatch, scale_sets) as azure:
        yield azure


def zone_out(azure: Azure, zone: str, out: bool) -> None:
    """Switch zone ``zone``'s capacity fault on or off in the fake."""
    faults = azure.compute.state.read(CAPACITY_FILE, {})
    faults.pop(zone_key(zone), None)
    if out:
        faults[zone_key(zone)] = capacity_fault("ZonalAllocationFailed", zone=zone)
    azure.compute.state.write(CAPACITY_FILE, faults)


def test_a_zone_out_of_capacity_refuses_its_scale_sets_as_azure_does(zoned: Azure) -> None:
    """Through the real client: a raise of the scale set in zone 1 fails in its operation with
    ZonalAllocationFailed, nothing made; the one in zone 2 is served; a raise of a regional
    scale set or of one in zones 1 and 3 is refused as not played (Azure does not publish its
    answer), nothing made; lifted, zone 1 is served."""
    from azure.core.exceptions import HttpResponseError

    zone_out(zoned, "1", True)
    with pytest.raises(HttpResponseError) as raised:
        zoned.scale_set(name=ZONE1).set_capacity(2)
    assert raised.value.status_code == 200  # the operation's failure, as for AllocationFailed
    code, message = vp.capacity_refusal(raised.value) or ("", "")
    assert code == "ZonalAllocationFailed"
    assert "sufficient capacity for the requested VM size in this zone" in message
    zoned.scale_set(name=NAME).set_capacity(1)
    for name in (ZONAL, SPOT):
        with pytest.raises(HttpResponseError, match="NotPlayedByTheFake") as raised:
            zoned.scale_set(name=name).set_capacity(1)
        assert raised.value.status_code == 400 and "is not published" in str(raised.value)
        assert vp.capacity_refusal(raised.value) is None
    assert [zoned.compute.capacity(n) for n in (ZONE1, NAME, ZONAL, SPOT)] == [0, 1, 0, 0]
    assert {c["scale_set"] for c in zoned.created} == {NAME}
    assert zoned.compute.state.lines("refused.jsonl") == [
        {"scale_set": ZONE1, "code": "ZonalAllocationFailed", "zone": "1"}
    ]
    zone_out(zoned, "1", False)
    zoned.scale_set(name=ZONE1).set_capacity(2)
    assert zoned.compute.capacity(ZONE1) == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: capacity_fault("ZonalAllocationFailed"), "a zone fault is ZonalAllocationFailed"),
        (lambda: capacity_fault("AllocationFailed", zone="1"), "a zone fault is"),
        (lambda: capacity_fault("ZonalAllocationFailed", zone="4"), "zone '4': one of 1, 2, 3"),
        (lambda: zone_key("westeurope-1"), "one of 1, 2, 3"),
    ],
)
def test_a_zone_fault_is_said_exactly(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_a_zone_fault_under_a_scale_set_of_other_zones_is_a_clear_error(zoned: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    refuse(zoned, ZONAL, capacity_fault("ZonalAllocationFailed", zone="1"))
    with pytest.raises(HttpResponseError, match="put it under zone_key"):
        zoned.scale_set(name=ZONAL).set_capacity(1)
    assert zoned.compute.capacity(ZONAL) == 0


def test_rays_autoscaler_routes_demand_from_a_full_zone_to_the_other_and_back(
    zoned: Azure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's own StandardAutoscaler with two pools of one size, pinned to zones 1 and 2: zone 1
    out of capacity, the demand Ray places on the zone-1 pool lands on the zone-2 pool; the
    refusal is the zone-1 pool's, with Azure's code; zone 1 back and the back-off over, new
    demand goes to the zone-1 pool again. Nothing half-made in the refused scale set."""
    clock = Clock()
    pools = [pool(), pool(name="zone1", scale_set=ZONE1)]
    config = vp.autoscaling_config(deploy_values(pools=pools))
    config["cluster_name"] = "unit"
    scale_sets = {vp.WORKER_TYPE: zoned.scale_set(), ZONE1_TYPE: zoned.scale_set(name=ZONE1)}
    p = vp.ScaleSetProvider(
        config["provider"], "unit", scale_sets=scale_sets, drain=Drains(), clock=clock
    )
    ray = RayAutoscaler(p, config, monkeypatch)
    demand, rounds = ray.demand, ray.rounds

    zone_out(zoned, "1", True)
    demand(4)
    rounds(1)  # Ray prefers the zone-1 pool: Azure refuses it
    assert p.refusals[ZONE1_TYPE].code == "ZonalAllocationFailed"
    rounds(2)
    assert (zoned.compute.capacity(ZONE1), zoned.compute.capacity(NAME)) == (0, 1)
    status = ClusterStatus(text="", autoscaler=ray.published(), autoscaler_error=None, nodes=[])
    [refused] = status.refused_pools()
    assert (refused["node_type"], refused["category"]) == (ZONE1_TYPE, "ZonalAllocationFailed")
    assert f"scale set {ZONE1}: ZonalAllocationFailed" in refused["description"]
    assert "in this zone" in refused["description"]
    assert zoned.compute.instances(ZONE1) == []
    assert {c["scale_set"] for c in zoned.created} == {NAME}
    assert zoned.compute.state.lines("refused.jsonl") == [
        {"scale_set": ZONE1, "code": "ZonalAllocationFailed", "zone": "1"}
    ]
    # Zone 1 back, the back-off over: new demand lands on the zone-1 pool again.
    zone_out(zoned, "1", False)
    clock.now += vp.backoff_s(1) + 1
    demand(8)
    rounds(2)
    assert (zoned.compute.capacity(ZONE1), zoned.compute.capacity(NAME)) == (1, 1)
    assert ZONE1_TYPE not in p.refusals
