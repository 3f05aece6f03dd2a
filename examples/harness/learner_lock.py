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

:func:`stop` ends each learner's update thread before the job's process ends. RLlib's thread is
a daemon: Python's exit does not wait for it, and a thread still in an update when the
interpreter finalizes is torn out of torch's backward (``pthread_exit`` unwinding through C++
frames: ``std::terminate``, SIGABRT, exit code 134). ``algo.stop()`` asks the thread to stop
but waits only 5 s for it (``IMPALALearner.shutdown``), and not at all on a learner actor, nor
when the run ends by an exception, Ctrl-C or ``driver stop``'s SIGTERM (Ray's handler raises
SystemExit): Pong's update takes ~5 s on 2 loaded cores (benchmarks/learner_update.py), far
more with bigger batches, and issue 41's jobs aborted after their ``RESULT`` line.

What this module knows of RLlib 2.60's ``IMPALALearner`` (APPO's too), and the only place that
does: the learner's ``_learner_thread``, a ``_LearnerThread`` that calls
``self._update_method(self=learner, ...)`` for each update, and whose ``request_stop()`` sets its
stop flag and puts a sentinel in its queue of batches, ``_in_queue`` (a thread waiting for a batch
wakes; one in an update stops after it).
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
import time
from typing import Any

LOCK_ATTRIBUTE = "_harness_state_lock"
STOP_TIMEOUT_S = 900.0
"""How long :func:`stop` waits for an update thread to end: the update in progress (one), which
on 2 loaded cores takes ~5 s for Pong's 500 env steps and ~100 s for 8,000."""
STOP_NOTICE_S = 5.0
"""After this long, :func:`stop` says what it is waiting for."""
STOP_CALL_MARGIN_S = 60.0
"""A learner actor's answer may take this much longer than its own wait (the call's way there)."""


def _update_thread(learner: Any) -> Any | None:
    """The learner's update thread (``None``: it updates in ``train()`` itself); an error if it
    is not the thread this module knows."""
    thread = getattr(learner, "_learner_thread", None)
    if thread is None:
        return None
    for name in ("_update_method", "request_stop", "join", "is_alive"):
        if not callable(getattr(thread, name, None)):
            raise RuntimeError(
                f"{type(learner).__name__}'s update thread has no {name}(): this RLlib version "
                "is not the one the harness knows (see harness/learner_lock.py)"
            )
    return thread


def _guard_learner(learner: Any) -> bool:
    """Install the lock on one learner; False for a learner without an update thread."""
    thread = _update_thread(learner)  # checked here too, so a new RLlib fails before training
    if thread is None:
        return False
    if getattr(learner, LOCK_ATTRIBUTE, None) is not None:
        return True
    # RLlib's _LearnerThread calls self._update_method(self=learner, ...) for every update; the
    # checkpoint path calls learner.get_state() (save) and learner.set_state() (restore).
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


def _stop_learner(learner: Any, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop one learner's update thread and wait for it to end (at most ``timeout`` seconds);
    whether no update thread is left running. Runs where the learner is (this process, or a
    learner actor through ``foreach_learner``)."""
    thread = _update_thread(learner)
    if thread is None or not thread.is_alive():
        return True
    _drop_queued_batches(thread)
    thread.request_stop()  # a thread waiting for a batch wakes; one in an update ends after it
    start = time.monotonic()
    thread.join(min(STOP_NOTICE_S, timeout))
    if thread.is_alive():
        print(
            f"waiting for {type(learner).__name__}'s update in progress to end "
            f"(at most {timeout:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        thread.join(max(0.0, timeout - (time.monotonic() - start)))
    _drop_queued_batches(thread)
    return not thread.is_alive()


def _drop_queued_batches(thread: Any) -> None:
    """Empty IMPALA's queue of batches for the thread (training is over): ``request_stop()``
    logs a warning, and puts no sentinel, when it is full, as it mostly is at the end of a run
    whose updates are slower than its sampling; RLlib asks once more at exit. (APPO's circular
    buffer is no ``queue.Queue`` and always takes the sentinel.)"""
    batches = getattr(thread, "_in_queue", None)
    if not isinstance(batches, queue.Queue):
        return
    while True:
        try:
            batches.get_nowait()
        except queue.Empty:
            return
        batches.task_done()


def stop(algo: Any, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the update thread of each of ``algo``'s learners (the job's own, or each learner
    actor's, inside the actor), each after the update in progress; call it before the process,
    or ``algo.stop()``, ends the learners. Whether this process may end: no update thread of its
    own is still running after ``timeout`` seconds. (A learner actor whose thread is still in an
    update is only reported: ``algo.stop()`` kills such an actor after 5 s, a kill that tears
    nothing out of native code.) Safe to call again, and on learners without an update thread.
    """
    group = getattr(algo, "learner_group", None)
    if group is None:
        return True
    if group.is_local:
        return all(bool(r.get()) for r in group.foreach_learner(_stop_learner, timeout=timeout))
    results = group.foreach_learner(
        _stop_learner, timeout=timeout, timeout_seconds=timeout + STOP_CALL_MARGIN_S
    )
    for result in results:
        if result.ok and result.get():
            continue
        why = "its update did not end in time" if result.ok else f"it failed: {result.get()!r}"
        print(
            f"warning: learner actor {result.actor_id}'s update thread was not stopped ({why}); "
            "the actor is killed with the algorithm",
            file=sys.stderr,
            flush=True,
        )
    return True
