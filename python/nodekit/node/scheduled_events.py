"""Tell the jobs, and drain a worker, before Azure takes the node away: a watcher of Azure's
Scheduled Events.

Runs on every node (systemd unit ``ray-scheduled-events``, as root), with the node's own Python
and no package but the standard library. About once a second it asks the instance metadata
service (``GET /metadata/scheduledevents``, header ``Metadata: true``) what is coming. When a
``Terminate`` (scale-in, deletion: the scale set's termination notice) or ``Preempt`` (Spot
eviction, ~30 s) event names this VM, it

1. publishes a **notice** in Ray's internal key-value store (the GCS), which every job on the
   cluster can read: key ``notice/NODE_ID`` in namespace :data:`KV_NAMESPACE`, a JSON object
   (``node_id``, ``node_ip``, ``event_id``, ``event_type``, ``not_before`` in Unix seconds, 0
   when Azure gave none, ``announced``). A job whose learning state lives on that node (the
   examples' harness: ``examples/harness/notice.py``) takes a **hold** (``hold/NODE_ID/HOLDER``)
   while it checkpoints and deletes it once the checkpoint is published;
2. waits for the jobs: while a hold exists, until :data:`SAFETY_S` before ``NotBefore``. With
   no hold, a worker goes on after its short grace (:data:`DRAIN_GRACE_S`); the head waits until
   that deadline (its jobs' learners look between iterations). The jobs come before the drain:
   RLlib saves a learner actor's state through a new actor on its node, which a drained node
   refuses (measured on the rehearsal, Ray 2.60);
3. on a worker, drains the Ray node — Ray's own drain (``ray drain-node``, reason PREEMPTION,
   with the time left before ``NotBefore`` as the deadline), so no new task or actor lands here
   and Ray knows the node is going. The head (``--role head``) is never drained: draining an
   idle head ends its raylet (measured, Ray 2.60), and its Ray is the cluster's;
4. on a worker, stops Ray gracefully (``systemctl stop ray-worker``);
5. acknowledges the event (``POST`` ``{"StartRequests": [{"EventId": ...}]}``), so Azure goes
   ahead at once instead of waiting out the notice.

Events for other VMs (every VM of the scale set sees them all) and other types (Reboot,
Redeploy, Freeze) are logged once and left alone. A metadata service that is down, slow or
answers garbage is logged once per outage and polled again with back-off; the watcher never
exits on it. One log line per decision (journald keeps them).

This file is installed on the nodes by the worker's cloud-init (``python -m nodekit render``
embeds it); the tests run it against the rehearsal's metadata service
(:mod:`nodekit.rehearsal.standins.azure_node`).
"""

from __future__ import annotations

import argparse
import email.utils
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

IMDS = "http://169.254.169.254"
EVENTS_API = "2020-07-01"
INSTANCE_API = "2021-02-01"
ACTED_ON = ("Terminate", "Preempt")
DRAIN_GRACE_S = 10.0
"""How long a worker waits for a job's hold before it drains and stops Ray (without a published
notice: between the drain and the stop; running tasks may finish, actors — RLlib's env runners
— never do, and RLlib restarts them on other nodes). A job that holds it has until
:data:`SAFETY_S` before the notice's end."""
SAFETY_S = 5.0
"""Stop Ray (and stop waiting for jobs) at least this long before the event's NotBefore."""
KV_NAMESPACE = "raycluster"
"""The notices' namespace in Ray's internal key-value store (``examples/harness/notice.py``
writes it too; tests/unit/test_notice.py holds the copies equal)."""
NOTICE_PREFIX = "notice/"
HOLD_PREFIX = "hold/"

Log = Callable[[str], None]


def _log(message: str) -> None:
    print(f"ray-scheduled-events: {message}", flush=True)


@dataclass
class Actions:
    """What the watcher does to the node; the tests substitute recorders. The head's have no
    ``drain`` and no ``stop``."""

    drain: Callable[[float, str], None] | None
    """``drain(deadline_seconds, reason_message)``"""
    stop: Callable[[], None] | None
    announce: Callable[[str, str, float], str] | None = None
    """``announce(event_id, event_type, not_before_unix)``: publish the notice; this node's
    Ray id."""
    hold_wait: Callable[[str, float, float], tuple[list[str], list[str]]] | None = None
    """``hold_wait(node_id, window_s, deadline_s)``: wait up to ``window_s`` for a job's hold on
    the node; once one appeared, until every hold is gone or ``deadline_s`` has passed. The
    holders seen, and those still holding at the end."""


