"""The harness's results store (examples/harness/store.py, blobsync.py): a run mirrored to Blob
storage by a helper process, checkpoints published by a pointer written last, resume from the
store. Against real Azurite and the fake metadata service (tests/unit/test_azurite.py's
fixture), on loopback, no root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from blob_support import (
    Lines,
    answer_tokens_with,
    blob_request,
    get_blob,
    start_uploader,
    storage_token,
    token_answer,
)
from fakes.local_blob import CLIENT_ID, Blob
from harness import blobsync, store
from harness.blobsync import StoreError
from harness.runs import PROGRESS_COLUMNS, latest_checkpoint, read_progress
from nodekit.rehearsal.standins.azure_node import STORAGE_RESOURCE

REPO = Path(__file__).resolve().parents[2]


def _listing(blob: Blob, prefix: str) -> list[str]:
    status, _, body = blob_request(
        blob,
        "GET",
        f"results?restype=container&comp=list&prefix={prefix}/&maxresults=5000",
        storage_token(blob),
    )
    assert status == 200
    text = body.decode()
    return sorted(
        part.split("</Name>")[0].removeprefix(f"{prefix}/") for part in text.split("<Name>")[1:]
    )


def _run_folder(tmp_path: Path, run: str, files: int = 3, size: int = 1000) -> Path:
    """A run folder as the harness leaves it, with a checkpoint of ``files`` files."""
    folder = tmp_path / run
    (folder / "checkpoint" / "learner").mkdir(parents=True)
    (folder / "progress.csv").write_text("iteration,env_steps\n1,100\n2,200\n")
    (folder / "events.out.tfevents.1.host").write_bytes(b"\x01" * 300)
    for i in range(files):
        (folder / "checkpoint" / "learner" / f"part{i:04d}.bin").write_bytes(os.urandom(size))
    (folder / "checkpoint" / "harness.json").write_text(
        json.dumps({"iteration": 2, "env_steps": 200})
    )
    return folder


def _wait(condition: object, what: str, timeout: float = 60) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.01)


def test_the_store_url_is_a_container_url_on_azure_or_azurite() -> None:
    azure = blobsync.parse_url("https://acct01.blob.core.windows.net/results/", "cid")
    assert (azure.account, azure.container, azure.authority, azure.client_id) == (
        "acct01",
        "results",
        None,
        "cid",
    )
    local = blobsync.parse_url("https://10.0.0.1:10000/rehearsalresults/results")
    assert (local.account, local.container, local.authority) == (
        "rehearsalresults",
        "results",
        "10.0.0.1:10000",
    )
    for bad in (
        "http://acct01.blob.core.windows.net/results",
        "https://acct01.blob.core.windows.net",
        "https://acct01.blob.core.windows.net/results/extra",
        "https://10.0.0.1:10000/rehearsalresults",
        "https://10.0.0.1:10000/Bad_Account/results",
        "https://10.0.0.1:10000/acct01/x",
    ):
        with pytest.raises(ValueError) as e:
            blobsync.parse_url(bad)
        assert str(e.value).startswith(blobsync.URL_ENV) and "\n" not in str(e.value)
    assert blobsync.from_env({}) is None
    assert blobsync.from_env(
        {blobsync.URL_ENV: "https://a12.blob.core.windows.net/r1x", "AZURE_CLIENT_ID": "x"}
    ) == blobsync.Store("https://a12.blob.core.windows.net/r1x", "a12", "r1x", None, "x")
    lines = Lines()
    os.environ[blobsync.URL_ENV] = "ftp://nowhere"
    try:
        assert store.configured(lines) is None
    finally:
        del os.environ[blobsync.URL_ENV]
    assert len(lines) == 1 and "results stay in the local run folder only" in lines[0]


def test_a_run_is_mirrored_and_its_checkpoint_published_by_a_pointer_written_last(
    env: Blob, tmp_path: Path
) -> None:
    run = f"run-mirror-{os.getpid()}"
    folder = _run_folder(tmp_path, run)
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    (folder / "summary.json").write_text('{"iterations": 2}\n')
    assert up.finish(60), lines
    names = _listing(env, run)
    checkpoint = [
        "checkpoint/harness.json",
        *[f"checkpoint/learner/part{i:04d}.bin" for i in range(3)],
        "progress.csv",
    ]
    assert names == sorted(
        [
            "events.out.tfevents.1.host",
            "latest.json",
            "progress.csv",
            "summary.json",
            *[f"checkpoints/000002/{n}" for n in checkpoint],
        ]
    )
    # What went up is what the run folder holds.
    for name in ("progress.csv", "summary.json", "events.out.tfevents.1.host"):
        assert get_blob(env, f"{run}/{name}") == (200, (folder / name).read_bytes())
    part = folder / "checkpoint" / "learner" / "part0001.bin"
    assert get_blob(env, f"{run}/checkpoints/000002/checkpoint/learner/part0001.bin") == (
        200,
        part.read_bytes(),
    )
    # The pointer names the complete checkpoint, and came after every one of its files.
    pointer = json.loads(get_blob(env, f"{run}/latest.json")[1])
    assert pointer["checkpoint"] == "checkpoints/000002"
    assert (pointer["iteration"], pointer["env_steps"]) == (2, 200)
    assert sorted(pointer["files"]) == checkpoint
    assert pointer["files"]["checkpoint/learner/part0001.bin"] == 1000
    assert sorted(up.uploaded) == [f"checkpoints/000002/{n}" for n in checkpoint]
    assert [p["checkpoint"] for p in up.published] == ["checkpoints/000002"]
    assert lines[0] == f"results store: mirroring this run to {env.url}/results/{run}"
    assert lines[1] == (
        f"results store: checkpoint at iteration 2 published as "
        f"{env.url}/results/{run}/checkpoints/000002"
    )
    assert lines[2].startswith(f"results store: all uploaded to {env.url}/results/{run} (")
    # The staging copies are gone; the local run folder is untouched.
    assert not (folder / store.STAGING).exists()
    assert (folder / "checkpoint" / "harness.json").is_file()
    assert (folder / store.HELPER_LOG).read_text() == ""


def _second_checkpoint_under_way(up: store.Uploader, tmp_path: Path, files: int) -> Path:
    """A second checkpoint (iteration 4) of ``files`` files of 2,000 bytes handed to ``up``,
    returned once three of its files are up (the rest still to go)."""
    second = tmp_path / "second" / "checkpoint"
    (second / "learner").mkdir(parents=True)
    for i in range(files):
        (second / "learner" / f"part{i:04d}.bin").write_bytes(os.urandom(2000))
    (second / "harness.json").write_text(json.dumps({"iteration": 4, "env_steps": 400}))
    up.checkpoint(second, {"iteration": 4, "env_steps": 400})
    _wait(
        lambda: sum(f.startswith("checkpoints/000004/") for f in up.uploaded) >= 3,
        "three files of the second checkpoint",
    )
    return second


def test_killing_the_uploader_mid_checkpoint_keeps_the_previous_pointer(
    env: Blob, tmp_path: Path
) -> None:
    run = f"run-killed-{os.getpid()}"
    folder = _run_folder(tmp_path, run, files=2)
    up, lines = start_uploader(folder)
    found = up.store
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    _wait(lambda: up.published, "the first checkpoint's pointer")
    first = json.loads(get_blob(env, f"{run}/latest.json")[1])
    # A second, bigger checkpoint: killed once three of its 60 files are up.
    second = _second_checkpoint_under_way(up, tmp_path, 60)
    assert up.pid is not None
    os.kill(up.pid, signal.SIGKILL)
    _wait(lambda: not up.alive(), "the uploader's end")
    _wait(lambda: any("uploader stopped" in line for line in lines), "the line saying so")
    names = _listing(env, run)
    partial = [n for n in names if n.startswith("checkpoints/000004/")]
    assert 3 <= len(partial) < 61, "killed mid-checkpoint"
    # The pointer still names the first checkpoint, which is complete; the partial is ignored.
    assert json.loads(get_blob(env, f"{run}/latest.json")[1]) == first
    for name, size in first["files"].items():
        assert f"checkpoints/000002/{name}" in names
        assert len(get_blob(env, f"{run}/checkpoints/000002/{name}")[1]) == size
    fetched = store.fetch_latest(found, run, timeout=60)
    restored = latest_checkpoint(fetched)
    assert restored.state == {"iteration": 2, "env_steps": 200}
    assert (restored.path / "learner" / "part0001.bin").read_bytes() == (
        folder / "checkpoint" / "learner" / "part0001.bin"
    ).read_bytes()
    assert read_progress(fetched / "progress.csv", 2) == [
        {**dict.fromkeys(PROGRESS_COLUMNS, ""), **row}
        for row in ({"iteration": "1", "env_steps": "100"}, {"iteration": "2", "env_steps": "200"})
    ]
    # One line in the job's log; training went on; the next checkpoint starts a new uploader.
    stopped = [line for line in lines if "uploader stopped" in line]
    assert stopped == [
        f"results store: the uploader stopped (killed by SIGKILL; its log: "
        f"{folder / store.HELPER_LOG}); a new one starts at the next checkpoint; the local run "
        f"folder {folder} has every result"
    ]
    up.sync()
    up.checkpoint(second, {"iteration": 6, "env_steps": 600})
    assert up.finish(60), lines
    assert "results store: uploader started again (1 of 3)" in lines
    pointer = json.loads(get_blob(env, f"{run}/latest.json")[1])
    assert (pointer["checkpoint"], pointer["iteration"], len(pointer["files"])) == (
        "checkpoints/000006",
        6,
        62,
    )
    assert not any("Traceback" in line for line in lines)


def test_fetching_a_run_the_store_does_not_have_is_one_line(env: Blob, tmp_path: Path) -> None:
    found = blobsync.from_env()
    assert found is not None
    with pytest.raises(StoreError) as e:
        store.fetch_latest(found, "never-ran", timeout=60)
    assert str(e.value) == f"no run never-ran in {env.url}/results (no never-ran/latest.json)"


MIRROR_SHARE_SCRIPT = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import blobsync

client = blobsync.Client(blobsync.from_env(), "share-run")
client.connect()
real = client.put_file

def slow(path, name):  # a slow link: each file's upload takes 0.4 s longer
    time.sleep(0.4)
    return real(path, name)

client.put_file = slow
up = blobsync.Uploader(client, Path(sys.argv[2]))
up.mirror()
first = up.sync_every
up.mirror()  # nothing changed: nothing to upload
print(json.dumps({"first": first, "second": up.sync_every}))
"""


