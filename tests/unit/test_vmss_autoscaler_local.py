"""Ray's own autoscaler runs the node provider: a local Ray head started as the cluster's head is
in scaling mode ray (``ray start --head --autoscaling-config=...`` with the configuration the
provider's ``config`` command writes), its monitor loading ``azure_vmss_provider`` and calling
the fake Azure Compute (python/nodekit/rehearsal/standins/azure_compute.py) with a managed
identity token from the fake metadata service, with two worker pools (CPU workers and a GPU
pool, a scale set each): CPU demand the head cannot serve raises the CPU workers' capacity
only, a GPU task the GPU pool's only.

The fake's instances never join (no VM boots here): the end-to-end test on the rehearsal
cluster (tests/e2e/test_autoscale.py) covers workers that boot, run the job and leave.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_support import Loopback, loopback_azure
from driver.localray import STARTED_LINE, node_timed_out
from nodekit.node import azure_vmss_provider as vp
from nodekit.rehearsal.standins.azure_compute import (
    FakeCompute,
    scale_set_config,
    subnet_pool,
)
from support import REPO

SUB = "00000000-1111-4222-8333-444444444444"
SCALE_SET_ID = (
    f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute"
    "/virtualMachineScaleSets/ray-workers"
)
START_S = 150
"""How long the head's `ray start` may take to say it started (a loaded 2-core machine)."""
AUTOSCALER = "aaaaaaaa-0000-4000-8000-000000000001"
POOLS = [
    {
        "labels": "",
        "max": 3,
        "min": 0,
        "name": "workers",
        "resources": {},
        "scale_set": "ray-workers",
        "vm_size": "Standard_D2s_v5",
    },
    {
        "labels": "accelerator=t4",
        "max": 2,
        "min": 0,
        "name": "gpu",
        "resources": {},
        "scale_set": "ray-gpu",
        "vm_size": "Standard_NC4as_T4_v3",
    },
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Loopback]:
    scale_sets = [
        scale_set_config(SUB, "rg", "ray-workers", subnet_pool("10.42.1.0/24", 6, 8)),
        scale_set_config(
            SUB, "rg", "ray-gpu", subnet_pool("10.42.1.0/24", 20, 4), "Standard_NC4as_T4_v3"
        ),
    ]
    with loopback_azure(
        tmp_path, "ray-head", {AUTOSCALER: "p-autoscaler"}, [AUTOSCALER], scale_sets
    ) as fakes:
        yield fakes


@pytest.fixture
def head(tmp_path: Path, loopback: Loopback) -> Iterator[tuple[FakeCompute, str, Path]]:
    compute, imds, ca = loopback.compute, loopback.imds, loopback.ca
    port = free_port()
    values = {
        "RAY_HEAD_IP": "127.0.0.1",
        "WORKER_SCALE_SET_ID": SCALE_SET_ID,
        "WORKER_VM_SIZE": "Standard_D2s_v5",
        "AUTOSCALER_POOLS": json.dumps(POOLS, separators=(",", ":")),
        "AUTOSCALER_IDLE_TIMEOUT_MINUTES": "1",
        "AUTOSCALER_CLIENT_ID": AUTOSCALER,
        "ARM_ENDPOINT": compute.url,
    }
    (tmp_path / "deploy.json").write_text(json.dumps(values))
    config = tmp_path / "autoscaler.yaml"
    assert (
        vp.main(["config", "--deploy-values", str(tmp_path / "deploy.json"), "--out", str(config)])
        == 0
    )
    data = json.loads(config.read_text())
    data["provider"]["gcs_port"] = port  # the head's GCS port here (6379 on a cluster)
    config.write_text(json.dumps(data))
    env = {
        **os.environ,
        # The head's Python finds the provider as the bootstrap installs it: importable by name.
        "PYTHONPATH": str(REPO / "python" / "nodekit" / "node"),
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": imds.url,
        "REQUESTS_CA_BUNDLE": str(ca),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "RAY_ADDRESS"):
        env.pop(name, None)
    temp = Path("/tmp") / f"rayvmss-{secrets.token_hex(3)}"
    log = tmp_path / "ray-start.log"
    cmd = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=0",
        "--include-dashboard=false",
        f"--temp-dir={temp}",
        f"--autoscaling-config={config}",
    ]
    # Ready once Ray says so; a node that missed Ray's registration window on a loaded machine
    # is started once more, as the driver's local Ray does (driver/localray.py).
    for attempt in (1, 2):
        with open(log, "w") as out:
            proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_S
        while STARTED_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        else:
            break
        _stop(proc)
        said = log.read_text(errors="replace")
        if attempt == 2 or not node_timed_out(said):
            pytest.fail(f"the head's Ray did not start:\n{said[-3000:]}")
    try:
        yield compute, f"127.0.0.1:{port}", temp
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The head's whole process group. Ray's autoscaler monitor outlives a SIGTERM by more than
    30 s (`ray start --block` waits for it), so the grace is short."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def monitor_log(temp: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in temp.glob("session_latest/logs/monitor.*")
    )


