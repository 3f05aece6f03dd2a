"""examples/tune_abfs/sweep.py, a Tune sweep whose ``RunConfig`` names its own Blob storage
through ``pyarrow.fs.AzureFileSystem``, run for real on local Ray against the rehearsal's Azurite
(HTTPS with OAuth, the ``blob`` fixture): pyarrow gets the managed identity's tokens from the
fake metadata service (``AZURE_POD_IDENTITY_AUTHORITY_HOST``, as in test_azurite.py), as it gets
them from 169.254.169.254 on Azure. What lands in the container is listed with
azure-storage-blob; a checkpoint is restored from there, and the sweep submitted again resumes
from the state there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from azure.core.credentials import AccessToken
from azure.storage.blob import ContainerClient

from blob_support import laptop_driver, storage_token
from fakes.local_blob import CLIENT_ID, Blob
from harness import blobsync
from nodekit.rehearsal.services import azurite
from support import REPO

EXAMPLE = REPO / "examples" / "tune_abfs" / "sweep.py"
STRIPPED = (blobsync.URL_ENV, blobsync.CLIENT_ID_ENV, "AZURE_CLIENT_ID", "SSL_CERT_DIR")


def _job_env(blob: Blob | None, client_id: str = CLIENT_ID) -> dict[str, str]:
    """A job's environment on a node of a cluster with results storage (``blob``; None: one
    without): the container's URL, the nodes' identity, their metadata service and CA."""
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    env.update(
        RAY_ADDRESS="local",  # a Ray of its own, not one another test left running
        PYTHONPATH=os.pathsep.join([str(REPO / "examples"), str(EXAMPLE.parent)]),
    )
    if blob is not None:
        env.update(
            {
                blobsync.URL_ENV: f"{blob.url}/{azurite.CONTAINER}",
                blobsync.CLIENT_ID_ENV: client_id,
                blobsync.IMDS_ENV: blob.imds.url,
                "SSL_CERT_FILE": str(blob.ca),
            }
        )
    return env


def _python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def _trials(stdout: str) -> dict[str, dict]:
    """The sweep's ``TRIAL {...}`` lines, by learning rate."""
    found = [json.loads(x[6:]) for x in stdout.splitlines() if x.startswith("TRIAL ")]
    return {str(t["lr"]): t for t in found}


class _Token:
    """azure-identity's credential protocol, answered with the node's storage token."""

    def __init__(self, blob: Blob) -> None:
        self.blob = blob

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        return AccessToken(storage_token(self.blob), int(time.time()) + 3600)


def _blobs(blob: Blob, prefix: str) -> dict[str, int]:
    """The container's blobs under ``prefix`` (name: size), listed with azure-storage-blob."""
    with ContainerClient(
        blob.url, azurite.CONTAINER, credential=_Token(blob), connection_verify=str(blob.ca)
    ) as container:
        return {b.name: b.size for b in container.list_blobs(name_starts_with=prefix)}


RESTORE = """
import hashlib, json, pickle, sys
import numpy as np
import torch
from ray.rllib.core.rl_module.rl_module import RLModule
from sweep import storage

_, fs = storage()
for checkpoint in sys.argv[1:]:
    policy = f"{checkpoint}/learner_group/learner/rl_module/default_policy"
    module = RLModule.from_checkpoint(policy, filesystem=fs)
    with fs.open_input_stream(f"{policy}/module_state.pkl") as f:
        stored = pickle.loads(f.read())
    with fs.open_input_stream(f"{checkpoint}/algorithm_state.pkl") as f:
        iteration = pickle.loads(f.read())["training_iteration"]
    state = module.get_state()
    inputs = module.forward_inference({"obs": torch.zeros((1, 4))})["action_dist_inputs"]
    print("RESTORED " + json.dumps({
        "iteration": iteration,
        "as_stored": list(state) == list(stored)
        and all(np.array_equal(state[k], stored[k]) for k in stored),
        "action_dist_inputs": list(inputs.shape),
        "weights": hashlib.sha256(b"".join(v.tobytes() for v in state.values())).hexdigest(),
    }), flush=True)
"""
"""The policies of checkpoints (their paths as Tune names them, the container first) restored
from Blob storage with no Ray: RLlib's ``RLModule.from_checkpoint`` through the example's file
system, what a serving process does; the weights it holds against the stored ones."""


