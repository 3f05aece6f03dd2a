"""harness.learner_lock on real APPO and IMPALA algorithms (RLlib's learner with its own update
thread): a checkpoint taken while an update is being applied waits for it, and a job's process
ends only after the update in progress, with the job's own exit code (never SIGABRT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import learner_lock
from harness.runs import save_checkpoint
from support import FIXTURES, REPO, communicate_or_explain, ray_workers

UPDATE_S = 1.0
"""How long each update is made to take: the checkpoint starts inside one and, unguarded, reads
the learner's state before it ends (the learner thread applies each batch twice: APPO's
circular buffer)."""


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    import ray

    from driver.localray import init_local_ray

    # ray.init sets variables in this process's environment (RAY_AUTH_MODE among them) that
    # the lane's later tests, and the processes they start, must not inherit.
    environ = dict(os.environ)
    # A Ray of its own ("local"), not a cluster another test started on this machine.
    init_local_ray(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(environ)


def _appo() -> Any:
    from ray.rllib.algorithms.appo import APPOConfig

    return (
        APPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=50)
        .learners(num_learners=0)  # the learner and its update thread in this process
        .training(train_batch_size_per_learner=100)
        .reporting(min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=0)
        .debugging(seed=0)
        .build_algo()
    )


class Timeline:
    """When each update ran and when the checkpoint read the learner's state."""

    def __init__(self) -> None:
        self.updates: list[tuple[float, float]] = []
        self.reads: list[tuple[float, float]] = []
        self.updating = threading.Event()

    def slow_updates(self, learner: Any) -> None:
        update = learner._learner_thread._update_method

        def timed(**kwargs: Any) -> Any:
            start = time.monotonic()
            self.updating.set()
            time.sleep(UPDATE_S)
            try:
                return update(**kwargs)
            finally:
                self.updates.append((start, time.monotonic()))
                self.updating.clear()

        learner._learner_thread._update_method = timed

    def timed_reads(self, learner: Any) -> None:
        get_state = learner.get_state

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return get_state(*args, **kwargs)
            finally:
                if threading.current_thread() is threading.main_thread():
                    self.reads.append((start, time.monotonic()))

        learner.get_state = timed

    def overlaps(self) -> list[tuple[tuple[float, float], tuple[float, float]]]:
        return [(u, r) for u in self.updates for r in self.reads if u[0] < r[1] and r[0] < u[1]]


def _until(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_a_checkpoint_during_an_update_waits_for_it(
    ray_local: None, guarded: bool, tmp_path: Path
) -> None:
    """Unguarded (RLlib as it is), the checkpoint reads the learner's state in the middle of an
    update; guarded, never, though it starts inside one."""
    algo = _appo()
    try:
        learner = algo.learner_group._learner
        timeline = Timeline()
        timeline.slow_updates(learner)  # the guard, installed after, holds its lock across it
        timeline.timed_reads(learner)
        if guarded:
            assert learner_lock.guard(algo) == [True]
            assert learner_lock.guard(algo) == [True]  # twice is once
        # APPO's first iteration queues no batch, and its second waits for the first update;
        # the checkpoint starts once an iteration has returned with an update under way.
        for _ in range(6):
            algo.train()
            if timeline.updating.wait(0.5):
                break
        assert timeline.updating.is_set(), "no update under way after six iterations"
        started = time.monotonic()
        save_checkpoint(algo, tmp_path, {"iteration": 1})
        # The event the test is about happened: the checkpoint began inside an update.
        assert _until(lambda: any(s < started < e for s, e in timeline.updates), 30)
        _, inside_ends = next((s, e) for s, e in timeline.updates if s < started < e)
        assert timeline.reads, "the checkpoint never read the learner's state"
        if guarded:
            assert timeline.overlaps() == []
            assert timeline.reads[0][0] >= inside_ends  # it waited for that update to end
        else:
            assert timeline.overlaps(), "the unguarded checkpoint missed the update it began in"
        assert (tmp_path / "checkpoint" / "harness.json").is_file()
    finally:
        algo.stop()


def test_learners_without_an_update_thread_are_left_alone(ray_local: None) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig

    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .build_algo()
    )
    try:
        learner = algo.learner_group._learner
        get_state = learner.get_state
        assert learner_lock.guard(algo) == [False]
        assert learner.get_state == get_state
        assert getattr(learner, learner_lock.LOCK_ATTRIBUTE, None) is None
        assert learner_lock.stop(algo)  # nothing to stop
    finally:
        algo.stop()


