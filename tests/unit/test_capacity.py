"""What Azure would refuse before a deployment (issue 37): the quota arithmetic and the reading of
the Usages and Resource SKUs answers (driver/capacity.py, pure), then `up --resource-group`,
`up --terraform-dir` (real terraform plan) and `price` against the fake Resource Manager
(tests/fakes/fake_arm.py, the published wire format): a quota too small, a size restricted in
every zone, a size the region does not offer, each one line with exit code 3 before anything is
created; a size restricted in one zone is a note; a cluster that fits shows the table and
deploys; a usages API that answers 403 is one line and `up` goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from azure_support import SUB, deploy_requests, driver
from driver import capacity
from driver.errors import EXIT_CAPACITY, DriverError
from driver.price import Pool, Sizing
from fakes.fake_arm import FakeAzure, location_restriction, vm_sku, zone_restriction
from fakes.retail_prices import FakeRetailPrices
from support import error_lines, run_driver
from terraform_support import stack_of_inputs

pytestmark = pytest.mark.usefixtures("prices")
"""Azure's Retail Prices API, which `up` asks before it asks for a yes."""

REGION = "westeurope"
D4, F8, D8 = "Standard_D4s_v5", "Standard_F8s_v2", "Standard_D8s_v5"
DSV5, FSV2 = "standardDSv5Family", "standardFSv2Family"
SKUS = {
    D4.lower(): capacity.Sku(D4, DSV5, 4, True, ("1", "2", "3")),
    D8.lower(): capacity.Sku(D8, DSV5, 8, True, ("1", "2", "3")),
    F8.lower(): capacity.Sku(F8, FSV2, 8, True, ("1", "2", "3")),
}


def usage(name: str, current: int, limit: int) -> capacity.Usage:
    return capacity.Usage(name, current, limit)


def plenty(**tight: tuple[int, int]) -> dict[str, capacity.Usage]:
    found = {n: (0, 1000) for n in ("cores", "lowPriorityCores", DSV5, FSV2)}
    found.update(tight)
    return {n.lower(): usage(n, c, lim) for n, (c, lim) in found.items()}


def cluster(*pools: Pool) -> Sizing:
    return Sizing(REGION, (Pool("head", D4, False, (1, 1, 1)), *pools))


# -- the arithmetic ------------------------------------------------------------------------
def test_a_family_needs_every_regular_pool_at_its_maximum_and_spot_counts_apart() -> None:
    deployment = cluster(
        Pool("workers", D4, False, (0, 2, 4)),  # 16
        Pool("big", D8, False, (0, 0, 2)),  # 16, same family
        Pool("cpu", F8, True, (0, 0, 20)),  # 160, Spot: lowPriorityCores only
    )
    check = capacity.judge(deployment, plenty(), SKUS)
    needs = {q.name: q.need for q in check.quotas}
    assert needs == {DSV5: 4 + 16 + 16, "cores": 36, "lowPriorityCores": 160}
    assert check.fits and not check.notes
    # One vCPU short in each: three lines.
    tight = plenty(**{DSV5: (5, 40), "cores": (64, 99), "lowPriorityCores": (0, 159)})
    check = capacity.judge(deployment, tight, SKUS)
    assert check.problems == (
        "quota standardDSv5Family in westeurope: the cluster needs 36 vCPUs at its maximum "
        "size, 35 of 40 free",
        "quota cores (regional vCPUs) in westeurope: the cluster needs 36 vCPUs at its maximum "
        "size, 35 of 99 free",
        "quota lowPriorityCores (Spot vCPUs) in westeurope: the cluster needs 160 vCPUs at its "
        "maximum size, 159 of 159 free",
    )
    # Exactly enough fits.
    exact = plenty(**{DSV5: (4, 40), "cores": (63, 99), "lowPriorityCores": (0, 160)})
    assert capacity.judge(deployment, exact, SKUS).fits


