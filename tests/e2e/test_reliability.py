"""Workers that leave and heads that reboot, on the rehearsal cluster (issue: reliability).

These tests take nodes away, so they run after every other test of the session (conftest.py
moves tests marked ``disruptive`` to the end) and in this order: a worker whose Ray fails for
good (its Ray is started again afterwards), a Terminate event (the worker
is booted again afterwards, as a scale set's replacement would be), a head reboot, and a worker
lost for good (last: the session's cluster is torn down after it).

What each one shows is what the person running a week of training relies on:

- a worker whose Ray failed for good says so to the scale set's Application Health extension
  (Unhealthy), which is what automatic instance repair acts on;

- a scale-in or Spot eviction notice reaches the worker's watcher through its metadata service,
  which drains the Ray node, stops Ray and acknowledges the event within 30 s, while the job
  keeps training;
- after the head reboots, the workers rejoin by themselves within 90 s, the driver waits for the
  head's Ray instead of failing, and ``submit --resume`` continues from the last checkpoint with
  the iteration and env-step counters carrying on;
- a worker lost mid-training (`rehearse crash`: no notice, no shutdown, its network silent)
  costs the run its env runner there, which RLlib takes out of service and recreates on the
  remaining worker; training goes on and the run still reaches its target.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from driver import layout
from fakes.azure_node import FakeImds, StateFolder
from nodekit.rehearsal.cluster import Rehearsal
from rehearsal_cluster import RehearsalCluster
from support import REPO, run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal, pytest.mark.disruptive]

T = TypeVar("T")
RUN = time.strftime("%H%M%S")
"""Submission ids are unique per session (a reused cluster keeps its jobs)."""


def _until(check: Callable[[], T | None], timeout: float, what: str, every: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def _ray_nodes(rehearsal: RehearsalCluster) -> list[dict[str, Any]] | None:
    """Ray's node table from the head, or None while the head's Ray cannot answer."""
    try:
        code, out, _ = rehearsal.ssh(
            rehearsal.head_ip, "ray list nodes --limit 1000 --format json", timeout=60
        )
    except Exception:  # the head is rebooting: no SSH yet
        return None
    if code != 0:
        return None
    try:
        return list(json.loads(out))
    except ValueError:
        return None


def _alive_workers(rehearsal: RehearsalCluster) -> set[str]:
    nodes = _ray_nodes(rehearsal) or []
    return {n["node_ip"] for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"]}


def _runner_nodes(rehearsal: RehearsalCluster, sid: str) -> list[str]:
    """The IPs of the nodes the job's live env runners are on (Ray's actor table)."""
    code, out, _ = rehearsal.ssh(
        rehearsal.head_ip, "ray list actors --limit 10000 --detail --format json", timeout=60
    )
    if code != 0:
        return []
    code, jobs, _ = rehearsal.ssh(rehearsal.head_ip, "ray list jobs --format json", timeout=60)
    job_ids = {j["job_id"] for j in json.loads(jobs) if j.get("submission_id") == sid}
    nodes = {n["node_id"]: n["node_ip"] for n in _ray_nodes(rehearsal) or []}
    return sorted(
        nodes.get(a["node_id"], "?")
        for a in json.loads(out)
        if a["class_name"] == "SingleAgentEnvRunner"
        and a["job_id"] in job_ids
        and a["state"] == "ALIVE"
    )


def _worker_at(cluster: Rehearsal, ip: str) -> Any:
    """The rehearsal's node with this address (a worker)."""
    state = cluster.load()
    assert state is not None
    return next(n for n in state.nodes if n.ip == ip and n.role == "worker")


def _head_file(cluster: Rehearsal, path: str) -> Path:
    """A file on the head's disk, seen from this machine (the container's root folder)."""
    return cluster.node("head").root / path.lstrip("/")


def _progress_rows(cluster: Rehearsal, sid: str) -> int:
    try:
        text = _head_file(cluster, f"{layout.RESULTS_DIR}/{sid}/progress.csv").read_text()
    except OSError:
        return 0
    return max(0, len(text.splitlines()) - 1)


def _checkpoint_state(cluster: Rehearsal, sid: str) -> dict[str, Any] | None:
    try:
        path = _head_file(cluster, f"{layout.RESULTS_DIR}/{sid}/checkpoint/harness.json")
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _status(rehearsal: RehearsalCluster, home: Path, sid: str) -> str:
    r = run_driver(
        "status", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), sid, "--json",
        home=home, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["status"])


def _submit_no_wait(rehearsal: RehearsalCluster, home: Path, sid: str, *flags: str) -> None:
    r = run_driver(
        "submit", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key),
        "--submission-id", sid, "--no-wait", "examples/cartpole/train.py", "--", *flags,
        home=home, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _follow(rehearsal: RehearsalCluster, home: Path, sid: str) -> dict[str, Any]:
    """``logs -f`` to the end; the job's RESULT summary."""
    r = run_driver(
        "logs", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), "-f", sid,
        home=home, timeout=1800,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


