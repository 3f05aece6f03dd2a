"""End-to-end tests on the rehearsal cluster (root, Linux, systemd-nspawn): see
rehearsal_cluster.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodekit.rehearsal.cluster import Rehearsal
from rehearsal_cluster import NAME, SUBNET, RehearsalCluster, down_and_check, driver


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that take nodes of the session's cluster away run last, in their file's order."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture(scope="session")
def rehearsal() -> Iterator[RehearsalCluster]:
    if os.geteuid() != 0:
        pytest.fail("the rehearsal cluster needs root (CI runs as root)")
    # RAYDRIVER_REUSE_REHEARSAL=NAME: run against a cluster already up (kept afterwards), while
    # working on a test; CI always boots its own.
    reuse = os.environ.get("RAYDRIVER_REUSE_REHEARSAL", "")
    name = reuse or NAME
    if not reuse:
        driver("rehearse", "down", "--name", NAME, "--subnet", SUBNET, timeout=300)  # a crash
        up = driver(
            "rehearse", "up", "--name", NAME, "--workers", "2", "--subnet", SUBNET, timeout=3600
        )
    status = json.loads(driver("rehearse", "status", "--name", name, timeout=60).stdout or "{}")
    cluster_dir = Rehearsal(name).dir
    try:
        if not reuse:
            assert up.returncode == 0, f"rehearse up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
        nodes = status["nodes"]
        yield RehearsalCluster(
            name=name,
            dir=cluster_dir,
            head_ip=status["head"],
            worker_ips=tuple(n["ip"] for n in nodes if n["role"] == "worker"),
            admin_user=status["admin_user"],
            ssh_key=Path(status["ssh_key"]),
            token=(cluster_dir / "token").read_text().strip(),
            netns=tuple(
                f"rh-{name}-{'head' if n['role'] == 'head' else 'w' + str(i)}"
                for i, n in enumerate(nodes)
            ),
        )
    finally:
        # RAYDRIVER_KEEP_REHEARSAL=1: leave it running for a look.
        if not reuse and os.environ.get("RAYDRIVER_KEEP_REHEARSAL") != "1":
            down_and_check(cluster_dir)
