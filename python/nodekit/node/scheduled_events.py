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
5. on the head, records each job that held it for its **resumption** (:class:`Resumer`): its
   submission (entrypoint, runtime environment with the packages of its working directory and
   modules, which live in Ray's GCS and go with the head, metadata) in a file of the head's OS
   disk (``--resume-dir``), unless the job has ended;
6. acknowledges the event (``POST`` ``{"StartRequests": [{"EventId": ...}]}``), so Azure goes
   ahead at once instead of waiting out the notice.

On the head, at every poll, the watcher also looks at its resumption records: once Ray's Jobs
API answers again and no longer knows a recorded job (the head's Ray started again: a Spot head
deallocated and started, a reboot), the job is submitted again as ``ID-resumed`` with
``--resume ID`` appended to its entrypoint, and the record deleted. A job the Jobs API shows
ended is not resubmitted (its record is deleted); a record that fails to submit stays and is
tried again; an ``ID-resumed`` that exists already (submitted before a crash kept its record)
counts as submitted. A head replaced with a new disk has no records.

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
import base64
import email.utils
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
RELEASED_PREFIX = "released/"
"""``released/NODE_ID/HOLDER``: a hold's trace, written by the job as it deletes the hold; a
job that held and released the node before the watcher looked still counts as seen."""
RESUMED_SUFFIX = "-resumed"
"""A resumed job's submission id: the recorded job's with this appended (Ray's Jobs API refuses
a second job of one id, so a record is never submitted twice)."""
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
"""Ray's job states after which a job is not resumed."""
RESUME_RETRY_S = 30.0
"""How long a record that failed to submit waits before the next try."""
RESULTS_ENV = "RAYDRIVER_RESULTS_DIR"
"""Where ``python -m driver submit`` tells a job to write, ``<results root>/<submission id>``
(driver/settings.py's; tests/unit/test_head_resume.py holds the copies equal): a resumed job
writes next to it, under its own id, as one submitted by hand would."""
SUBMISSION_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")
"""A holder that can name a record file (a job's hold is named by its submission id)."""

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
    record: Callable[[list[str], str], None] | None = None
    """``record(holders, event_id)`` (the head's): each holder's job recorded for resumption."""
    resume: Callable[[], None] | None = None
    """Called at every poll (the head's): resubmit the recorded jobs the head's Ray lost."""


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
            seen = self._wait_for_jobs(self.actions.hold_wait, node_id, window, left)
            if seen and self.actions.record:
                try:
                    self.actions.record(seen, event_id)
                except Exception as e:  # the acknowledgement matters more
                    self.log(f"recording the jobs for resumption failed ({e})")
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
    ) -> list[str]:
        """The window for a job's hold, then as long as jobs hold the node (at most ``left``
        seconds). The holders seen."""
        started = time.monotonic()
        try:
            seen, holding = hold_wait(node_id, window, left)
        except Exception as e:
            rest = max(0.0, window - (time.monotonic() - started))
            self.log(f"reading the jobs' holds failed ({e}); waiting {rest:.0f} s of grace")
            time.sleep(rest)
            return []
        took = time.monotonic() - started
        if not seen:
            self.log(f"no job held the node in {took:.0f} s")
        elif holding:
            self.log(
                f"still held by {', '.join(holding)} at the notice's end ({took:.0f} s): going on"
            )
        else:
            self.log(f"released by {', '.join(seen)} after {took:.1f} s")
        return seen

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
            if self.actions.resume:
                try:
                    self.actions.resume()
                except Exception as e:  # Resumer.step logs its own; this is a bug's one line
                    self.log(f"resuming the recorded jobs failed ({e})")
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


# -- the head's jobs, resumed after its Ray starts again ---------------------------------------
class JobsApi:
    """Ray's Jobs API on the head (its dashboard, on loopback, with the cluster token)."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """The HTTP status and body; an API that does not answer raises OSError."""
        req = urllib.request.Request(f"{self.url}{path}", data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if body is not None and method == "POST":
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def job(self, submission_id: str) -> dict[str, Any] | None:
        """The job's details, or None when Ray does not know it."""
        status, body = self.call("GET", f"/api/jobs/{submission_id}")
        if status == 404:
            return None
        if status != 200:
            raise OSError(f"GET /api/jobs/{submission_id}: HTTP {status} {_brief(body)}")
        return dict(json.loads(body))


def _brief(body: bytes) -> str:
    """An error body in one short line (Ray answers with a traceback: its last line)."""
    lines = [ln.strip() for ln in body.decode(errors="replace").splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:300]


def _packages(runtime_env: dict[str, Any]) -> list[str]:
    """The ``gcs://`` packages a runtime environment names (working_dir, py_modules): kept in
    the head's GCS only."""
    uris = [runtime_env.get("working_dir"), *(runtime_env.get("py_modules") or [])]
    return [u for u in uris if isinstance(u, str) and u.startswith("gcs://")]


