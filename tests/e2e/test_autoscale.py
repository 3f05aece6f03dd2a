"""Scaling that follows Ray, end to end on a rehearsal cluster in scaling mode ray: Ray's
autoscaler on the head, the node provider (python/nodekit/node/azure_vmss_provider.py) calling
the fake Azure Compute on the bridge through azure-mgmt-compute with the head's autoscaler
identity, and that fake booting a worker container when the capacity rises and removing exactly
the container of a deleted instance (tests/e2e/autoscale_cluster.py).

One cluster for the module (its own name and subnet, not the session's): head only at first,
two worker pools, each its own Flexible scale set (the stacks' default mode) and Ray node type:
the default (CPU) pool, max 2 workers, and the GPU pool, max 1, whose containers declare a GPU
to Ray without hardware (no GPU, no driver: the GPU bootstrap is proven in
tests/unit/test_gpu_node.py); idle timeout 1 minute. RAYDRIVER_REUSE_AUTOSCALE=1 runs against
one already up (``rehearse up --name asc --subnet 10.218.0.0/24 --scaling-mode ray
--gpu-pool-max 1 --orchestration-mode Flexible ...``) and keeps it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import autoscale_cluster as ac
from nodekit.node.azure_vmss_provider import WORKER_TYPE
from nodekit.rehearsal.services import compute
from nodekit.rehearsal.standins.azure_compute import is_flexible_vm_of
from nodekit.rehearsal.state import DEFAULT_POOL, GPU_POOL
from support import end_follower, job_failure, logs_until, run_benchmark, run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

IDLE_S = ac.IDLE_TIMEOUT_MINUTES * 60
BOOT_S = 900
"""A worker container's cold boot and join, with room for a slow package mirror."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[ac.Cluster]:
    if os.geteuid() != 0:
        pytest.fail("the rehearsal cluster needs root (CI runs as root)")
    reuse = os.environ.get("RAYDRIVER_REUSE_AUTOSCALE") == "1"
    if not reuse:
        up = ac.up()
        assert up.returncode == 0, f"rehearse up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
    try:
        yield ac.Cluster.load()
    finally:
        if not reuse and os.environ.get("RAYDRIVER_KEEP_REHEARSAL") != "1":
            down = ac.down()
            assert down.returncode == 0, down.stderr


