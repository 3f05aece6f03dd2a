"""The cluster storage (issue 36): the results container mounted on every node, Tune's default
storage in it, so a user's own Tune sweep runs across nodes as on a laptop."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from driver import layout
from driver.store import TUNE_ROOT
from nodekit.rehearsal.services import keyvault
from nodekit.rehearsal.standins.azure_node import FakeImds, imds_config, laptop_env
from rehearsal_cluster import CLIENT_ID, RehearsalCluster, cluster_results_container
from support import LOCAL_RAY_INIT, REPO, job_failure, run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

JOBS = REPO / "tests" / "fixtures" / "jobs"
HOME_RESULTS = f"{layout.STATE_DIR}/home/{TUNE_ROOT}/"
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
    restores on the other worker; ``download`` brings the experiment from Blob storage to this
    machine (as a laptop, with its own identity) and each trial's last checkpoint restores here."""
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

    shown = run_driver("status", *cluster, home=tmp_path / "home")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"cluster storage: {layout.CLUSTER_STORAGE_DIR} on every node" in shown.stdout

    # In Blob storage (what outlives the nodes): both checkpoints of each trial, Tune's state.
    blobs = [
        b.name
        for b in cluster_results_container(rehearsal.dir).list_blobs(
            name_starts_with=f"{TUNE_ROOT}/{name}/"
        )
    ]
    assert any(b.startswith(f"{TUNE_ROOT}/{name}/experiment_state") for b in blobs), blobs[:20]
    for t in trials:
        path = str(t["path"])
        assert path.startswith(HOME_RESULTS + name + "/"), path
        trial = f"{TUNE_ROOT}/" + path[len(HOME_RESULTS) :]
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

    # From Blob storage to a laptop, as with the cluster gone: every trial's last checkpoint.
    url = json.loads((rehearsal.dir / "state.json").read_text())["results_url"]
    shared = keyvault.shared(rehearsal.dir / "azure")
    laptop = FakeImds(tmp_path / "imds")
    (tmp_path / "imds" / "config.json").write_text(
        json.dumps(imds_config(bytes.fromhex(shared["token_key"]), "laptop", {CLIENT_ID: "laptop"}))
    )
    laptop.start()
    try:
        environment = {
            **laptop_env(laptop.url, CLIENT_ID, Path(shared["ca"])),
            "RAYDRIVER_RESULTS_EMULATOR": urllib.parse.urlsplit(url).netloc,
        }
        done = run_driver(
            "download", f"{TUNE_ROOT}/{name}", "--results-url", url,
            home=tmp_path / "home", cwd=tmp_path, env=environment,
        )  # fmt: skip
    finally:
        laptop.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    local = tmp_path / "results" / TUNE_ROOT / name
    checkpoints = [local / (str(t["checkpoint"])[len(HOME_RESULTS + name) + 1 :]) for t in trials]
    assert all((c / "rllib_checkpoint.json").is_file() for c in checkpoints), done.stderr
    restored = subprocess.run(
        [sys.executable, "-c", _RESTORE_HERE, *map(str, checkpoints)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert restored.stdout.split() == ["4", "4"], restored.stdout


_RESTORE_HERE = (
    LOCAL_RAY_INIT
    + """
import sys
from ray.rllib.algorithms.algorithm import Algorithm
init_local_ray(num_cpus=2, include_dashboard=False, logging_level="ERROR")
for path in sys.argv[1:]:
    algo = Algorithm.from_checkpoint(path)
    print(algo.iteration, flush=True)
    algo.stop()
"""
)
