"""Open the cluster a command names: local Ray, or a head reached over SSH."""

from __future__ import annotations

import shlex
from pathlib import Path

from driver.cluster import Cluster
from driver.discovery import Target, locate
from driver.localray import LocalCluster
from driver.progress import Progress
from driver.remote import RemoteCluster
from driver.settings import Settings, driver_home
from driver.ssh.options import SshOptions


def connect(
    settings: Settings,
    *,
    start_local: bool,
    results_root: Path,
    progress: Progress,
    head_started: bool = False,
    target: Target | None = None,
) -> Cluster:
    """Find the cluster (see :data:`driver.settings.CLUSTER_ORDER`) and open a way to it.

    Use the result in a ``with`` block. Only ``submit`` may start local Ray (``start_local``).
    ``head_started``: this command just started the head VM, whose sshd may not answer yet; it
    gets the ready timeout for that, as a head still bootstrapping gets it for its Ray.
    ``target``: the cluster this command has found already (its stack's outputs are not read
    again); found here when None.
    """
    if target is None:
        target = locate(settings.cluster)
    if target.head is None:
        return LocalCluster(driver_home(), results_root, start=start_local, progress=progress)
    ssh = SshOptions(
        identity=settings.identity,
        connect_timeout=settings.connect_timeout,
        retries=settings.retries,
        boot_wait_s=settings.ready_timeout if head_started else 0.0,
        strict_host_keys=settings.strict_host_keys,
        keepalive_s=settings.connect_timeout,
        dead_after_s=3 * settings.connect_timeout,
    )
    return RemoteCluster(
        target.head,
        target.source,
        ssh,
        progress,
        ready_timeout=settings.ready_timeout,
        reconnect_timeout=settings.reconnect_timeout,
        cli_hint=shlex.join(settings.hint),
        keep_s=settings.keep_connection,
    )