def _resumed_env(runtime_env: dict[str, Any], sid: str, new_id: str) -> dict[str, Any]:
    """The runtime environment with the job's results folder (:data:`RESULTS_ENV`) moved from
    ``.../SID`` to ``.../NEW_ID``; any other, as it was."""
    env_vars = dict(runtime_env.get("env_vars") or {})
    where = str(env_vars.get(RESULTS_ENV) or "").rstrip("/")
    if os.path.basename(where) != sid:
        return runtime_env
    env_vars[RESULTS_ENV] = os.path.join(os.path.dirname(where), new_id)
    return {**runtime_env, "env_vars": env_vars}


@dataclass
class Resumer:
    """The head's jobs that held it for a notice, recorded on its disk and submitted again once
    its Ray has started again (the module's docstring)."""

    folder: Path
    jobs: JobsApi
    packages: Callable[[list[str]], dict[str, str]]
    """``packages(uris)``: each ``gcs://`` package's bytes, base64, from the head's GCS."""
    log: Log = _log
    retry_s: float = RESUME_RETRY_S
    _next: dict[str, float] = field(default_factory=dict)
    _said: dict[str, str] = field(default_factory=dict)
    _waiting: bool = False

    def path(self, submission_id: str) -> Path:
        return self.folder / f"{submission_id}.json"

    def record(self, holders: list[str], event_id: str) -> None:
        """Each holder's job, unless it has ended or Ray does not know it; one line each."""
        for holder in holders:
            try:
                self._record(holder, event_id)
            except Exception as e:
                self.log(
                    f"recording job {holder} for resumption failed ({e}): resume it by hand "
                    f"with --resume {holder}"
                )

    def _record(self, submission_id: str, event_id: str) -> None:
        if not SUBMISSION_ID.match(submission_id):
            self.log(f"holder {submission_id} is not a job's submission id: nothing recorded")
            return
        job = self.jobs.job(submission_id)
        if job is None:
            self.log(f"job {submission_id} is not in Ray's Jobs API: nothing recorded")
            return
        if job.get("status") in ENDED:
            self.log(f"job {submission_id} has ended ({job['status']}): nothing recorded")
            return
        runtime_env = dict(job.get("runtime_env") or {})
        uris = _packages(runtime_env)
        packages = self.packages(uris) if uris else {}
        record: dict[str, Any] = {
            "submission_id": submission_id,
            "entrypoint": str(job["entrypoint"]),
            "runtime_env": runtime_env,
            "metadata": job.get("metadata") or {},
            "event_id": event_id,
            "recorded": round(time.time(), 3),
            "packages": packages,
        }
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self.path(submission_id)
        partial = final.with_name(f".{final.name}.partial")
        # Root's alone (the runtime environment may carry secrets); whole or absent.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, final)
        size = sum(len(p) * 3 // 4 for p in packages.values())
        self.log(
            f"recorded job {submission_id} in {final} ({len(packages)} packages, "
            f"{size} bytes): resubmitted as {submission_id}{RESUMED_SUFFIX} when Ray is back"
        )

    def step(self) -> None:
        """Each record once more: wait while the job runs; delete it once the job has ended;
        submit it again once Ray no longer knows it."""
        try:
            names = sorted(p.name for p in self.folder.glob("*.json"))
        except OSError:
            return
        for name in names:
            if time.monotonic() < self._next.get(name, 0.0):
                continue
            try:
                self._step(self.folder / name)
                self._next.pop(name, None)
                self._said.pop(name, None)
            except OSError as e:  # the Jobs API not back yet (or not answering)
                if not self._waiting:
                    self.log(f"waiting for Ray's Jobs API to resume the recorded jobs ({e})")
                self._waiting = True
                return
            except Exception as e:
                why = " ".join(str(e).split())[:300] or type(e).__name__
                if self._said.get(name) != why:
                    self.log(
                        f"resubmitting {name} failed ({why}): the record stays in "
                        f"{self.folder}, tried again every {self.retry_s:.0f} s"
                    )
                self._said[name] = why
                self._next[name] = time.monotonic() + self.retry_s

    def _step(self, path: Path) -> None:
        record = json.loads(path.read_text())
        sid = str(record["submission_id"])
        job = self.jobs.job(sid)
        if self._waiting:
            self._waiting = False
            self.log("Ray's Jobs API answers")
        if job is not None:
            if job.get("status") in ENDED:
                path.unlink()
                self.log(f"job {sid} ended ({job['status']}) on this Ray: nothing to resume")
            return  # still running here: the head has not gone (yet)
        for uri, data in record["packages"].items():
            protocol, _, name = uri.partition("://")
            status, body = self.jobs.call(
                "PUT", f"/api/packages/{protocol}/{name}", base64.b64decode(data)
            )
            if status != 200:
                raise RuntimeError(f"uploading {uri}: HTTP {status} {_brief(body)}")
        new_id = f"{sid}{RESUMED_SUFFIX}"
        request = {
            "entrypoint": f"{record['entrypoint']} --resume {shlex.quote(sid)}",
            "submission_id": new_id,
            "runtime_env": _resumed_env(record["runtime_env"], sid, new_id),
            "metadata": record["metadata"],
        }
        status, body = self.jobs.call("POST", "/api/jobs/", json.dumps(request).encode())
        if status != 200 and f"submission_id {new_id} already exists".encode() in body:
            path.unlink()
            self.log(f"job {new_id} exists already: the record of {sid} was submitted before")
        elif status == 200:
            path.unlink()
            self.log(f"resubmitted job {sid} as {new_id}: {request['entrypoint']}")
        else:
            raise RuntimeError(f"submitting {new_id}: HTTP {status} {_brief(body)}")


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
    "ns, prefix, gone = sys.argv[2].encode(), sys.argv[3].encode(), sys.argv[6].encode()\n"
    "window, left, start, seen = float(sys.argv[4]), float(sys.argv[5]), time.monotonic(), []\n"
    "while True:\n"
    "    keys = gcs.internal_kv_keys(prefix, ns, timeout=10)\n"
    "    held = sorted(k[len(prefix):].decode() for k in keys)\n"
    "    released = gcs.internal_kv_keys(gone, ns, timeout=10)\n"
    "    for h in held + sorted(k[len(gone):].decode() for k in released):\n"
    "        seen += [h] if h not in seen else []\n"
    "    waited = time.monotonic() - start\n"
    "    if (not seen and waited >= window) or (seen and not held) or waited >= left:\n"
    "        break\n"
    "    time.sleep(0.25)\n"
    "print(json.dumps({'seen': seen, 'holding': held}))\n"
)
"""Waits as :attr:`Actions.hold_wait` says: argv 1-6: GCS, namespace, the holds' prefix,
window, left, the released holds' prefix."""
_PACKAGES = (
    "import base64, json, sys\n"
    "from ray._raylet import GcsClient\n"
    "gcs, found = GcsClient(address=sys.argv[1]), {}\n"
    "for uri in sys.argv[2:]:\n"
    "    data = gcs.internal_kv_get(uri.encode(), None, timeout=30)\n"
    "    if data is None:\n"
    "        sys.exit(f'error: {uri} is not in the GCS')\n"
    "    found[uri] = base64.b64encode(data).decode()\n"
    "print(json.dumps(found))\n"
)
"""A runtime environment's packages (argv[2:], their ``gcs://`` URIs) from the GCS at argv[1],
base64, as one JSON object (where Ray's job agent reads them: the default namespace). One child
for all: each costs seconds of the notice on a busy head."""


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


