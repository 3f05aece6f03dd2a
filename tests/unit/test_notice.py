"""The job side of the eviction notice (issue 38; examples/harness/notice.py): a notice for the
job's node in Ray's KV, put there while examples/cartpole/train.py trains on a local Ray, makes
the harness hold the node, checkpoint at once and publish it to the results store (Azurite,
tests/unit/conftest.py's ``env``), release the hold, and say so in one line; a notice with too
little time left leaves the store's published checkpoint as it was."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from blob_support import get_blob, start_uploader
from fakes.local_blob import Blob
from harness import blobsync, notice, store
from harness.runs import latest_checkpoint
from notice_support import put_notice
from support import REPO

RUN_S = 600
"""A training run's bound: on 2 loaded cores, Ray's client and RLlib's imports take a while."""


# -- the protocol's constants and values ------------------------------------------------------
def test_the_kv_constants_are_the_node_watchers() -> None:
    """One protocol, two copies (the nodes' watcher has only the standard library, the jobs do
    not have nodekit): held equal here."""
    from nodekit.node import scheduled_events as node

    assert (
        node.KV_NAMESPACE, node.NOTICE_PREFIX, node.HOLD_PREFIX, node.RELEASED_PREFIX,
        node.SAFETY_S,
    ) == (
        notice.KV_NAMESPACE, notice.NOTICE_PREFIX, notice.HOLD_PREFIX, notice.RELEASED_PREFIX,
        notice.SAFETY_S,
    )  # fmt: skip
    assert (notice.KV_NAMESPACE, notice.NOTICE_PREFIX, notice.HOLD_PREFIX) == (
        "raycluster",
        "notice/",
        "hold/",
    )


def test_a_notice_is_read_from_the_watchers_json_and_its_deadline_is_the_watchers() -> None:
    found = notice.parse_notice(
        json.dumps(
            {
                "node_id": "ab" * 28,
                "node_ip": "10.0.0.5",
                "event_id": "E1",
                "event_type": "Preempt",
                "not_before": 1000.0,
                "announced": 970.0,
            }
        ).encode()
    )
    assert found == notice.Notice("ab" * 28, "10.0.0.5", "E1", "Preempt", 1000.0, 970.0)
    assert found.deadline == 1000.0 - notice.SAFETY_S
    assert found.left(now=990.0) == 5.0
    assert found.describe() == "Azure Preempt for 10.0.0.5 (event E1)"
    # Azure gave no NotBefore (the event has begun): no time left at all.
    started = notice.parse_notice(b'{"node_id": "x", "event_id": "E2", "not_before": 0.0}')
    assert started.left() < 0
    for bad in (b"not json", b"{}", b'{"node_id": "x", "event_id": "E", "not_before": "soon"}'):
        with pytest.raises(ValueError) as e:
            notice.parse_notice(bad)
        assert str(e.value).startswith("not a notice (") and "\n" not in str(e.value)