def test_a_spot_head_counts_against_the_spot_quota_only() -> None:
    """headPriority Spot: the head's vCPUs leave its family's and the regional quota for the
    Spot quota, with the Spot workers'; a size that cannot run as Spot is refused for it."""
    values: dict[str, Any] = {
        "location": REGION, "headVmSize": D8, "headPriority": "Spot", "workerVmSize": F8,
        "workerSpotEnabled": True, "workerMinCount": 0, "workerDefaultCount": 2,
        "workerMaxCount": 4,
    }  # fmt: skip
    deployment = capacity.sizing(values, arm=True)
    assert deployment.pools[0] == Pool("head", D8, True, (1, 1, 1))
    check = capacity.judge(deployment, plenty(**{"lowPriorityCores": (0, 39)}), SKUS)
    assert {q.name: q.need for q in check.quotas} == {"lowPriorityCores": 8 + 32}
    assert check.problems == (
        "quota lowPriorityCores (Spot vCPUs) in westeurope: the cluster needs 40 vCPUs at its "
        "maximum size, 39 of 39 free",
    )
    # The same head as a regular VM: its family's and the regional quota, not Spot's.
    regular = capacity.sizing({**values, "headPriority": "Regular"}, arm=True)
    needs = {q.name: q.need for q in capacity.judge(regular, plenty(), SKUS).quotas}
    assert needs == {DSV5: 8, "cores": 8, "lowPriorityCores": 32}
    no_spot = {D8.lower(): capacity.Sku(D8, DSV5, 8, False, ("1", "2", "3"))}
    check = capacity.judge(deployment, plenty(), {**SKUS, **no_spot})
    assert check.problems == (
        "head: Standard_D8s_v5 cannot run as Spot in westeurope (LowPriorityCapable False)",
    )


def test_an_update_compares_with_the_limit_alone() -> None:
    """In an existing group the cluster's own VMs are in currentValue already."""
    deployment = cluster(Pool("workers", D4, False, (0, 2, 4)))  # 20 vCPUs
    in_use = plenty(**{DSV5: (12, 20)})
    assert not capacity.judge(deployment, in_use, SKUS).fits
    assert capacity.judge(deployment, in_use, SKUS, existing=True).fits
    over = capacity.judge(deployment, plenty(**{DSV5: (0, 19)}), SKUS, existing=True)
    assert over.problems == (
        "quota standardDSv5Family in westeurope: the cluster needs 20 vCPUs at its maximum "
        "size, the limit is 19",
    )


def test_availability_absent_restricted_every_zone_one_zone_and_spot() -> None:
    skus = {
        **SKUS,
        D8.lower(): capacity.Sku(D8, DSV5, 8, True, ("1", "2", "3"), "NotAvailableForSubscription"),
        F8.lower(): capacity.Sku(F8, FSV2, 8, False, ("1", "2"), None, {"2": "QuotaId"}),
    }
    deployment = cluster(
        Pool("gone", "Standard_X9", False, (0, 0, 1)),
        Pool("big", D8, False, (0, 0, 1)),
        Pool("cpu", F8, True, (0, 0, 1)),
        Pool("fast", F8, False, (0, 0, 1)),
    )
    check = capacity.judge(deployment, plenty(), skus)
    assert check.problems == (
        "gone: Standard_X9 is not offered in westeurope",
        "big: Standard_D8s_v5 is restricted in westeurope for this subscription "
        "(NotAvailableForSubscription)",
        "cpu: Standard_F8s_v2 cannot run as Spot in westeurope (LowPriorityCapable False)",
    )
    assert check.notes == (
        "fast: Standard_F8s_v2 is restricted in zone 2 of westeurope (QuotaId); its VMs are "
        "regional (no zones given), so Azure places them in zone 1",
    )
    every = {F8.lower(): capacity.Sku(F8, FSV2, 8, True, ("1", "2"), None, {"1": "X", "2": "X"})}
    check = capacity.judge(cluster(Pool("fast", F8, False, (0, 0, 1))), plenty(), {**SKUS, **every})
    assert check.problems == (
        "fast: Standard_F8s_v2 is restricted in every zone of westeurope (X)",
    )


