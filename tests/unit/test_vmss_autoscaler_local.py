"""Ray's own autoscaler runs the node provider: a local Ray head started as the cluster's head is
in scaling mode ray (``ray start --head --autoscaling-config=...`` with the configuration the
provider's ``config`` command writes), its monitor loading ``azure_vmss_provider`` and calling
the fake Azure Compute (tests/fakes/azure_compute.py) with a managed identity token from the
fake metadata service. Demand the head cannot serve raises the scale set's capacity.

The fake's instances never join (no VM boots here): the end-to-end test on the rehearsal
cluster (tests/e2e/test_autoscale.py) covers workers that boot, run the job and leave.
"""

from __future__ import annotations

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

from fakes.azure_compute import FakeCompute, compute_config, scale_set_config, subnet_pool
from fakes.azure_node import FakeImds, imds_config, tls_certificate
from nodekit.node import azure_vmss_provider as vp
from support import REPO

SUB = "00000000-1111-4222-8333-444444444444"
SCALE_SET_ID = (
    f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute"
    "/virtualMachineScaleSets/ray-workers"
)
AUTOSCALER = "aaaaaaaa-0000-4000-8000-000000000001"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def head(tmp_path: Path) -> Iterator[tuple[FakeCompute, str, Path]]:
    key = secrets.token_bytes(32)
    ca, cert, cert_key = tls_certificate(tmp_path, "127.0.0.1")
    imds = FakeImds(tmp_path / "imds").start()
    imds.state.write("config.json", imds_config(key, "ray-head", {AUTOSCALER: "p-autoscaler"}))
    compute = FakeCompute(tmp_path / "compute", cert, cert_key).start()
    compute.state.write(
        "config.json",
        compute_config(
            key,
            compute.url,
            [AUTOSCALER],
            [scale_set_config(SUB, "rg", "ray-workers", subnet_pool("10.42.1.0/24", 6, 8))],
        ),
    )
    port = free_port()
    values = {
        "RAY_HEAD_IP": "127.0.0.1",
        "WORKER_SCALE_SET_ID": SCALE_SET_ID,
        "WORKER_VM_SIZE": "Standard_D2s_v5",
        "AUTOSCALER_MIN_WORKERS": "0",
        "AUTOSCALER_MAX_WORKERS": "3",
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
    proc = subprocess.Popen(
        [
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
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield compute, f"127.0.0.1:{port}", temp
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            # Ray's autoscaler monitor outlives a SIGTERM by more than 30 s (`ray start --block`
            # waits for it), so the grace is short: the whole process group goes either way.
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        compute.stop()
        imds.stop()


def monitor_log(temp: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in temp.glob("session_latest/logs/monitor.*")
    )


def test_demand_the_head_cannot_serve_raises_the_scale_set_capacity(
    head: tuple[FakeCompute, str, Path],
) -> None:
    compute, address, temp = head
    demand = (
        "import ray\n"
        f"ray.init(address={address!r})\n"
        "from ray.autoscaler.sdk import request_resources\n"
        "request_resources(num_cpus=3)\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
    r = subprocess.run(
        [sys.executable, "-c", demand], env=env, capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stderr[-2000:]
    deadline = time.monotonic() + 300  # the autoscaler's rounds on a loaded machine
    while compute.capacity("ray-workers") < 2:
        assert time.monotonic() < deadline, (
            "the autoscaler did not raise the capacity:\n" + monitor_log(temp)[-4000:]
        )
        time.sleep(1)
    # 3 CPUs on Standard_D2s_v5 workers (2 CPUs each): two workers, at the private IPs Azure
    # gave them, asked for by the autoscaler through the provider.
    assert compute.capacity("ray-workers") == 2
    requests = compute.state.lines("requests.jsonl")
    assert any(r["method"] == "PATCH" for r in requests)
    assert "ScaleSetProvider" in monitor_log(temp)
