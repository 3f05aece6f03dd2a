"""The driver against the rehearsal cluster, as a user runs it against Azure: real SSH to the
head, the Jobs API through the tunnel, env runners on the worker nodes, results brought back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rehearsal_cluster import RehearsalCluster
from support import run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

SID = "cartpole-rehearsal"


def _ray_state(rehearsal: RehearsalCluster, what: str) -> list[dict]:
    code, out, err = rehearsal.ssh(rehearsal.head_ip, f"ray list {what} --format json")
    assert code == 0, err
    return json.loads(out)


def test_cartpole_trains_on_the_workers_and_download_brings_the_checkpoint_back(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    home = tmp_path / "driver-home"
    cluster = ["--head", rehearsal.head, "-i", str(rehearsal.ssh_key)]
    r = run_driver(
        "submit",
        *cluster,
        "--submission-id",
        SID,
        "examples/cartpole/train.py",
        "--",
        "--num-env-runners",
        "2",
        home=home,
        timeout=1800,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # First contact with the head: its host key was trusted once, with the fingerprint shown.
    assert "SHA256:" in r.stderr
    result = json.loads(
        next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :]
    )
    assert result["reached_target"] and result["episode_return_mean"] >= 450
    assert result["env_steps"] <= 60_000
    assert result["node"] == rehearsal.head_ip  # the driver process and learner ran on the head
    assert result["checkpoint"] == f"/var/lib/ray-cluster/results/{SID}/checkpoint"

    # Where the env runners ran, from Ray's own state on the head (not the script's say-so).
    job_id = next(
        j["job_id"] for j in _ray_state(rehearsal, "jobs") if j.get("submission_id") == SID
    )
    node_list = _ray_state(rehearsal, "nodes --limit 1000")
    nodes = {n["node_id"]: n["node_ip"] for n in node_list}
    workers = {n["node_ip"] for n in node_list if not n["is_head_node"]}
    assert rehearsal.head_ip not in workers and set(rehearsal.worker_ips) <= workers
    runners = [
        a
        for a in _ray_state(rehearsal, "actors --limit 10000 --detail")
        if a["class_name"] == "SingleAgentEnvRunner" and a["job_id"] == job_id
    ]
    assert len(runners) == 2, runners
    assert {nodes[a["node_id"]] for a in runners} <= workers

    # The checkpoint and summary come back over SFTP; a second download skips what is there.
    results = tmp_path / "results"
    r = run_driver("download", *cluster, "--results", str(results), SID, home=home, timeout=600)
    assert r.returncode == 0, r.stderr
    local = results / SID
    assert json.loads((local / "summary.json").read_text()) == result
    files = [p for p in (local / "checkpoint").rglob("*") if p.is_file()]
    assert files and any(p.suffix in (".pkl", ".pt", ".json") for p in files)
    again = run_driver("download", *cluster, "--results", str(results), SID, home=home, timeout=600)
    assert again.returncode == 0, again.stderr
    total = len([p for p in local.rglob("*") if p.is_file()])
    assert f"Downloaded {total} files" in r.stderr, r.stderr
    assert "Downloaded 0 files (0 B)" in again.stderr and f"; {total} already there" in again.stderr