def test_the_holder_is_the_jobs_submission_id_else_the_drivers_pid() -> None:
    config = {"runtime_env": {}, "metadata": {"job_submission_id": "cartpole-2024.1_x"}}
    assert (
        notice.holder_name({"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(config)})
        == "cartpole-2024.1_x"
    )
    config["metadata"]["job_submission_id"] = "odd/id with space"
    assert (
        notice.holder_name({"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(config)})
        == "odd_id_with_space"
    )
    assert notice.holder_name({}) == f"pid{os.getpid()}"
    assert notice.holder_name({"RAY_JOB_CONFIG_JSON_ENV_VAR": "garbage"}) == f"pid{os.getpid()}"


def test_waiting_for_a_publication_ends_with_it_or_with_the_timeout(
    env: Blob, tmp_path: Path
) -> None:
    run = f"run-wait-{os.getpid()}"
    folder = tmp_path / run
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "checkpoint" / "harness.json").write_text('{"iteration": 3}')
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 3, "env_steps": 300})
    event = up.wait_published(3, 120)
    assert event is not None and event["checkpoint"] == "checkpoints/000003", lines
    assert json.loads(get_blob(env, f"{run}/latest.json")[1])["iteration"] == 3
    assert up.wait_published(2, 0) == event  # an earlier iteration: a later checkpoint does
    assert up.wait_published(4, 0.2) is None  # nothing handed: never published
    assert up.finish(60)
    assert up.wait_published(4, 60) is None  # the helper has ended: no wait at all


# -- a real run on local Ray with the store ---------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[tuple[str, str]]:
    """A local Ray of this test's own, started in this process (its KV is the one the job's
    process reads): (its GCS address, its node id)."""
    import ray

    from driver.localray import init_local_ray

    environ = dict(os.environ)  # ray.init sets variables later tests must not inherit
    init_local_ray(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        context = ray.get_runtime_context()
        yield context.gcs_address, context.get_node_id()
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(environ)


@pytest.fixture
def cluster(ray_cluster: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """The test's Ray with no notice and no hold in its KV before and after a test (a node's
    watcher never deletes a notice; a test does, as its node goes on)."""
    _clear()
    try:
        yield ray_cluster
    finally:
        _clear()


def _clear() -> None:
    from ray.experimental.internal_kv import _internal_kv_del

    for prefix in (notice.NOTICE_PREFIX, notice.HOLD_PREFIX, notice.RELEASED_PREFIX):
        _internal_kv_del(prefix, del_by_prefix=True, namespace=notice.KV_NAMESPACE)


def test_each_event_is_due_once_and_a_notice_past_before_the_job_began_never(
    cluster: tuple[str, str],
) -> None:
    from ray.experimental.internal_kv import _internal_kv_get

    _, node = cluster
    other = "ff" * 28  # a node that holds none of this job's learning state
    put_notice(node, "old", time.time() + notice.SAFETY_S - 10)  # its deadline passed
    lines: list[str] = []
    watch = notice.Watch([node], "job-1", lines.append)
    assert watch.due() is None
    put_notice(other, "elsewhere", time.time() + 60)
    assert watch.due() is None
    put_notice(node, "E7", time.time() + 60)
    due = watch.due()
    assert due is not None and (due.event_id, due.node_id) == ("E7", node)
    assert watch.due() is None  # acted on
    watch.hold(due)
    key = f"{notice.HOLD_PREFIX}{node}/job-1"
    assert json.loads(_internal_kv_get(key, namespace=notice.KV_NAMESPACE))["holder"] == "job-1"
    watch.release(due)
    assert _holds_now() == []
    # A value that is no notice: one line, once; training goes on.
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(notice.NOTICE_PREFIX + node, "garbage", namespace=notice.KV_NAMESPACE)
    assert watch.due() is None and watch.due() is None
    assert lines == [
        f"notice: {notice.KV_NAMESPACE}/{notice.NOTICE_PREFIX}{node} ignored: not a notice "
        "(JSONDecodeError: Expecting value: line 1 column 1 (char 0)): b'garbage'"
    ]


@pytest.mark.slow
def test_a_learner_actors_node_is_watched(cluster: tuple[str, str]) -> None:
    """With a learner actor (``--num-learners 1``), its node is asked once through RLlib's
    learner group; on this one-node Ray it is the job's own node. The learner's process cannot
    import ``harness`` (this Ray has no job runtime environment), as on a cluster whose job
    ships another working directory."""
    from ray.rllib.algorithms.ppo import PPOConfig

    _, node = cluster
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .learners(num_learners=1, num_cpus_per_learner=1)
        .build_algo()
    )
    try:
        assert not algo.learner_group.is_local
        assert notice.learning_nodes(algo) == [node]
    finally:
        algo.stop()


class HoldWatcher:
    """Polls the KV's hold keys from the test while the job runs: every key ever seen."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

        while not self._stop.wait(0.005):
            for key in _internal_kv_list(notice.HOLD_PREFIX, namespace=notice.KV_NAMESPACE):
                value = _internal_kv_get(key, namespace=notice.KV_NAMESPACE)
                if value:
                    self.seen[key.decode()] = json.loads(value)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _holds_now() -> list[bytes]:
    from ray.experimental.internal_kv import _internal_kv_list

    return _internal_kv_list(notice.HOLD_PREFIX, namespace=notice.KV_NAMESPACE)


def _train(
    gcs: str,
    run_dir: Path,
    env: dict[str, str],
    started: Callable[[], None],
    on_line: Callable[[str, int], None] = lambda line, pid: None,
) -> tuple[int, list[str]]:
    """examples/cartpole/train.py on the test's Ray, 4 iterations of 500 env steps, a checkpoint
    only at the end; ``started()`` once its process runs (it then imports RLlib and builds the
    algorithm: seconds before its first iteration), ``on_line(line, pid)`` for each line it
    prints, as it prints it."""
    child = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "examples" / "cartpole" / "train.py"),
            "--train-batch-size", "500",
            "--stop-reward", "none",
            "--max-iterations", "4",
            "--checkpoint-every", "0",
            "--num-env-runners", "0",
            "--results-dir", str(run_dir),
        ],
        env={
            **env,
            "RAY_ADDRESS": gcs,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "examples"), str(REPO / "examples" / "cartpole")]
            ),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )  # fmt: skip
    started()
    lines: list[str] = []
    timer = threading.Timer(RUN_S, child.kill)
    timer.start()
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            on_line(lines[-1], child.pid)
        return child.wait(), lines
    finally:
        timer.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()


class Paused:
    """The job's process stopped (SIGSTOP) while the test reads the store: it can hand the
    uploader nothing new meanwhile."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *_: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def _result(lines: list[str]) -> dict[str, Any]:
    line = [x for x in lines if x.startswith("RESULT ")][-1]
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return result


PUBLISHED = re.compile(
    r"^notice: Azure Preempt for 10\.0\.0\.5 \(event (?P<event>\S+)\): checkpoint at iteration "
    r"(?P<iteration>\d+) published in (?P<took>\d+\.\d) s, (?P<left>\d+\.\d) s before the "
    r"deadline$"
)
TOO_LITTLE = re.compile(
    r"^notice: Azure Preempt for 10\.0\.0\.5 \(event (?P<event>\S+)\): too little time "
    r"\((?P<left>\d+\.\d) s left\): checkpoint at iteration (?P<iteration>\d+) not published; "
    r"the last published checkpoint stays iteration (?P<kept>\d+)$"
)


AMPLE_S = 60
"""The first notice's time to go: ample for a CartPole checkpoint's save and publish (seconds,
also at a load of 30), and what the job then waits, training no further, for the event's time."""


@pytest.mark.slow
def test_a_notice_for_the_jobs_node_publishes_a_checkpoint_under_a_hold(
    env: Blob, cluster: tuple[str, str], tmp_path: Path
) -> None:
    """While CartPole runs: a notice with a minute to go (held, saved, published, released;
    the job's own node: no update more until the event's time, after which, the node still
    there, training goes on), then one whose deadline has passed (nothing saved; the store keeps
    the first checkpoint).
    The test reads the store while the job's process is stopped (SIGSTOP), so what it reads is
    what the line spoke of."""
    gcs, node = cluster
    run = f"cartpole-notice-{os.getpid()}"
    ample, late = f"ample-{os.getpid()}", f"late-{os.getpid()}"
    holds = HoldWatcher()
    seen: dict[str, Any] = {}

    def on_line(line: str, pid: int) -> None:
        seen["pid"] = pid
        if found := PUBLISHED.match(line):
            with Paused(pid):
                seen["published"] = found.groupdict()
                seen["pointer"] = json.loads(get_blob(env, f"{run}/latest.json")[1])
                seen["holds_after_publish"] = _holds_now()
                # The next: its deadline just passed (not_before within SAFETY_S), a quarter
                # second ago: later than the job's watch began (a notice whose deadline passed
                # before that is passed over), which on a quiet machine is under a second ago.
                put_notice(node, late, time.time() + notice.SAFETY_S - 0.25)
        elif found := TOO_LITTLE.match(line):
            with Paused(pid):
                seen["too_little"] = found.groupdict()
                seen["pointer_after_late"] = json.loads(get_blob(env, f"{run}/latest.json")[1])
                # What the pointer names is complete: it restores.
                fetched = store.fetch_latest(blobsync.from_env(), run, timeout=120)  # type: ignore[arg-type]
                seen["restored"] = latest_checkpoint(fetched).state

    try:
        code, lines = _train(
            gcs,
            tmp_path / run,
            dict(os.environ),
            lambda: put_notice(node, ample, time.time() + AMPLE_S),
            on_line,
        )
    finally:
        holds.stop()
    out = "\n".join(lines)
    assert code == 0, out[-4000:]
    notice_lines = [x for x in lines if x.startswith("notice: ")]
    assert len(notice_lines) == 3, out[-6000:]
    assert notice_lines[1].endswith(
        f"(event {ample}): the node is still in Ray 0 s after the event's time: training goes "
        "on with it"
    ), notice_lines
    # The first notice: published, and latest.json names its iteration.
    published = seen["published"]
    iteration = int(published["iteration"])
    assert published["event"] == ample and iteration >= 1
    assert seen["pointer"]["iteration"] == iteration
    assert seen["pointer"]["checkpoint"] == f"checkpoints/{iteration:06d}"
    # Published before the deadline of its two minutes (how long it took is the load's: 86 s at
    # a load of 18 on 2 cores; performance is benchmarks/notice_checkpoint.py's).
    assert 0 < float(published["left"]) < AMPLE_S
    # The hold was written while it checkpointed, and gone once it was published.
    holder = f"pid{seen['pid']}"  # run without the job supervisor: no submission id
    key = f"{notice.HOLD_PREFIX}{node}/{holder}"
    assert list(holds.seen) == [key], holds.seen
    assert holds.seen[key]["holder"] == holder
    assert seen["holds_after_publish"] == []
    # The late notice: nothing saved or held, and the store still names the first checkpoint.
    late_line = seen["too_little"]
    assert late_line["event"] == late and late_line["left"] == "0.0"
    assert int(late_line["kept"]) == iteration
    assert seen["pointer_after_late"] == seen["pointer"]
    assert seen["restored"]["iteration"] == iteration
    assert _holds_now() == []
    # The run went on to its end and its summary records both.
    result = _result(lines)
    assert result["iterations"] == 4 and result["stopped_by"] == "max_iterations"
    assert [(n["event_id"], n["saved"], n["published"]) for n in result["notices"]] == [
        (ample, True, True),
        (late, False, False),
    ]
    assert result["notices"][0]["iteration"] == iteration
    final = json.loads(get_blob(env, f"{run}/latest.json")[1])
    assert final["iteration"] == 4
    assert "Traceback" not in out
