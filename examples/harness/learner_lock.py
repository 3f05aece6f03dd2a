"""Checkpoints that never read a learner halfway through an update.

APPO's and IMPALA's learners (RLlib's ``IMPALALearner``) apply their updates in a thread of their
own: ``algo.train()`` hands the batches to that thread and returns while it is still applying
them. ``algo.save_to_path`` then reads the weights and Adam's state on the calling thread while
the update thread writes them. The checkpoint can mix two updates' state, and during the very
first update, while Adam creates its state, RLlib's save fails outright ("Could not pack
sequence ...": it flattens the optimizer's state dict, which grows under it). A loaded machine
makes that likely: the test suite met it once in ~50 runs.

:func:`guard` makes each update and each read or write of a learner's state exclude one
another, on every learner of the algorithm (the job's own, or each learner actor): a checkpoint
waits for the update in progress (at most one) and the next update waits for the checkpoint.
Learners that update in ``train()`` itself (PPO, DQN) have no update thread and are left alone.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

LOCK_ATTRIBUTE = "_harness_state_lock"


def _guard_learner(learner: Any) -> bool:
    """Install the lock on one learner; False for a learner without an update thread."""
    thread = getattr(learner, "_learner_thread", None)
    if thread is None:
        return False
    if getattr(learner, LOCK_ATTRIBUTE, None) is not None:
        return True
    # RLlib's _LearnerThread calls self._update_method(self=learner, ...) for every update; the
    # checkpoint path calls learner.get_state() (save) and learner.set_state() (restore).
    if not callable(getattr(thread, "_update_method", None)):
        raise RuntimeError(
            f"{type(learner).__name__}'s update thread has no _update_method: this RLlib "
            "version is not the one the harness knows (see harness/learner_lock.py)"
        )
    lock = threading.RLock()

    def locked(method: Any) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        return call

    thread._update_method = locked(thread._update_method)
    learner.get_state = locked(learner.get_state)
    learner.set_state = locked(learner.set_state)
    setattr(learner, LOCK_ATTRIBUTE, lock)
    return True


def guard(algo: Any) -> list[bool]:
    """Make updates and state reads/writes exclusive on each of ``algo``'s learners; for each
    learner, whether it has an update thread (and so was guarded)."""
    group = getattr(algo, "learner_group", None)
    if group is None:
        return []
    guarded = []
    for result in group.foreach_learner(_guard_learner):
        if not result.ok:  # a learner actor's error comes back as a value
            raise result.get()
        guarded.append(bool(result.get()))
    return guarded
