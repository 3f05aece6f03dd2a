"""A learner that saves itself: a checkpoint when Azure gives notice that a node of the job's
learning state is going (issue 38; docs/reliability.md, "Eviction notices").

Every node runs a watcher of Azure's Scheduled Events (python/nodekit/node/scheduled_events.py).
When a ``Preempt`` (Spot eviction) or ``Terminate`` event names its VM, it publishes a *notice*
in Ray's internal KV, then waits, at most until ``not_before - SAFETY_S``, while a job *holds* the
node, before it stops Ray and lets Azure go ahead. In the KV, namespace :data:`KV_NAMESPACE`:

``notice/<NODE_ID_HEX>``
    ``{"node_id", "node_ip", "event_id", "event_type", "not_before", "announced"}`` (times in
    unix seconds; ``not_before`` 0.0 when Azure gave none). Written once per event by the
    node's watcher, never deleted (a Ray node id is never reused).
``hold/<NODE_ID_HEX>/<HOLDER>``
    ``{"holder", "since"}``: written by a job when it starts checkpointing because of the
    node's notice, deleted once the checkpoint is published or the job gives up. HOLDER is
    the job's submission id, else its driver's pid.
``released/<NODE_ID_HEX>/<HOLDER>``
    ``{"holder", "released"}``: written just before the hold is deleted, never deleted, so
    that the watcher knows which jobs held the node even when a quick one held and released
    it before the watcher looked (the head's records those jobs for resumption).

:class:`Watch` reads the notices for the nodes that hold this algorithm's learning state (the
job's own process's node and each learner actor's) and holds and releases them;
:func:`act` is what the training loop does with a notice: hold, save a checkpoint at once, hand
it to the results store's uploader, wait until it is published (its ``latest.json`` pointer
written, which comes after every one of its files) or the deadline, release, and say so in one
line; :func:`wait_gone` is what it does next: when the node is a learner actor's (not its own
process's), it trains no further on that learner, whose updates would be lost with it, and waits
for the node to leave Ray, so that the algorithm is rebuilt from the checkpoint elsewhere
(harness/loop.py); when it is its own process's (the head), it trains no further until the
event's time, and goes with the head (whose watcher submits it again with ``--resume``).

The node side writes the same constants (its copy: the nodes' watcher has only the standard
library); tests/unit/test_notice.py holds the two copies equal.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.blobsync import URL_ENV
from harness.runs import CHECKPOINT, save_checkpoint
from harness.store import Uploader

KV_NAMESPACE = "raycluster"
NOTICE_PREFIX = "notice/"
HOLD_PREFIX = "hold/"
RELEASED_PREFIX = "released/"
SAFETY_S = 5.0
"""The watcher stops waiting for holds this long before the event's ``not_before``: the job's
deadline is ``not_before - SAFETY_S``."""
GONE_WAIT_S = 60.0
"""After a learner actor's notice checkpoint, how long past the event's ``not_before`` the job
waits for the node to leave Ray before it goes on with the node (the event did not happen)."""
HOLDER_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")

Log = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class Notice:
    node_id: str
    node_ip: str
    event_id: str
    event_type: str
    not_before: float
    """Unix seconds; 0.0 when Azure gave none (the event has begun: no time left)."""
    announced: float

    @property
    def deadline(self) -> float:
        """Until when the node's watcher waits for a hold (unix seconds)."""
        return self.not_before - SAFETY_S

    def left(self, now: float | None = None) -> float:
        return self.deadline - (time.time() if now is None else now)

    def describe(self) -> str:
        return f"Azure {self.event_type} for {self.node_ip} (event {self.event_id})"


