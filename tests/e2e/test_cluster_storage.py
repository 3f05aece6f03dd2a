"""The cluster storage (issue 36): the results container mounted on every node, Tune's default
storage in it, so a user's own Tune sweep runs across nodes as on a laptop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from driver import layout
from rehearsal_cluster import RehearsalCluster, cluster_results_container
from support import REPO, job_failure, run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

JOBS = REPO / "tests" / "fixtures" / "jobs"
HOME_RESULTS = f"{layout.STATE_DIR}/home/ray_results/"
"""Tune's default storage as the job sees it (the ray user's ~/ray_results)."""


def _lines(stdout: str, tag: str) -> list[dict[str, object]]:
    return [
        json.loads(ln[len(tag) + 1 :]) for ln in stdout.splitlines() if ln.startswith(tag + " ")
    ]


def test_a_users_own_tune_sweep_runs_its_trials_on_both_workers_and_every_node_reads_them(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    """Two PPO trials, checkpoints every 2 iterations and at the end, no storage_path: each trial
    runs on its own worker and saves there; the checkpoints are in Blob storage; each one
    restores on the other worker."""
    cluster = ["--head", rehearsal.head, "-i", str(rehearsal.ssh_key)]
    name = f"sweep-{time.strftime('%H%M%S')}"
    r = run_driver(
        "submit",
        *cluster,
        "--submission-id",
        name,
        str(JOBS / "tune_sweep.py"),
        "--",
        "4",
        name,
        home=tmp_path / "home",
        timeout=1800,
    )
    assert r.returncode == 0, job_failure(r)
    trials = _lines(r.stdout, "TRIAL")
    assert len(trials) == 2, r.stdout[-3000:]
    ran_on = sorted(str(t["node_ip"]) for t in trials)
    assert ran_on == sorted(rehearsal.worker_ips), f"the trials ran on {ran_on}"
    assert {t["iterations"] for t in trials} == {4}

    # In Blob storage (what outlives the nodes): both checkpoints of each trial, Tune's state.
    blobs = [
        b.name
        for b in cluster_results_container(rehearsal.dir).list_blobs(
            name_starts_with=f"ray_results/{name}/"
        )
    ]
    assert any(b.startswith(f"ray_results/{name}/experiment_state") for b in blobs), blobs[:20]
    for t in trials:
        path = str(t["path"])
        assert path.startswith(HOME_RESULTS + name + "/"), path
        trial = "ray_results/" + path[len(HOME_RESULTS) :]
        for number in ("000000", "000001"):
            assert any(b.startswith(f"{trial}/checkpoint_{number}/") for b in blobs), (trial, blobs)
        assert str(t["checkpoint"]) == f"{path}/checkpoint_000001"

    # Each trial's last checkpoint restores on the worker that did not write it.
    other = {ip: next(o for o in rehearsal.worker_ips if o != ip) for ip in rehearsal.worker_ips}
    args = [f"{other[str(t['node_ip'])]}={t['checkpoint']}" for t in trials]
    r = run_driver(
        "submit",
        *cluster,
        "--submission-id",
        f"{name}-restore",
        str(JOBS / "restore_checkpoint.py"),
        "--",
        *args,
        home=tmp_path / "home",
        timeout=1800,
    )
    assert r.returncode == 0, job_failure(r)
    restored = _lines(r.stdout, "RESTORED")
    assert sorted((str(x["node_ip"]), str(x["path"]), x["iteration"]) for x in restored) == sorted(
        (other[str(t["node_ip"])], str(t["checkpoint"]), 4) for t in trials
    )
