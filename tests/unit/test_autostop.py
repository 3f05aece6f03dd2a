"""Autostop on the head (python/nodekit/node/autostop.py): what counts as busy (Ray's jobs, SSH
connections read from /proc/net/tcp), the idle clock, the stop's order, and its Azure calls
through the real azure-mgmt-compute pipeline and azure-identity's managed identity credential
against the fakes of Azure Compute (python/nodekit/rehearsal/standins/azure_compute.py: the
head's VM, the workers' scale set, the autoscale setting) and of the metadata service
(python/nodekit/rehearsal/standins/azure_node.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compute_support import loopback_azure, use_managed_identity
from nodekit.node import autostop
from nodekit.node import azure_vmss_provider as vp
from nodekit.rehearsal.standins.azure_compute import (
    FakeCompute,
    autoscale_config,
    scale_set_config,
    subnet_pool,
    vm_config,
)
from nodekit.rehearsal.standins.azure_node import FakeImds

SUB = "00000000-1111-4222-8333-444444444444"
GROUP = "rg-ray"
SCALE_SET = "ray-workers"
HEAD = "ray-head"
AUTOSCALE = "ray-workers-autoscale"
SCALE_SET_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
    f"/providers/Microsoft.Compute/virtualMachineScaleSets/{SCALE_SET}"
)
HEAD_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
    f"/providers/Microsoft.Compute/virtualMachines/{HEAD}"
)
HEAD_IDENTITY = "aaaaaaaa-0000-4000-8000-000000000001"
"""The head's identity with the autostop role."""
OTHER = "bbbbbbbb-0000-4000-8000-000000000002"
"""An identity without it."""

# /proc/net/tcp and tcp6 as the kernel writes them (sl, local, remote, st, ...): sshd listening
# on 22 (0A), two established SSH connections (one IPv4, one IPv4-mapped in tcp6), the Jobs API
# on 8265 with a local client, and the head's own connection out to port 22 elsewhere.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0401A80A:0016 0101A80A:D431 01 00000000:00000000 02:000A6B9A 00000000     0        0 2 4
   2: 0100007F:2049 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 3 1
   3: 0401A80A:B2C4 0501A80A:0016 01 00000000:00000000 00:00000000 00000000  1000        0 4 1
   4: 0401A80A:0016 0201A80A:D432 06 00000000:00000000 03:00000E7F 00000000     0        0 0 3
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000
   1: 0000000000000000FFFF00000401A80A:0016 0000000000000000FFFF0000070B000A:E001 01 00000000
   2: 00000000000000000000000001000000:0016 00000000000000000000000001000000:A000 01 00000000