@dataclass
class Watcher:
    imds: str
    actions: Actions
    log: Log = _log
    timeout: float = 5.0
    grace: float = DRAIN_GRACE_S
    name: str = ""
    handled: set[str] = field(default_factory=set)
    """Events this node was drained and stopped for."""
    acknowledged: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    _outage: str = ""

    # -- the metadata service --------------------------------------------------------------
    def _request(self, path: str, body: bytes | None = None) -> bytes:
        req = urllib.request.Request(
            f"{self.imds}{path}",
            data=body,
            headers={"Metadata": "true"},
            method="POST" if body is not None else "GET",
        )
        if body is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return r.read()

    def instance_name(self) -> str:
        path = f"/metadata/instance/compute/name?api-version={INSTANCE_API}&format=text"
        return self._request(path).decode().strip()

    def events(self) -> list[dict[str, Any]]:
        data = json.loads(self._request(f"/metadata/scheduledevents?api-version={EVENTS_API}"))
        if not isinstance(data, dict) or not isinstance(data.get("Events"), list):
            raise ValueError(f"not a scheduled-events document: {str(data)[:120]}")
        return [e for e in data["Events"] if isinstance(e, dict)]

    def acknowledge(self, event_id: str) -> None:
        body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
        self._request(f"/metadata/scheduledevents?api-version={EVENTS_API}", body)

    # -- one look ----------------------------------------------------------------------------
    def poll_once(self) -> None:
        """Fetch the events and act on those for this VM. Errors go to the caller."""
        if not self.name:
            self.name = self.instance_name()
            self.log(f"watching scheduled events for {self.name}")
        for event in self.events():
            self.consider(event)

    def consider(self, event: dict[str, Any]) -> None:
        event_id = str(event.get("EventId", ""))
        kind = str(event.get("EventType", ""))
        resources = event.get("Resources") or []
        if not event_id or event_id in self.acknowledged:
            return
        if event_id in self.handled:  # drained and stopped; the acknowledgement failed before
            self._acknowledge(event_id)
            return
        mine = self.name in resources
        if not mine or kind not in ACTED_ON:
            if event_id not in self.seen:
                self.seen.add(event_id)
                why = "not for this VM" if not mine else f"{kind}: nothing to drain"
                self.log(f"ignoring event {event_id} ({kind} for {resources}): {why}")
            return
        self.handled.add(event_id)
        not_before = _unix_time(str(event.get("NotBefore", "")))
        remaining = max(0.0, not_before - time.time())
        self.log(f"{kind} event {event_id} for this VM, {remaining:.0f} s before it goes")
        node_id = ""
        if self.actions.announce:
            try:
                node_id = self.actions.announce(event_id, kind, not_before)
                self.log(f"notice published for Ray node {node_id}")
            except Exception as e:  # the drain still tells Ray; jobs learn it from Ray's death
                self.log(f"publishing the notice failed ({e})")
        left = max(0.0, remaining - SAFETY_S)
        # A worker's jobs may take a hold within its grace; the head's until the end.
        window = min(self.grace, left) if self.actions.stop else left
        if node_id and self.actions.hold_wait:
            # The jobs before the drain: RLlib saves a learner actor's state through a new
            # actor on the learner's node, which a drained node refuses (measured, Ray 2.60).
            self._wait_for_jobs(self.actions.hold_wait, node_id, window, left)
            self._drain(event_id, kind, not_before)
        else:
            self._drain(event_id, kind, not_before)
            time.sleep(window)
            self.log(f"waited {window:.0f} s of grace")
        if self.actions.stop:
            self.log("stopping Ray")
            try:
                self.actions.stop()
            except Exception as e:
                self.log(f"stopping Ray failed ({e}); acknowledging anyway")
        self._acknowledge(event_id)

    def _drain(self, event_id: str, kind: str, not_before: float) -> None:
        """Ray's drain, with what is left of the notice as its deadline (a worker's only)."""
        if not self.actions.drain:
            return
        self.log("draining")
        deadline = max(1.0, not_before - time.time() - SAFETY_S)
        try:
            self.actions.drain(deadline, f"Azure {kind} event {event_id}")
        except Exception as e:  # stopping Ray matters more than a drain that failed
            self.log(f"drain failed ({e}); stopping Ray anyway")

    def _wait_for_jobs(
        self,
        hold_wait: Callable[[str, float, float], tuple[list[str], list[str]]],
        node_id: str,
        window: float,
        left: float,
    ) -> None:
        """The window for a job's hold, then as long as jobs hold the node (at most ``left``
        seconds)."""
        started = time.monotonic()
        try:
            seen, holding = hold_wait(node_id, window, left)
        except Exception as e:
            rest = max(0.0, window - (time.monotonic() - started))
            self.log(f"reading the jobs' holds failed ({e}); waiting {rest:.0f} s of grace")
            time.sleep(rest)
            return
        took = time.monotonic() - started
        if not seen:
            self.log(f"no job held the node in {took:.0f} s")
        elif holding:
            self.log(
                f"still held by {', '.join(holding)} at the notice's end ({took:.0f} s): going on"
            )
        else:
            self.log(f"released by {', '.join(seen)} after {took:.1f} s")

    def _acknowledge(self, event_id: str) -> None:
        self.acknowledge(event_id)  # an error here is retried at the next poll
        self.acknowledged.add(event_id)
        self.log(f"acknowledged {event_id}: Azure may go ahead")

    # -- forever -----------------------------------------------------------------------------
    def run(
        self,
        interval: float = 1.0,
        max_backoff: float = 30.0,
        until: Callable[[], bool] = lambda: False,
    ) -> None:
        delay = interval
        while not until():
            try:
                self.poll_once()
                if self._outage:
                    self.log("metadata service answers again")
                    self._outage = ""
                delay = interval
            except (OSError, ValueError, urllib.error.URLError) as e:
                why = " ".join(str(e).split())[:200] or type(e).__name__
                if not self._outage:
                    self.log(f"metadata service unusable ({why}); polling with back-off")
                self._outage = why
                delay = min(delay * 2, max_backoff)
            time.sleep(delay)


