"""A cluster that autostop stopped, from the driver's side (python/driver/power.py,
python/driver/cli/power.py): `start`, `submit` and `status` against the fake Resource Manager
(tests/fakes/fake_arm.py: the head VM's instance view and start with its async operation, the
autoscale setting's PATCH; the real azure-identity and azure-core in the driver), and the idle
time and hourly rate `status` adds (against the fake Retail Prices API)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from azure_support import AUTOSCALE_ID, CLOSED, CREDENTIAL_ENV, GROUP, SUB, VM_ID
from driver import power
from driver.arm import ResourceManager
from driver.cli import main
from driver.cli.power import idle_line, rate_line
from driver.discovery import locate
from driver.errors import DriverError
from driver.settings import ClusterSpec
from fakes.fake_arm import FakeAzure
from fakes.retail_prices import FakeRetailPrices, vm_meters
from support import error_lines, run_driver


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    azure = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    azure.vms[VM_ID.lower()] = "deallocated"
    azure.autoscale[AUTOSCALE_ID.lower()] = False
    try:
        yield azure
    finally:
        azure.close()


def driver(fake: FakeAzure, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_driver(*args, home=home, env={**fake.env(), **env})


def ids(**extra: str) -> dict[str, str]:
    return {"RAYDRIVER_HEAD_VM_ID": VM_ID, "RAYDRIVER_WORKER_AUTOSCALE_ID": AUTOSCALE_ID, **extra}


def manager(fake: FakeAzure, monkeypatch: pytest.MonkeyPatch) -> ResourceManager:
    for k, v in fake.env().items():
        monkeypatch.setenv(k, v)
    return ResourceManager(SUB, fake.endpoint, sleep=lambda _: None)


# -- the library -------------------------------------------------------------------------------
def test_start_waits_for_the_operation_then_enables_autoscale(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    vm = power.HeadVm(VM_ID, AUTOSCALE_ID)
    with manager(fake, monkeypatch) as arm:
        assert power.power_state(arm, vm) == "deallocated"
        power.start(arm, vm, lines.append, sleep=lambda _: None)
        assert power.power_state(arm, vm) == "running"
    assert fake.vms[VM_ID.lower()] == "running"
    assert fake.autoscale[AUTOSCALE_ID.lower()] is True
    writes = [(m, p.rsplit("/", 1)[-1], b) for m, p, b in fake.bodies]
    assert writes == [
        ("POST", "start", None),
        ("PATCH", "ray-workers-autoscale", {"properties": {"enabled": True}}),
    ]
    polls = [p for p, _, _ in fake.requests if "/operations/" in p]
    assert len(polls) == fake.start_polls + 1  # InProgress twice, then Succeeded
    assert lines == [
        "Starting the head VM ray-head (with your Azure credential)",
        "The head VM ray-head runs",
        "Enabled the workers' autoscale setting again (workers return to its minimum)",
    ]


def test_start_enables_every_worker_pools_autoscale_setting(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Autostop turned every pool's setting off: start turns each on again, read from the
    stacks' worker_pools / workerPools outputs."""
    gpu = AUTOSCALE_ID.replace("ray-workers-autoscale", "ray-gpu-autoscale")
    fake.autoscale[gpu.lower()] = False
    pools = {
        "workers": {"autoscale_setting_id": AUTOSCALE_ID},
        "gpu": {"autoscale_setting_id": gpu},
    }
    tf = power.from_outputs(
        {
            "head_vm_id": {"value": VM_ID},
            "autoscale_setting_id": {"value": AUTOSCALE_ID},
            "worker_pools": {"value": pools},
        },
        "tf",
    )
    arm_pools = [{"name": "workers", "autoscaleSettingId": AUTOSCALE_ID},
                 {"name": "gpu", "autoscaleSettingId": gpu}]  # fmt: skip
    bicep = power.from_outputs(
        {"headVmId": VM_ID, "autoscaleSettingId": AUTOSCALE_ID, "workerPools": arm_pools}, "arm"
    )
    assert tf is not None and bicep is not None
    assert tf.more_autoscale_ids == bicep.more_autoscale_ids == (gpu,)
    lines: list[str] = []
    with manager(fake, monkeypatch) as arm:
        power.start(arm, tf, lines.append, sleep=lambda _: None)
    assert fake.autoscale[AUTOSCALE_ID.lower()] is True and fake.autoscale[gpu.lower()] is True
    assert lines[-1] == "Enabled the worker pool's autoscale setting ray-gpu-autoscale again"
    with pytest.raises(DriverError, match="autoscalesettings/NAME"):
        power.from_outputs({"headVmId": VM_ID, "workerPools": [{"autoscaleSettingId": "x"}]}, "a")


