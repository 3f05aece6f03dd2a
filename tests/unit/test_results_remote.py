"""The driver reads the results store with no cluster (python/driver/store.py): ``runs``,
``download ID --results-url URL`` and ``plot ID --results-url URL`` through the real command
line, against a run that the real harness uploader mirrored to Azurite. Only Azurite and the
fake metadata service run: the driver's DefaultAzureCredential reaches the metadata service
through azure-identity's own override (AZURE_POD_IDENTITY_AUTHORITY_HOST), and
AZURE_TOKEN_CREDENTIALS (azure-identity's own variable) keeps it from trying the developer
credentials of this machine. On loopback, no root (the full-disk case mounts a small tmpfs in
a user namespace of its own)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from blob_support import (
    get_blob,
    laptop_driver,
    laptop_environment,
    put_blob,
    start_uploader,
)
from driver.store import safe_name
from fakes.local_blob import Blob

REPO = Path(__file__).resolve().parents[2]
PROGRESS = "iteration,env_steps,time_total_s,episode_return_mean\n1,100,1.5,20.0\n2,200,3.0,35.5\n"
PART_FILE = "checkpoints/000002/checkpoint/learner/part0001.bin"
RUN_FILES = [
    "checkpoints/000002/checkpoint/harness.json",
    *[f"checkpoints/000002/checkpoint/learner/part{i:04d}.bin" for i in range(3)],
    "checkpoints/000002/progress.csv",
    "events.out.tfevents.1.host",
    "latest.json",
    "progress.csv",
    "summary.json",
]


def _mirrored(tmp_path: Path, run: str) -> Path:
    """A run folder mirrored by the harness's own uploader: one checkpoint published."""
    folder = tmp_path / "head" / run
    (folder / "checkpoint" / "learner").mkdir(parents=True)
    (folder / "progress.csv").write_text(PROGRESS)
    (folder / "events.out.tfevents.1.host").write_bytes(b"\x01" * 300)
    for i in range(3):
        (folder / "checkpoint" / "learner" / f"part{i:04d}.bin").write_bytes(os.urandom(50_000))
    (folder / "checkpoint" / "harness.json").write_text(
        json.dumps({"iteration": 2, "env_steps": 200})
    )
    up, lines = start_uploader(folder)
    up.checkpoint(folder / "checkpoint", {"iteration": 2, "env_steps": 200})
    (folder / "summary.json").write_text('{"iterations": 2}\n')
    assert up.finish(60), lines
    return folder