def real_actions(
    venv: str, node_env: str, service: str, role: str = "worker", resumer: Resumer | None = None
) -> Actions:
    """Publish notices and read holds in Ray's key-value store; on a worker, drain with Ray's
    CLI and stop the unit; on the head, record and resume its jobs with ``resumer`` (built by
    :func:`real_resumer`). The node's environment file is read when an event comes, not at
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
        args.append(f"{RELEASED_PREFIX}{node_id}/")
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
        if resumer is None:
            return Actions(None, None, announce, hold_wait)
        return Actions(None, None, announce, hold_wait, resumer.record, resumer.step)
    return Actions(drain, stop, announce, hold_wait)


def real_resumer(venv: str, node_env: str, folder: str, jobs_url: str, token: str) -> Resumer:
    """The head's :class:`Resumer`: packages read from its GCS with the node's Ray settings."""
    python = os.path.join(venv, "bin", "python")

    def packages(uris: list[str]) -> dict[str, str]:
        env = read_env(node_env)
        gcs = f"{env['RAY_HEAD_IP']}:{env.get('RAY_GCS_PORT', '6379')}"
        child_env = {**os.environ, **env, "RAY_ADDRESS": gcs}
        return dict(json.loads(_child(python, _PACKAGES, [gcs, *uris], child_env, 60)))

    return Resumer(Path(folder), JobsApi(jobs_url, token), packages)


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
    p.add_argument(
        "--resume-dir", help="the head's: where its jobs are recorded for resumption"
    )  # fmt: skip
    p.add_argument("--jobs-url", help="the head's: Ray's Jobs API (with --resume-dir)")
    p.add_argument("--token", type=Path, help="the head's: the cluster token's file")
    args = p.parse_args(argv)
    read_env(args.node_env)  # refuse to start without it
    resumer = None
    if args.resume_dir:
        if args.role != "head" or not args.jobs_url or not args.token:
            p.error("--resume-dir needs --role head, --jobs-url and --token")
        token = args.token.read_text().strip()
        resumer = real_resumer(args.venv, args.node_env, args.resume_dir, args.jobs_url, token)
    actions = real_actions(args.venv, args.node_env, args.service, args.role, resumer)
    Watcher(args.imds, actions).run(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
