"""The nodes' way to packages, on the bridge: the pinned torch wheel's index (an HTTP server
of the cached index) and the caching mirrors of the Debian archive and of PyPI
(:mod:`nodekit.rehearsal.mirrors`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from driver.errors import DriverError
from nodekit.rehearsal import mirrors
from nodekit.rehearsal.services import PORT_WAIT_S, Context, port, wait_for_port
from nodekit.rehearsal.state import State

PROXPI_LAUNCHER = (
    "import sys\nfrom proxpi.server import app\n"
    "app.run(host=sys.argv[1], port=int(sys.argv[2]), threaded=True)\n"
)


TORCH_INDEX_HOST = "torch-index.rehearsal.internal"
"""The torch index's name on every cluster's bridge, as Azure's DNS resolves PyTorch's index:
each node's and the bake's ``/etc/hosts`` map it to the bridge's host address
(:func:`etc_hosts`). The URL is then the same on every cluster with the same ``--http-port``
(the tests' clusters), and TORCH_INDEX_URL, part of the install digest, lets them share one
node image: every cluster serves the same cached index (``ImageCache.torch_index``)."""


def torch_index_url(state: State) -> str:
    """TORCH_INDEX_URL as the nodes see it (by name)."""
    return f"http://{TORCH_INDEX_HOST}:{port(state, 'packages')}/simple/"


def etc_hosts(state: State, hosts: str) -> str:
    """``hosts`` (a node's /etc/hosts) with the torch index's name on this bridge."""
    return hosts.rstrip("\n") + f"\n{state.host_ip}\t{TORCH_INDEX_HOST}\n"


def pip_index_url(state: State) -> str:
    return f"http://{state.host_ip}:{port(state, 'pypi')}/index/"


def apt_source(state: State, upstream: str) -> str:
    """The APT_SOURCE line: ``upstream`` (the Debian archive) through the apt mirror."""
    return mirrors.apt_source(state.host_ip, port(state, "apt"), upstream)


def mirror_cache(base: Path, cluster: str) -> Path:
    """Kept across ``down``: the next ``up`` of this cluster finds its packages there."""
    return base / "cache" / "mirrors" / cluster


PARTIAL_SUFFIX = ".proxpi-partial"
"""What proxpi names a file it is still downloading (it renames it once complete)."""


def seed_pypi_mirror(base: Path, cluster: str) -> int:
    """Link every complete file of the other clusters' PyPI mirror caches that this cluster's
    lacks into it (hard links: no copy, no space), before its proxpi starts and reads its cache:
    a package that one cluster (or ``rehearse prepare --bake``) fetched is not fetched again by
    the next. The number of files linked. proxpi renames a file into place only once it is
    complete, so no half-written one is taken; the Debian mirror's cache (apt-cacher-ng writes
    in place) is left to each cluster."""
    own = mirror_cache(base, cluster) / "pypi"
    linked = 0
    for other in sorted((base / "cache" / "mirrors").glob("*/pypi")):
        if other == own:
            continue
        for path in other.rglob("*"):
            if not path.is_file() or path.name.endswith(PARTIAL_SUFFIX):
                continue
            target = own / path.relative_to(other)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except FileExistsError:
                continue
            except OSError:  # another file system, or the file went meanwhile: leave it
                continue
            linked += 1
    return linked


def start_torch_index(ctx: Context, index: Path) -> None:
    """Serve ``index`` (a PEP 503 tree with ``simple/``) over HTTP on the bridge."""
    state = ctx.state
    log = open(ctx.dir / "http.log", "wb")  # noqa: SIM115 - owned by the server process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            state.host_ip,
            "--directory",
            str(index),
            str(ctx.port("packages")),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    state.http_pid = proc.pid
    ctx.store.record(state, f"pid:{proc.pid}")
    url = f"http://{state.host_ip}:{ctx.port('packages')}/simple/"
    deadline = time.monotonic() + PORT_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except OSError as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DriverError(
                    f"the package server on {state.host_ip}:{state.http_port} did not start: {e}"
                ) from None
            time.sleep(0.3)


def start_mirrors(ctx: Context, proxpi: Path) -> None:
    """apt-cacher-ng and proxpi (``proxpi``: its tool environment's python) on the bridge."""
    apt_port, pypi_port = ctx.port("apt"), ctx.port("pypi")
    cache = mirror_cache(ctx.base, ctx.name)
    seed_pypi_mirror(ctx.base, ctx.name)
    pid = mirrors.start_apt_cacher(
        ctx.host,
        apt_port,
        cache / "apt",
        ctx.dir / "apt-cacher-ng",
        ctx.dir / "apt-cacher-ng.log",
    )
    ctx.store.record(ctx.state, f"pid:{pid}")
    # The launcher lives in the cluster folder, so `down` finds the process by it.
    launcher = ctx.dir / "pypi-mirror.py"
    launcher.write_text(PROXPI_LAUNCHER)
    env_pid = mirrors.start_proxpi(
        proxpi, ctx.host, pypi_port, cache / "pypi", ctx.dir / "pypi-mirror.log", launcher
    )
    ctx.store.record(ctx.state, f"pid:{env_pid}")
    wait_for_port(ctx.host, apt_port, "the apt mirror (apt-cacher-ng)", pid=pid)
    wait_for_port(ctx.host, pypi_port, "the PyPI mirror (proxpi)", pid=env_pid)
