"""Autostop end to end on a rehearsal cluster: the head's agent (python/nodekit/node/autostop.py,
ray-autostop.service from the head's cloud-init) watching Ray's jobs and the SSH connections,
scaling the fake scale set to zero and deallocating its own VM through the fake Azure Compute on
the bridge (which powers the head's container off, its disk kept), and the driver starting it
again with the user's credential before a `submit`.

Its own cluster (head only, scaling mode ray, max 1 worker, Ray's idle timeout 1 minute,
autostop after 1 idle minute), booted from the node image; RAYDRIVER_AUTOSTOP_REHEARSAL and
RAYDRIVER_AUTOSTOP_SUBNET name another. The user's credential: a managed identity served by the
fake metadata service (python/nodekit/rehearsal/standins/azure_node.py) on this machine, with
the role on the fake head VM and scale set (added to the fake Compute's writers), reached by
azure-identity's DefaultAzureCredential in the driver as on a machine with a managed identity.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from driver import layout
from nodekit.rehearsal.cluster import Rehearsal
from nodekit.rehearsal.services import compute, keyvault
from support import REPO, run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

NAME = os.environ.get("RAYDRIVER_AUTOSTOP_REHEARSAL", "") or "ast"
SUBNET = os.environ.get("RAYDRIVER_AUTOSTOP_SUBNET", "") or "10.223.0.0/24"
AUTOSTOP_MINUTES = 1
WATCH_S = AUTOSTOP_MINUTES * 60 + 30
"""Longer than the idle period plus two of the agent's looks (15 s apart)."""
STOP_S = 420
"""Idle period, the agent's look, the workers' Terminate notices (up to 120 s), the poweroff."""

HOLD_JOB = """\
import time
import ray
ray.init()
print("holding", flush=True)
time.sleep(float(__import__("sys").argv[1]))
print("RESULT done", flush=True)
"""
DEMAND_JOB = """\
import json
import ray
ray.init()
@ray.remote(num_cpus=1)
def where():
    return ray.util.get_node_ip_address()
print("RESULT " + json.dumps({"worker": ray.get(where.remote())}), flush=True)
"""


