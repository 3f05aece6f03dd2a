"""What the rehearsal cluster boots from, built once from the registries and cached.

- a Debian 12 root filesystem that stands in for a cloud image: minimal Debian with systemd,
  cloud-init, openssh-server, sudo and locales, no apt lists, the /etc/hosts a cloud image has,
  and a cloud-init configuration that plays Azure's part (NoCloud datasource, admin user
  ``azureuser`` with the seeded SSH key, password login off);
- the pinned torch wheel for the containers' Python (Debian 12: CPython 3.11) in an index of its
  own (every other package reaches the nodes through the caching mirrors of
  :mod:`nodekit.rehearsal.mirrors`).

Each piece is keyed by a hash of its recipe, so a change rebuilds only what moved.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from driver import layout
from driver.errors import DriverError
from driver.progress import Progress
from nodekit import render
from nodekit.rehearsal.system import mount_overlay, run

SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_INCLUDE = ("systemd", "systemd-sysv", "dbus", "iproute2", "ca-certificates")
# cloud-init cannot go into --include (debootstrap fails); it is installed in a second step.
IMAGE_PACKAGES = ("cloud-init", "openssh-server", "sudo", "locales")
ADMIN_USER = layout.ADMIN_USER
IMAGE_CLOUD_CFG = f"""\
# Rehearsal image: the NoCloud seed stands in for Azure's datasource, which provides the admin
# user and its SSH key and turns password login off (disable_password_authentication = true).
datasource_list: [ NoCloud, None ]
system_info:
  default_user:
    name: {ADMIN_USER}
    lock_passwd: true
    groups: [sudo]
    sudo: ["ALL=(ALL) NOPASSWD:ALL"]
    shell: /bin/bash
ssh_pwauth: false
# Azure's DNS resolves the VM's own hostname; the rehearsal network has no DNS, so /etc/hosts does.
manage_etc_hosts: localhost
"""
ETC_HOSTS = """\
127.0.0.1\tlocalhost
::1\t\tlocalhost ip6-localhost ip6-loopback
ff02::1\t\tip6-allnodes
ff02::2\t\tip6-allrouters
"""
# The containers' Python: Debian 12 ships CPython 3.11 (x86_64 or aarch64, like the host).
PYTHON_VERSION = "3.11"
MANYLINUX = ("manylinux_2_36", "manylinux_2_28", "manylinux_2_17", "manylinux2014")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path, busy: Callable[[], object] | None = None) -> Iterator[None]:
    """One builder at a time per cache folder (a test run and a user may share it); ``busy``
    is called once if another holds the lock, before waiting for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is not None:
                busy()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _overlay(lower: Path, scratch: Path) -> Iterator[Path]:
    """A throwaway writable view of ``lower`` (so building the mirror leaves the image as is)."""
    upper, work, merged = scratch / "upper", scratch / "work", scratch / "merged"
    for d in (upper, work, merged):
        d.mkdir(parents=True)
    mount_overlay(lower, upper, work, merged, "mounting an overlay of the image")
    try:
        yield merged
    finally:
        run(["umount", str(merged)], check=False)


def _chroot(root: Path, script: str, what: str, timeout: float = 1800) -> None:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C",
        "HOME": "/root",
    }
    run(
        ["chroot", str(root), "/bin/bash", "-euo", "pipefail", "-c", script],
        what=what,
        env=env,
        timeout=timeout,
    )


def _no_service_starts(root: Path) -> None:
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\n# no service starts while the image is built\nexit 101\n")
    policy.chmod(0o755)


