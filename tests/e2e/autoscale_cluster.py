"""A rehearsal cluster in scaling mode ray, for tests/e2e/test_autoscale.py and
benchmarks/autoscale.py: the head only at first, Ray's autoscaler on it, and the fake Azure
Compute on the bridge, whose capacity raise boots a worker container and whose instance delete
removes that container (``rehearse up --scaling-mode ray``). Two worker pools, each its own
fake scale set and Ray node type: the default pool ``workers`` (CPU) and ``gpu``
(``--gpu-pool-max``), whose containers declare a GPU to Ray without hardware. Both are
Flexible scale sets (:data:`ORCHESTRATION_MODE`), as the stacks deploy pools by default.

What it reads, from this machine: each fake scale set's instances (``azure/compute/
instances.json`` of the cluster folder), the requests the fake Compute got
(``requests.jsonl``), what its hooks said (``azure/compute.log``), each worker's metadata
service's answers (its ``imds/config.json``), the rehearsal's state (which containers run, of
which pool) and the fake Compute's own answer for a scale set (over HTTPS, as the head's
autoscaler identity).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodekit.rehearsal.cluster import Rehearsal
from nodekit.rehearsal.services import compute, keyvault
from nodekit.rehearsal.standins.azure_compute import CAPACITY_FILE
from nodekit.rehearsal.standins.azure_node import issue_token
from nodekit.rehearsal.state import DEFAULT_POOL

REPO = Path(__file__).resolve().parents[2]
NAME = os.environ.get("RAYDRIVER_AUTOSCALE_REHEARSAL", "") or "asc"
SUBNET = os.environ.get("RAYDRIVER_AUTOSCALE_SUBNET", "") or "10.218.0.0/24"
IDLE_TIMEOUT_MINUTES = 1
MAX_WORKERS = 2
GPU_POOL_MAX = 1
ORCHESTRATION_MODE = "Flexible"
"""The pools' scale sets' mode (``rehearse up --orchestration-mode``)."""


def nodekit(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodekit", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def up(image: bool = True) -> subprocess.CompletedProcess[str]:
    """The cluster, its nodes booted from the node image (``image=False``: installing at boot,
    ``--no-image``)."""
    nodekit("rehearse", "down", "--name", NAME, "--subnet", SUBNET, "--delete-results", timeout=600)
    return nodekit(
        "rehearse",
        "up",
        "--name",
        NAME,
        "--subnet",
        SUBNET,
        "--workers",
        "0",
        "--scaling-mode",
        "ray",
        "--min-workers",
        "0",
        "--max-workers",
        str(MAX_WORKERS),
        "--gpu-pool-max",
        str(GPU_POOL_MAX),
        "--idle-timeout-minutes",
        str(IDLE_TIMEOUT_MINUTES),
        "--orchestration-mode",
        ORCHESTRATION_MODE,
        *([] if image else ["--no-image"]),
        timeout=3600,
    )


def down() -> subprocess.CompletedProcess[str]:
    return nodekit(
        "rehearse", "down", "--name", NAME, "--subnet", SUBNET, "--delete-results", timeout=600
    )


@dataclass
class Cluster:
    name: str
    dir: Path
    head_ip: str
    admin_user: str
    ssh_key: Path

    @classmethod
    def load(cls, name: str = NAME) -> Cluster:
        r = Rehearsal(name)
        state = r.load()
        assert state is not None, f"no rehearsal cluster {name}"
        return cls(name, r.dir, state.head.ip, state.admin_user, Path(state.ssh_key))

    @property
    def cluster_args(self) -> list[str]:
        return ["--head", f"{self.admin_user}@{self.head_ip}", "-i", str(self.ssh_key)]

    def instances(self, pool: str = DEFAULT_POOL) -> list[dict]:
        """A pool's fake scale set's instances: instanceId, ip, state."""
        path = self.dir / "azure" / "compute" / "instances.json"
        data = json.loads(path.read_text())
        return list(data[compute.scale_set_name(self.name, pool).lower()])

    def containers(self, pool: str | None = None) -> dict[str, str]:
        """Worker containers running here (of ``pool``; None: of every pool): name -> IP."""
        state = Rehearsal(self.name).load()
        assert state is not None
        return {
            n.name: n.ip
            for n in state.nodes
            if n.role == "worker" and (pool is None or n.pool == pool)
        }

    def container_name(self, pool: str, instance_id: str) -> str:
        """The worker container the rehearsal boots for ``pool``'s instance ``instance_id``."""
        state = Rehearsal(self.name).load()
        assert state is not None
        return compute.node_name(state, pool, instance_id)

    def metadata(self, container: str) -> dict[str, Any]:
        """What a worker's metadata service says of its VM (``compute``), while it runs."""
        path = self.dir / "nodes" / container / "imds" / "config.json"
        return dict(json.loads(path.read_text())["compute"])

    def hook_lines(self) -> list[str]:
        """What the fake Compute's ``rehearse scale-set create|delete`` hooks said."""
        path = self.dir / "azure" / "compute.log"
        return [ln for ln in path.read_text().splitlines() if ln.startswith("scale set: ")]

    def scale_set(self, pool: str = DEFAULT_POOL) -> dict[str, Any]:
        """The fake Compute's answer to ``GET`` of ``pool``'s scale set, asked over HTTPS (its
        CA) with a token of the identity that may read it (the head's autoscaler's)."""
        azure = self.dir / "azure"
        config = json.loads((azure / "compute" / "config.json").read_text())
        token = issue_token(
            bytes.fromhex(config["token_key"]), config["writers"][0], "test", config["audience"]
        )
        url = f"{config['audience']}{compute.scale_set_id(self.name, pool)}?api-version=2024-11-01"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        tls = ssl.create_default_context(cafile=keyvault.shared(azure)["ca"])
        with urllib.request.urlopen(request, context=tls, timeout=60) as r:
            return dict(json.loads(r.read()))

    def requests(self, since: float) -> list[tuple[str, str]]:
        """The requests the fake Compute got since ``since`` (its clock): (method, path)."""
        path = self.dir / "azure" / "compute" / "requests.jsonl"
        rows = map(json.loads, path.read_text().splitlines())
        return [(r["method"], r["path"]) for r in rows if r["time"] >= since]

    def refuse(self, pool: str, fault: dict | None) -> None:
        """Switch the fake Compute's capacity fault for ``pool``'s scale set on (``fault``,
        azure_compute.capacity_fault's) or off (None); the fake reads it at every raise."""
        path = self.dir / "azure" / "compute" / CAPACITY_FILE
        faults = json.loads(path.read_text()) if path.exists() else {}
        faults.pop(compute.scale_set_name(self.name, pool).lower(), None)
        if fault is not None:
            faults[compute.scale_set_name(self.name, pool).lower()] = fault
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults))
        tmp.replace(path)

    def refused(self) -> list[tuple[str, str]]:
        """The capacity raises the fake Compute refused: (pool, Azure's code)."""
        path = self.dir / "azure" / "compute" / "refused.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [
            (compute.pool_of(self.name, r["scale_set"]), r["code"]) for r in map(json.loads, lines)
        ]

    def writes(self, since: float) -> list[tuple[str, str]]:
        """The writes to the scale sets the fake Compute got since ``since`` (its clock):
        (what, pool) with what ``capacity`` (PATCH or PUT of the scale set) or ``delete``
        (instances deleted)."""
        scale_set = re.compile(r"/virtualmachinescalesets/([^/]+)(/delete)?$", re.IGNORECASE)
        found = []
        path = self.dir / "azure" / "compute" / "requests.jsonl"
        for line in path.read_text().splitlines():
            r = json.loads(line)
            m = scale_set.search(r["path"])
            if not m or r["time"] < since:
                continue
            pool = compute.pool_of(self.name, m[1])
            if m[2] and r["method"] == "POST":
                found.append(("delete", pool))
            elif not m[2] and r["method"] in ("PATCH", "PUT"):
                found.append(("capacity", pool))
        return found

    def wait(self, what: str, check: object, timeout: float) -> float:
        """Poll ``check()`` until true; the time it became true."""
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s: {what}"
            time.sleep(1)
        return time.time()


