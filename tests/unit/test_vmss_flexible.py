"""Worker pools as Flexible scale sets: the fake Azure Compute plays Flexible orchestration with
Azure's published shapes (python/nodekit/rehearsal/standins/azure_compute.py), Spot Priority
Mix and Instance Mix as far as Azure documents them, and the node provider
(python/nodekit/node/azure_vmss_provider.py) lists, creates, drains and deletes exactly the
chosen VM of a Flexible pool through the real azure-mgmt-compute client (the fixtures of
test_vmss_provider.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodekit.node import azure_vmss_provider as vp
from nodekit.rehearsal.standins.azure_compute import (
    MIX_FILE,
    NOT_PLAYED,
    scale_set_config,
    spot_priority_split,
    subnet_pool,
)
from vmss_support import (
    AUTOSCALER,
    GROUP,
    SCALE_SET_ID,
    SUB,
    Azure,
    Drains,
    autoscaler_round,
    deploy_values,
    head_azure,
    pool,
)

FLEX = "ray-flex"
"""A Flexible scale set of regular VMs, zones 1 and 2."""
MIXED = "ray-mixed"
"""A Flexible Spot scale set with Spot Priority Mix (1 regular first, then 50 %)."""
SIZES = "ray-sizes"
"""A Flexible scale set with Instance Mix (two sizes, LowestPrice)."""
VM_NAME = re.compile(rf"^{FLEX}_[0-9a-f]{{8}}$")


@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Azure]:
    mix = {"baseRegularPriorityCount": 1, "regularPriorityPercentageAboveBase": 50}
    sizes = {
        "vmSizes": ["Standard_D4s_v5", "Standard_D4as_v5"],
        "allocationStrategy": "LowestPrice",
    }
    flexible = {"orchestration_mode": "Flexible"}
    scale_sets = [
        scale_set_config(
            SUB, GROUP, FLEX, subnet_pool("10.42.1.0/24", 6, 20), zones=["1", "2"], **flexible
        ),
        scale_set_config(
            SUB, GROUP, MIXED, subnet_pool("10.42.1.0/24", 40, 10), spot=True, priority_mix=mix,
            **flexible,
        ),
        scale_set_config(
            SUB, GROUP, SIZES, subnet_pool("10.42.1.0/24", 60, 10), instance_mix=sizes,
            **flexible,
        ),
    ]  # fmt: skip
    with head_azure(tmp_path, monkeypatch, scale_sets) as azure:
        yield azure


# -- the fake plays Flexible orchestration -----------------------------------------------------
def test_a_flexible_scale_set_has_azures_flexible_shape(azure: Azure) -> None:
    s = azure.scale_set(name=FLEX)
    vmss = s.client.virtual_machine_scale_sets.get(GROUP, FLEX)
    assert vmss.orchestration_mode == "Flexible" and s.flexible()
    assert vmss.platform_fault_domain_count == 1 and vmss.single_placement_group is False
    assert vmss.overprovision is None and vmss.scale_in_policy is None
    mixed = s.client.virtual_machine_scale_sets.get(GROUP, MIXED)
    assert mixed.priority_mix_policy.base_regular_priority_count == 1
    assert mixed.priority_mix_policy.regular_priority_percentage_above_base == 50
    assert mixed.virtual_machine_profile.priority == "Spot"
    sizes = s.client.virtual_machine_scale_sets.get(GROUP, SIZES)
    assert sizes.sku.name == "Mix"
    assert [v.name for v in sizes.sku_profile.vm_sizes] == ["Standard_D4s_v5", "Standard_D4as_v5"]
    assert sizes.sku_profile.allocation_strategy == "LowestPrice"


def test_flexible_vms_are_named_vms_with_their_own_interfaces(azure: Azure) -> None:
    s = azure.scale_set(name=FLEX)
    s.set_capacity(3)
    got = s.instances()
    assert len(got) == 3 and all(i.state == "Succeeded" for i in got)
    # Azure's rule: the instance id of a Flexible VM is its name, {scale set}_{8 characters}.
    assert all(VM_NAME.match(i.name) and i.instance_id == i.name for i in got)
    assert {i.ip for i in got} == {i["ip"] for i in azure.compute.instances(FLEX)}
    # The IPs came from each VM's own interface: the scale set's list is not Flexible's.
    paths = [r["path"] for r in azure.compute.state.lines("requests.jsonl")]
    assert sum("/Microsoft.Network/networkInterfaces/" in p for p in paths) == 3
    assert not any(p.lower().endswith(f"{FLEX}/networkinterfaces") for p in paths)
    vms = list(s.client.virtual_machine_scale_set_vms.list(GROUP, FLEX))
    assert sorted(vm.zones[0] for vm in vms) == ["1", "1", "2"]


def test_delete_removes_exactly_the_named_flexible_vm(azure: Azure) -> None:
    s = azure.scale_set(name=FLEX)
    s.set_capacity(3)
    first, victim, last = (i.name for i in s.instances())
    s.delete([victim])
    assert [i.name for i in s.instances()] == [first, last]
    assert s.capacity() == 2
    assert [d["name"] for d in azure.deleted] == [victim]


def test_a_capacity_cut_azure_does_not_publish_is_refused_and_changes_nothing(
    azure: Azure,
) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set(name=FLEX)
    s.set_capacity(3)
    with pytest.raises(HttpResponseError, match=f"{NOT_PLAYED}.*is not published"):
        s.set_capacity(1)
    assert len(s.instances()) == 3
    s.set_capacity(0)  # to zero all go (autostop's cut)
    assert s.instances() == [] and len(azure.deleted) == 3


# -- Spot Priority Mix and Instance Mix ----------------------------------------------------------
@pytest.mark.parametrize(
    ("base", "percent", "capacity", "regular"),
    [
        (10, 50, 10, 10),  # Azure's example: at or below the base, all regular
        (10, 50, 30, 20),  # Azure's example: 10 base + 10 of the 20 above; 10 Spot
        (1, 0, 5, 1),  # one regular, then all Spot
        (0, 100, 4, 4),
        (2, 25, 6, 3),
        (2, 25, 5, None),  # 25 % of 3 is not whole: Azure publishes no rounding
    ],
)
def test_spot_priority_split_is_azures_documented_rule(
    base: int, percent: int, capacity: int, regular: int | None
) -> None:
    mix = {"baseRegularPriorityCount": base, "regularPriorityPercentageAboveBase": percent}
    assert spot_priority_split(mix, capacity) == regular


def test_new_vms_are_regular_up_to_the_base_then_split_as_the_mix_says(azure: Azure) -> None:
    s = azure.scale_set(name=MIXED)
    s.set_capacity(1)
    assert [i["priority"] for i in azure.compute.instances(MIXED)] == ["Regular"]
    s.set_capacity(3)  # 1 + 50 % of 2: one more regular, one Spot
    assert sorted(i["priority"] for i in azure.compute.instances(MIXED)) == [
        "Regular", "Regular", "Spot"
    ]  # fmt: skip
    s.set_capacity(5)
    priorities = [i["priority"] for i in azure.compute.instances(MIXED)]
    assert priorities.count("Regular") == 3 and priorities.count("Spot") == 2


def test_a_split_azure_does_not_round_publicly_is_refused_in_one_line(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set(name=MIXED)
    s.set_capacity(1)
    with pytest.raises(HttpResponseError) as refused:
        s.set_capacity(2)  # 50 % of 1 VM above the base
    assert refused.value.error.code == NOT_PLAYED
    assert "\n" not in refused.value.error.message
    assert "publishes no rounding" in refused.value.error.message
    assert len(azure.compute.instances(MIXED)) == 1


def test_instance_mix_sizes_are_the_ones_the_test_plays_for_azure(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    s = azure.scale_set(name=SIZES)
    with pytest.raises(HttpResponseError, match=f"{NOT_PLAYED}.*does not publish"):
        s.set_capacity(1)
    assert azure.compute.instances(SIZES) == []
    azure.compute.state.write(MIX_FILE, {SIZES: "Standard_D4as_v5"})
    s.set_capacity(2)
    assert [i["size"] for i in azure.compute.instances(SIZES)] == ["Standard_D4as_v5"] * 2
    [vm, _] = list(s.client.virtual_machine_scale_set_vms.list(GROUP, SIZES))
    assert vm.sku.name == "Standard_D4as_v5"
    azure.compute.state.write(MIX_FILE, {SIZES: "Standard_F8s_v2"})  # not one of its sizes
    with pytest.raises(HttpResponseError, match=NOT_PLAYED):
        s.set_capacity(3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"orchestration_mode": "flexible"}, "Uniform or Flexible"),
        ({"priority_mix": {}, "spot": True}, "need a Flexible scale set"),
        ({"orchestration_mode": "Flexible", "priority_mix": {}}, "needs a Spot scale set"),
        (
            {"orchestration_mode": "Flexible", "instance_mix": {"vmSizes": ["Standard_D4s_v5"]}},
            "2-5 VM sizes",
        ),
    ],
)
def test_the_fake_refuses_a_scale_set_azure_refuses(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scale_set_config(SUB, GROUP, "x", [], **kwargs)


# -- the node provider on a Flexible pool ----------------------------------------------------------
def flexible_provider(azure: Azure, drains: Drains) -> vp.ScaleSetProvider:
    config = vp.autoscaling_config(deploy_values(pools=[pool(scale_set=FLEX)]))["provider"]
    scale_set = vp.ScaleSet(
        SCALE_SET_ID.replace("/ray-workers", f"/{FLEX}"),
        vp.managed_identity(AUTOSCALER),
        azure.compute.url,
        connection_verify=str(azure.ca),
    )
    return vp.ScaleSetProvider(config, "unit", scale_sets={vp.WORKER_TYPE: scale_set}, drain=drains)


def test_the_provider_drains_then_deletes_exactly_the_chosen_flexible_vm(azure: Azure) -> None:
    drains = Drains()
    p = flexible_provider(azure, drains)
    autoscaler_round(p, launch=3)
    workers = p.non_terminated_nodes({})[1:]
    assert len(workers) == 3 and all(VM_NAME.match(w) for w in workers)
    ips = {w: p.internal_ip(w) for w in workers}
    assert set(ips.values()) == {i["ip"] for i in azure.compute.instances(FLEX)}
    victim = workers[1]  # neither the newest nor the oldest
    p.terminate_node(victim)
    p.post_process()
    assert victim not in p.non_terminated_nodes({})
    p.wait(120)
    assert drains.calls == [ips[victim]]
    assert [d["name"] for d in azure.deleted] == [victim]
    assert p.non_terminated_nodes({})[1:] == [workers[0], workers[2]]


def test_a_flexible_worker_ray_refuses_to_drain_is_kept(azure: Azure) -> None:
    drains = Drains()
    p = flexible_provider(azure, drains)
    autoscaler_round(p, launch=2)
    victim = p.non_terminated_nodes({})[1]
    drains.busy.add(p.internal_ip(victim))
    autoscaler_round(p, terminate=[victim])
    assert azure.deleted == [] and victim in p.non_terminated_nodes({})