@pytest.mark.slow
def test_a_sweep_with_its_own_storage_path_checkpoints_to_blob_storage_and_restores(
    blob: Blob, tmp_path: Path
) -> None:
    name = f"abfs-{os.getpid()}"
    env = _job_env(blob)
    first = _python(env, str(EXAMPLE), "--name", name, "--iterations", "2")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    trials = _trials(first.stdout)
    assert sorted(trials) == ["0.0003", "0.001"], first.stdout[-3000:]
    # Tune's paths are the container's (pyarrow's root is the account), one end checkpoint each.
    experiment = f"{azurite.CONTAINER}/ray_results/{name}"
    for t in trials.values():
        assert t["iterations"] == 2
        assert t["path"].startswith(f"{experiment}/PPO_CartPole-v1_")
        assert t["checkpoint"] == f"{t['path']}/checkpoint_000000"

    # In the container: the experiment's state, and each trial's results and checkpoint.
    stored = _blobs(blob, f"ray_results/{name}/")
    top = {n.split("/", 2)[2] for n in stored if n.count("/") == 2}
    assert {"tuner.pkl", ".validate_storage_marker"} <= top, sorted(top)
    assert len([n for n in top if n.startswith("experiment_state-")]) == 1, sorted(top)
    for t in trials.values():
        trial = t["path"].removeprefix(f"{azurite.CONTAINER}/")
        for f in ("progress.csv", "result.json", "params.json"):
            assert stored.get(f"{trial}/{f}", 0) > 0, (f, sorted(stored))
        at = f"{trial}/checkpoint_000000/"
        files = {n.removeprefix(at): size for n, size in stored.items() if n.startswith(at)}
        assert files.get("rllib_checkpoint.json", 0) > 0, sorted(files)
        assert files.get("algorithm_state.pkl", 0) > 0, sorted(files)
        weights = "learner_group/learner/rl_module/default_policy/module_state.pkl"
        assert files.get(weights, 0) > 0, sorted(files)
        assert not [n for n in stored if n.startswith(f"{trial}/checkpoint_000001")]

    # Each trial's policy restores from Blob storage, with the weights that trial trained.
    restored = _python(env, "-c", RESTORE, *(t["checkpoint"] for t in trials.values()))
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    policies = [
        json.loads(x[9:]) for x in restored.stdout.splitlines() if x.startswith("RESTORED ")
    ]
    assert [(p["iteration"], p["as_stored"], p["action_dist_inputs"]) for p in policies] == [
        (2, True, [1, 2]),
        (2, True, [1, 2]),
    ], restored.stdout
    assert policies[0]["weights"] != policies[1]["weights"]

    # Submitted again under the same name (as after a lost head): the sweep resumes from the
    # state in the container; its trials are done, so nothing trains and nothing is written.
    again = _python(env, str(EXAMPLE), "--name", name, "--iterations", "2")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming the sweep in {experiment}" in again.stdout
    assert _trials(again.stdout) == trials
    after = _blobs(blob, f"ray_results/{name}/")
    assert {n for n in after if "/checkpoint_" in n} == {n for n in stored if "/checkpoint_" in n}

    # The driver's `runs` lists it as the Tune experiment it is, from a laptop.
    listed = laptop_driver(
        blob, "runs", "--results-url", f"{blob.url}/{azurite.CONTAINER}", cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    row = [x for x in listed.stdout.splitlines() if x.startswith(f"ray_results/{name} ")]
    assert len(row) == 1 and "Tune experiment, 2 trials" in row[0], listed.stdout


def test_a_job_without_the_variables_is_told_in_one_line() -> None:
    done = _python(_job_env(None), str(EXAMPLE))
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == (
        1,
        [
            f"error: {blobsync.URL_ENV} and {blobsync.CLIENT_ID_ENV} must name the container "
            "and the managed identity (a cluster with results storage sets both for every job)"
        ],
    ), done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_an_identity_the_node_lacks_is_one_line_not_an_abort(blob: Blob) -> None:
    """pyarrow would abort the process (test_azurite.py); the example asks for a token first."""
    done = _python(_job_env(blob, client_id="not-attached-to-this-vm"), str(EXAMPLE))
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: no storage token for the managed identity not-attached-to-this-vm from the "
        f"metadata service ({blob.imds.url}): HTTP 400 "
    ), done.stderr[-3000:]
    assert "Identity not found" in last and "Traceback" not in done.stderr


URI = """
import sys, pyarrow.fs as pafs
fs, path = pafs.FileSystem.from_uri(sys.argv[1])
with fs.open_output_stream(path + "/uri.txt") as f:
    f.write(b"by uri")
print(type(fs).__name__, path)
"""


def test_the_abfs_uri_form_names_the_same_storage(blob: Blob) -> None:
    """``storage_path="abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH?client_id=ID"``, as
    pyarrow 26 parses it (Ray hands such a URI to ``FileSystem.from_uri``): the same account,
    container and managed identity; an emulator's address goes in the query."""
    authority = f"127.0.0.1:{blob.port}"
    uri = (
        f"abfs://{azurite.CONTAINER}@{azurite.ACCOUNT}.dfs.core.windows.net/uri-form"
        f"?client_id={CLIENT_ID}"
        f"&blob_storage_authority={authority}&dfs_storage_authority={authority}"
    )
    done = _python(_job_env(blob), "-c", URI, uri)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["AzureFileSystem", f"{azurite.CONTAINER}/uri-form"]
    assert _blobs(blob, "uri-form/") == {"uri-form/uri.txt": 6}
