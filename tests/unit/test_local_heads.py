"""The local default's exposure and ownership: what a local head listens on refuses requests
without the token, its session folder is private, and each Python environment has its own head
(jobs run in the environment of the driver that submitted them)."""

from __future__ import annotations

import http.client
import json
import os
import stat
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from driver.localray import LocalRay, session_pids
from support import REPO, driver_timeout, run_driver


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("heads")
    r = run_driver("local", "start", "--num-cpus", "1", home=home)
    assert r.returncode == 0, r.stderr
    running = LocalRay(home).running()
    assert running is not None
    yield home, running
    run_driver("local", "stop", home=home)


def _listeners(session_id: int) -> list[tuple[str, int]]:
    found = set()
    for pid in session_pids(session_id):
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                found.add((c.laddr.ip, c.laddr.port))
    return sorted(found)


def _answer_without_token(port: int, timeout: float = 5) -> str:
    """What an HTTP request without the token gets: a status, or what went wrong."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs/", timeout=timeout) as r:
            return f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (OSError, ValueError, http.client.HTTPException) as e:  # gRPC, closed, reset
        return type(e).__name__


def test_nothing_answers_without_the_token(head) -> None:  # type: ignore[no-untyped-def]
    _, running = head
    listeners = _listeners(running.session_id)
    assert listeners, "found no listening sockets (the check would prove nothing)"
    ports = {port for _, port in listeners}
    assert running.dashboard_port in ports and running.gcs_port in ports
    # The dashboard/Jobs API is on loopback only.
    assert {ip for ip, port in listeners if port == running.dashboard_port} == {"127.0.0.1"}
    # The dashboard must answer (a loaded machine's dashboard may take its time: 120 s); the
    # gRPC ports may keep a plain HTTP request waiting, and any answer but a 2xx will do there.
    answers = {
        port: _answer_without_token(port, 120 if port == running.dashboard_port else 5)
        for port in sorted(ports)
    }
    assert not [p for p, a in answers.items() if a.startswith("HTTP 2")], answers
    assert answers[running.dashboard_port] == "HTTP 401"
    # No Prometheus endpoints (they take no token): Ray's autoscaler metrics port is closed.
    assert 44217 not in ports


LISTENER_KINDS = {
    "gcs_server": "GCS",
    "raylet": "raylet",
    "ray.util.client.server": "Ray Client server",
    "dashboard/dashboard.py": "dashboard",
    "ray::DashboardAgent": "agent",
    "ray::RuntimeEnvAgent": "agent",
    # A worker the raylet has just started listens before it renames itself ray::IDLE.
    "ray/_private/workers/default_worker.py": "worker",
}
"""A piece of a listening process's command line, and the name docs/driver.md gives that kind."""


def _exposure_paragraph() -> str:
    text = " ".join((REPO / "docs" / "driver.md").read_text().split())
    start = text.index("What a local head exposes:")
    return text[start : text.index("For a cluster on Azure", start)]


def test_the_docs_name_every_kind_of_process_that_listens(head) -> None:  # type: ignore[no-untyped-def]
    """docs/driver.md's list of what a local head exposes covers every process of it that listens
    (the Ray Client server was missing): a new kind of listener fails here until it is named."""
    _, running = head
    required = {"GCS", "raylet", "dashboard", "Ray Client server"}
    deadline = time.monotonic() + 300  # the Ray Client server may listen a while after the rest
    while True:
        kinds = set()
        for pid in session_pids(running.session_id):
            try:
                proc = psutil.Process(pid)
                listening = any(
                    c.status == psutil.CONN_LISTEN for c in proc.net_connections(kind="tcp")
                )
                cmdline = " ".join(proc.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if listening:
                found = [name for piece, name in LISTENER_KINDS.items() if piece in cmdline]
                kinds.add(
                    found[0] if found else "worker" if cmdline.startswith("ray::") else cmdline
                )
        if required <= kinds or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert required <= kinds, kinds
    paragraph = _exposure_paragraph()
    assert not [kind for kind in kinds if kind not in paragraph], (kinds, paragraph)


def test_the_gcs_refuses_a_client_without_the_token(head, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, running = head
    code = (
        "from ray._raylet import GcsClient\n"
        f"print(len(GcsClient(address='127.0.0.1:{running.gcs_port}').get_all_node_info(timeout=60)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    for client_env in (
        {"RAY_AUTH_MODE": "disabled"},  # a client that sends no token at all
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "wrong-token-" + "x" * 32},
    ):
        p = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, **client_env, "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode != 0, client_env
        assert "InvalidAuthToken" in p.stderr, (client_env, p.stderr[-500:])


def test_the_session_folder_is_private(head) -> None:  # type: ignore[no-untyped-def]
    _, running = head
    parent = Path(running.temp_dir).parent
    st = os.lstat(parent)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700
    # Ray makes its own folders world-writable; the private parent keeps others out of them.
    assert (Path(running.temp_dir) / "session_latest").exists()


def _second_environment(folder: Path) -> Path:
    """A second virtual environment that sees this one's packages (no reinstall of Ray)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = Path(sysconfig.get_paths()["purelib"])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # An "import" line in a .pth runs: addsitedir also reads that folder's own .pth files
    # (the editable install of this repository is one).
    (folder / "lib" / version / "site-packages" / "borrowed.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n"
    )
    ray = folder / "bin" / "ray"
    ray.write_text(f"#!{folder}/bin/python\nfrom ray.scripts.scripts import main\nmain()\n")
    ray.chmod(0o755)
    return folder / "bin" / "python"


def test_each_python_environment_gets_its_own_head(head, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, first = head
    python = _second_environment(tmp_path / "other-venv")
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("import sys\nprint('PREFIX', sys.prefix)\n")
    env = {**os.environ, "RAYDRIVER_HOME": str(home)}
    try:
        r = subprocess.run(
            [
                str(python),
                "-m",
                "driver",
                "submit",
                "--submission-id",
                "env-2",
                str(job / "train.py"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=driver_timeout(["submit", "train.py"]),
            cwd=tmp_path,
        )
        assert r.returncode == 0, r.stderr
        assert f"PREFIX {tmp_path / 'other-venv'}" in r.stdout  # its own environment's python
        second = LocalRay(home, prefix=str(tmp_path / "other-venv")).running()
        assert second is not None and second.pid != first.pid
        assert LocalRay(home).running() == first  # the first environment's head is untouched
        status = subprocess.run(
            [str(python), "-m", "driver", "local", "status"],
            env=env,
            capture_output=True,
            text=True,
        )
        # the environment by its real path (.venv may be a link, as a fresh clone's is)
        assert f"another local Ray runs for {Path(sys.prefix).resolve()}" in status.stderr
        assert json.loads(
            LocalRay(home, prefix=str(tmp_path / "other-venv")).state_file.read_text()
        )["prefix"] == str((tmp_path / "other-venv").resolve())
    finally:
        subprocess.run([str(python), "-m", "driver", "local", "stop"], env=env, capture_output=True)