"""


# -- what keeps the cluster busy ----------------------------------------------------------------
def test_ssh_connections_are_the_established_ones_to_port_22() -> None:
    assert autostop.ssh_connections([TCP, TCP6]) == [
        "10.168.1.1:54321",
        "10.0.11.7:57345",
        "::1:40960",
    ]
    # The listening socket, TIME_WAIT (06), other ports, and outgoing SSH do not count.
    assert autostop.ssh_connections([TCP.splitlines()[0] + "\n" + TCP.splitlines()[1]]) == []
    assert autostop.ssh_connections(["garbage\n1: zz:zz yy:yy 01\n"]) == []


def test_read_ssh_reads_the_kernels_tables_and_skips_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(TCP)
    assert autostop.read_ssh((str(tmp_path / "tcp"), str(tmp_path / "missing"))) == [
        "10.168.1.1:54321"
    ]


def test_busy_jobs_are_pending_or_running_submissions_and_drivers() -> None:
    jobs = [
        {"submission_id": "raysubmit_a", "job_id": "01000000", "status": "RUNNING"},
        {"submission_id": "raysubmit_b", "status": "PENDING"},
        {"submission_id": "raysubmit_c", "status": "SUCCEEDED"},
        {"submission_id": "raysubmit_d", "status": "FAILED"},
        {"submission_id": "raysubmit_e", "status": "STOPPED"},
        {"submission_id": None, "job_id": "02000000", "type": "DRIVER", "status": "RUNNING"},
    ]
    assert autostop.busy_jobs(jobs) == ["raysubmit_a", "raysubmit_b", "02000000"]
    assert autostop.busy_jobs([]) == []
    with pytest.raises(autostop.AutostopError, match="not a list"):
        autostop.busy_jobs({"detail": "Unauthorized"})


# -- the idle clock ----------------------------------------------------------------------------
IDLE = autostop.Look()
JOB = autostop.Look(jobs=["raysubmit_a"])
SSH = autostop.Look(ssh=["203.0.113.7:50000"])
UNREAD = autostop.Look(error="connection refused")


def test_idle_clock_starts_at_the_first_idle_look_and_stops_after_the_minutes() -> None:
    s = autostop.decide(None, IDLE, 1000.0, 2)
    assert (s.decision, s.idle_since, s.started_at) == ("idle", 1000.0, 1000.0)
    s = autostop.decide(s, IDLE, 1119.0, 2)
    assert (s.decision, s.idle_since) == ("idle", 1000.0)
    assert s.idle_seconds(1119.0) == 119.0
    s = autostop.decide(s, IDLE, 1120.0, 2)
    assert s.decision == "stopping"
    assert s.reason == "no job pending or running, no SSH connection"


@pytest.mark.parametrize("busy", [JOB, SSH, UNREAD], ids=["job", "ssh", "jobs-unreadable"])
def test_anything_busy_resets_the_clock(busy: autostop.Look) -> None:
    s = autostop.decide(None, IDLE, 0.0, 1)
    s = autostop.decide(s, busy, 59.0, 1)
    assert (s.decision, s.idle_since) == ("busy", None)
    s = autostop.decide(s, IDLE, 100.0, 1)
    assert (s.decision, s.idle_since) == ("idle", 100.0)
    assert autostop.decide(s, IDLE, 159.0, 1).decision == "idle"
    assert autostop.decide(s, IDLE, 160.0, 1).decision == "stopping"


def test_busy_reasons_name_what_was_seen() -> None:
    look = autostop.Look(jobs=["raysubmit_a"], ssh=["10.0.0.9:50000"], error="timed out")
    assert look.reason() == (
        "cannot read Ray's jobs (timed out); job raysubmit_a pending or running; "
        "SSH connection from 10.0.0.9:50000"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _agent(
    tmp_path: Path, looks: list[autostop.Look], stop: Any, minutes: str = "1"
) -> tuple[autostop.Agent, Clock]:
    clock = Clock()
    agent = autostop.Agent(
        {"AUTOSTOP_IDLE_MINUTES": minutes},
        tmp_path / "autostop.json",
        tmp_path / "autostop.log",
        lambda: looks.pop(0),
        stop,
        clock,
    )
    return agent, clock


def test_agent_logs_each_change_writes_its_state_and_stops_once(tmp_path: Path) -> None:
    stops: list[float] = []
    looks = [JOB, JOB, IDLE, IDLE, IDLE]
    agent, clock = _agent(tmp_path, looks, lambda: stops.append(clock.now))
    for step in (0, 30, 30, 30, 30):
        clock.now += step
        status = agent.once()
    assert status.decision == "stopped"
    assert stops == [clock.now]  # once, 60 s after the first idle look
    state = json.loads((tmp_path / "autostop.json").read_text())
    assert state["decision"] == "stopped"
    assert state["idle_since"] == clock.now - 60
    assert state["idle_since_utc"].endswith("+00:00")
    lines = (tmp_path / "autostop.log").read_text().splitlines()
    assert len(lines) == 4, lines  # busy (once, unchanged), idle, stopping, stopped
    assert "job raysubmit_a pending or running: not stopping" in lines[0]
    assert "idle; stops after 1 idle minute(s)" in lines[1]
    assert "idle for 1.0 minute(s): stopping the cluster" in lines[2]
    assert "deallocation was accepted" in lines[3]


def test_agent_never_stops_while_an_ssh_session_stays(tmp_path: Path) -> None:
    agent, clock = _agent(tmp_path, [SSH] * 20, lambda: pytest.fail("stopped"))
    for _ in range(20):
        clock.now += 30
        assert agent.once().decision == "busy"
    log = (tmp_path / "autostop.log").read_text()
    assert log.count("SSH connection from 203.0.113.7:50000: not stopping") == 1


def test_a_failed_stop_is_logged_and_starts_a_new_idle_period(tmp_path: Path) -> None:
    def stop() -> None:
        raise RuntimeError("AuthorizationFailed")

    agent, clock = _agent(tmp_path, [IDLE] * 4, stop)
    agent.once()
    clock.now += 60
    status = agent.once()
    assert (status.decision, status.idle_since) == ("failed", None)
    assert "the stop failed: AuthorizationFailed" in (tmp_path / "autostop.log").read_text()
    clock.now += 30
    assert agent.once().decision == "idle"  # the clock starts again


def test_idle_minutes_must_be_a_whole_number() -> None:
    assert autostop.idle_minutes_of({"AUTOSTOP_IDLE_MINUTES": "0"}) == 0
    for bad in ("", "-1", "1.5", "ten"):
        with pytest.raises(autostop.AutostopError, match="whole number"):
            autostop.idle_minutes_of({"AUTOSTOP_IDLE_MINUTES": bad})


def test_zero_minutes_records_idle_time_and_never_stops(tmp_path: Path) -> None:
    agent, clock = _agent(tmp_path, [IDLE] * 3, lambda: pytest.fail("stopped"), minutes="0")
    for _ in range(3):
        clock.now += 3600
        status = agent.once()
    assert (status.decision, status.idle_seconds(clock.now)) == ("idle", 7200.0)
    assert "autostop is off" in (tmp_path / "autostop.log").read_text()


def test_main_refuses_unusable_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "deploy.json"
    args = ["--deploy-values", str(values), "--token", "t", "--jobs-url", "http://127.0.0.1:1"]
    args += ["--state", str(tmp_path / "s"), "--log", str(tmp_path / "l")]
    values.write_text("{")
    assert autostop.main(args) == 2
    values.write_text(json.dumps({"AUTOSTOP_IDLE_MINUTES": "soon"}))
    assert autostop.main(args) == 2
    assert "AUTOSTOP_IDLE_MINUTES must be a whole number" in capsys.readouterr().err


# -- the stop's order ----------------------------------------------------------------------------
class Recorder:
    def __init__(self, fail_at: str = "") -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at

    def _note(self, call: str) -> None:
        self.calls.append(call)
        if call.split(" ")[0] == self.fail_at:
            raise RuntimeError(f"{call} failed")

    def set_autoscale(self, name: str, enabled: bool) -> None:
        self._note(f"{'enable' if enabled else 'disable'}_autoscale {name}")

    def scale_to_zero(self, name: str) -> None:
        self._note(f"scale_to_zero {name}")

    def deallocate(self, vm_id: str) -> None:
        self._note(f"deallocate {vm_id}")

    def stop_ray(self) -> None:
        self._note("stop_ray")

    def start_ray(self) -> None:
        self._note("start_ray")


def test_mode_cpu_disables_autoscale_then_empties_the_scale_set_then_deallocates() -> None:
    r = Recorder()
    values = {
        "SCALING_MODE": "cpu",
        "WORKER_AUTOSCALE_NAME": AUTOSCALE,
        "WORKER_SCALE_SETS": SCALE_SET,
    }
    autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, lambda _: None)
    assert r.calls == [
        f"disable_autoscale {AUTOSCALE}",
        f"scale_to_zero {SCALE_SET}",
        f"deallocate {HEAD_ID}",
    ]


def test_mode_cpu_with_pools_turns_every_pools_autoscale_off_and_every_pool_to_zero() -> None:
    r = Recorder()
    values = {
        "SCALING_MODE": "cpu",
        "WORKER_AUTOSCALE_NAME": f"{AUTOSCALE} ray-gpu-autoscale",
        "WORKER_SCALE_SETS": f"{SCALE_SET} ray-gpu",
        "WORKER_SCALE_SET_ID": SCALE_SET_ID,
    }
    autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, lambda _: None)
    assert r.calls == [
        f"disable_autoscale {AUTOSCALE}",
        "disable_autoscale ray-gpu-autoscale",
        f"scale_to_zero {SCALE_SET}",
        "scale_to_zero ray-gpu",
        f"deallocate {HEAD_ID}",
    ]


def test_mode_cpu_with_pools_turns_every_autoscale_it_turned_off_on_again() -> None:
    """The second pool's scale set refuses: both settings go on again, and the one whose
    enabling fails does not keep the other off."""
    values = {
        "SCALING_MODE": "cpu",
        "WORKER_AUTOSCALE_NAME": f"{AUTOSCALE} ray-gpu-autoscale",
        "WORKER_SCALE_SETS": f"{SCALE_SET} ray-gpu",
    }
    r = Recorder(fail_at="scale_to_zero")
    logged: list[str] = []
    with pytest.raises(RuntimeError, match="scale_to_zero ray-workers failed"):
        autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, logged.append)
    assert r.calls[-2:] == [f"enable_autoscale {AUTOSCALE}", "enable_autoscale ray-gpu-autoscale"]

    class RefusesOne(Recorder):
        def set_autoscale(self, name: str, enabled: bool) -> None:
            super().set_autoscale(name, enabled)
            if enabled and name == AUTOSCALE:
                raise RuntimeError("enable refused")

    r = RefusesOne(fail_at="deallocate")
    with pytest.raises(RuntimeError, match="deallocate"):
        autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, logged.append)
    assert r.calls[-1] == "enable_autoscale ray-gpu-autoscale"
    assert f"enabling {AUTOSCALE} failed (enable refused)" in logged


def test_scale_sets_come_from_the_pools() -> None:
    values = {"WORKER_SCALE_SETS": "a b", "WORKER_SCALE_SET_ID": SCALE_SET_ID}
    assert autostop.scale_set_names(values) == ["a", "b"]
    with pytest.raises(autostop.AutostopError, match="WORKER_SCALE_SETS names no scale set"):
        autostop.scale_set_names({"WORKER_SCALE_SETS": " ", "WORKER_SCALE_SET_ID": SCALE_SET_ID})


def test_mode_ray_empties_the_scale_set_stops_ray_and_empties_it_again() -> None:
    r = Recorder()
    values = {
        "SCALING_MODE": "ray",
        "WORKER_AUTOSCALE_NAME": "",
        "WORKER_SCALE_SETS": SCALE_SET,
    }
    autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, lambda _: None)
    # Workers drain through the running head; then Ray's autoscaler stops, and whatever it
    # launched meanwhile goes too, before the head does.
    assert r.calls == [
        f"scale_to_zero {SCALE_SET}",
        "stop_ray",
        f"scale_to_zero {SCALE_SET}",
        f"deallocate {HEAD_ID}",
    ]


def test_mode_ray_starts_ray_again_when_a_later_step_fails() -> None:
    values = {"SCALING_MODE": "ray", "WORKER_AUTOSCALE_NAME": "", "WORKER_SCALE_SETS": SCALE_SET}
    r = Recorder(fail_at="deallocate")
    with pytest.raises(RuntimeError, match="failed"):
        autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, lambda _: None)
    assert r.calls[-2:] == [f"deallocate {HEAD_ID}", "start_ray"]
    r = Recorder(fail_at="scale_to_zero")  # Ray not stopped yet: nothing to start again
    with pytest.raises(RuntimeError, match="failed"):
        autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, lambda _: None)
    assert r.calls == [f"scale_to_zero {SCALE_SET}"]


def test_mode_cpu_turns_autoscale_on_again_when_a_later_step_fails() -> None:
    """A head left running with its workers' autoscale off would never scale again: whatever
    step fails after the setting went off, it goes on again."""
    values = {
        "SCALING_MODE": "cpu",
        "WORKER_AUTOSCALE_NAME": AUTOSCALE,
        "WORKER_SCALE_SETS": SCALE_SET,
    }
    for step in ("scale_to_zero", "deallocate", "disable_autoscale"):
        r = Recorder(fail_at=step)
        logged: list[str] = []
        with pytest.raises(RuntimeError, match="failed"):
            autostop.stop_cluster(values, HEAD_ID, r, r.stop_ray, r.start_ray, logged.append)
        assert r.calls[-1] == f"enable_autoscale {AUTOSCALE}", (step, r.calls)
        assert "start_ray" not in r.calls
        assert any(line.startswith("stopping failed (RuntimeError: ") for line in logged), logged


def test_vm_resource_id_from_the_metadata_service() -> None:
    assert autostop.vm_resource_id({"resourceId": HEAD_ID}) == HEAD_ID
    built = {"subscriptionId": SUB, "resourceGroupName": GROUP, "name": HEAD, "resourceId": ""}
    assert autostop.vm_resource_id(built) == HEAD_ID
    with pytest.raises(autostop.AutostopError, match="resourceGroupName"):
        autostop.vm_resource_id({"subscriptionId": SUB, "name": HEAD})


# -- the Azure calls, against the fakes --------------------------------------------------------
@dataclass
class Azure:
    compute: FakeCompute
    imds: FakeImds
    ca: Path
    deallocated: threading.Event
    started: threading.Event

    def cloud(self, client_id: str = HEAD_IDENTITY) -> autostop.Azure:
        return autostop.Azure(
            vp.ScaleSet(
                SCALE_SET_ID,
                vp.managed_identity(client_id),
                self.compute.url,
                connection_verify=str(self.ca),
                polling_interval=0.05,
            )
        )


@pytest.fixture
def azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Azure]:
    deallocated, started = threading.Event(), threading.Event()
    with loopback_azure(
        tmp_path,
        HEAD,
        {HEAD_IDENTITY: "p-head", OTHER: "p-other"},
        [HEAD_IDENTITY],
        [scale_set_config(SUB, GROUP, SCALE_SET, subnet_pool("10.42.1.0/24", 6, 20))],
        resource_id=HEAD_ID,
        virtual_machines=[vm_config(SUB, GROUP, HEAD)],
        autoscale_settings=[autoscale_config(SUB, GROUP, AUTOSCALE, SCALE_SET_ID)],
        on_deallocate=lambda info: deallocated.set(),
        on_start=lambda info: started.set(),
    ) as fakes:
        use_managed_identity(monkeypatch, fakes.imds)
        yield Azure(fakes.compute, fakes.imds, fakes.ca, deallocated, started)


def test_the_stop_through_azure_leaves_no_worker_no_autoscale_and_the_head_deallocated(
    azure: Azure,
) -> None:
    cloud = azure.cloud()
    cloud.scale_set.set_capacity(2)
    assert azure.compute.capacity(SCALE_SET) == 2
    vm_id = autostop.vm_resource_id(autostop.instance_metadata(azure.imds.url))
    assert vm_id == HEAD_ID
    logged: list[str] = []
    values = {
        "SCALING_MODE": "cpu",
        "WORKER_AUTOSCALE_NAME": AUTOSCALE,
        "WORKER_SCALE_SETS": SCALE_SET,
    }
    autostop.stop_cluster(values, vm_id, cloud, lambda: None, lambda: None, logged.append)
    assert azure.compute.autoscale_enabled(AUTOSCALE) is False
    assert azure.compute.capacity(SCALE_SET) == 0
    assert azure.deallocated.wait(120)
    assert _settles(lambda: azure.compute.power_state(HEAD) == "deallocated")
    writes = [
        (r["method"], r["path"].rsplit("/", 1)[-1], r["query"]["api-version"])
        for r in azure.compute.state.lines("requests.jsonl")
        if r["method"] in ("PATCH", "POST")
    ]
    assert writes[-3:] == [
        ("PATCH", AUTOSCALE, autostop.AUTOSCALE_API),
        ("PATCH", SCALE_SET, writes[-2][2]),
        ("POST", "deallocate", autostop.COMPUTE_API),
    ]
    assert logged[-1] == f"deallocating this head ({HEAD_ID})"


def test_an_identity_without_the_role_is_refused_and_nothing_changes(azure: Azure) -> None:
    from azure.core.exceptions import HttpResponseError

    cloud = azure.cloud(OTHER)
    with pytest.raises(HttpResponseError, match="virtualMachines/deallocate/action"):
        cloud.deallocate(HEAD_ID)
    with pytest.raises(HttpResponseError, match="autoscaleSettings/write"):
        cloud.set_autoscale(AUTOSCALE, False)
    assert azure.compute.power_state(HEAD) == "running"
    assert azure.compute.autoscale_enabled(AUTOSCALE) is True


# -- the fake's virtual machine, as the driver and the rehearsal use it --------------------------
def _arm(azure: Azure, method: str, path: str, body: Any = None, api: str = "2024-11-01") -> Any:
    from azure.core.rest import HttpRequest

    cloud = azure.cloud()
    url = f"{azure.compute.url}{path}?api-version={api}"
    return cloud.scale_set.client.send_request(HttpRequest(method, url, json=body))


def test_fake_vm_power_states_follow_azures_wire_format(azure: Azure) -> None:
    view = _arm(azure, "GET", f"{HEAD_ID}/instanceView").json()
    assert [s["code"] for s in view["statuses"]] == [
        "ProvisioningState/succeeded",
        "PowerState/running",
    ]
    doc = _arm(azure, "GET", HEAD_ID, api="2024-11-01").json()
    assert doc["id"] == HEAD_ID and doc["properties"]["hardwareProfile"]["vmSize"]
    response = _arm(azure, "POST", f"{HEAD_ID}/deallocate")
    assert response.status_code == 202
    assert "/operations/" in response.headers["Azure-AsyncOperation"]
    assert response.headers["Retry-After"] == "1"
    assert azure.deallocated.wait(120)
    assert _settles(lambda: azure.compute.power_state(HEAD) == "deallocated")
    operation = _arm_url(azure, response.headers["Azure-AsyncOperation"])
    assert operation["status"] == "Succeeded"
    view = _arm(azure, "GET", f"{HEAD_ID}/instanceView").json()
    assert view["statuses"][1] == {
        "code": "PowerState/deallocated",
        "level": "Info",
        "displayStatus": "VM deallocated",
    }
    # Deallocating again is accepted and changes nothing; starting boots it.
    assert _arm(azure, "POST", f"{HEAD_ID}/deallocate").status_code == 202
    assert _arm(azure, "POST", f"{HEAD_ID}/start").status_code == 202
    assert azure.started.wait(120)
    assert _settles(lambda: azure.compute.power_state(HEAD) == "running")
    missing = _arm(azure, "POST", HEAD_ID.replace(HEAD, "nope") + "/start")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "ResourceNotFound"


def test_fake_autoscale_setting_patch_validates_its_body(azure: Azure) -> None:
    path = (
        f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
        f"/providers/Microsoft.Insights/autoscalesettings/{AUTOSCALE}"
    )
    bad = _arm(azure, "PATCH", path, {"properties": {"enabled": "no"}}, api="2022-10-01")
    assert bad.status_code == 400
    ok = _arm(azure, "PATCH", path, {"properties": {"enabled": False}}, api="2022-10-01")
    assert ok.status_code == 200 and ok.json()["properties"]["enabled"] is False
    got = _arm(azure, "GET", path, api="2022-10-01").json()
    assert got["properties"]["targetResourceUri"] == SCALE_SET_ID


def _settles(check: Any, within: float = 120) -> bool:
    """Whether ``check()`` holds within ``within`` seconds, looked at every 0.05 s (the fake's
    hook thread sets the power state right after the hook returns; the bound is on a hang)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _arm_url(azure: Azure, url: str) -> Any:
    from azure.core.rest import HttpRequest

    return azure.cloud().scale_set.client.send_request(HttpRequest("GET", url)).json()


