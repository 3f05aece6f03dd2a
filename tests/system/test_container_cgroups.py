"""Each rehearsal node's container gets a cgroup of its own (root, Linux with cgroups).

nspawn with ``--keep-unit`` and no systemd on the host splits the cgroup it starts in into
``payload`` and ``supervisor``; nodes started from one cgroup shared ``payload/system.slice/...``,
and one node's systemd removed another's unit cgroup as it started (``status=219/CGROUP`` for
systemd-user-sessions.service: that node refused every login). The supervisor's shell moves
itself first (nodekit.rehearsal.nodes.own_cgroup); the e2e tests check every node's units."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodekit.rehearsal import nodes


def _paths(text: str) -> dict[str, str]:
    """The hierarchy name (``name=systemd``, or ``""`` for the unified one) → the path."""
    out = {}
    for line in text.splitlines():
        _, name, path = line.split(":", 2)
        out[name] = path
    return out


@pytest.mark.parametrize("machine", ["rh-cgtest-a", "rh-cgtest-b"])
def test_a_containers_shell_moves_into_a_cgroup_of_its_own_and_it_goes_again(
    machine: str,
) -> None:
    mounted = {
        name: mount for mount, name in nodes.CGROUP_HIERARCHIES.items() if Path(mount).is_dir()
    }
    assert mounted, "no cgroup hierarchy systemd manages is mounted here"
    own = _paths(Path("/proc/self/cgroup").read_text())
    r = subprocess.run(
        ["bash", "-c", f"{nodes.own_cgroup(machine)}; cat /proc/$$/cgroup"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    moved = _paths(r.stdout)
    for name, mount in mounted.items():
        expected = f"{own[name].rstrip('/')}/rehearsal/{machine}"
        assert moved[name] == expected, (name, r.stdout)
        assert Path(f"{mount}{expected}").is_dir()
    nodes.remove_own_cgroup(machine)  # the shell has ended: its cgroups are empty
    for name, mount in mounted.items():
        assert not Path(f"{mount}{own[name].rstrip('/')}/rehearsal/{machine}").exists()