def test_mirroring_takes_at_most_its_share_of_the_uploaders_time(env: Blob, tmp_path: Path) -> None:
    folder = _run_folder(tmp_path, "share-run", files=1)
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            MIRROR_SHARE_SCRIPT,
            str(REPO / "examples" / "harness"),
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    waits = json.loads(p.stdout.strip().splitlines()[-1])
    # Two files went up (progress.csv, the TensorBoard file; not the checkpoint) in >= 0.8 s:
    # the next mirror waits >= 0.8 s / MIRROR_SHARE (16 s), longer than the usual interval ...
    assert _listing(env, "share-run") == ["events.out.tfevents.1.host", "progress.csv"]
    assert waits["first"] >= 0.8 / blobsync.MIRROR_SHARE > blobsync.SYNC_INTERVAL_S, waits
    # ... and a quick one (nothing changed) brings it back to the usual interval.
    assert waits["second"] == blobsync.SYNC_INTERVAL_S, waits


AN_HOUR_AGO = time.time() - 3600


def _expired_token_answer(blob: Blob) -> str:
    """A storage token that expired 50 minutes ago (as a VM whose clock is off gets them)."""
    return token_answer(blob, STORAGE_RESOURCE, AN_HOUR_AGO, 600)


@pytest.fixture
def expired(env: Blob) -> Iterator[Blob]:
    """The metadata service hands out storage tokens that have already expired."""
    faults = answer_tokens_with(env, _expired_token_answer(env))
    try:
        yield env
    finally:
        faults.unlink()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "no token",
            "results store: no storage token for the managed identity not-attached from the "
            "metadata service ({imds}): HTTP 400 Identity not found",
        ),
        (
            "missing container",
            "results store: the container {url}/missing does not exist (the deployment makes "
            "it; check the storage account and container name)",
        ),
        (
            "refused",
            "results store: storage refused reading the container {url}/results (403 "
            "AuthenticationFailed): the identity {client} needs the role Storage Blob Data "
            "Contributor on {url}/results",
        ),
        (
            "expired",
            "results store: no usable storage token for the managed identity {client} from the "
            "metadata service ({imds}): it expired at {expired_at}, before it was used (is this "
            "machine's clock right?)",
        ),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line_and_training_goes_on(
    env: Blob,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    case: str,
    expected: str,
) -> None:
    if case == "no token":
        monkeypatch.setenv(blobsync.CLIENT_ID_ENV, "not-attached")
    elif case == "missing container":
        monkeypatch.setenv(blobsync.URL_ENV, f"{env.url}/missing")
    else:
        request.getfixturevalue(case)
    run = f"run-{case.replace(' ', '-')}-{os.getpid()}"
    folder = _run_folder(tmp_path, run)
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    up, lines = start_uploader(folder)
    found = up.store
    # The trainer's calls return whether or not the helper is still there.
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    up.sync()
    assert not up.finish(60)
    assert lines[1:] == [
        expected.format(
            imds=env.imds.url,
            url=env.url,
            client=CLIENT_ID,
            expired_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(AN_HOUR_AGO) + 600)),
        ),
    ], lines
    assert not up.alive()
    after = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if not p.name.startswith(".uploader")
    )
    assert after == before
    # The helper said it and ended (exit 3), not aborted (pyarrow's SIGABRT) with a traceback.
    assert "Traceback" not in (folder / store.HELPER_LOG).read_text()
    assert _listing(env, run) == []
    if case != "missing container":
        with pytest.raises(StoreError) as e:
            store.fetch_latest(found, run, timeout=60)
        assert f"results store: {e.value}" == lines[1]


