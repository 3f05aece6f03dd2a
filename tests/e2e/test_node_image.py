"""The rehearsal's node image (issue 20): ``rehearse up`` bakes the install phase once per install
digest (cloud-init/rendered/install.sh run in a container on the cluster's bridge) and boots
every node from it; a node whose bootstrap expects another digest installs as without an image.

On the session's cluster (conftest.py), which boots from the image.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from driver import layout
from nodekit import render
from nodekit.rehearsal import bake
from nodekit.rehearsal.cluster import Rehearsal
from rehearsal_cluster import REPO, RehearsalCluster

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]


def _documents() -> dict[str, str]:
    return {r: (REPO / "cloud-init" / "rendered" / f"{r}.yaml").read_text() for r in render.ROLES}


def _ray_nodes(rehearsal: RehearsalCluster) -> dict[str, str]:
    """Each address's state in Ray: ALIVE if any node at it is (a worker removed earlier, e.g.
    the bootstrap benchmark's, stays listed DEAD at the address the next worker gets)."""
    code, out, err = rehearsal.ssh(rehearsal.head_ip, "ray list nodes --format json")
    assert code == 0, err
    states: dict[str, str] = {}
    for n in json.loads(out):
        if states.get(n["node_ip"]) != "ALIVE":
            states[n["node_ip"]] = n["state"]
    return states


def test_the_cluster_boots_from_the_image_baked_for_its_install_digest(
    rehearsal: RehearsalCluster,
) -> None:
    """The image layer holds the install marker with the digest the documents and this
    cluster's values give; every node's disk has it under its own writes, found the install
    there ("image", no install step run) and joined."""
    cluster = Rehearsal(rehearsal.name)
    state = cluster.load()
    assert state is not None and state.image, "the session's cluster has no node image"
    expected = render.install_digest(bake.inputs_digest(_documents()), cluster.deploy_values(state))
    assert state.image_digest == expected
    baked = json.loads((Path(state.image) / layout.INSTALL_MARKER.lstrip("/")).read_text())
    assert baked["digest"] == expected
    assert baked["ray_version"] == render.cluster_pins().versions["ray"]
    mounts = {m.split()[1]: m.split()[3] for m in Path("/proc/mounts").read_text().splitlines()}
    alive = _ray_nodes(rehearsal)
    for node in state.nodes:
        lower = mounts[str(node.root)].split("lowerdir=")[1].split(",")[0]
        assert lower == f"{state.image}:{state.rootfs}", (node.name, lower)
        marker = cluster.marker(node)
        assert marker is not None, node.name
        assert marker["install"] == "image" and marker["install_digest"] == expected, node.name
        assert not [p for p in marker["phases"] if p.startswith("install_")], marker["phases"]
        assert alive.get(node.ip) == "ALIVE", (node.name, alive)


def test_a_node_whose_install_digest_differs_from_the_images_installs_fresh_and_joins(
    rehearsal: RehearsalCluster,
) -> None:
    """The issue's "must show": a worker booted from the cluster's image with another
    EXTRA_PIP_PACKAGES (a pin the lock holds: the same packages, another digest) does not trust
    the image; it runs the install phase, records the new digest and joins the head at the
    same Ray version. It is removed again (cleanly: its Ray leaves first)."""
    cluster = Rehearsal(rehearsal.name)
    state = cluster.load()
    assert state is not None and state.image
    lock = (REPO / "cloud-init" / "node-lock.txt").read_text()
    pin = re.search(r"^(idna==[\w.]+)", lock, re.M)
    assert pin, "the lock no longer pins idna"
    extra = pin.group(1)
    [node] = cluster.add_workers(1, timeout=1500, values={"EXTRA_PIP_PACKAGES": extra})
    try:
        lower = next(
            m.split()[3] for m in Path("/proc/mounts").read_text().splitlines()
            if m.split()[1] == str(node.root)
        ).split("lowerdir=")[1].split(",")[0]  # fmt: skip
        assert lower == f"{state.image}:{state.rootfs}"  # booted from the image all the same
        marker = cluster.marker(node)
        assert marker is not None
        values = {**cluster.deploy_values(state), "EXTRA_PIP_PACKAGES": extra}
        digest = render.install_digest(bake.inputs_digest(_documents()), values)
        assert digest != state.image_digest
        assert marker["install"] == "fresh"
        assert marker["install_digest"] == digest
        assert [p for p in marker["phases"] if p.startswith("install_")]
        log = (node.root / "var/log/cloud-init-output.log").read_text()
        assert f"install: image digest {state.image_digest} != expected {digest}, installing" in log
        installed = json.loads((node.root / layout.INSTALL_MARKER.lstrip("/")).read_text())
        assert installed["digest"] == digest and installed["extra_pip_packages"] == extra
        assert marker["ray_version"] == render.cluster_pins().versions["ray"]
        head = cluster.marker(state.head)
        assert head is not None and head["ray_version"] == marker["ray_version"]
        assert _ray_nodes(rehearsal).get(node.ip) == "ALIVE"
    finally:
        cluster.remove(node.name)
    # Shut down cleanly, it left Ray (the head notices within seconds, minutes when loaded).
    deadline = time.monotonic() + 180
    while _ray_nodes(rehearsal).get(node.ip) == "ALIVE":
        assert time.monotonic() < deadline, f"{node.ip} still ALIVE in Ray after its removal"
        time.sleep(2)
