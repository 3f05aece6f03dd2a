"""What every verb can ask of a cluster, local or remote: one protocol, no ``isinstance``.

:func:`driver.connect.connect` returns a :class:`Cluster`; both
:class:`driver.localray.LocalCluster` (the embedded default) and
:class:`driver.remote.RemoteCluster` (a head behind SSH) implement it. A cluster is a context
manager: leaving the ``with`` block closes whatever it opened (connection, SFTP, tunnels and
their threads), also after an error or Ctrl-C.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from driver.jobs import JobsClient
from driver.progress import ByteProgress
from driver.results import DownloadReport

DASHBOARD = "Ray dashboard"
TENSORBOARD = "TensorBoard"


@dataclass(frozen=True)
class WebUI:
    """A web interface the user can open: its name, local URL, and why it is down (or None)."""

    name: str
    url: str
    down: str | None = None
    tunnelled: bool = False
    """Reached through a tunnel that lives only while the command runs."""


class Cluster(Protocol):
    description: str
    """For messages: "local Ray (http://127.0.0.1:PORT)", "the head azureuser@IP (--head)"."""
    cli_hint: str
    """Options that reach this cluster again, for the next commands printed after submit."""

    def __enter__(self) -> Cluster: ...

    def __exit__(self, *exc: object) -> None: ...

    def warm_up(self) -> None:
        """Start slow, pure-waiting set-up in the background (called once, right after connect)."""
        ...

    def jobs(self) -> JobsClient:
        """The cluster's Jobs API (waits for a head that is still bootstrapping)."""
        ...

    def results_dir(self, submission_id: str) -> str:
        """Where a job writes its results, as a path on the node that runs the entrypoint."""
        ...

    def autostop_state(self) -> dict[str, Any] | None:
        """What the head's autostop agent last recorded (idle since, sizes), None without one."""
        ...

    def storage_state(self) -> dict[str, Any] | None:
        """The cluster storage as the head has it: ``{"configured", "mounted", "path",
        "account", "container"}``; None where there is none to have (local Ray)."""
        ...

    def download(
        self, submission_id: str, destination: Path, progress: ByteProgress | None = None
    ) -> DownloadReport:
        """Bring the job's results folder to ``destination`` (local Ray: say where it is)."""
        ...

    def dashboard(self, local_ports: dict[str, int]) -> list[WebUI]:
        """Make the dashboard and TensorBoard reachable from this machine."""
        ...

    def reconnect(self, reason: str) -> None:
        """After :class:`~driver.errors.ConnectionLost`: a new way to the cluster, or
        ConnectionLost again when none can be had within the reconnect budget."""
        ...

    def alive(self) -> bool:
        """Whether what :meth:`dashboard` opened still works."""
        ...

    def shell(self, command: str | None, stdin: IO[Any], stdout: IO[Any], stderr: IO[Any]) -> int:
        """A shell on the head, or one command there; its exit code."""
        ...

    def close(self) -> None: ...