def _train(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "cartpole" / "train.py"),
            "--train-batch-size",
            "500",
            "--stop-reward",
            "none",
            "--num-env-runners",
            "0",
            *args,
        ],
        env={
            **env,
            "RAY_ADDRESS": "local",  # a Ray of its own, not one another test left running
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "examples"), str(REPO / "examples" / "cartpole")]
            ),
        },
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def _result(stdout: str) -> dict[str, object]:
    line = [x for x in stdout.splitlines() if x.startswith("RESULT ")][-1]
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    return result


@pytest.mark.slow
def test_a_run_resumes_from_the_store_when_its_folder_is_gone(env: Blob, tmp_path: Path) -> None:
    """One real (tiny) CartPole run mirrored to the store, its folder deleted as with the head's
    disk, then ``--resume`` of its id on a fresh results root: the counters go on."""
    run = f"cartpole-stored-{os.getpid()}"
    first = _train(
        "--max-iterations", "2", "--checkpoint-every", "1",
        "--results-dir", str(tmp_path / "old-head" / run),
        env=dict(os.environ),
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    before = _result(first.stdout)
    assert f"results store: all uploaded to {env.url}/results/{run}" in first.stdout
    assert "Traceback" not in first.stdout
    pointer = json.loads(get_blob(env, f"{run}/latest.json")[1])
    assert (pointer["checkpoint"], pointer["iteration"]) == ("checkpoints/000002", 2)
    stored_rows = get_blob(env, f"{run}/progress.csv")[1].decode().splitlines()
    assert len(stored_rows) == 3  # header + two iterations
    # The head and its disk are gone; a new head's results root is empty.
    old = (tmp_path / "old-head" / run / "progress.csv").read_text()
    subprocess.run(["rm", "-rf", str(tmp_path / "old-head")], check=True)
    second = _train(
        "--max-iterations", "3", "--resume", run,
        "--results-dir", str(tmp_path / "new-head" / f"resumed-{os.getpid()}"),
        env=dict(os.environ),
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    after = _result(second.stdout)
    assert f"resumed from {env.url}/results/{run}: iteration 2, env steps " in second.stdout
    assert after["iterations"] == 3
    assert after["resumed_from"] == f"{env.url}/results/{run}"
    assert isinstance(after["env_steps"], int) and isinstance(before["env_steps"], int)
    assert after["env_steps"] > before["env_steps"]
    rows = (
        (tmp_path / "new-head" / f"resumed-{os.getpid()}" / "progress.csv").read_text().splitlines()
    )
    assert rows[:3] == old.splitlines()  # the earlier run's rows carried over
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3"]
    # The resumed run is mirrored under its own id; the temporary copy is gone.
    resumed = f"{env.url}/results/resumed-{os.getpid()}"
    assert f"results store: all uploaded to {resumed}" in second.stdout, second.stdout[-3000:]
    assert json.loads(get_blob(env, f"resumed-{os.getpid()}/latest.json")[1])["iteration"] == 3
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"resume-{run}-*"))