def parse_notice(data: bytes) -> Notice:
    """A notice's value in the KV; ValueError with one line when it is not one."""
    try:
        doc = json.loads(data)
        return Notice(
            node_id=str(doc["node_id"]),
            node_ip=str(doc.get("node_ip") or "?"),
            event_id=str(doc["event_id"]),
            event_type=str(doc.get("event_type") or "event"),
            not_before=float(doc.get("not_before") or 0.0),
            announced=float(doc.get("announced") or 0.0),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a notice ({type(e).__name__}: {e}): {data[:120]!r}") from None


def holder_name(environ: dict[str, str] | None = None) -> str:
    """This job's name in a hold key: its submission id (Ray's job supervisor gives it to the
    entrypoint in the job's config), else the driver's pid."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR
    from ray.dashboard.modules.job.common import JOB_ID_METADATA_KEY

    env = os.environ if environ is None else environ
    try:
        config = json.loads(env.get(RAY_JOB_CONFIG_JSON_ENV_VAR) or "{}")
        submission = str((config.get("metadata") or {}).get(JOB_ID_METADATA_KEY) or "")
    except (ValueError, AttributeError):
        submission = ""
    name = HOLDER_CHARACTERS.sub("_", submission)
    return name or f"pid{os.getpid()}"


def learning_nodes(algo: Any) -> list[str]:
    """The Ray node ids that hold ``algo``'s learning state: this process's node (the algorithm,
    a local learner) and each learner actor's, asked once."""
    import ray

    nodes = [ray.get_runtime_context().get_node_id()]
    group = getattr(algo, "learner_group", None)
    if group is not None and not group.is_local:
        # A lambda, which Ray ships by value: a function of this module would be imported by
        # name in the learner's process, where ``harness`` need not be importable.
        asked = group.foreach_learner(
            lambda learner: __import__("ray").get_runtime_context().get_node_id()
        )
        for result in asked:
            if not result.ok:
                raise result.get()
            nodes.append(str(result.get()))
    return list(dict.fromkeys(nodes))


class Watch:
    """Notices for ``nodes``, each event acted on once; holds in this job's name. A notice whose
    deadline had passed before the watch began is an earlier job's business (the node outlived
    it, or the notice is a leftover): passed over in silence."""

    def __init__(self, nodes: list[str], holder: str, log: Log = _say) -> None:
        self.nodes = nodes
        self.holder = holder
        self.log = log
        self.since = time.time()
        self.acted: set[str] = set()
        self._said: set[str] = set()

    @classmethod
    def for_algorithm(cls, algo: Any, log: Log = _say) -> Watch:
        return cls(learning_nodes(algo), holder_name(), log)

    def _once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.log(line)

    def due(self) -> Notice | None:
        """A notice for one of the nodes not acted on yet (marked acted on), else None. A KV
        that cannot be read is one line, and no notice."""
        from ray.experimental.internal_kv import _internal_kv_get

        for node in self.nodes:
            key = NOTICE_PREFIX + node
            try:
                data = _internal_kv_get(key, namespace=KV_NAMESPACE)
            except Exception as e:  # the GCS away for a moment: training goes on
                self._once(f"notice: reading {KV_NAMESPACE}/{key} failed: {e}")
                continue
            if not data:
                continue
            try:
                notice = parse_notice(data)
            except ValueError as e:
                self._once(f"notice: {KV_NAMESPACE}/{key} ignored: {e}")
                continue
            if notice.event_id in self.acted:
                continue
            self.acted.add(notice.event_id)
            if notice.deadline < self.since:
                continue
            return notice
        return None

    def hold_key(self, notice: Notice) -> str:
        return f"{HOLD_PREFIX}{notice.node_id}/{self.holder}"

    def hold(self, notice: Notice) -> None:
        from ray.experimental.internal_kv import _internal_kv_put

        value = json.dumps({"holder": self.holder, "since": round(time.time(), 3)})
        _internal_kv_put(self.hold_key(notice), value, overwrite=True, namespace=KV_NAMESPACE)

    def release(self, notice: Notice) -> None:
        from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_put

        value = json.dumps({"holder": self.holder, "released": round(time.time(), 3)})
        key = f"{RELEASED_PREFIX}{notice.node_id}/{self.holder}"
        _internal_kv_put(key, value, overwrite=True, namespace=KV_NAMESPACE)
        _internal_kv_del(self.hold_key(notice), namespace=KV_NAMESPACE)


def own_node() -> str:
    """This process's Ray node id."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _alive(node_id: str) -> bool:
    import ray

    return any(n.get("NodeID") == node_id and n.get("Alive") for n in ray.nodes())


def wait_gone(
    notice: Notice,
    log: Log = _say,
    alive: Callable[[str], bool] = _alive,
    every: float = 1.0,
    grace: float | None = None,
) -> bool:
    """Wait until the notice's node has left Ray (its watcher stops Ray once the jobs released
    the node; Azure then takes the VM), at most until ``grace`` (:data:`GONE_WAIT_S` unless
    given) past the event's ``not_before``: True once it is gone, False (and one line) if it is
    still there. A node table that cannot be read counts as the node still there. For the
    job's own node (the head) it never returns True: the job goes with it."""
    grace = GONE_WAIT_S if grace is None else grace
    until = max(notice.not_before, time.time()) + grace
    while True:
        try:
            if not alive(notice.node_id):
                return True
        except Exception as e:  # the GCS away for a moment
            log(f"notice: reading Ray's nodes failed: {e}")
        if time.time() >= until:
            log(
                f"notice: {notice.describe()}: the node is still in Ray {grace:.0f} s "
                f"after the event's time: training goes on with it"
            )
            return False
        time.sleep(every)