def test_a_size_restricted_in_one_of_a_pools_zones_is_refused_for_that_pool() -> None:
    """A pool with zones has its VMs in exactly those zones: a size restricted (or not offered)
    in one of them is refused for that pool, while the regional pool of the same size gets the
    note (Azure places it in the other zones)."""
    f8 = capacity.Sku(F8, FSV2, 8, True, ("1", "2", "3"), None, {"2": "QuotaId"})
    deployment = cluster(
        Pool("cpu", F8, True, (0, 0, 4), ("1", "2")),
        Pool("fast", F8, False, (0, 0, 1)),
        Pool("far", F8, False, (0, 0, 1), ("1", "3")),
    )
    check = capacity.judge(deployment, plenty(), {**SKUS, F8.lower(): f8})
    assert check.problems == (
        "cpu: Standard_F8s_v2 is restricted in zone 2 (QuotaId) of westeurope, one of the "
        "pool's zones (1, 2)",
    )
    assert [r.available for r in check.rows] == ["yes", "not in zone 2", "not in zone 2", "yes"]
    assert check.notes == (
        "fast: Standard_F8s_v2 is restricted in zone 2 of westeurope (QuotaId); its VMs are "
        "regional (no zones given), so Azure places them in zone 1, 3",
    )
    # A zone the size is not offered in (here: a region of two zones), and a region of none.
    two = capacity.Sku(F8, FSV2, 8, True, ("1", "2"))
    check = capacity.judge(cluster(Pool("far", F8, False, (0, 0, 1), ("1", "3"))), plenty(),
                           {**SKUS, F8.lower(): two})  # fmt: skip
    assert check.problems == (
        "far: Standard_F8s_v2 is not offered in zone 3 of westeurope, one of the pool's zones "
        "(1, 3)",
    )
    regional = capacity.Sku(F8, FSV2, 8, True, ())
    check = capacity.judge(cluster(Pool("far", F8, False, (0, 0, 1), ("1",))), plenty(),
                           {**SKUS, F8.lower(): regional})  # fmt: skip
    assert check.problems == (
        "far: Standard_F8s_v2 is not offered in zone 1 of westeurope, one of the pool's zones (1)",
    )


def test_the_wire_answers_are_read_and_checked() -> None:
    page1 = {"value": [{"name": {"value": "cores"}, "currentValue": 3, "limit": 10}]}
    page2 = {"value": [{"name": {"value": "standardDSv5Family"}, "currentValue": 0, "limit": 4,
                        "unit": "Count"}]}  # fmt: skip
    found = capacity.usages([page1, page2])
    assert found["standarddsv5family"] == usage("standardDSv5Family", 0, 4)
    assert found["cores"].free == 7
    bad_count = {"name": {"value": "cores"}, "currentValue": "3", "limit": 10}
    for bad in ({"value": {}}, {"value": [{"name": "cores"}]}, {"value": [bad_count]}):
        with pytest.raises(DriverError, match="the Compute usages: not in the shape Azure"):
            capacity.usages([bad])
    restricted = vm_sku(F8, FSV2, 8, restrictions=(zone_restriction(REGION, ["3"]),
                                                    location_restriction("eastus")))  # fmt: skip
    disk = {"resourceType": "disks", "name": "Premium_LRS", "locations": [REGION]}
    found_skus = capacity.skus([{"value": [disk, restricted, vm_sku(D4, DSV5, 4, ("eastus",))]}],
                               REGION)  # fmt: skip
    assert list(found_skus) == [F8.lower()]  # D4 is offered in eastus only; disks are no VMs
    sku = found_skus[F8.lower()]
    assert (sku.family, sku.vcpus, sku.spot_capable, sku.zones) == (FSV2, 8, True, ("1", "2", "3"))
    assert sku.region_restriction is None  # the Location restriction is eastus's
    assert sku.zone_restrictions == {"3": "NotAvailableForSubscription"}


def test_worker_pools_take_the_place_of_the_single_pool() -> None:
    values: dict[str, Any] = {
        "location": "westeurope",
        "headVmSize": D4,
        "workerVmSize": D4,
        "workerSpotEnabled": False,
        "workerMinCount": 0,
        "workerDefaultCount": 2,
        "workerMaxCount": 4,
        "workerPools": [{"name": "cpu", "vmSize": F8, "spotEnabled": True, "maxCount": 20,
                         "zones": ["1", "2"], "zoneBalance": True},
                        {"name": "gpu", "maxCount": 2}],
    }  # fmt: skip
    sizing = capacity.sizing(values, arm=True)
    assert sizing.pools == (
        Pool("head", D4, False, (1, 1, 1)),
        Pool("cpu", F8, True, (0, 2, 20), ("1", "2")),
        Pool("gpu", D4, False, (0, 2, 2)),
    )
    with pytest.raises(DriverError, match="pool cpu's zones must be a list of zones"):
        capacity.sizing({**values, "workerPools": [{"name": "cpu", "zones": "1"}]}, arm=True)
    terraform = {
        "location": "westeurope",
        "head_vm_size": D4,
        "worker_vm_size": D4,
        "worker_spot_enabled": False,
        "worker_min_count": 0,
        "worker_default_count": 2,
        "worker_max_count": 4,
        "worker_pools": {"cpu": {"vm_size": F8, "spot_enabled": None, "max_count": 8,
                                 "zones": ["3"], "zone_balance": False}},
    }  # fmt: skip
    assert capacity.sizing(terraform, arm=False).pools[1] == Pool(
        "cpu", F8, False, (0, 2, 8), ("3",)
    )


