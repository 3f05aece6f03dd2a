"""``rehearse up`` a second time with the same name, as a person does day after day (issue 19,
finding 7): the new head has new SSH host keys at the same address, and the driver must reach
it all the same, as the README's up -> submit flow promises.

A cluster of its own (a head, no workers), booted twice; the session's cluster is not touched.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from support import run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

NAME = "pytestup"
SUBNET = "10.224.0.0/24"


def _rehearse(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_driver("rehearse", *args, home=home, timeout=timeout, module="nodekit")


def _head_lines(known_hosts: Path, ip: str) -> list[str]:
    text = known_hosts.read_text() if known_hosts.exists() else ""
    return [ln for ln in text.splitlines() if ln.split() and ip in ln.split()[0].split(",")]


def test_a_second_up_with_the_same_name_is_reached_by_the_driver_and_ssh(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the rehearsal cluster needs root (CI runs as root)")
    home = tmp_path / "driver-home"
    known_hosts = home / "known_hosts"
    where = ("--name", NAME, "--subnet", SUBNET)
    _rehearse("down", *where, home=home)  # what a crashed run left
    seen: list[dict[str, object]] = []
    try:
        for boot in (1, 2):
            up = _rehearse("up", *where, "--workers", "0", home=home, timeout=3600)
            assert up.returncode == 0, f"up #{boot}:\n{up.stdout}\n{up.stderr[-4000:]}"
            status = json.loads(_rehearse("status", "--name", NAME, home=home).stdout)
            ip, key = str(status["head"]), str(status["ssh_key"])
            cluster = ("--head", f"{status['admin_user']}@{ip}", "-i", key)
            # The README's flow: the driver line `up` printed, as it is (trust on first use).
            r = run_driver("ssh", *cluster, "--", "true", home=home, timeout=600)
            assert r.returncode == 0, f"the driver after up #{boot}: {r.stderr[-2000:]}"
            assert "host key changed" not in r.stderr
            # Known before the first connection: `up` recorded the key the head's sshd offers.
            strict = run_driver(
                "ssh", *cluster, "--strict-host-keys", "--", "true", home=home, timeout=600
            )
            # And OpenSSH with the `ssh:` line `up` printed.
            line = next(ln for ln in up.stdout.splitlines() if ln.startswith("ssh:"))
            ssh = subprocess.run(
                [*shlex.split(line[len("ssh:") :]), "-o", "BatchMode=yes", "true"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            recorded = _head_lines(known_hosts, ip)
            down = _rehearse("down", *where, home=home)
            assert down.returncode == 0, down.stderr[-2000:]
            seen.append(
                {
                    "first use": "first connection" in r.stderr,
                    "strict": (strict.returncode, strict.stderr[-500:]),
                    "openssh": (ssh.returncode, ssh.stderr[-500:]),
                    "recorded": recorded,
                    "after down": _head_lines(known_hosts, ip),
                }
            )
    finally:
        _rehearse("down", *where, home=home)
    assert [s["first use"] for s in seen] == [False, False], seen  # recorded by up, every time
    assert [s["strict"][0] for s in seen] == [0, 0], seen  # refused if not known beforehand
    assert [s["openssh"][0] for s in seen] == [0, 0], seen
    assert all(s["recorded"] for s in seen), seen
    assert seen[0]["recorded"] != seen[1]["recorded"], seen  # the second head had new keys
    assert [s["after down"] for s in seen] == [[], []], seen  # down took them away again
