"""The rehearsal's way to the package registries: caching proxies on the host, as the Internet is
on Azure (through the NAT gateway) — but reachable only on the cluster's bridge, with no NAT and
no route out of the containers.

- Debian packages: apt-cacher-ng (Debian's package), one process per cluster, path-based
  (``deb http://HOST:PORT/deb.debian.org/debian bookworm main``): apt still checks the archive's
  signatures with the image's own keyring.
- Python packages: proxpi (PyPI), a caching mirror of PyPI's simple index, run from a tool
  environment of its own; every file a node asks for is fetched once and then served from the
  cache, so a job's ``--pip`` works on the rehearsal as on Azure.
- torch: PyTorch's CPU index is not one the host can always reach, so the host downloads the one
  pinned wheel (pip also finds it in its own find-links) and serves it from a one-package index,
  as TORCH_INDEX_URL does on Azure.

Caches live under ``<base>/cache/mirrors/<cluster name>/`` and survive ``down``, so the next
``up`` of the same cluster is warm.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from driver.errors import DriverError
from driver.procs import spawn
from driver.progress import Progress

PROXPI = "proxpi==1.3.1"
"""The Python caching mirror, pinned; installed in its own environment (its Flask and lxml
have nothing to do with the driver's pins)."""
APT_CACHER_NG = "/usr/sbin/apt-cacher-ng"
DEBIAN_SUITE = "bookworm"


def ensure_proxpi(tools: Path, progress: Progress) -> Path:
    """The tool environment with proxpi; its python."""
    venv = tools / PROXPI.replace("==", "-")
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    tools.mkdir(parents=True, exist_ok=True)
    # Clusters brought up side by side (the test lanes) install it once: the others wait.
    with open(tools / ".proxpi.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            _install_proxpi(venv, progress)
    return python


def _install_proxpi(venv: Path, progress: Progress) -> None:
    python = venv / "bin" / "python"
    progress(f"installing {PROXPI} (the rehearsal's PyPI mirror) into {venv}")
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    for cmd in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PROXPI],
    ):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DriverError(f"installing {PROXPI} failed: {tail[0]}")
    (venv / ".complete").write_text("")


def start_proxpi(python: Path, bind: str, port: int, cache: Path, log: Path, launcher: Path) -> int:
    """proxpi on ``bind:port`` (``launcher`` runs its Flask app), caching files in ``cache``;
    returns its pid."""
    cache.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PROXPI_CACHE_DIR": str(cache),
        "PROXPI_CACHE_SIZE": str(20 * 1024**3),
        # Never redirect a node to the upstream file (it has no route there): wait for the
        # download and serve it from the cache.
        "PROXPI_DOWNLOAD_TIMEOUT": "1800",
        "PROXPI_LOGGING_LEVEL": "WARNING",
    }
    return spawn([str(python), str(launcher), bind, str(port)], log, env).pid


def start_apt_cacher(bind: str, port: int, cache: Path, workdir: Path, log: Path) -> int:
    """apt-cacher-ng on ``bind:port`` with its own (empty) configuration; returns its pid."""
    if not Path(APT_CACHER_NG).exists():
        raise DriverError(
            "the rehearsal cluster needs apt-cacher-ng (apt-get install apt-cacher-ng)"
        )
    conf = workdir / "conf"
    for d in (cache, conf, workdir / "log"):
        d.mkdir(parents=True, exist_ok=True)
    (conf / "acng.conf").write_text("# empty: every setting is on the command line\n")
    cmd = [
        APT_CACHER_NG,
        "-c",
        str(conf),
        "ForeGround=1",
        f"Port={port}",
        f"BindAddress={bind}",
        f"CacheDir={cache}",
        f"LogDir={workdir / 'log'}",
        f"PidFile={workdir / 'pid'}",
        f"SocketPath={workdir / 'socket'}",
        "ExThreshold=365",
    ]
    return spawn(cmd, log).pid


def apt_source(host: str, port: int, mirror: str) -> str:
    """The APT_SOURCE line a node gets: the Debian archive, through the host's cache."""
    upstream = mirror.removeprefix("http://").removeprefix("https://").rstrip("/")
    return f"deb http://{host}:{port}/{upstream} {DEBIAN_SUITE} main"