def test_a_priority_mix_counts_its_regular_share_against_the_regular_quotas() -> None:
    """A Spot pool with Spot Priority Mix at its maximum: its regular share needs its family's
    and the region's quota, its Spot share the Spot quota; a split that is not a whole number
    of VMs (Azure publishes no rounding) counts the larger share against each quota."""
    # Azure's own example: base 10, 50 %, 30 VMs = 20 regular and 10 Spot, exactly.
    assert Pool("cpu", F8, True, (0, 0, 30), priority_mix=(10, 50)).regular(30) == (20, 20)
    assert Pool("cpu", F8, True, (0, 0, 5), priority_mix=(10, 50)).regular(5) == (5, 5)
    assert Pool("cpu", F8, True, (0, 0, 5)).regular(5) == (0, 0)  # no mix: all Spot
    assert Pool("cpu", F8, False, (0, 0, 5)).regular(5) == (5, 5)  # a regular pool
    # 1 first, then 25 % of the 19 above it (4.75): 5 or 6 regular, 15 or 14 Spot.
    mixed = Pool("cpu", F8, True, (0, 0, 20), priority_mix=(1, 25))
    assert mixed.regular(20) == (5, 6)
    check = capacity.judge(cluster(mixed), plenty(), SKUS)
    needs = {q.name: q.need for q in check.quotas}
    assert needs == {DSV5: 4, FSV2: 6 * 8, "cores": 4 + 6 * 8, "lowPriorityCores": 15 * 8}
    assert [(r.pool.name, r.vm_size, r.spot, r.count, r.quota) for r in check.rows] == [
        ("head", D4, False, 1, DSV5), ("cpu", F8, False, 6, FSV2),
        ("cpu", F8, True, 15, "lowPriorityCores"),
    ]  # fmt: skip
    # Without the mix the same pool needs no regular quota: the mix is what asks for it.
    plain = capacity.judge(cluster(Pool("cpu", F8, True, (0, 0, 20))), plenty(), SKUS)
    assert {q.name: q.need for q in plain.quotas} == {DSV5: 4, "cores": 4, "lowPriorityCores": 160}
    tight = capacity.judge(cluster(mixed), plenty(**{FSV2: (0, 47)}), SKUS)
    assert tight.problems == (
        "quota standardFSv2Family in westeurope: the cluster needs 48 vCPUs at its maximum "
        "size, 47 of 47 free",
    )
    # A size that cannot run as Spot: its Spot share is refused, its regular share is not.
    no_spot = {**SKUS, F8.lower(): capacity.Sku(F8, FSV2, 8, False, ("1", "2", "3"))}
    check = capacity.judge(cluster(mixed), plenty(), no_spot)
    assert check.problems == (
        "cpu: Standard_F8s_v2 cannot run as Spot in westeurope (LowPriorityCapable False)",
    )
    shown = [(r.spot, r.available) for r in check.rows[1:]]
    assert shown == [(False, "yes"), (True, "not as Spot")]


