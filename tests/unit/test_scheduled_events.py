"""The worker's scheduled-events watcher against the fake instance metadata service
(python/nodekit/rehearsal/standins/azure_node.py), shaped like Azure's: what it acts on, in
which order, how fast, and what it survives."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodekit.node.scheduled_events import Actions, Watcher
from nodekit.rehearsal.standins.azure_node import FakeImds, imds_config

ME = "ray-workers_3"
OTHER = "ray-workers_4"


class Node:
    """Records what the watcher did to the node, with when."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, object]] = []
        self.lock = threading.Lock()

    def drain(self, deadline: float, message: str) -> None:
        with self.lock:
            self.calls.append(("drain", time.monotonic(), deadline))

    def stop(self) -> None:
        with self.lock:
            self.calls.append(("stop", time.monotonic(), None))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


@pytest.fixture
def imds(tmp_path: Path) -> Iterator[FakeImds]:
    fake = FakeImds(tmp_path / "imds")
    fake.state.write("config.json", imds_config(secrets.token_bytes(16), ME, {}))
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def node() -> Node:
    return Node()


class Running:
    """The watcher in a thread, polling every 0.2 s, with its log."""

    def __init__(
        self, imds: FakeImds, node: Node, grace: float = 1.0, timeout: float = 2.0
    ) -> None:
        self.lines: list[str] = []
        self.done = threading.Event()
        self.watcher = Watcher(
            imds.url,
            Actions(node.drain, node.stop),
            log=self.lines.append,
            timeout=timeout,
            grace=grace,
        )
        self.thread = threading.Thread(
            target=self.watcher.run,
            kwargs={"interval": 0.2, "max_backoff": 1.0, "until": self.done.is_set},
            daemon=True,
        )
        self.thread.start()

    def wait_for(self, text: str, limit: float = 120) -> None:
        deadline = time.monotonic() + limit
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, self.lines
            time.sleep(0.05)

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def _preempted(imds: FakeImds, node: Node, actions: Actions) -> tuple[Running, str, float]:
    """The watcher with ``actions`` through a Preempt of this VM 30 s ahead, until it has
    acknowledged it: the run, the event's id and when it was posted (Unix seconds)."""
    w = Running(imds, node)
    w.watcher.actions = actions
    try:
        w.wait_for(f"watching scheduled events for {ME}")
        posted = time.time()
        event_id = imds.schedule("Preempt", [ME], not_before_s=30)
        w.wait_for(f"acknowledged {event_id}")
    finally:
        w.close()
    return w, event_id, posted


@pytest.mark.parametrize(("kind", "notice"), [("Terminate", 300.0), ("Preempt", 30.0)])
def test_an_event_for_this_vm_drains_stops_and_acknowledges_in_that_order(
    imds: FakeImds, node: Node, kind: str, notice: float
) -> None:
    w = Running(imds, node)
    try:
        w.wait_for(f"watching scheduled events for {ME}")
        posted = time.monotonic()
        event_id = imds.schedule(kind, [ME], not_before_s=notice)
        w.wait_for(f"acknowledged {event_id}")
    finally:
        w.close()
    assert node.names() == ["drain", "stop"]
    (_, drained_at, deadline), (_, stopped_at, _) = node.calls
    acks = imds.acks()
    assert [a["EventId"] for a in acks] == [event_id] and acks[0]["known"]
    # drain → stop → acknowledge, all well within the notice (Preempt: ~30 s).
    assert drained_at < stopped_at
    assert acks[0]["time"] - time.time() + time.monotonic() > stopped_at - 0.5
    assert stopped_at - posted < min(notice, 30)
    # The drain's deadline: what was left of the notice (NotBefore has whole seconds) when the
    # watcher read the event, less the 5 s safety margin. How long it took to read it is
    # measured, not assumed (a loaded machine can be seconds late).
    late = drained_at - posted
    assert notice - 6 - late - 0.1 < float(deadline) <= notice - 5
    # Acknowledged: the event left the document, as Azure goes ahead.
    assert imds.state.read("events.json", None) == []


