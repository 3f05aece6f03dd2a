"""Which cluster a command talks to, and how it is reached.

Every verb asks :func:`connect` for a :class:`Cluster`: a :class:`~driver.remote.RemoteCluster`
when discovery names a head, else :class:`LocalCluster`. Only ``submit`` may start local Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Protocol

from driver import profiles
from driver.discovery import ClusterOptions, hint_text, resolve
from driver.errors import DriverError
from driver.jobs import JobsClient
from driver.localray import LocalRay
from driver.paths import driver_home
from driver.remote import DEFAULT_READY_TIMEOUT_S, RemoteCluster
from driver.ssh import SshOptions

RESULTS_ENV = "RAYDRIVER_RESULTS_DIR"
"""Environment variable that tells a job where to write results and checkpoints."""


class Cluster(Protocol):
    description: str
    cli_hint: str
    """Options that reach this cluster again, for the next commands printed after submit."""

    def jobs(self) -> JobsClient: ...

    def results_dir(self, submission_id: str) -> str:
        """Where a job writes its results, as a path on the node that runs the entrypoint."""
        ...

    def close(self) -> None: ...


NO_CLUSTER_GIVEN = "no --head, --terraform-dir, --resource-group/--deployment or saved profile"


class LocalCluster:
    """The embedded default: the driver's own Ray head on 127.0.0.1."""

    cli_hint = ""

    def __init__(self, results_root: Path, start: bool, progress: Callable[[str], None]) -> None:
        self.local = LocalRay(driver_home())
        if start:
            head, _ = self.local.start(progress=progress)
            progress(f"using local Ray at {head.jobs_address} ({NO_CLUSTER_GIVEN})")
        else:
            head = self.local.running()
            if head is None:
                raise DriverError(
                    "no cluster: local Ray is not running and no remote cluster was given "
                    "(submit a job or run `python -m driver local start`)"
                )
        self.head = head
        self.results_root = results_root
        self.description = f"local Ray ({head.jobs_address})"

    def jobs(self) -> JobsClient:
        return JobsClient(self.head.jobs_address, self.head.token(), where="local Ray")

    def results_dir(self, submission_id: str) -> str:
        return str((self.results_root / submission_id).resolve())

    def close(self) -> None:
        pass


def connect(
    *,
    start_local: bool,
    results_root: Path,
    progress: Callable[[str], None],
    options: ClusterOptions | None = None,
    ssh_options: SshOptions | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
) -> LocalCluster | RemoteCluster:
    """Find the cluster (see :mod:`driver.discovery` for the order) and open a way to it.

    A key given with ``-i`` is repeated in the next commands printed after submit; when the
    cluster comes from the saved profile and ``-i`` was not given, the profile's key is used.
    """
    options = options or ClusterOptions()
    ssh_options = ssh_options or SshOptions()
    profile = None if options.any() else profiles.load()
    target = resolve(options, profile)
    if target.is_local:
        return LocalCluster(results_root, start=start_local, progress=progress)
    hint = list(target.hint)
    if ssh_options.identity is not None:
        hint += ["-i", str(ssh_options.identity)]
    elif profile and target.source.startswith("saved profile") and profile.get("identity"):
        ssh_options = dataclasses.replace(
            ssh_options, identity=Path(profile["identity"]).expanduser()
        )
    return RemoteCluster(
        target, ssh_options, progress, ready_timeout=ready_timeout, cli_hint=hint_text(hint)
    )


@contextlib.contextmanager
def connected(**kwargs):  # type: ignore[no-untyped-def]
    cluster = connect(**kwargs)
    try:
        yield cluster
    finally:
        cluster.close()


def remote_results_dir(root: str, submission_id: str) -> str:
    return str(PurePosixPath(root) / submission_id)