def test_an_instance_mix_needs_each_sizes_family_quota_and_each_size_available() -> None:
    """Any VM of an Instance Mix may be of any of its sizes (and Azure asks for quota for every
    size of a mix): each family needs the pool's VMs at its largest size there, the totals all
    of them at the largest size of the mix; each size must be offered."""
    mixed = Pool("cpu", D4, False, (0, 0, 4), mix_sizes=(D4, F8))
    check = capacity.judge(cluster(mixed), plenty(), SKUS)
    assert {q.name: q.need for q in check.quotas} == {
        DSV5: 4 + 4 * 4, FSV2: 4 * 8, "cores": 4 + 4 * 8,
    }  # fmt: skip
    assert [(r.vm_size, r.count, r.quota, r.available) for r in check.rows[1:]] == [
        (D4, 4, DSV5, "yes"), (F8, 4, FSV2, "yes"),
    ]  # fmt: skip
    # A Spot mix: the Spot quota for all of them at the largest size; a size the region does
    # not offer is refused for the pool, by name.
    spot = Pool("cpu", D4, True, (0, 0, 4), mix_sizes=(D4, F8, "Standard_D8as_v5"))
    check = capacity.judge(cluster(spot), plenty(), SKUS)
    assert {q.name: q.need for q in check.quotas} == {DSV5: 4, "cores": 4, "lowPriorityCores": 32}
    assert check.problems == ("cpu: Standard_D8as_v5 is not offered in westeurope",)
    # Both mixes: each share of each size.
    both = Pool("cpu", D4, True, (0, 0, 10), priority_mix=(2, 0), mix_sizes=(D4, D8))
    check = capacity.judge(cluster(both), plenty(), SKUS)
    assert {q.name: q.need for q in check.quotas} == {
        DSV5: 4 + 2 * 8, "cores": 4 + 2 * 8, "lowPriorityCores": 8 * 8,
    }  # fmt: skip
    assert len(check.rows) == 1 + 2 * 2


def test_worker_pools_bring_their_mixes() -> None:
    """The pools' Spot Priority Mix and Instance Mix as each stack names them (a regular pool's
    Priority Mix is none); a mix without the pool's size or with a bad number is one line."""
    values: dict[str, Any] = {
        "location": "westeurope", "headVmSize": D4, "workerVmSize": D4,
        "workerSpotEnabled": False, "workerMinCount": 0, "workerDefaultCount": 2,
        "workerMaxCount": 4,
        "workerPools": [{"name": "cpu", "spotEnabled": True, "maxCount": 20,
                         "priorityMix": {"baseRegularCount": 1, "regularPercentageAboveBase": 25},
                         "instanceMix": {"vmSizes": [D4, D8], "allocationStrategy": "LowestPrice"}},
                        {"name": "gpu", "priorityMix": {"baseRegularCount": 1}}],
    }  # fmt: skip
    cpu, gpu = capacity.sizing(values, arm=True).pools[1:]
    assert (cpu.priority_mix, cpu.mix_sizes, cpu.sizes) == ((1, 25), (D4, D8), (D4, D8))
    assert (gpu.priority_mix, gpu.mix_sizes, gpu.sizes) == (None, (), (D4,))
    bad = {**values, "workerPools": [{"name": "cpu", "instanceMix": {"vmSizes": [F8, D8]}}]}
    with pytest.raises(DriverError, match="pool cpu's instanceMix must include the pool's VM size"):
        capacity.sizing(bad, arm=True)
    bad = {**values, "workerPools": [{"name": "cpu", "spotEnabled": True,
                                      "priorityMix": {"baseRegularCount": 1.5}}]}  # fmt: skip
    with pytest.raises(DriverError, match="priorityMix: its two numbers must be whole, 0 to 100"):
        capacity.sizing(bad, arm=True)
    terraform = {
        "location": "westeurope", "head_vm_size": D4, "worker_vm_size": D4,
        "worker_spot_enabled": True, "worker_min_count": 0, "worker_default_count": 2,
        "worker_max_count": 4,
        "worker_pools": {"cpu": {"vm_size": F8, "spot_enabled": None, "max_count": 8,
                                 "orchestration_mode": "Flexible",
                                 "priority_mix": {"base_regular_count": 2,
                                                  "regular_percentage_above_base": 0},
                                 "instance_mix": None}},
    }  # fmt: skip
    assert capacity.sizing(terraform, arm=False).pools[1] == Pool(
        "cpu", F8, True, (0, 2, 8), (), (2, 0)
    )


# -- up and price against the fake Resource Manager ------------------------------------------
def up(fake: FakeAzure, home: Path, params: Path, *args: str) -> Any:
    return driver(fake, home, "up", "--resource-group", "rg-ray", "--location", REGION,
                  "--parameters", str(params), *args)  # fmt: skip