def _unix_time(not_before: str) -> float:
    """An RFC 1123 time ("Mon, 19 Sep 2016 18:29:47 GMT") in Unix seconds; 0 if unknown."""
    try:
        return email.utils.parsedate_to_datetime(not_before).timestamp()
    except (TypeError, ValueError, IndexError):
        return 0.0


# -- the real actions on a node ----------------------------------------------------------------
def _ray(venv: str) -> str:
    return os.path.join(venv, "bin", "ray")


_LOOKUP = (
    "import json, sys, time\n"
    "from ray._raylet import GcsClient\n"
    "gcs = GcsClient(address=sys.argv[1])\n"
    "nodes = gcs.get_all_node_info(timeout=10)\n"
    "alive = [i.hex() for i, n in nodes.items()\n"
    "         if n.node_manager_address == sys.argv[2] and n.state == 0]\n"
    "node_id = alive[0] if alive else ''\n"
)
"""A child's first lines: this node's Ray id (``node_id``, "" if none) by its IP (argv[2]),
from the GCS at argv[1]. A child process: a GCS client that cannot authenticate aborts its
process."""
_ANNOUNCE = _LOOKUP + (
    "if node_id:\n"
    "    notice = dict(json.loads(sys.argv[4]), node_id=node_id)\n"
    "    gcs.internal_kv_put(f'{NOTICE_PREFIX}{node_id}'.encode(), json.dumps(notice).encode(),\n"
    "                        True, sys.argv[3].encode(), timeout=10)\n"
    "print(node_id)\n"
)
"""argv[3]: the namespace, argv[4]: the notice without its node id."""
_HOLDS = (
    "import json, sys, time\n"
    "from ray._raylet import GcsClient\n"
    "gcs = GcsClient(address=sys.argv[1])\n"
    "ns, prefix = sys.argv[2].encode(), sys.argv[3].encode()\n"
    "window, left, start, seen = float(sys.argv[4]), float(sys.argv[5]), time.monotonic(), []\n"
    "while True:\n"
    "    keys = gcs.internal_kv_keys(prefix, ns, timeout=10)\n"
    "    held = sorted(k[len(prefix):].decode() for k in keys)\n"
    "    seen += [h for h in held if h not in seen]\n"
    "    waited = time.monotonic() - start\n"
    "    if (not seen and waited >= window) or (seen and not held) or waited >= left:\n"
    "        break\n"
    "    time.sleep(0.25)\n"
    "print(json.dumps({'seen': seen, 'holding': held}))\n"
)
"""Waits as :attr:`Actions.hold_wait` says: argv 1-5: GCS, namespace, prefix, window, left."""


