"""The node containers: each node a Debian system booted by systemd-nspawn, as a VM boots.

A node's disk is an overlay over the cached image (writes land in its own folder), seeded for
cloud-init's NoCloud datasource with the document of its role; a supervisor loop around
``systemd-nspawn --boot`` plays the VM's power: a reboot inside boots it again, a power-off ends
it. Readiness is what the bootstrap writes on the node's disk (its ready or failed marker).

Nothing here knows the network or the services: the container joins a namespace that
:mod:`nodekit.rehearsal.network` made, and the orchestration (:mod:`nodekit.rehearsal.cluster`)
puts the pieces together.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import time
from pathlib import Path

from driver import layout
from driver.errors import DriverError
from driver.procs import pid_alive, pids_with_cmdline, spawn
from driver.progress import Progress
from nodekit.rehearsal.state import Node
from nodekit.rehearsal.system import mount_overlay, run, unmount_under

REBOOT_EXIT = 133
"""systemd-nspawn's exit status when the container asked for a reboot."""
CGROUP_HIERARCHIES = {"/sys/fs/cgroup/systemd": "name=systemd", "/sys/fs/cgroup/unified": ""}
"""The hierarchies a container's systemd manages (cgroup v1 with systemd's named one, and the
unified one beside it), and their names in /proc/PID/cgroup."""


def own_cgroup(machine: str) -> str:
    """Shell lines that move the shell into a cgroup of the container's own in each hierarchy
    of :data:`CGROUP_HIERARCHIES` that is mounted, below the cgroup it is in.

    With ``--keep-unit`` and no systemd on the host, nspawn splits the cgroup it starts in into
    ``payload`` (the container's systemd takes it as its root) and ``supervisor``: two nodes
    started from one cgroup share ``payload/system.slice/...``, and one node's systemd removes
    the cgroup of another's unit as it starts (``status=219/CGROUP``: seen for
    systemd-user-sessions.service, which left a node refusing logins). A cgroup per node keeps
    them apart; where none can be made the shell goes on where it is."""
    lines = []
    for mount, name in CGROUP_HIERARCHIES.items():
        field = f"{name}:" if name else ":"
        lines.append(
            f"if [ -d {mount} ]; then own=$(sed -n 's/^[0-9]*:{field}//p' /proc/self/cgroup); "
            f'mkdir -p "{mount}${{own%/}}/rehearsal/{machine}" && '
            f'echo $$ > "{mount}${{own%/}}/rehearsal/{machine}/cgroup.procs"; fi 2>/dev/null'
        )
    return "; ".join(lines)


def remove_own_cgroup(machine: str) -> None:
    """The empty cgroups :func:`own_cgroup` made for a container that has ended (what cannot
    go, e.g. still in use, stays)."""
    for mount, name in CGROUP_HIERARCHIES.items():
        field = f"{name}:" if name else ":"
        own = ""
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                number, _, rest = line.partition(":")
                if number.isdigit() and rest.startswith(field):
                    own = rest[len(field) :]
        top = Path(f"{mount}{own.rstrip('/')}/rehearsal/{machine}")
        if not top.is_dir():
            continue
        for folder, _, _ in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    return []


# -- create ----------------------------------------------------------------------------------
def mount_root(node: Node, lowers: list[Path]) -> None:
    """The node's root filesystem: a writable overlay of ``lowers`` (the image layer, if any,
    over the root filesystem) at ``node.root``."""
    ndir = Path(node.dir)
    for d in ("upper", "work", "root"):
        (ndir / d).mkdir(parents=True)
    mount_overlay(
        lowers,
        ndir / "upper",
        ndir / "work",
        node.root,
        f"mounting the root filesystem of {node.name}",
    )


def seed(node: Node, instance_id: str, public_key: str, user_data: str) -> None:
    """What Azure gives a VM's cloud-init (instance, host name, SSH key, custom data), as a
    NoCloud seed on the node's disk."""
    folder = node.root / "var/lib/cloud/seed/nocloud"
    folder.mkdir(parents=True)
    (folder / "meta-data").write_text(
        f"instance-id: {instance_id}\nlocal-hostname: {node.name}\npublic-keys:\n  - {public_key}\n"
    )
    (folder / "user-data").write_text(user_data)


def start(node: Node, binds: list[str]) -> int:
    """Boot the node in its network namespace (``node.netns``) under a supervisor; its pid.

    ``binds``: ``HOST:CONTAINER`` folders to bind into the container."""
    nspawn = shlex.join(
        [
            "systemd-nspawn",
            "--quiet",
            "--boot",
            f"--directory={node.root}",
            "--register=no",
            "--keep-unit",
            f"--machine={node.netns}",
            f"--network-namespace-path=/run/netns/{node.netns}",
            # A VM has FUSE: the cluster storage's rclone mounts with it.
            "--bind=/dev/fuse",
            *(f"--bind={b}" for b in binds),
        ]
    )
    # A VM that reboots comes back: nspawn ends with 133 when the container asks for a
    # reboot, and this loop boots it again; a power-off (any other end) ends the loop.
    supervisor = (
        f"{own_cgroup(node.netns)}; "
        f"while :; do {nspawn}; rc=$?; [ $rc -eq {REBOOT_EXIT} ] || exit $rc; done"
    )
    return spawn(["bash", "-c", supervisor], node.console_log).pid


