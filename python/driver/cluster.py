"""Which cluster a command talks to, and how it is reached.

Every verb asks :func:`connect` for a :class:`Cluster`; only ``submit`` may start local Ray.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Protocol

from driver.errors import DriverError
from driver.jobs import JobsClient
from driver.localray import LocalRay
from driver.paths import driver_home

RESULTS_ENV = "RAYDRIVER_RESULTS_DIR"
"""Environment variable that tells a job where to write results and checkpoints."""


class Cluster(Protocol):
    description: str

    def jobs(self) -> JobsClient: ...

    def results_dir(self, submission_id: str) -> str:
        """Where a job writes its results, as a path on the node that runs the entrypoint."""
        ...

    def close(self) -> None: ...


class LocalCluster:
    """The embedded default: the driver's own Ray head on 127.0.0.1."""

    def __init__(self, results_root: Path, start: bool, progress: Callable[[str], None]) -> None:
        self.local = LocalRay(driver_home())
        if start:
            head, started = self.local.start(progress=progress)
            progress(("started" if started else "using") + f" local Ray at {head.jobs_address}")
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


def connect(*, start_local: bool, results_root: Path, progress: Callable[[str], None]) -> Cluster:
    """Find the cluster to use (today: local Ray)."""
    return LocalCluster(results_root, start=start_local, progress=progress)


@contextlib.contextmanager
def connected(**kwargs):  # type: ignore[no-untyped-def]
    cluster = connect(**kwargs)
    try:
        yield cluster
    finally:
        cluster.close()


def remote_results_dir(root: str, submission_id: str) -> str:
    return str(PurePosixPath(root) / submission_id)