DEMAND_JOB = """\
import json, os, socket, time
import ray
ray.init()
# More CPUs than the cluster has (the head offers none): Ray's autoscaler adds a worker.
@ray.remote(num_cpus=1)
def where():
    return {"ip": ray.util.get_node_ip_address(), "started": time.time()}
t0 = time.time()
out = ray.get(where.remote())
print("RESULT " + json.dumps({"submitted": t0, **out}), flush=True)
"""

ACTOR_JOB = """\
import json, os, time
import ray
ray.init()
cpus = int(os.environ["WORKER_CPUS"])
# One actor holds a whole worker for as long as the job runs; a burst of tasks needs a second
# worker, which is idle once the burst is done.
@ray.remote(num_cpus=cpus)
class Holder:
    def ip(self):
        return ray.util.get_node_ip_address()
holder = Holder.remote()
actor_ip = ray.get(holder.ip.remote())
@ray.remote(num_cpus=cpus)
def burst():
    return ray.util.get_node_ip_address()
burst_ip = ray.get(burst.remote())
print("RESULT " + json.dumps({"actor": actor_ip, "burst": burst_ip, "done": time.time()}),
      flush=True)
while True:
    time.sleep(5)
"""


GPU_JOB = """\
import json, time
import ray
ray.init()
# A GPU, which only the GPU pool's workers offer: Ray's autoscaler adds one of those.
@ray.remote(num_gpus=1)
def where():
    return {
        "ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        "started": time.time(),
    }
out = ray.get(where.remote())
node = next(n for n in ray.nodes() if n["NodeID"] == out["node_id"])
print("RESULT " + json.dumps({**out, "labels": node.get("Labels", {}),
                              "resources": node["Resources"]}), flush=True)
"""


def write_job(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(text)
    return folder / "job.py"