@pytest.mark.parametrize(
    ("kind", "resources"),
    [
        ("Terminate", [OTHER]),
        ("Preempt", [OTHER, "ray-head"]),
        ("Reboot", [ME]),
        ("Freeze", [ME]),
        ("Redeploy", [ME]),
    ],
)
def test_other_vms_events_and_other_kinds_are_left_alone(
    imds: FakeImds, node: Node, kind: str, resources: list[str]
) -> None:
    w = Running(imds, node)
    try:
        w.wait_for("watching")
        event_id = imds.schedule(kind, resources, not_before_s=60)
        w.wait_for(f"ignoring event {event_id}")
        polls = len(imds.state.lines("requests.jsonl"))
        deadline = time.monotonic() + 120
        # Five more polls answered (it asks one at a time): still nothing, and said once.
        while len(imds.state.lines("requests.jsonl")) < polls + 6:
            assert time.monotonic() < deadline, w.lines
            time.sleep(0.05)
    finally:
        w.close()
    assert node.calls == [] and imds.acks() == []
    assert len([line for line in w.lines if event_id in line]) == 1


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 500, "body": "boom"},
        {"body": "not json at all"},
        {"body": '{"Events": "nope"}'},
        {"delay": 3},
    ],
    ids=["http-500", "garbage", "wrong-shape", "timeout"],
)
def test_a_broken_metadata_service_is_survived_and_the_watcher_recovers(
    imds: FakeImds, node: Node, fault: dict
) -> None:
    w = Running(imds, node, timeout=1.0)
    try:
        w.wait_for("watching")
        imds.state.write("faults.json", {"/metadata/scheduledevents": fault})
        w.wait_for("metadata service unusable")
        time.sleep(1.5)
        assert w.thread.is_alive() and node.calls == []
        assert len([line for line in w.lines if "unusable" in line]) == 1  # once per outage
        imds.state.write("faults.json", {})
        w.wait_for("metadata service answers again")
        event_id = imds.schedule("Terminate", [ME], not_before_s=300)
        w.wait_for(f"acknowledged {event_id}")
    finally:
        w.close()
    assert node.names() == ["drain", "stop"]


def test_a_service_that_is_down_at_start_is_waited_for(tmp_path: Path, node: Node) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lines: list[str] = []
    done = threading.Event()
    watcher = Watcher(
        f"http://127.0.0.1:{port}", Actions(node.drain, node.stop), log=lines.append, timeout=1.0
    )
    thread = threading.Thread(
        target=watcher.run, kwargs={"interval": 0.1, "max_backoff": 0.5, "until": done.is_set}
    )
    thread.start()
    # Down when the watcher first asks (and says so), then up.
    deadline = time.monotonic() + 120
    while not any("unusable" in line for line in lines):
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    imds = FakeImds(tmp_path / "late", port=port)
    imds.state.write("config.json", imds_config(secrets.token_bytes(16), ME, {}))
    imds.start()
    try:
        deadline = time.monotonic() + 120
        while not any("watching scheduled events" in line for line in lines):
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
    finally:
        done.set()
        thread.join(timeout=10)
        imds.stop()
    assert any("unusable" in line for line in lines) and node.calls == []


def test_a_failed_acknowledgement_is_retried_without_draining_twice(
    imds: FakeImds, node: Node
) -> None:
    w = Running(imds, node)
    try:
        w.wait_for("watching")
        imds.state.write("faults.json", {"POST /metadata/scheduledevents": {"status": 503}})
        event_id = imds.schedule("Terminate", [ME], not_before_s=300)
        w.wait_for("metadata service unusable")  # the acknowledgement was refused
        assert node.names() == ["drain", "stop"] and imds.acks() == []
        imds.state.write("faults.json", {})
        w.wait_for(f"acknowledged {event_id}")
    finally:
        w.close()
    assert node.names() == ["drain", "stop"]  # drained and stopped once
    assert [a["EventId"] for a in imds.acks()] == [event_id]


def test_the_real_drain_runs_ray_with_the_nodes_settings_read_when_the_event_comes(
    tmp_path: Path,
) -> None:
    """Ray's clients on the node need its token settings: both the node-id lookup and
    `ray drain-node` get node.env's values, read at drain time (a restart of Ray rewrites the
    node's address there)."""
    import json
    import stat

    from nodekit.node.scheduled_events import real_actions

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "calls.jsonl"
    fake = (
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:3], "
        "'auth': os.environ.get('RAY_AUTH_MODE'), 'address': os.environ.get('RAY_ADDRESS')}) "
        "+ '\\n')\n"
        "if os.environ.get('RAY_AUTH_MODE') != 'token':\n"
        "    sys.exit('ray.exceptions.AuthenticationError: token missing')\n"
        "print('ab' * 28)\n"
    )
    for name in ("python", "ray"):
        path = venv / "bin" / name
        path.write_text(fake)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    node_env = tmp_path / "node.env"
    node_env.write_text("RAY_HEAD_IP=10.0.0.4\nRAY_NODE_IP=\nRAY_AUTH_MODE=token\n")
    actions = real_actions(str(venv), str(node_env), "ray-worker.service")
    # Ray started (again) after the watcher did: the address is in the file now.
    node_env.write_text("RAY_HEAD_IP=10.0.0.4\nRAY_NODE_IP=10.0.0.7\nRAY_AUTH_MODE=token\n")
    actions.drain(20.0, "Azure Terminate event E1")
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c["argv"][0] for c in calls] == ["-c", "drain-node"]
    assert all(c["auth"] == "token" and c["address"] == "10.0.0.4:6379" for c in calls), calls
    node_env.write_text("RAY_HEAD_IP=10.0.0.4\nRAY_NODE_IP=10.0.0.7\n")  # no token settings
    with pytest.raises(RuntimeError, match="AuthenticationError: token missing"):
        actions.drain(20.0, "Azure Terminate event E2")