def _last_published(uploader: Uploader) -> str:
    iterations = [int(e["iteration"]) for e in uploader.published if e.get("iteration") is not None]
    if not iterations:
        return "no checkpoint of this run is published"
    return f"the last published checkpoint stays iteration {max(iterations)}"


def act(
    notice: Notice,
    watch: Watch,
    algo: Any,
    run_dir: Path,
    state: dict[str, Any],
    uploader: Uploader | None,
    log: Log = _say,
) -> dict[str, Any]:
    """Hold the node, save a checkpoint now (``state``: the harness's, with the iteration), hand
    it to ``uploader`` and wait until it is published, at most until the notice's deadline;
    release; then one line. What happened, for the run's summary."""
    start = time.time()
    left = notice.left(start)
    record: dict[str, Any] = {
        **asdict(notice),
        "iteration": int(state["iteration"]),
        "left_s": round(left, 1),
        "saved": False,
        "published": False,
    }
    if left <= 0:  # the watcher no longer waits: the node may go any moment
        line = _too_little(record, uploader)
    else:
        _kv(watch.hold, notice, "writing", log)
        try:
            line = _checkpoint(notice, record, algo, run_dir, state, uploader, start)
        finally:
            _kv(watch.release, notice, "deleting", log)
    log(f"notice: {notice.describe()}: {line}")
    return record


def _too_little(record: dict[str, Any], uploader: Uploader | None) -> str:
    kept = _last_published(uploader) if uploader else "no results store"
    return (
        f"too little time ({max(record['left_s'], 0.0):.1f} s left): checkpoint at iteration "
        f"{record['iteration']} not published; {kept}"
    )


def _checkpoint(
    notice: Notice,
    record: dict[str, Any],
    algo: Any,
    run_dir: Path,
    state: dict[str, Any],
    uploader: Uploader | None,
    start: float,
) -> str:
    """Save, hand to the uploader, wait for the pointer: the line that says how it went."""
    iteration = record["iteration"]
    checkpoint = save_checkpoint(algo, run_dir, state)
    record["saved"] = True
    if uploader is None:
        record["seconds"] = round(time.time() - start, 2)
        return (
            f"checkpoint at iteration {iteration} saved in {record['seconds']:.1f} s to "
            f"{run_dir / CHECKPOINT}, {notice.left():.1f} s before the deadline; not durable: "
            f"no results store ({URL_ENV} is not set), it stays on this machine's disk"
        )
    uploader.checkpoint(checkpoint, state)
    published = uploader.wait_published(iteration, max(0.0, notice.left()))
    record["seconds"] = round(time.time() - start, 2)
    if published is not None:
        record["published"] = True
        return (
            f"checkpoint at iteration {iteration} published in {record['seconds']:.1f} s, "
            f"{notice.left():.1f} s before the deadline"
        )
    if not uploader.alive():
        return (
            f"checkpoint at iteration {iteration} not published: the results store's uploader "
            f"is not running; {_last_published(uploader)}"
        )
    return _too_little(record, uploader)


def _kv(call: Callable[[Notice], None], notice: Notice, doing: str, log: Log) -> None:
    """A hold's write or delete; a KV that cannot be reached is one line (the checkpoint is
    what matters; the node's watcher waits for a hold at most until the deadline anyway)."""
    try:
        call(notice)
    except Exception as e:
        log(f"notice: {doing} the hold on {notice.node_ip} failed: {e}")
