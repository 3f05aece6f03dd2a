"""The worker's health endpoint (python/nodekit/node/health.py): what it tells the scale set's
Application Health extension in every state of the node, over real HTTP on loopback, with
temporary marker files and a fake ray-worker unit."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodekit.node import health
from nodekit.node.health import HEALTHY, INITIALIZING, UNHEALTHY, Node, assess, make_server

BOOT = "3f1c7a52-5d1e-4b8e-9c41-0d6a1e2f3b4c"
EARLIER_BOOT = "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"


class FakeNode:
    """Marker files in a temporary folder, a settable unit state and boot."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.unit = "inactive"
        self.boot = BOOT
        self.booted_at = time.time() - 600
        self.unit_calls = 0

    @property
    def paths(self) -> dict[str, Path]:
        return {n: self.root / n for n in ("ready", "failed", "restart-failed")}

    def node(self) -> Node:
        def unit_state() -> str:
            self.unit_calls += 1
            return self.unit

        return Node(
            ready=str(self.paths["ready"]),
            failed=str(self.paths["failed"]),
            restart_failed=str(self.paths["restart-failed"]),
            unit_state=unit_state,
            boot_id=lambda: self.boot,
            boot_time=lambda: self.booted_at,
        )

    def ready(self, boot: str = BOOT) -> None:
        marker = {"role": "worker", "node_ip": "10.0.0.6", "boot_id": boot}
        self.paths["ready"].write_text(json.dumps(marker, indent=2) + "\n")

    def fail(self, reason: str) -> None:
        self.paths["failed"].write_text(reason + "\n")

    def restart_failed(self, reason: str, at: float) -> None:
        path = self.paths["restart-failed"]
        path.write_text(reason + "\n")
        os.utime(path, (at, at))


@pytest.fixture
def fake(tmp_path: Path) -> FakeNode:
    return FakeNode(tmp_path)


# -- the decision ------------------------------------------------------------------------------
def test_a_fresh_node_is_initializing_while_the_bootstrap_runs(fake: FakeNode) -> None:
    state, reason = assess(fake.node())
    assert state == INITIALIZING and "bootstrap is still running" in reason


def test_a_failed_bootstrap_is_unhealthy_with_its_reason(fake: FakeNode) -> None:
    fake.fail('step "install_ray": `uv pip install` exited with 2')
    state, reason = assess(fake.node())
    assert state == UNHEALTHY
    assert reason == 'the bootstrap failed: step "install_ray": `uv pip install` exited with 2'


def test_the_failed_marker_wins_over_anything_else(fake: FakeNode) -> None:
    fake.ready()
    fake.unit = "active"
    fake.fail("Ray did not come up on this worker within 1800 s")
    assert assess(fake.node())[0] == UNHEALTHY


def test_an_empty_failed_marker_still_means_failed(fake: FakeNode) -> None:
    fake.paths["failed"].write_text("")
    assert assess(fake.node())[0] == UNHEALTHY


@pytest.mark.parametrize("unit", ["active", "activating", "reloading", "deactivating"])
def test_ready_at_this_boot_with_ray_running_or_restarting_is_healthy(
    fake: FakeNode, unit: str
) -> None:
    fake.ready()
    fake.unit = unit
    state, reason = assess(fake.node())
    assert state == HEALTHY and unit in reason


def test_ray_stopped_on_purpose_is_no_reason_to_replace_the_vm(fake: FakeNode) -> None:
    """The scheduled-events watcher stops Ray before Azure removes the VM: a repair then would
    fight the scale-in it drains for."""
    fake.ready()
    fake.unit = "inactive"
    assert assess(fake.node())[0] == HEALTHY


def test_ray_failed_after_being_ready_is_unhealthy(fake: FakeNode) -> None:
    fake.ready()
    fake.unit = "failed"
    state, reason = assess(fake.node())
    assert state == UNHEALTHY and "ray-worker.service failed" in reason


def test_the_unit_is_asked_only_once_the_node_was_ready(fake: FakeNode) -> None:
    assess(fake.node())
    assert fake.unit_calls == 0
    fake.ready()
    assess(fake.node())
    assert fake.unit_calls == 1


def test_after_a_reboot_the_earlier_boots_marker_means_initializing(fake: FakeNode) -> None:
    fake.ready(boot=EARLIER_BOOT)
    fake.unit = "failed"  # not asked: this boot's Ray has not been ready yet
    state, reason = assess(fake.node())
    assert state == INITIALIZING and "come back" in reason
    assert fake.unit_calls == 0