# -- notices for the jobs (issue 38) ------------------------------------------------------------
class Jobs:
    """Records the notices published and plays the jobs' holds: ``held`` seconds of holding by
    ``holders`` (none: no job cares)."""

    def __init__(self, node: Node, holders: list[str], held: float = 0.0) -> None:
        self.node, self.holders, self.held = node, holders, held
        self.notices: list[tuple[str, str, float]] = []
        self.waits: list[tuple[float, float]] = []

    def announce(self, event_id: str, kind: str, not_before: float) -> str:
        with self.node.lock:
            self.node.calls.append(("announce", time.monotonic(), event_id))
        self.notices.append((event_id, kind, not_before))
        return "ab" * 28

    def hold_wait(self, node_id: str, window: float, left: float) -> tuple[list[str], list[str]]:
        self.waits.append((window, left))
        time.sleep(self.held if self.holders else min(window, 0.5))
        with self.node.lock:
            self.node.calls.append(("waited", time.monotonic(), self.holders))
        return list(self.holders), []


def test_a_notice_is_published_and_a_job_holding_the_worker_gets_until_the_notices_end(
    imds: FakeImds, node: Node
) -> None:
    """The worker publishes the notice, drains, and gives a job that holds it (while it
    checkpoints) until the notice's end less the safety margin, not just its grace; then it
    stops Ray and acknowledges."""
    jobs = Jobs(node, ["raysubmit_abc"], held=1.0)
    actions = Actions(node.drain, node.stop, jobs.announce, jobs.hold_wait)
    w, event_id, posted = _preempted(imds, node, actions)
    # The job's checkpoint before the drain (a drained node takes no new actor, and RLlib saves
    # a learner actor's state through one).
    assert node.names() == ["announce", "waited", "drain", "stop"]
    [(announced, kind, not_before)] = jobs.notices
    assert (announced, kind) == (event_id, "Preempt")
    assert posted + 29 <= not_before <= posted + 31  # NotBefore in Unix seconds (whole ones)
    [(window, left)] = jobs.waits
    assert 20 < left <= 25  # the notice's end, less the 5 s safety margin
    assert window == 1.0  # the grace (Running's) for a hold to appear
    assert any("released by raysubmit_abc" in line for line in w.lines), w.lines
    assert [a["EventId"] for a in imds.acks()] == [event_id]


def test_the_head_publishes_the_notice_and_waits_for_its_jobs_but_never_drains_or_stops(
    imds: FakeImds, node: Node
) -> None:
    """The head's Ray is the cluster's (draining an idle head ends its raylet): the watcher
    only publishes the notice and gives its jobs until the notice's end, less the safety
    margin, to take a hold; once they released it, it acknowledges."""
    jobs = Jobs(node, ["raysubmit_abc"], held=1.0)
    w, event_id, _ = _preempted(imds, node, Actions(None, None, jobs.announce, jobs.hold_wait))
    assert node.names() == ["announce", "waited"]
    [(window, left)] = jobs.waits
    assert window == left and 20 < left <= 25
    assert not any("draining" in line or "stopping Ray" in line for line in w.lines), w.lines
    assert [a["EventId"] for a in imds.acks()] == [event_id]