class ImageCache:
    """The cache folder: ``rootfs-<key>/``, ``serve/debian/``, ``serve/{simple,files}/``."""

    def __init__(self, root: Path, mirror: str = DEBIAN_MIRROR) -> None:
        self.root = root
        self.mirror = mirror
        self.serve = root / "serve"
        self.lock = root / ".lock"

    # -- root filesystem -------------------------------------------------------------------
    @property
    def rootfs_key(self) -> str:
        return _key(SUITE, self.mirror, BASE_INCLUDE, IMAGE_PACKAGES, IMAGE_CLOUD_CFG, ETC_HOSTS)

    @property
    def rootfs(self) -> Path:
        return self.root / f"rootfs-{self.rootfs_key}"

    def _waiting(self, progress: Progress) -> Callable[[], object]:
        return lambda: progress(
            f"another `up` or `prepare` is building what {self.root} caches; waiting"
        )

    def ensure_rootfs(self, progress: Progress) -> Path:
        with _locked(self.lock, self._waiting(progress)):
            if (self.rootfs / ".complete").exists():
                return self.rootfs
            progress(f"building the Debian 12 image (debootstrap from {self.mirror}, ~2 min)")
            tmp = self.root / f".rootfs-{self.rootfs_key}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_INCLUDE)}",
                    SUITE,
                    str(tmp),
                    self.mirror,
                ],
                what="debootstrap",
                timeout=1800,
            )
            shutil.copy("/etc/resolv.conf", tmp / "etc/resolv.conf")
            _no_service_starts(tmp)
            _chroot(
                tmp,
                "apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                + " ".join(IMAGE_PACKAGES)
                + " >/dev/null"
                + " && sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen"
                + " && locale-gen >/dev/null && update-locale LANG=en_US.UTF-8"
                + " && apt-get clean && rm -rf /var/lib/apt/lists/*",
                what="installing cloud-init and sshd into the image",
            )
            (tmp / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
            (tmp / "usr/sbin/policy-rc.d").unlink()
            (tmp / "etc/resolv.conf").unlink()
            (tmp / "etc/machine-id").write_text("")  # each container gets its own at boot
            # What a Debian cloud image carries (debootstrap writes none): localhost resolves,
            # and cloud-init adds the VM's own name (manage_etc_hosts).
            (tmp / "etc/hosts").write_text(ETC_HOSTS)
            (tmp / "etc/cloud/cloud.cfg.d/90-rehearsal.cfg").write_text(IMAGE_CLOUD_CFG)
            (tmp / ".complete").write_text("")
            shutil.rmtree(self.rootfs, ignore_errors=True)
            tmp.rename(self.rootfs)
            return self.rootfs

    def image_python(self) -> str:
        """The image's Python version (major.minor), read from the image itself."""
        p = run(
            [
                "chroot",
                str(self.rootfs),
                "python3",
                "-c",
                "import sys; print('%d.%d' % sys.version_info[:2])",
            ],
            what="image python",
        )
        return p.stdout.strip()

    # -- torch -----------------------------------------------------------------------------
    @property
    def torch_index(self) -> Path:
        """A one-package index (PEP 503) served on the bridge: ``simple/torch/``."""
        return self.root / "torch-index"

    def ensure_torch(
        self, torch_requirement: str, torch_index_url: str, progress: Progress
    ) -> Path:
        """The pinned torch wheel for the containers' Python, indexed on its own.

        Everything else reaches the nodes through the PyPI mirror; torch comes from PyTorch's
        index on Azure (TORCH_INDEX_URL), which this host may not reach: pip fetches the one
        wheel from there or finds it in its own find-links.
        """
        serve = self.torch_index
        marker = serve / f".complete-{_key(torch_requirement, torch_index_url)}"
        with _locked(self.lock, self._waiting(progress)):
            if marker.exists():
                return serve
            files = serve / "files"
            files.mkdir(parents=True, exist_ok=True)
            pyver = self.image_python()
            machine = os.uname().machine
            progress(f"downloading torch ({torch_requirement}) for Python {pyver}")
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--dest",
                    str(files),
                    "--no-deps",
                    "--only-binary=:all:",
                    f"--python-version={pyver}",
                    "--implementation=cp",
                    f"--abi=cp{pyver.replace('.', '')}",
                    *[f"--platform={tag}_{machine}" for tag in MANYLINUX],
                    "--retries",
                    "1",
                    "--index-url",
                    torch_index_url,
                    torch_requirement,
                ],
                what="downloading torch",
                timeout=3600,
            )
            write_simple_index(serve)
            marker.write_text(torch_requirement + "\n")
            return serve


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_simple_index(serve: Path) -> int:
    """(Re)write ``serve/simple/`` as a PEP 503 index of every wheel in ``serve/files/``."""
    projects: dict[str, list[tuple[str, str]]] = {}
    for wheel in sorted((serve / "files").glob("*.whl")):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        projects.setdefault(_normalize(wheel.name.split("-")[0]), []).append((wheel.name, digest))
    simple = serve / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    simple.mkdir(parents=True)
    for name, wheels in projects.items():
        (simple / name).mkdir()
        links = "".join(
            f'<a href="../../files/{html.escape(f)}#sha256={d}">{html.escape(f)}</a><br>\n'
            for f, d in wheels
        )
        (simple / name / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"
        )
    links = "".join(f'<a href="{n}/">{n}</a><br>\n' for n in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return len(projects)


@dataclass(frozen=True)
class NodeRequirements:
    """What the rendered documents make a node install, read back from the documents."""

    os_packages: list[str]
    requirements: list[str]
    """Top-level pip requirements (requirements.txt), with the installer (uv)."""
    lock: str
    """The hashed lock (requirements.lock, decompressed)."""


def document_requirements(documents: dict[str, str]) -> NodeRequirements:
    """From rendered documents: OS packages, pip requirements (with uv) and the lock."""
    packages: set[str] = set()
    reqs: set[str] = set()
    locks: set[str] = set()
    for text in documents.values():
        for path, content in render.document_files(text).items():
            if path == layout.OS_PACKAGES:
                packages.update(ln.strip() for ln in content.splitlines() if ln.strip())
            if path.endswith("/requirements.txt"):
                reqs.update(ln.strip() for ln in content.splitlines() if ln.strip())
            if path.endswith("/requirements.lock"):
                locks.add(content)
            uv = re.search(r'"uv==([^"]+)"', content)
            if uv:
                reqs.add(f"uv=={uv.group(1)}")
    if len(locks) != 1:
        raise DriverError(f"the documents carry {len(locks)} different locks, expected one")
    return NodeRequirements(sorted(packages), sorted(reqs), locks.pop())
