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


@pytest.fixture(scope="session")
def rehearsal() -> Iterator[RehearsalCluster]:
    if os.geteuid() != 0:
        pytest.fail("the rehearsal cluster needs root (CI runs as root)")
    driver("rehearse", "down", "--name", NAME, "--subnet", SUBNET, timeout=300)  # a crashed run
    up = driver(
        "rehearse", "up", "--name", NAME, "--workers", "2", "--subnet", SUBNET, timeout=3600
    )
    status = json.loads(driver("rehearse", "status", "--name", NAME, timeout=60).stdout or "{}")
    cluster_dir = Rehearsal(NAME).dir
    try:
        assert up.returncode == 0, f"rehearse up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
        nodes = status["nodes"]
        yield RehearsalCluster(
            name=NAME,
            dir=cluster_dir,
            head_ip=status["head"],
            worker_ips=tuple(n["ip"] for n in nodes if n["role"] == "worker"),
            admin_user=status["admin_user"],
            ssh_key=Path(status["ssh_key"]),
            token=(cluster_dir / "token").read_text().strip(),
            netns=tuple(
                f"rh-{NAME}-{'head' if n['role'] == 'head' else 'w' + str(i)}"
                for i, n in enumerate(nodes)
            ),
        )
    finally:
        if os.environ.get("RAYDRIVER_KEEP_REHEARSAL") != "1":  # 1: leave it running for a look
            down_and_check(cluster_dir)