def _tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_runs_download_and_plot_read_the_store_with_no_cluster(env: Blob, tmp_path: Path) -> None:
    run = f"remote-{os.getpid()}"
    folder = _mirrored(tmp_path, run)
    url = f"{env.url}/results"
    # A newer checkpoint still uploading (no pointer names it), an older one published before,
    # and names a job could plant.
    put_blob(env, f"{run}/checkpoints/000004/checkpoint/harness.json", b"{}")
    put_blob(env, f"{run}/checkpoints/000001/checkpoint/harness.json", b"{}")
    planted = [f"{run}/x/../../y", f"{run}//absolute"]  # a backslash: Azure makes it /
    for name in planted:
        put_blob(env, name, b"planted")

    listed = laptop_driver(env, "runs", "--results-url", url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if x.startswith(f"{run} "))
    assert "checkpoints/000002 (iteration 2)" in line
    as_json = laptop_driver(
        env, "runs", "--json", cwd=tmp_path, extra={"RAYDRIVER_RESULTS_URL": url}
    )
    mine = next(r for r in json.loads(as_json.stdout) if r["id"] == run)
    assert (mine["checkpoint"], mine["iteration"]) == ("checkpoints/000002", 2)
    stored = sum(len(get_blob(env, f"{run}/{n}")[1]) for n in RUN_FILES) + 4 + 2 * len("planted")
    assert mine["size"] == stored

    # download: the plain files and the published checkpoint; nothing else, nothing outside.
    done = laptop_driver(env, "download", run, "--results-url", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    local = tmp_path / "results" / run
    assert _tree(local) == RUN_FILES
    for name in ("progress.csv", "summary.json", "events.out.tfevents.1.host"):
        assert (local / name).read_bytes() == (folder / name).read_bytes()
    part = "checkpoint/learner/part0001.bin"
    assert (local / "checkpoints/000002" / part).read_bytes() == (folder / part).read_bytes()
    assert json.loads((local / "latest.json").read_text())["checkpoint"] == "checkpoints/000002"
    assert done.stderr.splitlines() == [
        f"Downloaded 8 files ({_size(local, RUN_FILES)}) from {url}/{run} to "
        f"results/{run}: checkpoint checkpoints/000002 (iteration 2)",
        "Left out 1 file of older checkpoints (published before; only the one latest.json "
        "names is downloaded)",
        "Left out 1 file of checkpoints not published (newer than latest.json: still "
        "uploading, or their uploader stopped)",
        "Left out 2 blobs whose names are not plain relative paths: '/absolute', 'x/../../y'",
    ]
    assert not list(tmp_path.rglob("*.part"))

    # A truncated file is not taken for the blob's first bytes (only a partial file the driver
    # wrote for this version of the blob is continued: test_a_full_disk_...): downloaded again
    # whole. A symlink planted where a file goes is replaced, not followed.
    target = local / "checkpoints/000002" / part
    whole = target.read_bytes()
    target.write_bytes(b"\x00" * 20_000)  # not the blob's bytes
    outside = tmp_path / "outside.txt"
    outside.write_text("not the store's")
    (local / "summary.json").unlink()
    (local / "summary.json").symlink_to(outside)
    again = laptop_driver(env, "download", run, "--plot", "--results-url", url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[0] == (
        f"Downloaded 2 files (48.8 KB) from {url}/{run} to results/{run}: checkpoint "
        "checkpoints/000002 (iteration 2); 6 already there"
    )
    assert target.read_bytes() == whole
    assert outside.read_text() == "not the store's"
    assert not (local / "summary.json").is_symlink()
    assert (local / "summary.json").read_bytes() == (folder / "summary.json").read_bytes()
    assert not any(p.is_symlink() for p in local.rglob("*"))
    assert again.stderr.splitlines()[-1] == f"Wrote results/{run}/curve.png: 1 run, 2 points"
    assert (local / "curve.png").read_bytes().startswith(b"\x89PNG")

    # plot, from the store's progress.csv.
    drawn = laptop_driver(env, "plot", run, "--results-url", url, cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stderr.splitlines() == [f"Wrote {run}.png: 1 run, 2 points"]
    assert (tmp_path / f"{run}.png").read_bytes().startswith(b"\x89PNG")


def _size(folder: Path, names: list[str]) -> str:
    from driver.progress import human_size

    return human_size(sum((folder / n).stat().st_size for n in names if n != "latest.json"))


def test_blob_names_that_are_not_plain_paths_are_refused() -> None:
    for good in ("progress.csv", "checkpoints/000002/checkpoint/a.bin", "a..b/c"):
        assert safe_name(good), good
    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b", "a\x1b[2J", "a/"):
        assert not safe_name(bad), bad


@pytest.mark.parametrize(
    "case", ["not a container URL", "missing container", "no credential", "refused", "no run"]
)
def test_bad_input_is_one_line(
    env: Blob, tmp_path: Path, request: pytest.FixtureRequest, case: str
) -> None:
    url = f"{env.url}/results"
    extra: dict[str, str] = {}
    run = "never-ran"
    expected = {
        "not a container URL": (
            "error: expected the results container's URL, "
            "https://ACCOUNT.blob.core.windows.net/CONTAINER (or Azurite's "
            f"https://HOST:PORT/ACCOUNT/CONTAINER), got '{env.url}'"
        ),
        "missing container": (
            f"error: the container {env.url}/missing does not exist (check the storage account "
            "and container name: the cluster's deployment output results_url)"
        ),
        "no credential": (
            f"error: no Azure credential for reading {url}: sign in with `az login` "
            "(DefaultAzureCredential found none; ManagedIdentityCredential: "
            "ManagedIdentityCredential authentication unavailable, no response from the IMDS "
            "endpoint. Token request error: (invalid_request) Identity not found)"
        ),
        "refused": (
            "error: storage refused {doing} (403 AuthenticationFailed): "
            "your Azure identity needs the role Storage Blob Data Reader (or Contributor) on "
            + url
            + ", and the storage account must let your address in"
        ),
        "no run": f"error: no run never-ran in {url} (see `runs` for the runs there)",
    }[case]
    if case == "not a container URL":
        url = env.url
    elif case == "missing container":
        url = f"{env.url}/missing"
    elif case == "no credential":
        extra["AZURE_CLIENT_ID"] = "not-attached"
    elif case == "refused":
        request.getfixturevalue("refused")
    doing = {
        "download": f"reading {run}/latest.json",
        "plot": f"reading {run}/progress.csv",
        "runs": f"listing {url}",
    }
    for verb in ("download", "plot", "runs"):
        args = [verb, run] if verb != "runs" else [verb]
        done = laptop_driver(env, *args, "--results-url", url, cwd=tmp_path, extra=extra)
        if verb == "runs" and case == "no run":
            assert done.returncode == 0 and f"{run} " not in done.stdout, done.stderr
            continue
        line = expected.replace("{doing}", doing[verb])
        assert (done.returncode, done.stderr.splitlines()) == (2, [line]), done.stderr
    assert not (tmp_path / "results").exists()


def test_a_full_disk_is_one_line_and_the_next_download_resumes(env: Blob, tmp_path: Path) -> None:
    """The destination is a 64 KiB tmpfs (mounted in a user and mount namespace of the
    driver's own: no root needed, nothing left mounted)."""
    if not shutil.which("unshare"):
        pytest.fail("unshare (util-linux) is needed for the full-disk case")
    run = f"full-{os.getpid()}"
    folder = _mirrored(tmp_path, run)
    url = f"{env.url}/results"
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} && cd {disk} && "
        f"{sys.executable} -m driver download {run} --results-url {url}; echo rc=$?; "
        f"find {disk} -name '*.part' -size +0 | wc -l; "
        f"mount -o remount,size=4m {disk} && "
        f"{sys.executable} -m driver download {run} --results-url {url} 2>&1; echo rc=$?; "
        f"cmp results/{run}/{PART_FILE} {folder / 'checkpoint/learner/part0001.bin'} && echo same"
    )
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "-rm"]
    full = subprocess.run(
        [*unshare, "sh", "-c", script],
        env=laptop_environment(env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = full.stderr.splitlines()
    assert len(lines) == 1, full.stderr
    assert lines[0].startswith(f"error: cannot write results/{run}/checkpoints/000002/")
    assert lines[0].endswith(": No space left on device")
    out = full.stdout.splitlines()
    assert out[:2] == ["rc=2", "1"], full.stdout  # the partial file is kept for a resume
    # Once there is room, the next download goes on from where the partial file stops.
    assert len(out) == 5, full.stdout
    assert out[2].startswith("Downloaded ") and "; 1 resumed; " in out[2], out[2]
    assert out[3:] == ["rc=0", "same"]


def test_runs_without_a_store_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "driver", "runs"],
        env={
            **{k: v for k, v in os.environ.items() if k != "RAYDRIVER_RESULTS_URL"},
            "PYTHONPATH": str(REPO / "python"),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr.splitlines()) == (
        2,
        [
            "error: no results store given: pass --results-url URL or set "
            "RAYDRIVER_RESULTS_URL (the cluster's deployment output results_url)"
        ],
    )