def test_stop_waits_for_the_update_in_progress_and_drops_the_queued_batches(
    ray_local: None,
) -> None:
    """IMPALA's learner in this process, in an update, with its queue of batches full (as at the
    end of a run whose updates are slower than its sampling): stop() returns after that update
    and the thread is gone; the queued batches are dropped, never updated from, so RLlib's stop
    sentinel has room (a full queue: a warning, now and at exit)."""
    from ray.rllib.algorithms.impala import IMPALAConfig

    algo = (
        IMPALAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=50)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=50, broadcast_interval=1000)
        .reporting(min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=0)
        .debugging(seed=0)
        .build_algo()
    )
    try:
        thread = algo.learner_group._learner._learner_thread
        update = thread._update_method
        began, release = threading.Event(), threading.Event()
        spans: list[tuple[float, float]] = []

        def held(**kwargs: Any) -> Any:  # each update waits for the test's release
            start = time.monotonic()
            began.set()
            release.wait(60)
            try:
                return update(**kwargs)
            finally:
                spans.append((start, time.monotonic()))

        thread._update_method = held
        assert learner_lock.guard(algo) == [True]
        for _ in range(6):
            algo.train()
            if began.wait(0.5):
                break
        assert began.is_set(), "no update under way after six iterations"
        batches = thread._in_queue
        while not batches.full():
            batches.put_nowait(("not a batch", {}))  # an update from one would fail
        called = time.monotonic()
        threading.Timer(UPDATE_S, release.set).start()  # the update in progress ends then
        assert learner_lock.stop(algo)
        returned = time.monotonic()
        assert not thread.is_alive()
        assert batches.empty()
        assert len(spans) == 1, spans  # that update, and none after it
        assert spans[0][0] < called < called + UPDATE_S <= spans[0][1] <= returned
        assert learner_lock.stop(algo)  # twice is once
    finally:
        release.set()
        algo.stop()


class _Thread:
    """An update thread that is not the one harness.learner_lock knows: no request_stop()."""

    def _update_method(self, **kwargs: Any) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool:
        return True


class _Learner:
    _learner_thread = _Thread()


@pytest.mark.parametrize("call", [learner_lock._guard_learner, learner_lock._stop_learner])
def test_an_update_thread_it_does_not_know_is_a_one_line_error(call: Any) -> None:
    with pytest.raises(RuntimeError) as e:
        call(_Learner())
    message = str(e.value)
    assert "\n" not in message
    assert "_Learner's update thread has no request_stop()" in message
    assert "harness/learner_lock.py" in message


EXIT_JOB = FIXTURES / "jobs" / "learner_exit.py"
EXITS = {
    # (algorithm, how the run ends, --num-learners): the job's own exit code
    ("appo", "done", 0): 0,
    ("impala", "done", 0): 0,
    # driver stop (Ray's SIGTERM handler: sys.exit(15)), the update thread in a learner actor
    ("appo", "sigterm", 1): 15,
}
"""Each a job of its own (tests/fixtures/jobs/learner_exit.py), all started at once."""
JOB_BOUND_S = 600.0
"""How long a job may take: ~10 s alone and ~70 s in CI's loaded lanes, where one with a learner
actor once went past 300 s (its stacks now come with such a failure)."""


@pytest.fixture(scope="module")
def exit_jobs(
    ray_local: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str, int], tuple[subprocess.Popen[str], Path]]]:
    """The jobs of EXITS, side by side, each a driver on the module's Ray (no Ray to start)."""
    import ray

    address = ray.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": str(REPO / "examples")}
    jobs = {}
    for algo, ending, learners in EXITS:
        results = tmp_path_factory.mktemp(f"{algo}-{ending}-{learners}")
        args = [algo, ending, str(learners), address, str(results)]
        child = subprocess.Popen(
            [sys.executable, str(EXIT_JOB), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        jobs[algo, ending, learners] = (child, results)
    try:
        yield jobs
    finally:
        for child, _ in jobs.values():
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.parametrize(
    ("algo", "ending", "learners"), list(EXITS), ids=[f"{a}-{e}-{n}" for a, e, n in EXITS]
)
def test_a_job_ends_after_the_update_in_progress_with_its_exit_code(
    exit_jobs: dict[tuple[str, str, int], tuple[subprocess.Popen[str], Path]],
    algo: str,
    ending: str,
    learners: int,
) -> None:
    """The job trains, then its process ends (stop condition, or driver stop's SIGTERM) while
    the update thread is in a 12-s update, inside torch's backward: the update ends, then the
    process, with the job's exit code. Before the harness stopped the thread, Python's exit tore
    it out of the backward: SIGABRT (exit 134 in a shell), as issue 41 saw on Pong."""
    child, results = exit_jobs[algo, ending, learners]
    out = communicate_or_explain(child, JOB_BOUND_S, also=ray_workers())
    story = out[-6000:]
    assert "a slow update began" in out, story
    code = child.returncode
    assert code != -signal.SIGABRT, f"aborted (SIGABRT): {story}"
    assert code == EXITS[algo, ending, learners], story
    if ending == "done":
        assert "RESULT {" in out, story
    assert "TerminateHandler" not in out, story  # no process of the job's aborted, actors' too
    # The update in progress at the end was completed, in the learner's own process.
    updated = [int(p.name.split("-")[1]) for p in results.glob("updated-*")]
    assert updated, f"the update in progress never ended: {story}"
    assert (child.pid in updated) == (learners == 0), updated