# -- what the head gets --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("module", "path_name"),
    [("autostop", "AUTOSTOP_PATH"), ("azure_vmss_provider", "AUTOSCALER_PROVIDER_PATH")],
)
def test_the_head_gets_its_modules_without_docstrings_and_comments_and_nothing_else_changed(
    module: str, path_name: str
) -> None:
    from nodekit import render
    from support import REPO

    source = (REPO / "python" / "nodekit" / "node" / f"{module}.py").read_text()
    head = (REPO / "cloud-init" / "rendered" / "head.yaml").read_text()
    embedded = render.document_files(head)[getattr(render, path_name)]
    assert embedded == render.compact_python(source)
    assert not embedded.lstrip().startswith('"""')  # the module's docstring went
    assert embedded.count('"""') < source.count('"""') // 4  # only lone bodies keep theirs
    assert "\n#" not in embedded and "  # " not in embedded  # comments went
    # Every embedded line is a source line or one cut before its comment, in order.
    remaining = iter(source.splitlines())
    assert all(
        any(line == src or src.startswith(line + "  #") for src in remaining)
        for line in embedded.splitlines()
    )
    assert _code(source) == _code(embedded)  # the same program
    compile(embedded, f"{module}.py", "exec")


def _code(text: str) -> str:
    """The program without docstrings, as ``ast`` sees it (no line numbers)."""
    import ast

    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and len(body) > 1:
            node.body = [  # type: ignore[attr-defined]
                b
                for b in body
                if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))
            ]
    return ast.dump(tree)