def _child(
    python: str, code: str, args: list[str], env: dict[str, str], timeout: float, tries: int = 2
) -> str:
    """A child's stdout; a failure says the line of its stderr that tells why. Tried twice by
    default: a node busy training can miss one 10-second deadline."""
    why = ""
    for _ in range(tries):
        out = subprocess.run(
            [python, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
        why = _reason(out.stderr) or f"exit {out.returncode}, no answer"
    raise RuntimeError(why)


def _node_id(python: str, gcs: str, node_ip: str, env: dict[str, str]) -> str:
    """This node's Ray id, by its IP, from the GCS."""
    node_id = _child(python, _LOOKUP + "print(node_id or '-')\n", [gcs, node_ip], env, 60)
    if node_id == "-":
        raise RuntimeError(f"no live Ray node at {node_ip}: not in the GCS's node table")
    return node_id


def _reason(stderr: str) -> str:
    """The line of a child's stderr that says what went wrong (Ray appends long hints)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "failed" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else ""


def real_actions(venv: str, node_env: str, service: str, role: str = "worker") -> Actions:
    """Publish notices and read holds in Ray's key-value store; on a worker, drain with Ray's
    CLI and stop the unit. The node's environment file is read when an event comes, not at
    start: each start of Ray writes the node's current address into it."""
    python = os.path.join(venv, "bin", "python")

    def ray_env() -> tuple[dict[str, str], str, dict[str, str]]:
        env = read_env(node_env)
        gcs = f"{env['RAY_HEAD_IP']}:{env.get('RAY_GCS_PORT', '6379')}"
        # The node's Ray settings (token authentication among them) for Ray's own clients.
        return env, gcs, {**os.environ, **env, "RAY_ADDRESS": gcs}

    def announce(event_id: str, kind: str, not_before: float) -> str:
        env, gcs, child_env = ray_env()
        notice = {
            "node_ip": env["RAY_NODE_IP"],
            "event_id": event_id,
            "event_type": kind,
            "not_before": not_before,
            "announced": round(time.time(), 3),
        }
        code = f"NOTICE_PREFIX = {NOTICE_PREFIX!r}\n" + _ANNOUNCE
        args = [gcs, env["RAY_NODE_IP"], KV_NAMESPACE, json.dumps(notice)]
        node_id = _child(python, code, args, child_env, 60)
        if not node_id:
            raise RuntimeError(f"no live Ray node at {env['RAY_NODE_IP']}")
        return node_id

    def hold_wait(node_id: str, window: float, left: float) -> tuple[list[str], list[str]]:
        _, gcs, child_env = ray_env()
        args = [gcs, KV_NAMESPACE, f"{HOLD_PREFIX}{node_id}/", str(window), str(left)]
        # Once: the wait is bounded by the notice's end, which a second try would overrun.
        answer = json.loads(_child(python, _HOLDS, args, child_env, left + 60, tries=1))
        return list(answer["seen"]), list(answer["holding"])

    def drain(deadline: float, message: str) -> None:
        env, gcs, child_env = ray_env()
        node_id = _node_id(python, gcs, env["RAY_NODE_IP"], child_env)
        out = subprocess.run(
            [
                _ray(venv),
                "drain-node",
                "--address",
                gcs,
                "--node-id",
                node_id,
                "--reason",
                "DRAIN_NODE_REASON_PREEMPTION",
                "--reason-message",
                message,
                "--deadline-remaining-seconds",
                str(int(deadline)),
            ],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ray drain-node: {_reason(out.stderr) or out.returncode}")

    def stop() -> None:
        subprocess.run(["systemctl", "stop", service], check=True, timeout=120)

    if role == "head":
        return Actions(None, None, announce, hold_wait)
    return Actions(drain, stop, announce, hold_wait)


def read_env(path: str) -> dict[str, str]:
    values = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                values[key] = value
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--node-env", required=True, help="the node's environment file (node.env)")
    p.add_argument("--venv", required=True, help="the node's Ray environment")
    p.add_argument("--service", default="ray-worker.service")
    p.add_argument(
        "--role", choices=("worker", "head"), default="worker",
        help="head: publish notices and wait for the jobs, never drain or stop Ray",
    )  # fmt: skip
    p.add_argument("--imds", default=IMDS)
    p.add_argument("--interval", type=float, default=1.0)
    args = p.parse_args(argv)
    read_env(args.node_env)  # refuse to start without it
    actions = real_actions(args.venv, args.node_env, args.service, args.role)
    Watcher(args.imds, actions).run(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