def nodekit(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodekit", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Cluster:
    dir: Path
    head_ip: str
    admin_user: str
    ssh_key: Path
    head_root: Path
    env: dict[str, str]
    """The driver's environment: the head VM's id, the fake ARM endpoint, its CA, the identity."""
    home: Path
    holder: subprocess.Popen[bytes] | None = None
    """An SSH session the fixture holds open until the first test's job runs."""

    @property
    def args(self) -> list[str]:
        return ["--head", f"{self.admin_user}@{self.head_ip}", "-i", str(self.ssh_key)]

    def log(self) -> str:
        path = self.head_root / layout.AUTOSTOP_LOG.lstrip("/")
        return path.read_text() if path.exists() else ""

    def agent_state(self) -> dict:
        path = self.head_root / layout.AUTOSTOP_STATE.lstrip("/")
        return json.loads(path.read_text()) if path.exists() else {}

    def power(self) -> str:
        path = self.dir / "azure" / "compute" / "power.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        return str(data.get(f"rh-{NAME}-head", "running"))

    def instances(self) -> list[dict]:
        data = json.loads((self.dir / "azure" / "compute" / "instances.json").read_text())
        return next(iter(data.values()), [])

    def head_running(self) -> bool:
        state = Rehearsal(NAME).load()
        assert state is not None
        pid = state.head.pid
        return pid is not None and Path(f"/proc/{pid}").exists()

    def driver(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return run_driver(*args, home=self.home, env=self.env, timeout=timeout)


def wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s: {what}"
        time.sleep(2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.fail("the rehearsal cluster needs root (CI runs as root)")
    from nodekit.rehearsal.standins.azure_node import FakeImds, imds_config

    nodekit("rehearse", "down", "--name", NAME, "--subnet", SUBNET, "--delete-results", timeout=600)
    up = nodekit("rehearse", "up", "--name", NAME, "--subnet", SUBNET, "--workers", "0",
                 "--scaling-mode", "ray", "--min-workers", "0", "--max-workers", "1",
                 "--idle-timeout-minutes", "1", "--autostop-idle-minutes", str(AUTOSTOP_MINUTES),
                 timeout=3600)  # fmt: skip
    imds = None
    holder: subprocess.Popen[bytes] | None = None
    try:
        assert up.returncode == 0, f"rehearse up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
        r = Rehearsal(NAME)
        state = r.load()
        assert state is not None
        azure = r.dir / "azure"
        # The user's own identity: a managed identity on this machine, with the role.
        user = str(uuid.uuid4())
        imds = FakeImds(tmp_path_factory.mktemp("user-imds")).start()
        imds.state.write(
            "config.json", imds_config(keyvault.token_key(azure), "laptop", {user: "p-user"})
        )
        config_path = azure / "compute" / "config.json"
        config = json.loads(config_path.read_text())
        config["writers"].append(user)
        config_path.write_text(json.dumps(config))
        env = {
            "RAYDRIVER_HEAD_VM_ID": compute.head_vm_id(NAME),
            "AZURE_RESOURCE_MANAGER_ENDPOINT": compute.arm_endpoint(state),
            "REQUESTS_CA_BUNDLE": keyvault.shared(azure)["ca"],
            "AZURE_POD_IDENTITY_AUTHORITY_HOST": imds.url,
            "AZURE_CLIENT_ID": user,
        }
        home = tmp_path_factory.mktemp("driver-home")
        head = state.head
        c = Cluster(r.dir, head.ip, state.admin_user, Path(state.ssh_key), head.root, env, home)
        # Busy from now on until the first test has its job running: an SSH session (the
        # idle minute may have begun while `up` finished, on a loaded machine).
        holder = subprocess.Popen(
            [sys.executable, "-m", "driver", "ssh", *c.args, "--", "sleep", "3600"],
            cwd=REPO,
            env={**os.environ, "RAYDRIVER_HOME": str(home), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        c.holder = holder
        wait("the holder's SSH session", lambda: "SSH connection from" in c.log(), 120)
        assert "stopping the cluster" not in c.log(), c.log()
        yield c
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        if imds is not None:
            imds.stop()
        if os.environ.get("RAYDRIVER_KEEP_REHEARSAL") != "1":
            down = nodekit(
                "rehearse",
                "down",
                "--name",
                NAME,
                "--subnet",
                SUBNET,
                "--delete-results",
                timeout=600,
            )
            assert down.returncode == 0, down.stderr


def test_a_running_job_keeps_the_cluster_up(cluster: Cluster, tmp_path: Path) -> None:
    job = tmp_path / "hold" / "job.py"
    job.parent.mkdir()
    job.write_text(HOLD_JOB)
    assert cluster.holder is not None
    try:
        r = cluster.driver("submit", str(job), *cluster.args, "--submission-id", "hold-1",
                           "--no-wait", "--", str(WATCH_S + 30))  # fmt: skip
    finally:
        # From now on only the job keeps it busy (and, should the submit fail, nothing: the
        # holder's session would keep the cluster up through the next tests).
        _end_holder(cluster)
    assert r.returncode == 0, r.stderr
    time.sleep(WATCH_S)
    assert cluster.head_running() and cluster.power() == "running"
    log = cluster.log()
    # The agent's verdict with the job alone (no SSH connection in it), and nothing else since.
    last = log.rstrip("\n").splitlines()[-1]
    assert last.endswith("job hold-1 pending or running: not stopping"), log
    assert "stopping the cluster" not in log
    wait("the job's end", lambda: cluster.agent_state().get("decision") != "busy", 120)


def test_an_open_ssh_session_keeps_the_cluster_up(cluster: Cluster) -> None:
    r = cluster.driver("ssh", *cluster.args, "--", "sleep", str(WATCH_S), timeout=WATCH_S + 120)
    assert r.returncode == 0, r.stderr
    assert cluster.head_running() and cluster.power() == "running"
    log = cluster.log()
    assert ": not stopping" in log and "SSH connection from" in log, log
    assert "stopping the cluster" not in log


def _end_holder(cluster: Cluster) -> None:
    if cluster.holder is not None and cluster.holder.poll() is None:
        cluster.holder.terminate()
        cluster.holder.wait(60)


def test_idle_cluster_stops_and_submit_starts_it_again(cluster: Cluster, tmp_path: Path) -> None:
    _end_holder(cluster)  # gone already, unless the test that ends it failed before it could
    # A job that needs a worker: Ray's autoscaler adds one (the scale set is at 1).
    job = tmp_path / "demand" / "job.py"
    job.parent.mkdir()
    job.write_text(DEMAND_JOB)
    r = cluster.driver("submit", str(job), *cluster.args)
    assert r.returncode == 0, r.stderr
    assert len(cluster.instances()) == 1
    # Idle now (Ray's own idle timeout and autostop's are both 1 minute): autostop stops it.
    try:
        wait("the head deallocated", lambda: cluster.power() == "deallocated", STOP_S)
    except AssertionError as e:
        pytest.fail(f"{e}\nthe agent's log:\n{cluster.log()[-3000:]}")
    assert cluster.instances() == []  # the workers went to zero first
    wait("the head's container down", lambda: not cluster.head_running(), 120)
    log = cluster.log()
    steps = [
        "setting the capacity of the workers' scale set ",
        "stopping the head's Ray",
        "setting the capacities to 0 again",
        "deallocating this head",
    ]
    at = [log.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), log
    assert f"deallocating this head ({compute.head_vm_id(NAME)})" in log

    status = cluster.driver("status", *cluster.args)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"stopped: the head VM rh-{NAME}-head is deallocated")

    r = cluster.driver("submit", str(job), *cluster.args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "The cluster is stopped (its head VM is deallocated): starting it first" in r.stderr
    assert "RESULT " in r.stdout
    assert cluster.power() == "running" and cluster.head_running()
    # The agent watches again from the boot on, with a new idle clock.
    assert log.count("started: stops the cluster after 1 idle minute(s)") == 1
    wait(
        "the agent's start after the boot",
        lambda: cluster.log().count("started: stops the cluster") == 2,
        120,
    )
