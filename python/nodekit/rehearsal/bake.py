"""The rehearsal's node image: the bootstrap's install phase baked once, under every node's disk.

As Azure Image Builder runs ``cloud-init/rendered/install.sh`` on the stacks' base image, the
rehearsal runs it in a container (systemd-nspawn, not booted) on an overlay of the cached Debian
root filesystem, in a network namespace on the cluster's bridge: it reaches the package mirrors
and the torch index exactly as the nodes do. What the install wrote (the overlay's upper folder)
is kept as an image layer, ``<cache>/images/<digest>/tree``, keyed by the install digest the
nodes' bootstrap expects: :func:`nodekit.render.install_digest` of the documents'
``INSTALL_INPUTS_DIGEST`` and the cluster's install values. Every node's disk is then an overlay
of ``tree`` over the root filesystem; its bootstrap finds the install marker with its own digest
and skips the install ("image" in its ready marker). A node expecting another digest (other
documents, other extras) installs at boot as without an image ("fresh").

A layer is built under a lock of its own (clusters share the cache) and only the newest
:data:`KEEP` layers that no mounted disk uses are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from driver import layout
from driver.errors import DriverError
from driver.procs import pid_alive, spawn
from driver.progress import Progress
from nodekit import render
from nodekit.rehearsal.image import _locked
from nodekit.rehearsal.nodes import children
from nodekit.rehearsal.state import Node
from nodekit.rehearsal.system import mount_overlay, unmount_under

KEEP = 4
"""Complete image layers kept in the cache (the newest used); one that a mounted disk or a
cluster's state names is never removed."""
BAKE_TIMEOUT_S = 1800
INPUTS_RE = re.compile(r"^INSTALL_INPUTS_DIGEST=([0-9a-f]{64})$", re.M)
INSIDE = "/run/rehearsal-bake"
"""Where the container sees the customizer and its values (a tmpfs: nothing of it stays)."""
LEFT_OUT = ("var/cache/ray-cluster/uv", "var/cache/apt/archives", "root/.cache")
"""Download caches the install leaves: not part of the image (the mirrors keep the files)."""


def inputs_digest(documents: dict[str, str]) -> str:
    """The render-time digest of the install phase that every document's bootstrap carries."""
    found = set()
    for role, text in documents.items():
        bootstrap = render.document_files(text).get(render.BOOTSTRAP_PATH, "")
        m = INPUTS_RE.search(bootstrap)
        if m is None:
            raise DriverError(f"the {role} document's bootstrap carries no INSTALL_INPUTS_DIGEST")
        found.add(m.group(1))
    if len(found) != 1:
        raise DriverError("the documents' bootstraps carry different install digests")
    return found.pop()


def install_values(deploy_values: dict[str, str]) -> dict[str, str]:
    """The deploy-time values the install phase reads."""
    return {n: deploy_values[n] for n in render.INSTALL_VALUE_NAMES}


def install_digest(documents: dict[str, str], deploy_values: dict[str, str]) -> str:
    """The install digest a node booted with these documents and values expects."""
    return render.install_digest(inputs_digest(documents), deploy_values)