# -- 0. a worker whose Ray fails for good ------------------------------------------------------
def _health(cluster: Rehearsal, node: Any) -> dict[str, str]:
    """What the Application Health extension would read on that worker (it probes locally)."""
    url = f"http://127.0.0.1:{layout.HEALTH_PORT}{layout.HEALTH_PATH}"
    out = cluster.exec(
        node,
        [
            "python3",
            "-c",
            f"import urllib.request; print(urllib.request.urlopen({url!r}).read().decode())",
        ],
        timeout=60,
    )
    return dict(json.loads(out))


def test_a_worker_whose_ray_fails_for_good_tells_the_scale_set_it_is_unhealthy(
    rehearsal: RehearsalCluster,
) -> None:
    """ray-worker.service fails for good (exit 78, the one exit it does not restart after: what
    a worker refusing the head's Ray or Python version does): the endpoint answers Unhealthy, so
    automatic repair replaces the VM; once Ray runs again it is Healthy. The endpoint runs
    in its sandbox as its own user, and must see the unit's state through systemd."""
    cluster = Rehearsal(rehearsal.name)
    worker_ip = rehearsal.worker_ips[-1]
    worker = _worker_at(cluster, worker_ip)
    assert _health(cluster, worker)["ApplicationHealthState"] == "Healthy"
    # A drop-in on the worker's disk (seen here through the container's root folder).
    dropin = Path(worker.root) / "etc/systemd/system/ray-worker.service.d/zz-test-fails.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text('[Service]\nExecStart=\nExecStart=/bin/sh -c "exit 78"\n')
    restart = "systemctl daemon-reload && systemctl restart ray-worker.service || :"
    try:
        cluster.exec(worker, ["sh", "-c", restart], timeout=120)
        answer = _until(
            lambda: (a := _health(cluster, worker))["ApplicationHealthState"] == "Unhealthy" and a,
            60,
            "the health endpoint to say Unhealthy",
        )
        assert "ray-worker.service failed" in answer["Reason"], answer
    finally:
        dropin.unlink()
        cluster.exec(worker, ["sh", "-c", restart], timeout=120)
    _until(
        lambda: worker_ip in _alive_workers(rehearsal), 300, f"{worker.name} back in Ray", every=3
    )
    assert _health(cluster, worker)["ApplicationHealthState"] == "Healthy"


