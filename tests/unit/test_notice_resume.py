"""Resume on the next node without a person (issue 38; examples/harness/loop.py ``rebuild``): a
notice for the node of CartPole's learner actor, on a local two-node Ray (Ray's own
``cluster_utils``), makes the harness checkpoint, wait for the node to go, build the algorithm
again from that checkpoint with its learner on the replacement node, and train on to its target
with the counters and the curve going on. No store here: the checkpoint is saved to the disk and
said not durable (tests/unit/test_notice.py has the store; the rehearsal's e2e test has both)."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import blobsync, loop, notice
from notice_support import put_notice
from support import REPO

pytestmark = pytest.mark.slow

RUN_S = 900
ITERATIONS = 5
BATCH = 500


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    """A head without CPUs (the job's process only) and one worker of 1 CPU: the learner
    actor's place. Its workers import ``harness`` as a job's do on a cluster (its working
    directory): the harness guards a learner actor's state with a function of its own."""
    import ray
    from ray.cluster_utils import Cluster

    environ = dict(os.environ)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "examples"), *filter(None, [environ.get("PYTHONPATH")])]
    )
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="ERROR")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(environ)


def _worker_ids() -> list[str]:
    import ray

    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]


def test_a_learner_actors_node_that_goes_after_its_notice_checkpoint_is_trained_on_elsewhere(
    two_nodes: Any, tmp_path: Path
) -> None:
    cluster = two_nodes
    [old] = _worker_ids()
    event = f"resume-{os.getpid()}"
    run_dir = tmp_path / "run"
    environment = {
        k: v for k, v in os.environ.items() if k not in (blobsync.URL_ENV, blobsync.CLIENT_ID_ENV)
    }
    child = subprocess.Popen(
        [
            sys.executable, str(REPO / "examples" / "cartpole" / "train.py"),
            "--train-batch-size", str(BATCH), "--stop-reward", "none",
            "--max-iterations", str(ITERATIONS), "--checkpoint-every", "0",
            "--num-env-runners", "0", "--num-learners", "1", "--results-dir", str(run_dir),
        ],
        env={
            **environment,
            "RAY_ADDRESS": cluster.address,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "examples"), str(REPO / "examples" / "cartpole")]
            ),
        },
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    timer = threading.Timer(RUN_S, child.kill)
    timer.start()
    lines: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("iter    2 "):  # the learner is on the worker, training
                put_notice(old, event, time.time() + 120)
            elif line.startswith("notice: Azure Preempt"):
                # What the node's watcher does once the job released it (Ray stopped), and the
                # autoscaler's replacement.
                [node] = [n for n in cluster.worker_nodes if n.node_id == old]
                cluster.remove_node(node)
                cluster.add_node(num_cpus=1)
        code = child.wait()
    finally:
        timer.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    out = "\n".join(lines)
    assert code == 0, out[-6000:]
    # Without a store, the checkpoint stays on this machine's disk, and the line says so.
    [saved] = [x for x in lines if x.startswith("notice: Azure Preempt")]
    found = re.match(
        rf"^notice: Azure Preempt for 10\.0\.0\.5 \(event {event}\): checkpoint at iteration "
        rf"(\d+) saved in \d+\.\d s to {re.escape(str(run_dir / 'checkpoint'))}, \d+\.\d s "
        rf"before the deadline; not durable: no results store \({blobsync.URL_ENV} is not set\), "
        r"it stays on this machine's disk$",
        saved,
    )
    assert found, saved
    result = json.loads([x for x in lines if x.startswith("RESULT ")][-1][len("RESULT ") :])
    [record] = result["notices"]
    [rebuilt] = result["rebuilds"]
    assert (record["event_id"], record["saved"], record["published"]) == (event, True, False)
    assert record["iteration"] == int(found[1])
    assert rebuilt["event_id"] == event and rebuilt["iteration"] == record["iteration"]
    assert rebuilt["attempts"] == 1
    [new] = _worker_ids()
    assert new != old
    assert f", its learner on {rebuilt['learners_on'][0]}" in out
    # The counters and the curve go on: every iteration once, and no env step lost: the first
    # iteration after the rebuild adds one iteration's steps (a batch, give or take the end of
    # an episode) to the checkpoint's count.
    assert result["iterations"] == ITERATIONS and result["stopped_by"] == "max_iterations"
    with (run_dir / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == list(range(1, ITERATIONS + 1))
    steps = [int(r["env_steps"]) for r in rows]
    at = record["iteration"]
    assert rebuilt["env_steps"] == steps[at - 1]
    others = [b - a for a, b in itertools.pairwise(steps) if a != rebuilt["env_steps"]]
    assert BATCH <= min(others) <= steps[at] - steps[at - 1] <= max(others), steps
    assert "Traceback" not in out, out[-6000:]


def test_a_rebuild_that_keeps_failing_ends_the_run_in_one_line() -> None:
    """Bounded: each failed attempt is one line, and after the last the run's error says why
    and what a person can do."""
    built: list[int] = []
    stopped: list[str] = []

    class Old:
        def stop(self) -> None:
            stopped.append("old")

    def build() -> Any:
        built.append(1)
        raise TimeoutError("Placement group creation timed out.\nCurrent resources: {}")

    learning = loop.Learning(Old(), build)
    gone = notice.Notice("ab" * 28, "10.0.0.7", "E9", "Preempt", time.time(), time.time())
    with pytest.raises(loop.RebuildError) as e:
        loop.rebuild(learning, gone, Path("/nonexistent"), {"iteration": 7, "env_steps": 3500},
                     attempts=2, pause=0)  # fmt: skip
    assert len(built) == 2 and stopped == ["old"]
    assert str(e.value) == (
        "the algorithm could not be rebuilt from the checkpoint at iteration 7 after Azure "
        "Preempt for 10.0.0.7 (event E9) (2 attempts; the last: TimeoutError: Placement group "
        "creation timed out. Current resources: {}); resume by hand with --resume"
    )


def test_waiting_for_a_node_to_go_ends_when_it_has_gone_or_past_the_events_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    answers = iter([True, True, False])
    soon = notice.Notice("cd" * 28, "10.0.0.8", "E1", "Preempt", time.time(), time.time())
    assert notice.wait_gone(soon, lines.append, lambda _: next(answers), every=0)
    assert lines == []
    # Still there well past the event's time (the event did not happen): training goes on.
    past = notice.Notice("cd" * 28, "10.0.0.8", "E2", "Preempt", 1.0, 1.0)
    monkeypatch.setattr(notice, "GONE_WAIT_S", 0.0)
    assert not notice.wait_gone(past, lines.append, lambda _: True, every=0)
    assert lines == [
        "notice: Azure Preempt for 10.0.0.8 (event E2): the node is still in Ray 0 s after the "
        "event's time: training goes on with it"
    ]