# -- remove ----------------------------------------------------------------------------------
def stop(pids: set[int]) -> list[int]:
    """Stop supervisors and their containers (or any processes, e.g. the services on the
    bridge): SIGTERM (a container's clean poweroff) first, 15 s, then SIGKILL with their
    children (a container's init: its whole PID namespace goes), 60 s; the pids still running
    after that."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.5)
    for pid in pids:
        for child in children(pid):  # the container's init: SIGKILL ends its namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.5)
    return [p for p in pids if pid_alive(p)]


def stop_node(node: Node) -> None:
    """The node's container, every process started with a path of its folder (its metadata
    service) and its mounts."""
    if node.pid is not None and pid_alive(node.pid):
        stop({node.pid})
    remove_own_cgroup(node.netns)
    for pid in pids_with_cmdline(f"{node.dir}/"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    unmount_under(Path(node.dir))


def remove_folder(node: Node) -> None:
    shutil.rmtree(node.dir, ignore_errors=True)


# -- inside a running node -------------------------------------------------------------------
def container_init(node: Node) -> int | None:
    """PID (here) of the container's systemd: the child of the current nspawn."""
    for nspawn in children(node.pid or 0):
        for init in children(nspawn):
            return init
    return None


def exec(node: Node, command: list[str], timeout: float = 120) -> str:
    """Run a command inside the container (all its namespaces), as root; its output."""
    init = container_init(node)
    if init is None:
        raise DriverError(f"rehearsal node {node.name} is not running")
    p = run(["nsenter", "-t", str(init), "-a", *command], what=f"on {node.name}", timeout=timeout)
    return p.stdout


# -- power -----------------------------------------------------------------------------------
def reboot(node: Node) -> None:
    """As `sudo reboot` on the VM: its services stop, it boots again from the same disk."""
    before = container_init(node)
    exec(node, ["systemctl", "reboot"])
    deadline = time.monotonic() + 120
    while container_init(node) in (before, None):
        if time.monotonic() > deadline:
            raise DriverError(f"rehearsal node {node.name} did not come back from its reboot")
        time.sleep(0.5)


def poweroff(node: Node) -> None:
    """As a VM switched off: it shuts down and stays down."""
    exec(node, ["systemctl", "poweroff"])
    deadline = time.monotonic() + 120
    while pid_alive(node.pid):
        if time.monotonic() > deadline:
            raise DriverError(f"rehearsal node {node.name} did not power off")
        time.sleep(0.5)


def kill(node: Node) -> None:
    """Every process of the node killed with its init, nothing shut down; it stays down."""
    assert node.pid is not None
    nspawns = children(node.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(node.pid, signal.SIGKILL)  # the supervisor: no boot after this one
    for nspawn in nspawns:
        for init in children(nspawn):  # its PID namespace, all processes, goes with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while any(pid_alive(p) for p in [node.pid, *nspawns]):
        if time.monotonic() > deadline:
            raise DriverError(f"rehearsal node {node.name} did not stop")
        time.sleep(0.2)


# -- readiness -------------------------------------------------------------------------------
def marker(node: Node) -> dict | None:
    """The bootstrap's ready marker on the node's disk, once it is there."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads((node.root / layout.READY_MARKER.lstrip("/")).read_text())
    return None


def failure(node: Node) -> str | None:
    """Why the bootstrap failed, once its failed marker is there."""
    with contextlib.suppress(OSError):
        return (node.root / layout.FAILED_MARKER.lstrip("/")).read_text().strip()
    return None


def phase(node: Node) -> str:
    """The bootstrap's last announced step, from the node's cloud-init output log."""
    log = node.root / "var/log/cloud-init-output.log"
    with contextlib.suppress(OSError):
        steps = re.findall(r"ray-cluster-bootstrap\[\w+\]: (\w+)\n", log.read_text())
        if steps:
            return steps[-1]
    return "booting"


def wait_ready(cluster: str, nodes: list[Node], timeout: float, progress: Progress) -> None:
    """Until every node's bootstrap wrote its ready marker; a failed one, a container that
    exited or the timeout raises (naming each pending node's phase)."""
    deadline = time.monotonic() + timeout
    next_note = 0.0
    while True:
        pending = []
        for node in nodes:
            reason = failure(node)
            if reason:
                raise DriverError(
                    f"rehearsal node {node.name} failed to bootstrap: {reason} "
                    f"(inspect {node.root}/var/log/cloud-init-output.log, then "
                    f"`python -m nodekit rehearse down --name {cluster}`)"
                )
            if not pid_alive(node.pid):
                raise DriverError(
                    f"rehearsal node {node.name}'s container exited (console: "
                    f"{node.console_log}); run `python -m nodekit rehearse down --name "
                    f"{cluster}`"
                )
            if marker(node) is None:
                pending.append(node)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise DriverError(
                f"rehearsal cluster not ready after {timeout:.0f} s: "
                + ", ".join(f"{n.name} at {phase(n)}" for n in pending)
            )
        if time.monotonic() >= next_note:
            progress("waiting: " + ", ".join(f"{n.name} {phase(n)}" for n in pending))
            next_note = time.monotonic() + 15
        time.sleep(1)