# -- 1. a Terminate notice ----------------------------------------------------------------------
def test_a_terminate_notice_drains_and_stops_the_worker_within_30_s_while_training_goes_on(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    cluster = Rehearsal(rehearsal.name)
    home = tmp_path / "home"
    sid = f"reliability-terminate-{RUN}"
    # Long enough to be still training when the notice comes; stopped by the test.
    _submit_no_wait(
        rehearsal, home, sid, "--num-env-runners", "2", "--stop-reward", "none",
        "--max-env-steps", "2000000",
    )  # fmt: skip
    # Ray may put both runners on one worker (the head's raylet places each lease from its own,
    # slightly late view of the workers' CPUs): then both go with the notice, and RLlib
    # recreates both on the other worker. Either way training must go on.
    try:
        runners = _until(
            lambda: (lambda n: n if len(n) == 2 else None)(_runner_nodes(rehearsal, sid)),
            600,
            "the job's two env runners",
            every=3,
        )
    except AssertionError as e:
        pytest.fail(f"{e}\n{_job_report(rehearsal, home, sid)}")
    worker_ip = runners[0]
    worker = _worker_at(cluster, worker_ip)
    imds_dir = Path(worker.dir) / "imds"

    # Azure's scale-in notice, as every VM of the scale set sees it: for this worker only.
    imds = FakeImds(StateFolder(imds_dir))
    other = imds.schedule("Terminate", ["rh-elsewhere_7"], not_before_s=600)
    instance = json.loads((imds_dir / "config.json").read_text())["compute"]["name"]
    noticed = time.monotonic()
    event = imds.schedule("Terminate", [instance], not_before_s=300)

    def stopped() -> bool:
        out = cluster.exec(worker, ["sh", "-c", "systemctl is-active ray-worker || :"], timeout=30)
        return out.strip() in ("inactive", "failed")

    try:
        _until(stopped, 60, f"ray-worker stopped on {worker.name}", every=0.5)
    except Exception:
        pytest.fail("watcher log:\n" + _journal(cluster, worker))
    took = time.monotonic() - noticed
    rows_at_stop = _progress_rows(cluster, sid)
    assert took <= 30, f"{worker.name} stopped {took:.1f} s after the notice"
    acked = _until(lambda: [a["EventId"] for a in imds.acks()], 30, "the acknowledgement")
    assert acked == [event], acked  # its own event only, never the other VM's
    assert other in [e["EventId"] for e in json.loads((imds_dir / "events.json").read_text())]

    # In this order, each decision on one line: drain, stop, acknowledge.
    log = _journal(cluster, worker)
    steps = [
        log.find(word) for word in (": draining", "stopping Ray after", f"acknowledged {event}")
    ]
    assert -1 not in steps and steps == sorted(steps), log
    assert f"ignoring event {other}" in log, log
    assert "failed" not in log, log  # the drain went through Ray, not around it
    # Ray was told before the node went: drained, not merely lost.
    dead = [n for n in _ray_nodes(rehearsal) or [] if n["node_ip"] == worker_ip]
    assert dead and all(n["state"] == "DEAD" for n in dead), dead

    # Training goes on: new iterations after the stop, and the job still running.
    _until(
        lambda: _progress_rows(cluster, sid) >= rows_at_stop + 3, 300, "3 more iterations", every=2
    )
    assert _status(rehearsal, home, sid) == "RUNNING"
    r = run_driver(
        "stop", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), sid, home=home,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr

    # Azure would now delete the VM; here it boots again, as the scale set's replacement would.
    (imds_dir / "events.json").write_text("[]")
    cluster.reboot(worker.name)
    _until(
        lambda: worker_ip in _alive_workers(rehearsal), 300, f"{worker.name} back in Ray", every=3
    )


def _job_report(rehearsal: RehearsalCluster, home: Path, sid: str) -> str:
    """What a person would look at when a job does not get going: its status, its log's tail,
    the runners Ray knows of and the nodes."""
    r = run_driver(
        "status", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), sid, "--json",
        home=home, timeout=300,
    )  # fmt: skip
    logs = run_driver(
        "logs", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), sid,
        home=home, timeout=300,
    )  # fmt: skip
    return (
        f"status: {r.stdout.strip() or r.stderr.strip()}\n"
        f"runners on: {_runner_nodes(rehearsal, sid)}\n"
        f"nodes: {[(n['node_ip'], n['state']) for n in _ray_nodes(rehearsal) or []]}\n"
        f"log tail:\n{logs.stdout[-3000:]}{logs.stderr[-1000:]}"
    )


def _journal(cluster: Rehearsal, node: Any) -> str:
    return cluster.exec(
        node, ["journalctl", "-u", "ray-scheduled-events", "--no-pager", "-o", "cat"], timeout=60
    )