def test_the_head_records_the_jobs_that_held_it_before_it_acknowledges(
    imds: FakeImds, node: Node
) -> None:
    """Once its jobs released the head, the watcher records them for resumption (the jobs it
    saw holding, with the event), then acknowledges; a failed record is one line and the
    acknowledgement goes out all the same. The resumption runs at every poll, also while the
    metadata service does not answer (the head's Ray comes back on its own clock)."""
    jobs = Jobs(node, ["raysubmit_abc", "run-2"], held=0.5)
    recorded: list[tuple[list[str], str, bool]] = []
    polls: list[float] = []

    def record(holders: list[str], event_id: str) -> None:
        acked = event_id in [a["EventId"] for a in imds.acks()]
        recorded.append((holders, event_id, acked))
        if len(recorded) > 1:
            raise OSError("No space left on device")

    w = Running(imds, node)
    w.watcher.actions = Actions(
        None, None, jobs.announce, jobs.hold_wait, record, lambda: polls.append(time.time())
    )
    try:
        w.wait_for(f"watching scheduled events for {ME}")
        first = imds.schedule("Preempt", [ME], not_before_s=30)
        w.wait_for(f"acknowledged {first}")
        second = imds.schedule("Preempt", [ME], not_before_s=30)
        w.wait_for(f"acknowledged {second}")
        imds.stop()  # the metadata service away: the resumption goes on
        counted = len(polls)
        w.wait_for("metadata service unusable")
        deadline = time.monotonic() + 30
        while len(polls) < counted + 2:
            assert time.monotonic() < deadline, polls
            time.sleep(0.1)
    finally:
        w.close()
    assert recorded == [
        (["raysubmit_abc", "run-2"], first, False), (["raysubmit_abc", "run-2"], second, False)
    ]  # fmt: skip
    assert any(
        ln == "recording the jobs for resumption failed (No space left on device)" for ln in w.lines
    ), w.lines
    assert [a["EventId"] for a in imds.acks()] == [first, second]


def test_a_notice_that_cannot_be_published_still_drains_and_stops(
    imds: FakeImds, node: Node
) -> None:
    def fails(event_id: str, kind: str, not_before: float) -> str:
        raise RuntimeError("no live Ray node at 10.0.0.7")

    actions = Actions(node.drain, node.stop, fails, Jobs(node, []).hold_wait)
    w, _, _ = _preempted(imds, node, actions)
    assert node.names() == ["drain", "stop"]
    assert any("publishing the notice failed (no live Ray node" in ln for ln in w.lines), w.lines


def test_the_real_notice_and_holds_go_through_rays_key_value_store(tmp_path: Path) -> None:
    """real_actions against a real Ray (this process's): the notice lands under notice/NODE_ID
    in the namespace jobs read, with this node's Ray id; a hold a job takes while the watcher
    waits is seen, and the wait ends when the job deletes it; with no hold, after the window."""
    import json
    import os
    import sys

    import ray
    from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get, _internal_kv_put

    from driver.localray import init_local_ray
    from nodekit.node.scheduled_events import (
        HOLD_PREFIX,
        KV_NAMESPACE,
        RELEASED_PREFIX,
        real_actions,
    )

    environ = dict(os.environ)
    init_local_ray(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        host, port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
        me = ray.get_runtime_context().get_node_id()
        node_env = tmp_path / "node.env"
        node_env.write_text(
            f"RAY_HEAD_IP={host}\nRAY_GCS_PORT={port}\nRAY_NODE_IP={ray.util.get_node_ip_address()}\n"
        )
        actions = real_actions(str(Path(sys.executable).parent.parent), str(node_env), "-", "head")
        assert actions.drain is None and actions.stop is None
        assert actions.announce and actions.hold_wait
        assert actions.announce("E1", "Preempt", 1234.5) == me
        notice = json.loads(_internal_kv_get(f"notice/{me}", namespace=KV_NAMESPACE))
        assert {k: notice[k] for k in ("node_id", "event_id", "event_type", "not_before")} == {
            "node_id": me, "event_id": "E1", "event_type": "Preempt", "not_before": 1234.5
        }  # fmt: skip

        hold = f"{HOLD_PREFIX}{me}/raysubmit_1"

        def job() -> None:  # as examples/harness/notice.py's Watch holds and releases
            time.sleep(1.0)
            _internal_kv_put(hold, b"{}", namespace=KV_NAMESPACE)
            time.sleep(2.0)
            _internal_kv_put(f"{RELEASED_PREFIX}{me}/raysubmit_1", b"{}", namespace=KV_NAMESPACE)
            _internal_kv_del(hold, namespace=KV_NAMESPACE)

        holder = threading.Thread(target=job)
        started = time.monotonic()
        holder.start()
        assert actions.hold_wait(me, 10.0, 60.0) == (["raysubmit_1"], [])
        took = time.monotonic() - started
        holder.join()
        assert took >= 3.0  # until the hold went, not the window's end
        # Released before the wait: seen at once, not waited for (a wait would last the whole
        # 30 s window; the margin is for a loaded machine).
        started = time.monotonic()
        assert actions.hold_wait(me, 30.0, 60.0) == (["raysubmit_1"], [])
        assert time.monotonic() - started < 30.0
        _internal_kv_del(f"{RELEASED_PREFIX}{me}/", del_by_prefix=True, namespace=KV_NAMESPACE)
        started = time.monotonic()
        assert actions.hold_wait(me, 1.0, 60.0) == ([], [])
        assert time.monotonic() - started >= 1.0
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(environ)