def result(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_the_pools_are_flexible_scale_sets_as_azure_answers_for_them(cluster: ac.Cluster) -> None:
    """What the node provider reads of each pool's scale set: the fake Compute's answer in
    Azure's shape for Flexible orchestration (what Flexible has and what it has not)."""
    assert ac.ORCHESTRATION_MODE == "Flexible"
    for pool in (DEFAULT_POOL, GPU_POOL):
        doc = cluster.scale_set(pool)
        assert doc["name"] == compute.scale_set_name(cluster.name, pool)
        props = doc["properties"]
        assert props["orchestrationMode"] == "Flexible", doc
        assert props["singlePlacementGroup"] is False and props["platformFaultDomainCount"] == 1
        assert "overprovision" not in props and "scaleInPolicy" not in props, doc
        assert doc["sku"]["capacity"] == 0  # to zero: the pools' min


def test_demand_adds_a_worker_that_runs_the_job_and_idle_removes_it(
    cluster: ac.Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    assert cluster.instances() == [] and cluster.containers() == {}
    assert cluster.instances(GPU_POOL) == []
    t0 = time.time()

    # The cluster as the driver shows it: Ray's autoscaler reports (after its first round), the
    # head alone.
    def status() -> str:
        st = run_driver("status", *cluster.cluster_args, home=home)
        assert st.returncode == 0, st.stderr
        return st.stdout

    cluster.wait("the autoscaler's first report", lambda: "Autoscaler status" in status(), 120)
    text = status()
    assert "1 ray.head.default" in text and "ray.worker." not in text, text
    job = ac.write_job(tmp_path / "demand", ac.DEMAND_JOB)
    r = run_driver(
        "submit", *cluster.cluster_args, "--submission-id", "demand-1", str(job),
        home=home, timeout=BOOT_S + 300,
    )  # fmt: skip
    assert r.returncode == 0, job_failure(r)
    out = result(r.stdout)
    [instance] = cluster.instances()
    # The task ran on the worker the autoscaler added: the fake's new instance, a container here.
    assert out["ip"] == instance["ip"] != cluster.head_ip
    assert list(cluster.containers().values()) == [instance["ip"]]
    # A Flexible pool's VM: a virtual machine of its own whose name is its instance id, and so
    # its metadata service says (the name the watcher finds in its Scheduled Events).
    vm = instance["instanceId"]
    scale_set = compute.scale_set_name(cluster.name, DEFAULT_POOL)
    assert is_flexible_vm_of(scale_set, vm), vm
    container = cluster.container_name(DEFAULT_POOL, vm)
    assert cluster.containers() == {container: instance["ip"]}
    meta = cluster.metadata(container)
    assert (meta["name"], meta["vmScaleSetName"]) == (vm, scale_set), meta
    assert meta["resourceId"].endswith(f"/providers/Microsoft.Compute/virtualMachines/{vm}"), meta
    # The node provider read it as Flexible: the VM's own interface (Network's API), never the
    # scale set's interface list (which a Flexible scale set has not).
    reads = [path.lower() for method, path in cluster.requests(t0) if method == "GET"]
    assert any(f"/microsoft.network/networkinterfaces/{vm.lower()}" in p for p in reads), reads
    assert not any(p.endswith("/networkinterfaces") for p in reads), reads
    # CPU demand scaled the CPU pool only: the GPU pool's scale set stayed at 0, never written.
    assert cluster.instances(GPU_POOL) == [] and cluster.containers(GPU_POOL) == {}
    assert set(cluster.writes(t0)) == {("capacity", "workers")}
    # Idle now: drained and deleted within the idle timeout (plus the autoscaler's rounds and
    # the Terminate notice the worker acknowledges), its container gone.
    gone = cluster.wait(
        "the idle worker is deleted",
        lambda: cluster.instances() == [] and cluster.containers() == {},
        IDLE_S + 300,
    )
    assert gone - out["started"] >= IDLE_S - 5  # not before the idle timeout
    assert "ray.worker." not in status()
    # Exactly that VM deleted by name, after its Terminate notice (naming the VM) was
    # acknowledged by the worker's watcher: drained and stopped before it went.
    assert f"scale set: instance {vm} deleted (its Terminate notice acknowledged)" in (
        cluster.hook_lines()
    )
    # Both pools at their minimum (0); the GPU pool's scale set was never touched.
    assert cluster.instances(GPU_POOL) == [] and cluster.containers(GPU_POOL) == {}
    assert {pool for _, pool in cluster.writes(t0)} == {"workers"}


def test_a_worker_hosting_a_running_actor_is_never_chosen(
    cluster: ac.Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    cpus = os.cpu_count() or 1
    job = ac.write_job(tmp_path / "actor", ac.ACTOR_JOB)
    r = run_driver(
        "submit", *cluster.cluster_args, "--submission-id", "actor-1", "--no-wait",
        "--env", f"WORKER_CPUS={cpus}", str(job), home=home,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr

    # The job's log, followed until it says where the actor and the burst ran (the job holds
    # its actor until it is stopped).
    follower, lines = logs_until(
        cluster.cluster_args, "actor-1", lambda ln: ln.startswith("RESULT "), home=home,
        timeout=2 * BOOT_S,
    )  # fmt: skip
    end_follower(follower)
    out = result(lines[-1])
    assert out["actor"] != out["burst"]
    # The burst's worker goes after the idle timeout; the actor's stays, however long.
    cluster.wait(
        "the burst's worker is deleted",
        lambda: out["burst"] not in cluster.containers().values(),
        IDLE_S + 300,
    )
    time.sleep(IDLE_S)  # a whole idle timeout more
    assert [i["ip"] for i in cluster.instances()] == [out["actor"]]
    assert list(cluster.containers().values()) == [out["actor"]]
    # Once the job (and its actor) ends, that worker is idle and goes too: scaled to zero.
    stop = run_driver("stop", *cluster.cluster_args, "actor-1", home=home)
    assert stop.returncode == 0, stop.stderr
    cluster.wait(
        "scaled to zero",
        lambda: cluster.instances() == [] and cluster.containers() == {},
        IDLE_S + 300,
    )
    assert cluster.instances(GPU_POOL) == []  # CPU demand never went to the GPU pool


def test_gpu_demand_scales_only_the_gpu_pool_lands_there_and_idle_returns_it_to_zero(
    cluster: ac.Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    assert cluster.instances(GPU_POOL) == [] and cluster.containers() == {}
    assert cluster.instances() == []
    t0 = time.time()
    job = ac.write_job(tmp_path / "gpu", ac.GPU_JOB)
    r = run_driver(
        "submit", *cluster.cluster_args, "--submission-id", "gpu-1", str(job),
        home=home, timeout=BOOT_S + 300,
    )  # fmt: skip
    assert r.returncode == 0, job_failure(r)
    out = result(r.stdout)
    # The GPU pool's scale set got one more instance, a container of that pool here ...
    [instance] = cluster.instances(GPU_POOL)
    assert is_flexible_vm_of(compute.scale_set_name(cluster.name, GPU_POOL), instance["instanceId"])
    assert cluster.containers() == {
        cluster.container_name(GPU_POOL, instance["instanceId"]): instance["ip"]
    }
    assert cluster.containers(GPU_POOL) == cluster.containers()
    # ... where the task ran: a Ray node of pool gpu offering the GPU its stand-in declared.
    assert out["ip"] == instance["ip"] != cluster.head_ip
    assert out["labels"].get("pool") == GPU_POOL, out
    assert out["resources"].get("GPU") == 1 and len(out["gpu_ids"]) == 1, out
    # Only the GPU pool scaled: the CPU pool's scale set stayed at 0, never written.
    assert cluster.instances() == []
    assert set(cluster.writes(t0)) == {("capacity", GPU_POOL)}
    # Idle now: the GPU worker is drained and deleted after the idle timeout, its container
    # gone; the GPU pool is back at its minimum, 0.
    gone = cluster.wait(
        "the idle GPU worker is deleted",
        lambda: cluster.instances(GPU_POOL) == [] and cluster.containers() == {},
        IDLE_S + 300,
    )
    assert gone - out["started"] >= IDLE_S - 5  # not before the idle timeout
    assert ("delete", GPU_POOL) in cluster.writes(t0)
    assert {pool for _, pool in cluster.writes(t0)} == {GPU_POOL}
    assert cluster.instances() == []


def test_a_pool_azure_cannot_fill_is_said_and_its_demand_runs_on_another(
    cluster: ac.Cluster, tmp_path: Path
) -> None:
    """The fake Compute refuses the CPU pool's capacity raise (AllocationFailed, as Azure's
    operation ends): Ray's autoscaler is told (the node provider's NodeLaunchException) and
    places the CPU demand on the pool that can serve it, here the GPU pool (Ray avoids GPU
    nodes for CPU work, it does not forbid them); `driver status` names Azure's answer; the
    capacity back, new demand lands on the CPU pool again. Nothing is left half-created.

    The refused cycle is benchmarks/autoscale.py's, in its smoke mode on this module's cluster
    (``--smoke --reuse --refused``: the CPU pool refused, the demand job submitted, where it
    ran, the idle worker's deletion, the refusal lifted; measured and printed), so that the
    benchmark cannot break unnoticed. (Its plain cycle is the same code with nothing refused,
    which the tests above run.)"""
    home = tmp_path / "home"
    assert cluster.instances() == [] and cluster.instances(GPU_POOL) == []
    assert cluster.containers() == {}
    refused_before = len(cluster.refused())
    run = int(time.time())  # its own submission ids, also on a reused cluster
    # The benchmark's own bounds: a worker's boot for the job, then the idle worker's deletion.
    p, printed = run_benchmark(
        "autoscale", "--smoke", "--reuse", "--refused", timeout=BOOT_S + IDLE_S + 600
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    [report] = printed
    assert report["smoke"] is True and report["idle_timeout_s"] == IDLE_S
    # This module's cluster boots its workers from the node image.
    assert "cold" not in report
    assert report["baked"]["runs"] == [], report  # the smoke's one cycle is the refused one
    # The demand ran on the GPU pool's worker; the CPU pool's scale set: refused (once: Ray
    # asked it, the provider raised, the pool was backed off), nothing created there.
    [refused] = report["baked"]["refused_runs"]
    assert refused["pool"] == GPU_POOL, report
    assert refused["demand_to_running_s"] > 0 and refused["idle_to_deleted_s"] > 0, refused
    assert cluster.refused()[refused_before:] == [(DEFAULT_POOL, "AllocationFailed")]
    assert cluster.instances() == [] and cluster.containers() == {}
    assert cluster.instances(GPU_POOL) == []
    # Ray's autoscaler keeps the pool's record until it asks the pool again: `status` names
    # Azure's answer, since when, and when the pool is asked again.
    st = run_driver("status", *cluster.cluster_args, home=home)
    assert st.returncode == 0, st.stderr
    line = next(
        (ln for ln in st.stdout.splitlines() if ln.startswith(f"  {WORKER_TYPE}: Azure")),
        "",
    )
    assert "AllocationFailed since" in line, st.stdout
    assert "We do not have sufficient capacity" in line, st.stdout
    retry = re.search(r"next try after (\S+Z)", line)
    assert retry, st.stdout
    # The capacity back (the benchmark lifted the refusal) and the back-off over (60 s after a
    # first refusal, at most the idle wait), new CPU demand goes to the CPU pool again.
    over = datetime.datetime.fromisoformat(retry[1].replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, over + 1 - time.time()))
    job = ac.write_job(tmp_path / "demand", ac.DEMAND_JOB)
    r = run_driver(
        "submit", *cluster.cluster_args, "--submission-id", f"refused-{run}-2", str(job),
        home=home, timeout=BOOT_S + 300,
    )  # fmt: skip
    assert r.returncode == 0, job_failure(r)
    [instance] = cluster.instances()
    assert result(r.stdout)["ip"] == instance["ip"]
    assert cluster.instances(GPU_POOL) == []
    assert len(cluster.refused()) == refused_before + 1
    st = run_driver("status", *cluster.cluster_args, home=home)
    assert st.returncode == 0 and "Pools Azure refused" not in st.stdout, st.stdout
    cluster.wait(
        "scaled to zero",
        lambda: cluster.instances() == [] and cluster.containers() == {},
        IDLE_S + 300,
    )