# -- 2. the head reboots ------------------------------------------------------------------------
def test_after_a_head_reboot_workers_rejoin_and_submit_resume_carries_on(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    cluster = Rehearsal(rehearsal.name)
    home = tmp_path / "home"
    first, second = f"reliability-before-reboot-{RUN}", f"reliability-after-reboot-{RUN}"
    _submit_no_wait(
        rehearsal, home, first, "--num-env-runners", "2", "--checkpoint-every", "1",
        "--max-iterations", "200",
    )  # fmt: skip
    saved = _until(
        lambda: (lambda s: s if s and s["iteration"] >= 3 else None)(
            _checkpoint_state(cluster, first)
        ),
        600,
        "a checkpoint at iteration 3",
        every=2,
    )

    workers = _alive_workers(rehearsal)
    assert len(workers) >= 2, workers
    rebooted = time.monotonic()
    cluster.reboot("head")
    # The driver, asked at once, waits for the head's Ray instead of failing on the marker the
    # previous boot left behind; the job died with the head (its state lived there).
    r = run_driver(
        "list", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key), "--json",
        home=home, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # Workers' raylets wait 60 s for the head's GCS, then exit and systemd starts them again:
    # they come back either way. The bound is a failure detector for a loaded machine (two
    # cores, three lanes), not a speed target: 90 s was once not enough there.
    _until(
        lambda: workers <= _alive_workers(rehearsal),
        max(1.0, 300 - (time.monotonic() - rebooted)),
        f"the workers {sorted(workers)} alive in the rebooted head's Ray",
        every=2,
    )
    print(f"workers rejoined {time.monotonic() - rebooted:.0f} s after the head's reboot")

    # What survived is the checkpoint on the head's disk: resume from it.
    state = _checkpoint_state(cluster, first)
    assert state is not None and state["iteration"] >= saved["iteration"]
    r = run_driver(
        "submit", "--head", rehearsal.head, "-i", str(rehearsal.ssh_key),
        "--submission-id", second, "examples/cartpole/train.py", "--",
        "--num-env-runners", "2", "--resume", first, "--stop-reward", "none",
        "--max-iterations", str(state["iteration"] + 2),
        home=home, timeout=1800,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(
        next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :]
    )
    assert result["resumed_from"] == f"{layout.RESULTS_DIR}/{first}/checkpoint", result
    assert result["iterations"] == state["iteration"] + 2, (result, state)
    assert result["env_steps"] > state["env_steps"], (result, state)
    rows = _head_file(cluster, f"{layout.RESULTS_DIR}/{second}/progress.csv").read_text()
    assert len(rows.splitlines()) - 1 == state["iteration"] + 2  # the curve is whole


# -- 3. a worker lost without notice ------------------------------------------------------------
def _rows(cluster: Rehearsal, sid: str) -> list[dict[str, str]]:
    try:
        text = _head_file(cluster, f"{layout.RESULTS_DIR}/{sid}/progress.csv").read_text()
    except OSError:
        return []
    return list(csv.DictReader(io.StringIO(text)))


def test_a_worker_lost_mid_training_takes_its_runner_out_and_training_goes_on_to_the_target(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    """A worker lost at once (`rehearse crash`: its network silent, everything in it killed, no
    shutdown), while one of the job's two env runners on it is sampling: RLlib takes that
    runner out of service and the run goes on with what is left to its target. Asserted as
    events, not as an outcome a run that never lost anything would also show: the runner was
    alive on that worker and in service (both runners healthy in the iteration before); the
    loss came while the job was training; RLlib counted the runner out; iterations were
    trained after the loss; Ray saw the node die."""
    cluster = Rehearsal(rehearsal.name)
    home = tmp_path / "home"
    sid = f"reliability-crash-{RUN}"
    # A step budget well past the target: the lost runner's share must not end the run.
    _submit_no_wait(
        rehearsal, home, sid, "--num-env-runners", "2", "--checkpoint-every", "2",
        "--max-env-steps", "200000",
    )  # fmt: skip
    try:
        runners = _until(
            lambda: (lambda n: n if len(n) == 2 else None)(_runner_nodes(rehearsal, sid)),
            600,
            "the job's two env runners",
            every=3,
        )
    except AssertionError as e:
        pytest.fail(f"{e}\n{_job_report(rehearsal, home, sid)}")
    before = _alive_workers(rehearsal)
    lost = _worker_at(cluster, runners[0])
    assert lost.ip in before
    in_service = _until(
        lambda: next((r for r in _rows(cluster, sid) if r["healthy_env_runners"] == "2"), None),
        600,
        "an iteration sampled by both runners",
        every=0.5,
    )
    crashed_at = time.time()
    cluster.crash(lost.name)
    rows_at_crash = len(_rows(cluster, sid))
    assert _status(rehearsal, home, sid) == "RUNNING"  # the loss came while it trained

    result = _follow(rehearsal, home, sid)
    rows = _rows(cluster, sid)
    assert result["reached_target"] and result["episode_return_mean"] >= 450, result
    after = [r for r in rows if float(r["timestamp"]) > crashed_at]
    # RLlib took the lost runner out of service (and, on the other worker, back in).
    out = [r for r in after if int(r["healthy_env_runners"] or 2) < 2]
    restarted = [r for r in after if int(r["env_runner_restarts"] or 0) > 0]
    assert out or restarted, rows
    # Training went on after the worker was gone: iterations finished after the loss.
    assert len(after) >= 2 and result["iterations"] > rows_at_crash, (rows_at_crash, rows)
    # Every checkpoint the run wrote is there: the last one, at the final iteration.
    state = _checkpoint_state(cluster, sid)
    assert state is not None and state["iteration"] == result["iterations"], (state, result)
    # Ray saw the worker die (lost without a drain); the other worker stayed.
    nodes = [n for n in _ray_nodes(rehearsal) or [] if n["node_ip"] == lost.ip]
    assert nodes and all(n["state"] == "DEAD" for n in nodes), nodes
    assert _alive_workers(rehearsal) == before - {lost.ip}
    print(
        json.dumps(
            {
                "crashed_at_iteration": rows_at_crash,
                "in_service_at": in_service["iteration"],
                "iterations": result["iterations"],
                "env_steps": result["env_steps"],
                "after_crash": [
                    {k: r[k] for k in ("iteration", "iteration_time_s", "healthy_env_runners",
                                       "env_runner_restarts", "env_steps")}
                    for r in after
                ],
            }
        )
    )  # fmt: skip


@pytest.mark.parametrize("verb", ["reboot", "poweroff", "crash"])
def test_the_rehearsal_power_verbs_refuse_unknown_nodes(verb: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "nodekit", "rehearse", verb, "--name", "nosuch", "--node", "x"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: no rehearsal cluster 'nosuch': run `rehearse up` first"
    ], r.stderr
