"""The rehearsal's head's SSH host keys, where SSH clients look for them.

Every ``rehearse up`` boots a head whose cloud-init makes new host keys, at the same address
for the same ``--subnet`` (10.213.0.10 by default). A key the driver trusted for the previous
cluster would make it refuse the new one as a changed key. The rehearsal knows its head's keys
(they are on the head's disk, here), so ``up`` records them in the driver's known_hosts, in
place of any earlier key for that address, and in the cluster folder's own ``known_hosts`` for
OpenSSH (the ``ssh`` line ``up`` prints uses it); ``down`` removes exactly those lines again.

The workers' keys go to the cluster folder's file too, as each worker is ready (``up``,
``add-worker``, a scale set's new instance) and leave it with the worker, so the ``worker`` line
``up`` prints (through the head, as a worker on Azure is reached) verifies the worker as well.
The driver's own file gets only the head's: the driver never connects to a worker.
"""

from __future__ import annotations

from pathlib import Path

from driver import hostkeys

KNOWN_HOSTS = "known_hosts"
"""The cluster folder's known_hosts for OpenSSH (``ssh -o UserKnownHostsFile=...``)."""


PREFERRED = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa")
"""The key types sshd serves by default, in the order recorded: paramiko asks a known host for
the type of its first entry. cloud-init also makes a DSA key, which sshd never offers."""


def head_keys(root: Path) -> list[hostkeys.Key]:
    """The host keys a node's sshd offers (the head's, or a worker's): its
    ``/etc/ssh/ssh_host_*_key.pub``."""
    found = [
        hostkeys.read_public_key(p.read_text())
        for p in (root / "etc" / "ssh").glob("ssh_host_*_key.pub")
    ]
    keys = sorted((k for k in found if k[0] in PREFERRED), key=lambda k: PREFERRED.index(k[0]))
    if not keys:
        raise FileNotFoundError(f"no SSH host keys in {root / 'etc' / 'ssh'}")
    return keys


def record(host: str, root: Path, cluster_dir: Path) -> tuple[list[hostkeys.Key], Path]:
    """Trust the head at ``host`` with the keys on its disk; the keys and the driver's file."""
    keys = head_keys(root)
    driver_file = hostkeys.default_file()
    hostkeys.replace(host, keys, driver_file)
    hostkeys.replace(host, keys, cluster_dir / KNOWN_HOSTS)
    return keys, driver_file


def forget(host: str, keys: list[list[str]], driver_file: str) -> int:
    """Remove what :func:`record` wrote to the driver's known_hosts (the cluster folder's
    file goes with the folder); how many lines went."""
    if not keys or not driver_file:
        return 0
    return hostkeys.remove(host, [(k[0], k[1]) for k in keys], Path(driver_file))


def record_worker(host: str, root: Path, cluster_dir: Path) -> list[hostkeys.Key]:
    """Trust the worker at ``host`` with the keys on its disk, in the cluster folder's file
    only, in place of any earlier key for that address (a scale set reuses addresses)."""
    keys = head_keys(root)
    hostkeys.replace(host, keys, cluster_dir / KNOWN_HOSTS)
    return keys


def forget_node(host: str, cluster_dir: Path) -> None:
    """A node removed: its address leaves the cluster folder's file (the next node there has
    new keys)."""
    file = cluster_dir / KNOWN_HOSTS
    if file.exists():
        hostkeys.replace(host, [], file)
