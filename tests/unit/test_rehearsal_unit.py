"""The rehearsal cluster's checks and building blocks that need no containers."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from driver.errors import DriverError
from nodekit import render
from nodekit.rehearsal import system
from nodekit.rehearsal.cluster import Rehearsal
from nodekit.rehearsal.image import document_requirements, write_simple_index
from support import REPO


def test_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.os, "geteuid", lambda: 1000)
    with pytest.raises(DriverError, match=r"needs root .* run it with sudo"):
        system.require_root_linux()


def test_needs_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.sys, "platform", "darwin")
    with pytest.raises(DriverError, match="needs Linux"):
        system.require_root_linux()


def test_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system.os, "geteuid", lambda: 0)  # as root, so the next check runs
    real = system.shutil.which
    monkeypatch.setattr(system.shutil, "which", lambda t: None if t == "debootstrap" else real(t))
    with pytest.raises(DriverError, match=r"apt-get install debootstrap\)"):
        system.require_root_linux()


@pytest.mark.parametrize("name", ["", "UPPER", "has-dash", "waytoolongname", "1st"])
def test_cluster_names_fit_interface_names(name: str) -> None:
    with pytest.raises(DriverError, match="rehearsal name"):
        Rehearsal(name)


@pytest.mark.parametrize("subnet", ["10.0.0.0/30", "fd00::/64", "not-a-net"])
def test_subnets_are_checked(subnet: str) -> None:
    with pytest.raises(DriverError, match="--subnet"):
        Rehearsal("x", subnet=subnet)


def test_a_subnet_overlapping_a_host_route_is_refused() -> None:
    routes = subprocess.run(["ip", "-4", "-o", "route", "show"], capture_output=True, text=True)
    nets = [ln.split()[0] for ln in routes.stdout.splitlines() if ln.split()[0] != "default"]
    assert nets, "this machine has no IPv4 route to overlap"
    taken = ipaddress.ip_network(nets[0], strict=False)
    with pytest.raises(DriverError, match="overlaps the host route"):
        Rehearsal(
            "x", subnet=str(taken.supernet(new_prefix=min(taken.prefixlen, 24)))
        )._check_subnet_free()
    Rehearsal("x", subnet="10.254.254.0/24")._check_subnet_free()  # a free one passes


def test_document_requirements_come_from_the_rendered_documents() -> None:
    docs = {r: (REPO / "cloud-init" / "rendered" / f"{r}.yaml").read_text() for r in render.ROLES}
    needs = document_requirements(docs)
    config = render.load_config()
    assert needs.os_packages == sorted(config["os_packages"])
    for pin in render.cluster_pins().requirements:
        assert pin in needs.requirements
    assert f"uv=={config['uv_version']}" in needs.requirements
    assert set(config["head_packages"]) <= set(needs.requirements)
    assert needs.lock == (REPO / "cloud-init" / "node-lock.txt").read_text()


def test_simple_index_is_one_pip_can_install_from(tmp_path: Path) -> None:
    """The wheelhouse's PEP 503 index, read by pip itself."""
    files = tmp_path / "files"
    files.mkdir()
    wheel = files / "Tiny_Pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tiny_pkg/__init__.py", "VALUE = 42\n")
        z.writestr(
            "Tiny_Pkg-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: Tiny-Pkg\nVersion: 1.0\n",
        )
        z.writestr(
            "Tiny_Pkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr("Tiny_Pkg-1.0.dist-info/RECORD", "")
    assert write_simple_index(tmp_path) == 1
    assert (tmp_path / "simple" / "tiny-pkg" / "index.html").exists()
    target = tmp_path / "installed"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--isolated",
            "--index-url",
            (tmp_path / "simple").as_uri(),
            "--target",
            str(target),
            "tiny-pkg==1.0",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert (target / "tiny_pkg" / "__init__.py").read_text() == "VALUE = 42\n"