def test_cpu_demand_raises_the_cpu_pool_and_a_gpu_task_the_gpu_pool(
    head: tuple[FakeCompute, str, Path],
) -> None:
    compute, address, temp = head
    driver = (
        "import sys, time, ray\n"
        f"ray.init(address={address!r})\n"
        "@ray.remote(num_cpus=1)\n"
        "def env_runner():\n"
        "    time.sleep(600)\n"
        "@ray.remote(num_gpus=1)\n"
        "def learner():\n"
        "    pass\n"
        "runners = [env_runner.remote() for _ in range(3)]\n"
        "print('cpu', flush=True)\n"
        "sys.stdin.readline()\n"
        "update = learner.remote()\n"
        "print('gpu', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_ADDRESS": "",
        "RAY_SCHEDULER_EVENTS": "0",  # no autoscaler messages on the driver's stdout
    }
    errors = temp / "driver.err"
    with open(errors, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", driver],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )

    def said(word: str) -> None:
        assert proc.stdout is not None
        lines = []
        while (line := proc.stdout.readline()) and line.strip() != word:
            lines.append(line)
        assert line, f"the driver ended before {word!r}: {lines}\n" + errors.read_text()[-3000:]

    def capacities(workers: int, gpu: int, what: str) -> None:
        deadline = time.monotonic() + 300  # the autoscaler's rounds on a loaded machine
        while (compute.capacity("ray-workers"), compute.capacity("ray-gpu")) != (workers, gpu):
            assert time.monotonic() < deadline, (
                f"{what}: capacities {compute.capacity('ray-workers')}, "
                f"{compute.capacity('ray-gpu')}:\n" + monitor_log(temp)[-4000:]
            )
            time.sleep(1)

    try:
        assert proc.stdout is not None and proc.stdin is not None
        said("cpu")
        # 3 CPU tasks on Standard_D2s_v5 workers (2 CPUs each): two CPU workers, no GPU one
        # (the GPU pool's nodes have CPUs too: Ray keeps CPU-only demand off them).
        capacities(2, 0, "three 1-CPU tasks")
        proc.stdin.write("\n")
        proc.stdin.flush()
        said("gpu")
        # The GPU task: one GPU worker (Standard_NC4as_T4_v3: 1 GPU), the CPU pool unchanged.
        capacities(2, 1, "a 1-GPU task")
        time.sleep(6)  # one more autoscaler round changes neither
        assert (compute.capacity("ray-workers"), compute.capacity("ray-gpu")) == (2, 1)
    finally:
        proc.kill()
        proc.wait(10)
    patched = [r["path"] for r in compute.state.lines("requests.jsonl") if r["method"] == "PATCH"]
    assert sorted(p.rsplit("/", 1)[-1] for p in patched) == ["ray-gpu", "ray-workers"]
    assert "ScaleSetProvider" in monitor_log(temp)