def test_mode_ray_has_no_autoscale_setting_to_enable(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    with manager(fake, monkeypatch) as arm:
        power.start(arm, power.HeadVm(VM_ID), sleep=lambda _: None)
    assert [m for m, _, _ in fake.bodies] == ["POST"]
    assert fake.autoscale[AUTOSCALE_ID.lower()] is False


def test_a_start_that_fails_is_one_line_with_azures_reason(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.start_fails_with = "Allocation failed. We do not have sufficient capacity."
    with (
        manager(fake, monkeypatch) as arm,
        pytest.raises(DriverError) as raised,
    ):
        power.start(arm, power.HeadVm(VM_ID, AUTOSCALE_ID), sleep=lambda _: None)
    line = str(raised.value)
    assert line.startswith("starting the head VM ray-head: GET "), line
    assert line.endswith(
        ": AllocationFailed: Allocation failed. We do not have sufficient capacity."
    ), line
    assert "\n" not in line
    assert fake.autoscale[AUTOSCALE_ID.lower()] is False  # nothing enabled for a failed start


def test_a_start_that_never_ends_is_given_up_in_one_line(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.start_polls = 10**6
    ticks = iter(range(0, 10**6, 100))
    with (
        manager(fake, monkeypatch) as arm,
        pytest.raises(DriverError, match="did not start within 900 s"),
    ):
        power.start(
            arm, power.HeadVm(VM_ID), sleep=lambda _: None, clock=lambda: float(next(ticks))
        )


def test_ids_come_from_the_stacks_outputs_or_the_environment() -> None:
    arm = power.from_outputs({"headVmId": VM_ID, "autoscaleSettingId": ""}, "ARM deployment x")
    assert arm is not None and (arm.vm_id, arm.autoscale_id, arm.name) == (VM_ID, "", "ray-head")
    tf = power.from_outputs({"head_vm_id": VM_ID, "autoscale_setting_id": AUTOSCALE_ID}, "tf")
    assert tf is not None and (tf.vm_id, tf.autoscale_id, tf.subscription) == (
        VM_ID,
        AUTOSCALE_ID,
        SUB,
    )
    assert power.from_outputs({"headPublicIp": "20.1.2.3"}, "x") is None
    with pytest.raises(DriverError, match="virtualMachines/NAME"):
        power.HeadVm("/subscriptions/x/resourceGroups/y", source="$RAYDRIVER_HEAD_VM_ID")
    with pytest.raises(DriverError, match="autoscalesettings/NAME"):
        power.HeadVm(VM_ID, "/not/an/autoscale/setting")


def test_the_outputs_start_reads_are_the_stacks_outputs() -> None:
    """The names power.py reads are declared by both stacks (Terraform first, then Bicep)."""
    root = Path(__file__).resolve().parents[2]
    tf = (root / "infra/terraform/outputs.tf").read_text()
    bicep = (root / "infra/bicep/main.bicep").read_text()
    for tf_name, bicep_name in (power.HEAD_VM_OUTPUTS, power.AUTOSCALE_OUTPUTS):
        assert f'output "{tf_name}" {{' in tf
        assert f"\noutput {bicep_name} string = " in bicep


def test_local_ray_has_no_head_vm_even_with_the_variable_set() -> None:
    env = {"RAYDRIVER_HEAD_VM_ID": VM_ID}
    assert power.head_vm(locate(ClusterSpec()), env) is None
    found = power.head_vm(locate(ClusterSpec(head="10.0.0.4", source="--head")), env)
    assert found is not None and found.vm_id == VM_ID
    assert power.head_vm(locate(ClusterSpec(head="10.0.0.4", source="--head")), {}) is None


# -- the commands --------------------------------------------------------------------------------
BOOT = ("--retries", "0", "--ready-timeout", "6")
"""A head VM just started may refuse SSH for a while (its boot): retried for the ready timeout,
beyond --retries."""


def test_start_starts_the_head_then_reaches_for_ssh(fake: FakeAzure, tmp_path: Path) -> None:
    r = driver(fake, tmp_path, "start", "--head", CLOSED, *BOOT, **ids())
    assert fake.vms[VM_ID.lower()] == "running"
    assert fake.autoscale[AUTOSCALE_ID.lower()] is True
    assert "Starting the head VM ray-head" in r.stderr
    assert "The head VM ray-head runs" in r.stderr
    # The head at this address never answers SSH: waited for as a boot, then said, not hidden.
    assert r.returncode == 2
    # Attempts at 0, 1 and 3 s; the next (7 s) would come after the 6 s.
    assert "the VM was just started: again in 1 s (for 6 s at most)" in r.stderr
    assert "the VM was just started: again in 2 s (for 6 s at most)" in r.stderr
    [line] = error_lines(r.stderr)[-1:]
    assert "over SSH after 3 attempts in " in line and ": connection refused" in line
    # Once running, start again only says so, and SSH gets --retries alone.
    r = driver(fake, tmp_path, "start", "--head", CLOSED, *BOOT, **ids())
    assert "The head VM ray-head runs already" in r.stderr
    assert "the VM was just started" not in r.stderr
    assert "over SSH after 1 attempt in 0 s" in r.stderr
    assert [m for m, _, _ in fake.bodies].count("POST") == 1


def test_start_reads_the_ids_from_the_arm_deployments_outputs(
    fake: FakeAzure, tmp_path: Path
) -> None:
    fake.add_deployment(
        SUB,
        GROUP,
        "ray-cluster",
        {
            "headPublicIp": "127.0.0.1",
            "adminUsername": "azureuser",
            "headVmId": VM_ID,
            "autoscaleSettingId": AUTOSCALE_ID,
        },
    )
    r = driver(fake, tmp_path, "start", "--resource-group", GROUP, "--deployment", "ray-cluster",
               "--subscription", SUB, *BOOT, "--connect-timeout", "1")  # fmt: skip
    assert fake.vms[VM_ID.lower()] == "running", r.stderr
    assert fake.autoscale[AUTOSCALE_ID.lower()] is True


def test_start_without_a_head_vm_id_is_one_line(fake: FakeAzure, tmp_path: Path) -> None:
    r = driver(fake, tmp_path, "start", "--head", CLOSED)
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert "start needs the head VM's resource id" in line and "RAYDRIVER_HEAD_VM_ID" in line
    r = driver(fake, tmp_path, "start", "--head", CLOSED, RAYDRIVER_HEAD_VM_ID="/nope")
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert "$RAYDRIVER_HEAD_VM_ID: expected /subscriptions/SUB" in line
    assert fake.bodies == []


def test_status_of_a_stopped_cluster_says_stopped_without_ssh(
    fake: FakeAzure, tmp_path: Path
) -> None:
    r = driver(fake, tmp_path, "status", "--head", CLOSED, **ids())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("stopped: the head VM ray-head is deallocated")
    r = driver(fake, tmp_path, "status", "--json", "--head", CLOSED, **ids())
    assert json.loads(r.stdout) == {
        "state": "stopped",
        "head_vm": VM_ID,
        "power_state": "deallocated",
    }
    assert fake.bodies == []  # status never starts anything


def test_submit_on_a_stopped_cluster_starts_it_first(fake: FakeAzure, tmp_path: Path) -> None:
    script = tmp_path / "job" / "train.py"
    script.parent.mkdir()
    script.write_text("print('hi')\n")
    r = driver(fake, tmp_path, "submit", str(script), "--head", CLOSED, *BOOT, **ids())
    assert "The cluster is stopped (its head VM is deallocated): starting it first" in r.stderr
    assert fake.vms[VM_ID.lower()] == "running"
    # Then SSH to this address fails, as it would for any head, after the boot's wait.
    assert "the VM was just started" in r.stderr
    assert r.returncode == 2


# -- one look for the cluster a command ----------------------------------------------------------
STACK_OUTPUTS = {
    "head_public_ip": "127.0.0.1:1",  # SSH refuses at once: each verb ends right after
    "admin_username": "azureuser",
    "head_vm_id": VM_ID,
    "autoscale_setting_id": AUTOSCALE_ID,
}
VERBS = {
    "submit": ("submit", "JOB"),
    "logs": ("logs", "job-1"),
    "status": ("status",),
    "status ID": ("status", "job-1"),
    "download": ("download", "job-1"),
}


@pytest.mark.parametrize("stack", ["terraform", "arm"])
@pytest.mark.parametrize("verb", VERBS)
def test_a_command_reads_its_clusters_outputs_once(
    fake: FakeAzure,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
    stack: str,
) -> None:
    """submit and status ask whether autostop stopped the head (its VM id is in the stack's
    outputs), then connect: both from one read of the outputs (`terraform output -json`, or
    the ARM deployment's GET), as logs and download, which only connect, read them."""
    for k, v in {**fake.env(), "RAYDRIVER_HOME": str(tmp_path / "home")}.items():
        monkeypatch.setenv(k, v)
    for name in ("RAYDRIVER_HEAD", "RAYDRIVER_HEAD_VM_ID", "RAYDRIVER_WORKER_AUTOSCALE_ID"):
        monkeypatch.delenv(name, raising=False)
    fake.vms[VM_ID.lower()] = "running"
    reads = tmp_path / "terraform-reads"
    if stack == "terraform":
        # A terraform that answers `output -json` as Terraform does, and counts the calls.
        bin_dir, state = tmp_path / "bin", tmp_path / "tf"
        bin_dir.mkdir()
        state.mkdir()
        doc = {
            k: {"sensitive": False, "type": "string", "value": v} for k, v in STACK_OUTPUTS.items()
        }
        (tmp_path / "outputs.json").write_text(json.dumps(doc))
        fake_tf = bin_dir / "terraform"
        fake_tf.write_text(f'#!/bin/sh\necho "$*" >> {reads}\ncat {tmp_path / "outputs.json"}\n')
        fake_tf.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        where = ["--terraform-dir", str(state)]
    else:
        camel = {
            "head_public_ip": "headPublicIp",
            "admin_username": "adminUsername",
            "head_vm_id": "headVmId",
            "autoscale_setting_id": "autoscaleSettingId",
        }
        fake.add_deployment(
            SUB, GROUP, "ray-cluster", {camel[k]: v for k, v in STACK_OUTPUTS.items()}
        )
        where = ["--resource-group", GROUP, "--deployment", "ray-cluster", "--subscription", SUB]
    job = tmp_path / "job" / "train.py"
    job.parent.mkdir()
    job.write_text("print('hi')\n")
    args = [str(job) if a == "JOB" else a for a in VERBS[verb]]
    assert main([*args, *where, "--retries", "0"]) == 2
    deployment = "/providers/microsoft.resources/deployments/ray-cluster"
    arm_reads = [p for p, _, _ in fake.requests if p.lower().endswith(deployment)]
    tf_reads = reads.read_text().splitlines() if reads.exists() else []
    assert (len(tf_reads), len(arm_reads)) == ((1, 0) if stack == "terraform" else (0, 1))
    assert all(line.startswith("output -json") for line in tf_reads)
    # The power state was asked where the verb cares whether the head is stopped.
    looked = any(p.endswith("/instanceView") for p, _, _ in fake.requests)
    assert looked == (verb in ("submit", "status"))


# -- what status adds ---------------------------------------------------------------------------
STATE = {
    "idle_minutes": 60,
    "decision": "idle",
    "idle_since": 1_000.0,
    "reason": "no job pending or running, no SSH connection",
    "sizes": {
        "location": "westeurope",
        "head_vm_size": "Standard_D4s_v5",
        "worker_vm_size": "Standard_D8s_v5",
    },
}


def test_idle_line_from_the_heads_autostop_state() -> None:
    assert idle_line(STATE, now=1_000 + 25 * 60) == (
        "Idle for 25 min; autostop stops the cluster in 35 min"
    )
    assert idle_line({**STATE, "idle_minutes": 0}, now=1_000 + 600) == (
        "Idle for 10 min (autostop is off)"
    )
    busy = {**STATE, "decision": "busy", "idle_since": None, "reason": "job a pending or running"}
    assert idle_line(busy) == "Busy: job a pending or running"


def test_rate_line_prices_the_head_and_the_running_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAYDRIVER_HOME", str(tmp_path))
    items = [*vm_meters("westeurope", "Standard_D4s_v5", 0.23, spot=0.046),
             *vm_meters("westeurope", "Standard_D8s_v5", 0.46, spot=0.092)]  # fmt: skip
    with FakeRetailPrices(items) as api:
        monkeypatch.setenv("RAYDRIVER_PRICES_URL", api.url)
        line = rate_line(STATE, workers=2)
        assert line.startswith(
            "Rate: 1.1500 USD/hour (head Standard_D4s_v5 0.2300 + 2 × Standard_D8s_v5 0.4600;"
        )
        assert rate_line(STATE, workers=0).startswith("Rate: 0.2300 USD/hour")
        gone = {**STATE, "sizes": {**STATE["sizes"], "head_vm_size": "Standard_Z9_v9"}}
        assert (
            rate_line(gone, workers=0) == "Rate unknown: no price for Standard_Z9_v9 in westeurope"
        )
        api.fail_with = 503
        monkeypatch.setenv("RAYDRIVER_HOME", str(tmp_path / "other"))  # no cache there
        assert rate_line(STATE, workers=1).startswith("Rate unknown: the Retail Prices API at")
    assert rate_line({"sizes": {}}, workers=1) == (
        "Rate unknown: the head did not say its region and VM sizes"
    )


def test_the_driver_and_the_heads_agent_speak_the_same_api_versions() -> None:
    """The agent on the head stands alone (no driver import), so it keeps its own copies."""
    from nodekit.node import autostop

    assert (power.COMPUTE_API, power.AUTOSCALE_API) == (
        autostop.COMPUTE_API,
        autostop.AUTOSCALE_API,
    )
