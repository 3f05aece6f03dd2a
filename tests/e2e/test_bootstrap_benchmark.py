"""benchmarks/bootstrap.py in its smoke mode on the session's cluster (conftest.py), so that the
benchmark cannot break unnoticed (issue 35: its anchor method failed at install_ray, its pip
filling the node's /tmp with a CUDA torch, and nothing noticed).

``--smoke --reuse``: one worker per method joins the session's running head and is removed
again, instead of a cluster booted per method. The method run here is baked (the workers'
boot from the node image): the benchmark's whole code path (the cluster, a worker's boot and
removal, the phases, what it installed against the lock, the JSON) in ~1 min of the suite.
The anchor's install at boot (~2 min of a core: one pip install of everything) is not booted
here; its documents are, in tests/unit/test_benchmarks.py, run in bash up to pip's arguments
(every http index trusted, torch only from the torch index: the failure issue 35 found). Cold,
our install at boot, is the same bootstrap as the worker test_node_image.py boots with another
install digest.
"""

from __future__ import annotations

import inspect
import time

import pytest

from nodekit.rehearsal.cluster import Rehearsal
from rehearsal_cluster import RehearsalCluster
from support import run_benchmark

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

BOOT_S = inspect.signature(Rehearsal.add_workers).parameters["timeout"].default
"""How long the benchmark waits for a worker to boot and join (the rehearsal's own bound)."""


@pytest.mark.timeout(BOOT_S + 600)
def test_the_bootstrap_benchmark_boots_a_baked_worker_into_the_running_cluster(
    rehearsal: RehearsalCluster,
) -> None:
    cluster = Rehearsal(rehearsal.name)
    state = cluster.load()
    assert state is not None
    before = [n.name for n in state.nodes]
    p, printed = run_benchmark(
        "bootstrap", "--smoke", "--reuse", "--name", rehearsal.name, "--only", "baked",
        timeout=BOOT_S + 300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    report = printed[-1]
    assert report["smoke"] is True
    assert report["cluster"] == {
        "name": rehearsal.name, "subnet": state.subnet, "per_method": False, "reused": True,
    }  # fmt: skip
    # One line per step as it is measured, then the whole.
    assert [o.get("step") or o.get("method") for o in printed[:-1]] == ["host_caches", "baked"]
    line = next(o for o in printed if o.get("method") == "baked")
    assert line["smoke"] is True and "error" not in line, line
    assert {k: v for k, v in line.items() if k not in ("benchmark", "smoke", "method")} == (
        report["baked"]
    )
    worker = report["baked"]["worker"]
    assert "head" not in report["baked"]  # the head booted long before
    assert worker["install"] == "image", worker
    assert worker["cloud_init_to_registered_s"] > 0 and report["baked"]["worker_wall_s"] > 0
    installed = worker["installed"]
    assert installed["same_versions_as_lock"], installed
    assert installed["key"]["torch"].endswith("+cpu"), installed
    assert report["baked"]["image"] == state.image_digest
    # The worker is gone again, and its Ray node left the cluster (the head notices within
    # seconds, minutes when loaded): the session's cluster as before.
    after = cluster.load()
    assert after is not None and [n.name for n in after.nodes] == before
    alive = {rehearsal.head_ip, *rehearsal.worker_ips}
    deadline = time.monotonic() + 180
    while {n["node_ip"] for n in rehearsal.ray_list("nodes") if n["state"] == "ALIVE"} != alive:
        assert time.monotonic() < deadline, "a removed worker is still ALIVE in Ray"
        time.sleep(2)