def test_ray_not_back_after_a_reboot_is_unhealthy(fake: FakeNode) -> None:
    fake.ready(boot=EARLIER_BOOT)
    fake.restart_failed("Ray did not come up on this worker within 1800 s", at=time.time())
    state, reason = assess(fake.node())
    assert state == UNHEALTHY and reason.startswith("Ray did not come back at this boot: ")


def test_an_earlier_boots_restart_failure_is_forgotten(fake: FakeNode) -> None:
    fake.ready(boot=EARLIER_BOOT)
    fake.restart_failed("old news", at=fake.booted_at - 3600)
    assert assess(fake.node())[0] == INITIALIZING
    fake.ready()
    fake.unit = "active"
    assert assess(fake.node())[0] == HEALTHY


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"boot_id": 7}'])
def test_a_half_written_or_foreign_marker_is_not_ready(fake: FakeNode, text: str) -> None:
    fake.paths["ready"].write_text(text)
    fake.unit = "active"
    assert assess(fake.node())[0] == INITIALIZING


def test_no_boot_id_means_not_ready(fake: FakeNode) -> None:
    fake.ready()
    fake.unit = "active"
    fake.boot = None  # type: ignore[assignment]
    assert assess(fake.node())[0] == INITIALIZING


# -- the endpoint ------------------------------------------------------------------------------
@pytest.fixture
def served(fake: FakeNode) -> Iterator[str]:
    server = make_server(fake.node(), "127.0.0.1", 0, "/health")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_endpoint_answers_in_the_extensions_rich_health_format(
    fake: FakeNode, served: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, body = get(f"{served}/health")
    assert status == 200 and body["ApplicationHealthState"] == INITIALIZING
    fake.ready()
    fake.unit = "active"
    assert get(f"{served}/health") == (
        200,
        {
            "ApplicationHealthState": HEALTHY,
            "Reason": "Ray was ready at this boot; ray-worker.service is active",
        },
    )
    fake.unit = "failed"
    status, body = get(f"{served}/health?probe=1")
    assert status == 200 and body["ApplicationHealthState"] == UNHEALTHY
    fake.fail("gave up")
    assert get(f"{served}/health")[1]["Reason"] == "the bootstrap failed: gave up"
    # One log line per change of answer, not one per probe.
    get(f"{served}/health")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == [
        INITIALIZING,
        HEALTHY,
        UNHEALTHY,
        UNHEALTHY,
    ]


def test_other_paths_are_not_found(served: str) -> None:
    status, body = get(f"{served}/")
    assert status == 404 and "/health" in body["error"]


def test_the_body_is_json_the_extension_reads(fake: FakeNode, served: str) -> None:
    """The extension unmarshals the body and accepts exactly Healthy or Unhealthy in
    ApplicationHealthState; Initializing is deliberately outside that set (read as Unknown,
    which keeps the instance Initializing during the extension's grace period)."""
    with urllib.request.urlopen(f"{served}/health", timeout=60) as r:
        assert r.headers["Content-Type"] == "application/json"
        raw = r.read()
    assert int(r.headers["Content-Length"]) == len(raw)
    assert set(json.loads(raw)) == {"ApplicationHealthState", "Reason"}


def test_main_serves_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    class Server:
        def serve_forever(self) -> None:
            pass

    def fake_make_server(node: Node, host: str, port: int, path: str) -> Server:
        seen.update(host=host, port=port, path=path, node=node)
        return Server()

    monkeypatch.setattr(health, "make_server", fake_make_server)
    argv = ["--port", "8790", "--ready", "r", "--failed", "f", "--restart-failed", "rf"]
    assert health.main(argv) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8790 and seen["path"] == "/health"
    node = seen["node"]
    assert isinstance(node, Node) and (node.ready, node.failed) == ("r", "f")


def test_systemd_unit_state_reports_what_systemctl_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    systemctl = tmp_path / "systemctl"
    systemctl.write_text('#!/bin/sh\n[ "$1 $2" = "is-active ray-worker.service" ] && echo failed\n')
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert health.systemd_unit_state("ray-worker.service")() == "failed"
    systemctl.unlink()
    assert health.systemd_unit_state("ray-worker.service")().startswith("unknown")