class Images:
    """``<cache>/images/``: one folder per install digest, ``tree/`` the layer. ``clusters``:
    the folder of the clusters whose state may name a layer."""

    def __init__(self, root: Path, clusters: Path | None = None) -> None:
        self.root = root
        self.clusters = clusters

    def folder(self, digest: str) -> Path:
        return self.root / digest[:16]

    def layer(self, digest: str) -> Path:
        return self.folder(digest) / "tree"

    def complete(self, digest: str) -> bool:
        return (self.folder(digest) / ".complete").exists()

    def marker(self, digest: str) -> dict | None:
        """The install marker the layer holds."""
        with contextlib.suppress(OSError, ValueError):
            return json.loads((self.layer(digest) / layout.INSTALL_MARKER.lstrip("/")).read_text())
        return None

    @contextlib.contextmanager
    def locked(self, digest: str, progress: Progress | None = None) -> Iterator[None]:
        def busy() -> None:
            if progress is not None:
                progress(f"node image {digest[:12]}: being baked by another `up`; waiting")

        with _locked(self.root / f"{digest[:16]}.lock", busy):
            yield

    def wait_for_bakes(self, progress: Progress | None = None) -> None:
        """Return once no layer is being baked (by ``rehearse prepare --bake`` or another
        ``up``): an ``up`` then starts its mirrors with what that bake fetched (see
        :func:`~nodekit.rehearsal.services.packages.seed_pypi_mirror`) and finds its image."""
        for lock in sorted(self.root.glob("*.lock")):

            def busy(digest: str = lock.stem) -> None:
                if progress is not None:
                    progress(f"node image {digest[:12]}: being baked; waiting for it first")

            with _locked(lock, busy):
                pass

    def ensure(
        self,
        digest: str,
        rootfs: Path,
        customizer: Path,
        values: dict[str, str],
        etc_hosts: str,
        bake_node: Callable[[], Node],
        progress: Progress,
    ) -> Path:
        """The layer for ``digest``: baked earlier, or now by :func:`bake` in the node that
        ``bake_node`` makes (a namespace on the bridge, a folder in the cluster folder); its
        ``tree``. Another cluster baking the same digest is waited for (clusters whose
        install values agree share one layer)."""
        with self.locked(digest, progress):
            if self.complete(digest):
                os.utime(self.folder(digest) / ".complete")
                progress(f"node image {digest[:12]} baked earlier: {self.layer(digest)}")
                return self.layer(digest)
            t0 = time.monotonic()
            progress(
                f"baking the node image (install digest {digest[:12]}): {customizer.name} in "
                f"a container on the bridge"
            )
            scratch = self.root / f".{digest[:16]}.bake"
            _clear(scratch)
            try:
                upper = bake(rootfs, scratch, customizer, values, etc_hosts, bake_node(), progress)
                marker = _read_marker(upper)
                if marker is None or marker.get("digest") != digest:
                    raise DriverError(
                        f"the baked install carries digest {(marker or {}).get('digest')}, the "
                        f"documents expect {digest}: {customizer} is not the install phase of "
                        "these documents (run `python -m nodekit render`)"
                    )
                for path in LEFT_OUT:
                    shutil.rmtree(upper / path, ignore_errors=True)
                folder = self.folder(digest)
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                upper.rename(folder / "tree")
                (folder / ".complete").write_text(json.dumps(marker) + "\n")
            finally:
                _clear(scratch)
            progress(
                f"node image {digest[:12]} baked in {time.monotonic() - t0:.0f} s "
                f"(Ray {marker.get('ray_version')}, torch {marker.get('torch_version')})"
            )
            self.prune(keep=digest)
            return self.layer(digest)

    def prune(self, keep: str) -> list[Path]:
        """Remove complete layers beyond the newest :data:`KEEP` (``keep`` stays), except any
        that a mounted disk uses, a cluster's state names or whose lock is held; what went."""
        mounts = Path("/proc/mounts").read_text()
        for state in self.clusters.glob("*/state.json") if self.clusters else []:
            with contextlib.suppress(OSError):
                mounts += state.read_text()
        # Another cluster's `up` may prune at the same time (the test lanes boot clusters side
        # by side): a layer gone between the listing and a look at it is simply gone.
        done = []
        for complete in self.root.glob("*/.complete"):
            with contextlib.suppress(FileNotFoundError):
                done.append((complete.stat().st_mtime, complete))
        done.sort(reverse=True)
        removed = []
        for _, complete in done[KEEP:]:
            folder = complete.parent
            if folder == self.folder(keep) or f"{folder}/" in mounts:
                continue
            with open(self.root / f"{folder.name}.lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue
                if not complete.exists():  # pruned by another meanwhile
                    continue
                complete.unlink()
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        return removed


def _read_marker(upper: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((upper / layout.INSTALL_MARKER.lstrip("/")).read_text())
    return None


def _clear(scratch: Path) -> None:
    """A bake's scratch folder gone, with anything mounted in it."""
    if scratch.exists():
        unmount_under(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def bake(
    rootfs: Path,
    scratch: Path,
    customizer: Path,
    values: dict[str, str],
    etc_hosts: str,
    node: Node,
    progress: Progress,
) -> Path:
    """Run ``customizer`` with ``values`` as root in a container on an overlay of ``rootfs``
    in ``node``'s network namespace; the overlay's upper folder (what the install wrote).
    ``etc_hosts`` is the container's /etc/hosts (bound read-only: not part of the layer).

    The customizer and its values are copied into ``node.dir`` and bound read-only into the
    container, so the container's command line names the cluster folder (``down`` stops it)."""
    upper, work, root = scratch / "upper", scratch / "work", scratch / "root"
    for d in (upper, work, root):
        d.mkdir(parents=True)
    inputs = Path(node.dir)
    inputs.mkdir(parents=True, exist_ok=True)
    shutil.copy(customizer, inputs / "install.sh")
    (inputs / "values.json").write_text(json.dumps(values))
    (inputs / "hosts").write_text(etc_hosts)
    log = inputs / "bake.log"
    mount_overlay(rootfs, upper, work, root, "mounting the image to bake")
    try:
        cmd = [
            "systemd-nspawn",
            "--quiet",
            f"--directory={root}",
            "--register=no",
            "--keep-unit",
            f"--machine={node.netns}",
            f"--network-namespace-path=/run/netns/{node.netns}",
            "--resolv-conf=off",
            "--timezone=off",
            "--link-journal=no",
            "--console=pipe",
            f"--bind-ro={inputs}:{INSIDE}",
            f"--bind-ro={inputs / 'hosts'}:/etc/hosts",
            "--setenv=LC_ALL=C",
            "/bin/bash",
            f"{INSIDE}/install.sh",
            f"{INSIDE}/values.json",
        ]
        proc = spawn(cmd, log)
        node.pid = proc.pid
        deadline = time.monotonic() + BAKE_TIMEOUT_S
        next_note = time.monotonic() + 15
        while proc.poll() is None:
            if time.monotonic() > deadline:
                _kill(proc.pid)
                raise DriverError(
                    f"baking the node image took over {BAKE_TIMEOUT_S} s (log: {log})"
                )
            if time.monotonic() >= next_note:
                progress(f"baking: {_step(log)}")
                next_note = time.monotonic() + 15
            time.sleep(1)
        if proc.returncode != 0:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            raise DriverError(
                f"baking the node image failed (exit {proc.returncode}): "
                f"{tail[-1] if tail else 'no output'} (log: {log})"
            )
    finally:
        if node.pid is not None and pid_alive(node.pid):
            _kill(node.pid)
        unmount_under(scratch)
    return upper


def _step(log: Path) -> str:
    """The install's last announced step, from the bake's log."""
    with contextlib.suppress(OSError):
        steps = re.findall(r"ray-cluster-bootstrap\[install\]: (\w+)\n", log.read_text())
        if steps:
            return steps[-1]
    return "starting"


def _kill(pid: int) -> None:
    for child in children(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, 9)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
