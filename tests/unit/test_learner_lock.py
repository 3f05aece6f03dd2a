"""harness.learner_lock on a real APPO algorithm (RLlib's learner with its own update thread, in
this process): a checkpoint taken while an update is being applied waits for it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import learner_lock
from harness.runs import save_checkpoint

UPDATE_S = 1.0
"""How long each update is made to take: the checkpoint starts inside one and, unguarded, reads
the learner's state before it ends (the learner thread applies each batch twice: APPO's
circular buffer)."""


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    import ray

    # ray.init sets variables in this process's environment (RAY_AUTH_MODE among them) that
    # the lane's later tests, and the processes they start, must not inherit.
    environ = dict(os.environ)
    # A Ray of its own ("local"), not a cluster another test started on this machine.
    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
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
    finally:
        algo.stop()