def with_values(params: Path, **values: Any) -> Path:
    doc = json.loads(params.read_text())
    doc["parameters"].update({k: {"value": v} for k, v in values.items()})
    params.write_text(json.dumps(doc))
    return params


def capacity_lines(stdout: str) -> list[str]:
    """The capacity table: its title and the rows under it."""
    lines = stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("Capacity in "))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), None)
    return lines[start:end]


def nothing_created(azure: FakeAzure) -> None:
    """No PUT (the resource group, the deployment), no what-if: at most the score's POST."""
    assert [m for m, _ in deploy_requests(azure) if m != "POST"] == []
    assert not azure.resource_groups
    assert not [p for m, p in deploy_requests(azure) if p in ("whatIf", "rg-ray")]


def refused(azure: FakeAzure, home: Path, params: Path) -> str:
    """``up --yes`` that the capacity check refuses: exit code 3, nothing created. Its verdict
    (the last line)."""
    r = up(azure, home, params, "--yes")
    assert r.returncode == 3, r.stderr
    nothing_created(azure)
    return error_lines(r.stderr)[-1]


def test_a_cluster_that_fits_shows_the_table_and_deploys(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    fake.page_size = 2  # usages and sizes come in pages: nextLink followed
    fake.usages["standardDSv5Family"] = (4, 24)
    r = up(fake, tmp_path, params, "--yes")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = capacity_lines(out)
    assert lines[0].startswith("Capacity in westeurope at the cluster's maximum size (")
    assert lines[1].split() == ["pool", "VM", "size", "priority", "VMs", "vCPUs", "quota", "needs",
                                "free/limit", "zones", "available", "Spot", "score"]  # fmt: skip
    assert lines[2].split() == ["head", D4, "regular", "1", "4", DSV5, "20", "20/24", "1,2,3",
                                "yes", "-"]  # fmt: skip
    assert lines[3].split() == ["workers", D4, "regular", "4", "16", DSV5, "20", "20/24",
                                "1,2,3", "yes", "-"]  # fmt: skip
    assert lines[4].split() == ["all", "regular", "cores", "20", "100/100"]
    assert "Capacity: the cluster fits in westeurope at its maximum size." in error_lines(r.stderr)
    assert out.index("Capacity in") < out.index("Create")  # before the what-if
    # before anything is created: the results storage `up` deploys first, then the cluster
    assert deploy_requests(fake) == [
        ("PUT", "rg-ray-results"), ("POST", "whatIf"), ("PUT", "ray-results"),
        ("PUT", "rg-ray"), ("POST", "whatIf"), ("PUT", "ray-cluster"),
    ]  # fmt: skip
    asked = [p for p, _, _ in fake.requests if "Microsoft.Compute" in p]
    assert asked.count(f"/subscriptions/{SUB}/providers/Microsoft.Compute/skus") >= 2  # paged


def test_a_quota_too_small_is_one_line_exit_3_and_nothing_created(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    fake.usages["standardDSv5Family"] = (8, 24)  # 16 free, the cluster needs 20 at its maximum
    r = up(fake, tmp_path, params, "--yes")
    assert r.returncode == EXIT_CAPACITY == 3
    assert error_lines(r.stderr)[-1] == (
        "error: capacity: Azure would refuse the cluster at its maximum size: quota "
        "standardDSv5Family in westeurope: the cluster needs 20 vCPUs at its maximum size, 16 of "
        "24 free (nothing created; --ignore-capacity deploys anyway)"
    )
    assert "20  16/24 SHORT" in r.stdout
    nothing_created(fake)
    assert fake.bodies == []
    r = up(fake, tmp_path, params, "--yes", "--ignore-capacity")
    assert r.returncode == 0, r.stderr
    assert (
        "Capacity: Azure would refuse the cluster at its maximum size: quota standardDSv5Family in "
        "westeurope: the cluster needs 20 vCPUs at its maximum size, 16 of 24 free; deploying "
        "anyway (--ignore-capacity)."
    ) in error_lines(r.stderr)
    assert deploy_requests(fake)[-1] == ("PUT", "ray-cluster")


def test_spot_workers_count_against_the_spot_quota_with_their_placement_score(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    with_values(params, workerSpotEnabled=True, workerMaxCount=10)
    fake.usages["lowPriorityCores"] = (8, 40)  # 32 free, 40 needed; the family quota is not asked
    fake.usages["standardDSv5Family"] = (0, 4)
    fake.spot_scores[D4.lower()] = "Medium"
    r = up(fake, tmp_path, params, "--yes")
    assert r.returncode == 3
    assert error_lines(r.stderr)[-1] == (
        "error: capacity: Azure would refuse the cluster at its maximum size: quota "
        "lowPriorityCores (Spot vCPUs) in westeurope: the cluster needs 40 vCPUs at its maximum "
        "size, 32 of 40 free (nothing created; --ignore-capacity deploys anyway)"
    )
    [row] = [x for x in capacity_lines(r.stdout) if x.startswith("  workers")]
    assert row.split() == ["workers", D4, "Spot", "10", "40", "lowPriorityCores", "40",
                           "32/40", "SHORT", "1,2,3", "yes", "1", "Medium,", "2", "Medium,", "3",
                           "Medium"]  # fmt: skip
    [(_, path, body)] = fake.bodies  # the score's POST, nothing else
    assert path.endswith(f"/locations/{REGION}/placementScores/spot/generate")
    assert body == {"desiredLocations": [REGION], "desiredSizes": [{"sku": D4}],
                    "desiredCount": 10, "availabilityZones": True}  # fmt: skip
    nothing_created(fake)
    # Without the Compute Recommendations role Azure answers 403: the score is not checked.
    fake.errors[path.lower()] = (403, "AuthorizationFailed", "no placementScores/spot/action")
    r = up(fake, tmp_path, params, "--yes", "--ignore-capacity")
    assert r.returncode == 0, r.stderr
    [row] = [x for x in capacity_lines(r.stdout) if x.startswith("  workers")]
    assert row.split()[-5:] == ["yes", "not", "checked", "(HTTP", "403)"]


def test_a_size_the_region_does_not_offer_is_one_line(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    fake.skus = [s for s in fake.skus if s["name"] != D4] + [
        vm_sku(D4, DSV5, 4, locations=("eastus",))
    ]
    assert refused(fake, tmp_path, params) == (
        "error: capacity: Azure would refuse the cluster at its maximum size: head: "
        "Standard_D4s_v5 is not offered in westeurope; workers: Standard_D4s_v5 is not offered "
        "in westeurope (nothing created; --ignore-capacity deploys anyway)"
    )


def test_a_size_restricted_in_one_zone_is_a_note_in_every_zone_a_refusal(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    with_values(params, workerVmSize=F8)
    [f8] = [s for s in fake.skus if s["name"] == F8]
    f8["restrictions"] = [zone_restriction(REGION, ["3"])]
    r = up(fake, tmp_path, params, "--yes")
    assert r.returncode == 0, r.stderr
    assert (
        "Capacity note: workers: Standard_F8s_v2 is restricted in zone 3 of westeurope "
        "(NotAvailableForSubscription); its VMs are regional (no zones given), so Azure places "
        "them in zone 1, 2."
    ) in error_lines(r.stderr)
    [row] = [x for x in capacity_lines(r.stdout) if x.startswith("  workers")]
    assert "  1,2  " in row and "  not in zone 3  " in row
    f8["restrictions"] = [zone_restriction(REGION, ["1", "2", "3"])]
    fake.resource_groups.clear()
    fake.bodies.clear()
    assert refused(fake, tmp_path, params) == (
        "error: capacity: Azure would refuse the cluster at its maximum size: workers: "
        "Standard_F8s_v2 is restricted in every zone of westeurope (NotAvailableForSubscription) "
        "(nothing created; --ignore-capacity deploys anyway)"
    )
    # The same restriction in one zone, for a pool that chose that zone: refused for it.
    f8["restrictions"] = [zone_restriction(REGION, ["3"])]
    with_values(params, workerPools=[{"name": "workers", "zones": ["2", "3"]}])
    assert refused(fake, tmp_path, params) == (
        "error: capacity: Azure would refuse the cluster at its maximum size: workers: "
        "Standard_F8s_v2 is restricted in zone 3 (NotAvailableForSubscription) of westeurope, "
        "one of the pool's zones (2, 3) (nothing created; --ignore-capacity deploys anyway)"
    )


def test_usages_refused_with_403_is_one_line_and_up_goes_on(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    path = f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/{REGION}/usages"
    fake.errors[path.lower()] = (403, "AuthorizationFailed", "The client does not have "
                                 "authorization to perform action 'Microsoft.Compute/locations/"
                                 "usages/read'.")  # fmt: skip
    r = up(fake, tmp_path, params, "--yes")
    assert r.returncode == 0, r.stderr
    [line] = [x for x in error_lines(r.stderr) if x.startswith("Capacity")]
    assert line == (
        f"Capacity not checked: GET {fake.endpoint}{path}: HTTP 403 AuthorizationFailed: The "
        "client does not have authorization to perform action "
        "'Microsoft.Compute/locations/usages/read'.; going on without it."
    )
    assert "Capacity in" not in r.stdout
    assert deploy_requests(fake)[-1] == ("PUT", "ray-cluster")


def test_an_existing_group_is_checked_against_the_limits_alone(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
) -> None:
    fake.resource_groups.add((SUB, "rg-ray"))
    fake.groups[(SUB, "rg-ray")] = {"location": REGION, "tags": {}}
    fake.usages["standardDSv5Family"] = (12, 20)  # the running cluster's own 12
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "limit 20" in r.stdout and "the resource group exists" in r.stdout
    fake.usages["standardDSv5Family"] = (12, 19)
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes")  # fmt: skip
    assert r.returncode == 3
    assert "20 vCPUs at its maximum size, the limit is 19" in error_lines(r.stderr)[-1]


def test_price_checks_capacity_with_a_subscription_and_says_so_without(
    fake: FakeAzure,
    tmp_path: Path,
    params: Path,
    prices: FakeRetailPrices,
) -> None:
    args = ("price", "--parameters", str(params), "--location", REGION)
    fake.usages["cores"] = (90, 100)
    r = driver(fake, tmp_path, *args)
    assert r.returncode == 3
    assert "Hourly price in westeurope" in r.stdout and "Capacity in westeurope" in r.stdout
    assert error_lines(r.stderr)[-1] == (
        "error: capacity: Azure would refuse the cluster at its maximum size: quota cores "
        "(regional vCPUs) in westeurope: the cluster needs 20 vCPUs at its maximum size, 10 of "
        "100 free (counted as a new cluster: free = limit - in use)"
    )
    no_subscription = {"AZURE_SUBSCRIPTION_ID": "", "ARM_SUBSCRIPTION_ID": ""}
    r = run_driver(
        *args, home=tmp_path, env={**no_subscription, "RAYDRIVER_PRICES_URL": prices.url}
    )
    assert r.returncode == 0, r.stderr
    assert error_lines(r.stderr) == [
        "Capacity not checked: no subscription to ask (pass --subscription ID or set "
        "$AZURE_SUBSCRIPTION_ID); going on without it."
    ]


def test_terraform_up_checks_after_the_plan_and_applies_nothing(
    fake: FakeAzure,
    tmp_path: Path,
    prices: FakeRetailPrices,
) -> None:
    """The stack's own variables.tf and checks.tf with a head resource (no provider): the plan's
    variables are checked in $ARM_SUBSCRIPTION_ID's subscription, against the limits alone."""
    stack = stack_of_inputs(tmp_path / "tf")
    fake.usages["standardDSv5Family"] = (0, 19)  # the example's head + 4 workers need 20
    env = {**fake.env(), "AZURE_SUBSCRIPTION_ID": "", "ARM_SUBSCRIPTION_ID": SUB,
           "CHECKPOINT_DISABLE": "1", "RAYDRIVER_PRICES_URL": prices.url}  # fmt: skip
    r = run_driver("up", "--yes", "--terraform-dir", str(stack), "--no-results-storage",
                   home=tmp_path, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 3
    assert error_lines(r.stderr)[-1] == (
        "error: capacity: Azure would refuse the cluster at its maximum size: quota "
        "standardDSv5Family in westeurope: the cluster needs 20 vCPUs at its maximum size, the "
        "limit is 19 (nothing applied; --ignore-capacity applies anyway)"
    )
    assert r.stdout.index("Plan: 3 to add") < r.stdout.index("Capacity in westeurope")
    assert not (stack / "terraform.tfstate").exists()
    assert fake.bodies == []