def test_a_store_lost_mid_run_is_one_line_and_the_run_ends_normally(
    env: Blob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container goes away after the first checkpoint (deleted, as by a teardown): the next
    checkpoint is not published, said once, and the end of the run says uploads failed."""
    container = f"lost{os.getpid()}"
    assert blob_request(env, "PUT", f"{container}?restype=container", storage_token(env))[0] == 201
    monkeypatch.setenv(blobsync.URL_ENV, f"{env.url}/{container}")
    run = "run-lost"
    folder = _run_folder(tmp_path, run)
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    _wait(lambda: up.published, "the first checkpoint's pointer")
    assert (
        blob_request(env, "DELETE", f"{container}?restype=container", storage_token(env))[0] == 202
    )
    up.checkpoint(folder / "checkpoint", {"iteration": 4, "env_steps": 400})
    up.sync()
    assert not up.finish(60)
    assert lines[2:] == [
        f"results store: checkpoint 000004 not published: the container {env.url}/{container} "
        f"does not exist (uploading checkpoints/000004)",
        f"results store: uploading ended with 1 failed upload(s), said above; the local run "
        f"folder {folder} has every result",
    ], lines
    assert [p["iteration"] for p in up.published] == [2]
    assert (folder / "checkpoint" / "harness.json").is_file()


def test_a_network_blip_mid_checkpoint_never_publishes_a_checkpoint_that_does_not_restore(
    env: Blob, tmp_path: Path
) -> None:
    """Azurite goes away for a few seconds while a checkpoint's files go up, then comes back on
    the same port with the same data: the checkpoint is published by a retry or said in one line,
    and latest.json names a checkpoint that restores either way."""
    run = f"run-blip-{os.getpid()}"
    folder = _run_folder(tmp_path, run, files=2)
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    _wait(lambda: up.published, "the first checkpoint's pointer")
    second = _second_checkpoint_under_way(up, tmp_path, 200)
    env.stop()
    try:
        time.sleep(3)
    finally:
        env.start()
    assert up.finish(300), lines
    # Published by a retry (blobsync.RETRY_DELAYS_S), said in no line of its own.
    assert lines[1:-1] == [
        f"results store: checkpoint at iteration {i} published as "
        f"{env.url}/results/{run}/checkpoints/{i:06d}"
        for i in (2, 4)
    ], lines
    pointer = json.loads(get_blob(env, f"{run}/latest.json")[1])
    assert (pointer["checkpoint"], len(pointer["files"])) == ("checkpoints/000004", 202)
    restored = latest_checkpoint(store.fetch_latest(up.store, run, timeout=60))
    assert restored.state == {"iteration": 4, "env_steps": 400}
    assert (restored.path / "learner" / "part0199.bin").read_bytes() == (
        second / "learner" / "part0199.bin"
    ).read_bytes()


def test_storage_gone_longer_than_the_retries_is_one_line_and_the_pointer_restores(
    env: Blob, tmp_path: Path
) -> None:
    """Storage gone for longer than the retries: one line, and latest.json names the previous
    checkpoint, which restores."""
    run = f"run-outage-{os.getpid()}"
    folder = _run_folder(tmp_path, run, files=2)
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    _wait(lambda: up.published, "the first checkpoint's pointer")
    env.stop()
    try:
        up.checkpoint(folder / "checkpoint", {"iteration": 4, "env_steps": 400})
        assert not up.finish(300)
    finally:
        env.start()
    tries = len(blobsync.RETRY_DELAYS_S) + 1
    assert lines[2:] == [
        f"results store: checkpoint 000004 not published: uploading checkpoints/000004 failed: "
        f"Fail to get a new connection for: https://127.0.0.1:{env.port}. Could not connect to "
        f"server ({tries} tries)",
        f"results store: uploading ended with 1 failed upload(s), said above; the local run "
        f"folder {folder} has every result",
    ], lines
    restored = latest_checkpoint(store.fetch_latest(up.store, run, timeout=60))
    assert restored.state == {"iteration": 2, "env_steps": 200}
