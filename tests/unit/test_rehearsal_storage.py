"""The rehearsal's results storage outlives its cluster (python/nodekit/rehearsal/services/
azurite.py, cluster.py, cli.py): ``up`` gives the nodes its container's URL as RESULTS_URL
(unless ``--no-results-storage``), its data lives outside the cluster folder so that ``down``
keeps it (unless ``--delete-results``), and ``rehearse storage`` serves the kept data on
loopback with the cluster down, with tokens for this machine. No root: Azurite on loopback
(scripts/setup.d/20-azurite.sh), the real command line."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from driver.errors import DriverError
from nodekit.cli import build_parser
from nodekit.rehearsal.cluster import Rehearsal, State
from nodekit.rehearsal.services import Context, azurite
from nodekit.rehearsal.state import StateFile
from rehearsal_support import unit_state
from support import REPO

URL = "https://10.213.0.1:8475/rehearsalresults/results"


def _state(results_url: str = "") -> State:
    return unit_state(results_url=results_url)


def test_the_nodes_get_the_results_containers_url_as_results_url(tmp_path: Path) -> None:
    r = Rehearsal("unit", base=tmp_path)
    assert r.deploy_values(_state(URL))["RESULTS_URL"] == URL
    # up --no-results-storage: none, as a stack's default (results on the head's disk).
    assert r.deploy_values(_state())["RESULTS_URL"] == ""
    # The same container URL up makes: Azurite's account, path style, then the container.
    state = _state()
    assert f"{azurite.url(state)}/{azurite.CONTAINER}" == URL


def test_the_results_storage_lives_outside_the_cluster_folder_per_cluster_name(
    tmp_path: Path,
) -> None:
    r = Rehearsal("unit", base=tmp_path)
    assert r.results_dir == tmp_path / "results" / "unit"
    assert not r.results_dir.is_relative_to(r.dir)  # down's rmtree of the folder keeps it
    assert Rehearsal("other", base=tmp_path).results_dir != r.results_dir


def test_results_storage_is_on_by_default_and_down_keeps_it_unless_asked() -> None:
    parser = build_parser()
    assert parser.parse_args(["rehearse", "up"]).results_storage is True
    assert parser.parse_args(["rehearse", "up", "--no-results-storage"]).results_storage is False
    assert parser.parse_args(["rehearse", "down"]).delete_results is False
    assert parser.parse_args(["rehearse", "down", "--delete-results"]).delete_results is True


def _nodekit(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodekit", *args],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO / "python"),
            "RAYDRIVER_REHEARSAL_DIR": str(base),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_storage_without_kept_data_or_with_a_bad_name_is_one_line(tmp_path: Path) -> None:
    r = _nodekit(tmp_path, "rehearse", "storage", "--name", "gone")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"error: rehearsal cluster 'gone' has no kept results storage "
        f"({tmp_path / 'results' / 'gone'} does not exist)"
    ]
    bad = _nodekit(tmp_path, "rehearse", "storage", "--name", "../x")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


class _Served:
    """``rehearse storage`` running: its URL and the environment it printed."""

    def __init__(self, base: Path, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nodekit", "rehearse", "storage", "--name", name],
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": str(REPO / "python"),
                "RAYDRIVER_REHEARSAL_DIR": str(base),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        lines = [self.proc.stdout.readline() for _ in range(3)]
        assert lines[0].startswith(f"results storage of rehearsal cluster {name!r}"), (
            lines,
            self.proc.stderr.read() if self.proc.poll() is not None else "",
        )
        self.url = lines[1].removeprefix("url: ").strip()
        self.env = dict(kv.split("=", 1) for kv in lines[2].removeprefix("env: ").split())

    def token(self) -> str:
        query = urllib.parse.urlencode(
            {
                "api-version": "2018-02-01",
                "resource": "https://storage.azure.com",
                "client_id": self.env["AZURE_CLIENT_ID"],
            }
        )
        request = urllib.request.Request(
            f"{self.env['AZURE_POD_IDENTITY_AUTHORITY_HOST']}/metadata/identity/oauth2/token?"
            f"{query}",
            headers={"Metadata": "true"},
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            token: str = json.load(r)["access_token"]
        return token

    def request(self, method: str, blob: str, body: bytes | None = None) -> bytes:
        headers = {"Authorization": f"Bearer {self.token()}", "x-ms-version": azurite.API_VERSION}
        if body is not None:
            headers["x-ms-blob-type"] = "BlockBlob"
        request = urllib.request.Request(
            f"{self.url}/{blob}", data=body, method=method, headers=headers
        )
        context = ssl.create_default_context(cafile=self.env["REQUESTS_CA_BUNDLE"])
        with urllib.request.urlopen(request, context=context, timeout=60) as r:
            data: bytes = r.read()
        return data

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def test_storage_serves_the_kept_data_again_and_once(tmp_path: Path) -> None:
    """What one serve wrote, the next serve (with a new certificate, port and token key)
    still has; the container is the cluster's; a second server of the same data is refused;
    the driver reads it with the environment printed."""
    if not os.access(REPO / azurite.BINARY, os.X_OK):
        pytest.fail(f"Azurite is missing: run {azurite.SETUP}")
    kept = tmp_path / "results" / "kept"
    kept.mkdir(parents=True)
    first = _Served(tmp_path, "kept")
    try:
        assert first.url.startswith("https://127.0.0.1:") and first.url.endswith(
            f"/{azurite.ACCOUNT}/{azurite.CONTAINER}"
        )
        # The cluster made the container; here, a fresh data folder: make it as up does.
        azurite.create_container(
            first.url.rsplit("/", 1)[0],
            azurite.CONTAINER,
            first.token(),
            Path(first.env["REQUESTS_CA_BUNDLE"]),
        )
        first.request("PUT", "run1/progress.csv", b"iteration,env_steps\n1,100\n")
        twice = _nodekit(tmp_path, "rehearse", "storage", "--name", "kept")
        assert twice.returncode != 0
        assert twice.stderr.strip().splitlines() == [
            "error: the results storage of 'kept' is being served already (its cluster is up, "
            "or another `rehearse storage` runs): use that one"
        ]
        # Nor does a cluster's up serve it meanwhile.
        cluster = tmp_path / "clusters" / "kept"
        with pytest.raises(
            DriverError, match=r"is being served \(`rehearse storage --name kept`\)"
        ):
            azurite.start(Context("kept", cluster, tmp_path, _state(), StateFile(cluster / "s")))
    finally:
        assert first.stop() == 0
    second = _Served(tmp_path, "kept")
    try:
        assert second.url != first.url or second.env != first.env
        assert second.request("GET", "run1/progress.csv") == b"iteration,env_steps\n1,100\n"
        listed = subprocess.run(
            [sys.executable, "-m", "driver", "runs", "--results-url", second.url],
            cwd=tmp_path,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("AZURE_")},
                "PYTHONPATH": str(REPO / "python"),
                **second.env,
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        assert any(line.startswith("run1 ") for line in listed.stdout.splitlines()), listed
    finally:
        assert second.stop() == 0
    assert not any(p for p in Path("/proc").glob("[0-9]*/cmdline") if _serves(p, kept))


def _serves(cmdline: Path, data: Path) -> bool:
    try:
        return f"--location\0{data}\0" in cmdline.read_bytes().decode(errors="replace")
    except OSError:
        return False
