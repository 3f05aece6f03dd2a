"""A cluster on Azure (or anywhere with the node layout), reached through one SSH connection.

What the head offers is fixed by :mod:`driver.layout`: the readiness and failure markers the
bootstrap writes, the cluster token (group ``ray``, which the admin user is in) and Ray's Jobs
API on the head's 127.0.0.1. The driver forwards that port over SSH to a local ephemeral port
and talks to it with the same :class:`~driver.jobs.JobsClient` as for local Ray. The token is
read over SFTP into memory and goes only into the ``Authorization`` header.

Pieces are set up when first needed: ``ssh`` needs only the connection (it must work while the
head is still bootstrapping, to look at it), ``download`` needs SFTP, the job verbs need the head
ready, the token and the tunnel. With ``keep_s`` above 0 the job verbs get the token and the
tunnel from a kept connection (:mod:`driver.ssh.kept`), started by the first command that needs
one, and open no connection of their own.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from driver import layout
from driver.address import HeadAddress
from driver.cluster import DASHBOARD, TENSORBOARD, WebUI
from driver.errors import ConnectionLost, DriverError
from driver.jobs import JobsClient
from driver.progress import ByteProgress, Progress
from driver.results import DownloadReport, download_tree
from driver.settings import DEFAULT_READY_TIMEOUT_S, DEFAULT_RECONNECT_TIMEOUT_S
from driver.ssh.forward import Forward
from driver.ssh.options import SshOptions

if TYPE_CHECKING:  # the session module loads paramiko: a command that uses a kept connection
    # never needs it
    from driver.ssh.kept import Kept
    from driver.ssh.session import SshSession

READY_POLL_S = 3.0
BOOT_ID = "/proc/sys/kernel/random/boot_id"
"""Changes with every boot: a readiness marker names the boot it was written in."""
PROGRESS_EVERY_S = 30.0
JOBS_API_GRACE_S = 45.0
"""How long the Jobs API may take to answer after a head that this command waited for became
ready (a head that just booted or restarted: on a loaded VM its dashboard can come up, or come
back, after the ready marker). A head that was ready at the first look gets no grace."""
JOBS_API_POLL_S = 3.0


@dataclass(frozen=True)
class ReadyState:
    status: dict[str, Any]
    waited_s: float
    waited: bool = False
    """Whether the marker was missing (or of an earlier boot) at the first look."""


def cloud_init_status(session: SshSession) -> str:
    """``cloud-init status`` on the head ("running", "done", "error"...), or why it is unknown."""
    try:
        r = session.run("cloud-init status 2>/dev/null", timeout=20)
    except DriverError:
        return "unknown"
    for line in r.stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "status" and value.strip():
            return value.strip()
    return "not available" if r.exit_status == 127 else "unknown"


def wait_until_ready(
    session: SshSession,
    timeout: float,
    progress: Progress,
    poll: float = READY_POLL_S,
) -> ReadyState:
    """Wait for the head's ready marker; fail at once on its failure marker or at ``timeout``."""
    started = time.monotonic()
    said, said_at = "", 0.0
    while True:
        failed = session.read_text(layout.FAILED_MARKER)
        if failed is not None:
            reason = " ".join(failed.split())[:300] or "no reason given"
            raise DriverError(
                f"the head's bootstrap failed: {reason} (from {layout.FAILED_MARKER}; the "
                "whole log is /var/log/cloud-init-output.log on the head)"
            )
        ready = session.read_text(layout.READY_MARKER)
        stale = ""
        if ready is not None:
            try:
                status = json.loads(ready) if ready.strip() else {}
            except ValueError:
                status = {"raw": ready.strip()[:200]}
            status = status if isinstance(status, dict) else {}
            marker_boot = status.get("boot_id")
            this_boot = (session.read_text(BOOT_ID) or "").strip() if marker_boot else ""
            if not marker_boot or marker_boot == this_boot:
                return ReadyState(status, time.monotonic() - started, waited=bool(said))
            # Written before the head last restarted: Ray is coming back; wait for the new one.
            stale = "the head restarted and Ray is coming back"
        ci = stale or f"cloud-init: {cloud_init_status(session)}"
        elapsed = time.monotonic() - started
        if elapsed >= timeout:
            raise DriverError(
                f"the head {session.head.endpoint} is not ready after {timeout:.0f} s: expected "
                f"{layout.READY_MARKER} of this boot, found none ({ci}) — still bootstrapping? "
                "Raise --ready-timeout, or look at /var/log/cloud-init-output.log there with "
                "`python -m driver ssh`"
            )
        message = (
            f"waiting for Ray on the head ({ci})"
            if stale
            else f"waiting for the head to finish bootstrapping ({ci})"
        )
        now = time.monotonic()
        if message != said or now - said_at >= PROGRESS_EVERY_S:
            progress(f"{message}; {elapsed:.0f} s of at most {timeout:.0f} s")
            said, said_at = message, now
        time.sleep(max(0.0, min(poll, timeout - elapsed)))


MIN_RECONNECT_ATTEMPT_S = 1.0
"""The shortest connect timeout a reconnection attempt gets; none starts with less budget left."""


class RemoteCluster:
    """The cluster behind one head, reached through one SSH connection (a context manager)."""

    def __init__(
        self,
        head: HeadAddress,
        source: str,
        ssh_options: SshOptions,
        progress: Progress,
        ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S,
        cli_hint: str = "",
        keep_s: float = 0.0,
    ) -> None:
        self.head = head
        self.progress = progress
        self.ready_timeout = ready_timeout
        self.reconnect_timeout = reconnect_timeout
        self.ssh_options = ssh_options
        self.cli_hint = cli_hint
        self.source = source
        self.description = f"the head {head} ({source})"
        self.keep_s = keep_s
        self._session: SshSession | None = None
        self._ready: ReadyState | None = None
        self._jobs: JobsClient | None = None
        self._kept: Kept | None = None
        self._bridge: Forward | None = None
        if keep_s <= 0:
            self._session = self._connect(ssh_options)

    def _connect(self, options: SshOptions) -> SshSession:
        from driver.ssh.session import SshSession

        return SshSession.connect(self.head, options, self.progress)

    @property
    def session(self) -> SshSession:
        """This command's own connection (opened on first use where a kept one serves the
        job verbs)."""
        if self._session is None:
            self._session = self._connect(self.ssh_options)
        return self._session

    def __enter__(self) -> RemoteCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm_up(self) -> None:
        """Let the head start its SFTP server while this process finishes importing Ray."""
        if self._session is not None:
            self._session.prefetch_sftp()

    # -- readiness, token, tunnel ----------------------------------------------------------
    def ensure_ready(self) -> ReadyState:
        if self._ready is None:
            self._ready = wait_until_ready(self.session, self.ready_timeout, self.progress)
        return self._ready

    def _token(self) -> str:
        from driver.ssh.session import AccessDenied

        hint = (
            f"expected it readable by group {layout.RAY_USER} (mode 0640) and "
            f"{self.head.user} in that group — is this the cluster's admin user?"
        )
        try:
            token = self.session.read_text(layout.TOKEN_FILE, denied_hint=hint)
        except AccessDenied:
            # A connection opened while the head bootstrapped keeps the group list the admin
            # user had then, without `ray`: a new one gets it (`terraform apply`, then `submit`).
            self._new_session()
            token = self.session.read_text(layout.TOKEN_FILE, denied_hint=hint)
        if token is None:
            raise DriverError(
                f"no cluster token on the head at {layout.TOKEN_FILE}: expected the bootstrap "
                "to write it before the ready marker (is this head set up by this project?)"
            )
        token = token.strip()
        if not token:
            raise DriverError(f"the cluster token {layout.TOKEN_FILE} on the head is empty")
        return token

    def _check_jobs_api(self, local_url: str, token: str, grace: float = 0.0) -> None:
        """Fail with a clear line if nothing (or nothing sane) answers on the head's 8265.

        Waits at most the connect timeout: Ray's own client has no timeout at all, so a hung
        dashboard would otherwise hang every command. Nothing listening there is looked at
        again for ``grace`` seconds (a head that just became ready).
        """
        limit = self.ssh_options.connect_timeout
        deadline = time.monotonic() + grace
        why = self.session.reachable(layout.RAY_DASHBOARD_PORT)
        if why is not None and grace > 0:
            self.progress(f"waiting for Ray's Jobs API on the head ({why}); at most {grace:.0f} s")
        while why is not None and time.monotonic() < deadline:
            time.sleep(min(JOBS_API_POLL_S, max(0.0, deadline - time.monotonic())))
            why = self.session.reachable(layout.RAY_DASHBOARD_PORT)
        if why is not None:
            raise DriverError(
                f"the Ray Jobs API is not answering on the head (127.0.0.1:"
                f"{layout.RAY_DASHBOARD_PORT} there: {why}): expected Ray's dashboard once the "
                "head is ready — is Ray running there?"
            )
        import requests

        try:
            r = requests.get(
                f"{local_url}/api/version",
                headers={"Authorization": f"Bearer {token}"},
                timeout=limit,
            )
        except requests.RequestException as e:
            kind = "timed out" if isinstance(e, requests.Timeout) else type(e).__name__
            raise DriverError(
                f"the Ray Jobs API on the head (127.0.0.1:{layout.RAY_DASHBOARD_PORT} there) "
                f"is not answering: request {kind} after {limit:.0f} s — is Ray "
                "overloaded or stuck?"
            ) from None
        if r.status_code in (401, 403):
            raise DriverError(
                f"the Ray Jobs API on the head rejected the cluster token (HTTP {r.status_code}):"
                f" expected {layout.TOKEN_FILE} to be the token Ray was started with"
            )
        if r.status_code != 200:
            raise DriverError(
                f"the Ray Jobs API on the head answered HTTP {r.status_code} to /api/version "
                f"(expected 200): {' '.join(r.text.split())[:150]}"
            )

    def open_tunnel(self) -> tuple[Forward, str]:
        """This connection's tunnel to the Jobs API and the token, once both are checked."""
        ready = self.ensure_ready()
        token = self._token()
        fwd = self.session.forward(layout.RAY_DASHBOARD_PORT)
        self._check_jobs_api(fwd.url, token, JOBS_API_GRACE_S if ready.waited else 0.0)
        return fwd, token

    def _kept_tunnel(self, options: SshOptions) -> tuple[Forward, str]:
        """The kept connection's tunnel (started now where none runs) and its token."""
        from driver.ssh import kept

        request = kept.KeepRequest(
            self.head,
            self.source,
            options,
            idle_s=self.keep_s,
            ready_timeout=self.ready_timeout,
            reconnect_timeout=self.reconnect_timeout,
        )
        self._kept = kept.attach(request, self.progress)
        self._bridge = Forward(self._kept.open_tunnel, layout.RAY_DASHBOARD_PORT)
        return self._bridge, self._kept.token

    def _tunnel(self, options: SshOptions) -> None:
        fwd, token = self._kept_tunnel(options) if self.keep_s > 0 else self.open_tunnel()
        self._jobs = JobsClient(
            fwd.url,
            token,
            where=f"the head {self.head.host}",
            timeout=self.ssh_options.connect_timeout,
        )

    def jobs(self) -> JobsClient:
        if self._jobs is None:
            self._tunnel(self.ssh_options)
        assert self._jobs is not None
        return self._jobs

    def _drop_tunnel(self) -> None:
        """Forget the tunnel; a kept connection that failed us is told to go (the next one
        is fresh and checked again)."""
        self._jobs = None
        if self._bridge is not None:
            self._bridge.close()
            self._bridge = None
        if self._kept is not None:
            self._kept.stop()
            self._kept = None

    def _new_session(self) -> None:
        """Replace the SSH connection (and with it the tunnel) by a fresh one."""
        self._jobs = None
        if self._session is not None:
            self._session.close()
        self._session = self._connect(self.ssh_options)

    def reconnect(self, reason: str) -> None:
        """After the connection broke: a fresh one, retried with back-off (1, 2, 4… s) for at
        most ``reconnect_timeout`` seconds; :class:`ConnectionLost` if none can be had.

        Each attempt's connect timeout is cut to what is left of the budget, so a head that
        accepts connections but never answers (a frozen sshd) costs the budget, not more.
        """
        budget = self.reconnect_timeout
        # The watchdog's verdict is the cause; what failed because of it (a request through the
        # tunnel) is not news.
        if self._session is not None:
            reason = self._session.lost_because or reason
        self.progress(
            f"lost the connection to {self.head.endpoint} ({reason}); reconnecting for up to "
            f"{budget:.0f} s"
        )
        deadline = time.monotonic() + budget
        delay, last = 1.0, reason
        while True:
            self._drop_tunnel()
            if self._session is not None:
                self._session.close()
                self._session = None
            left = deadline - time.monotonic()
            attempt = dataclasses.replace(
                self.ssh_options,
                retries=0,
                connect_timeout=min(
                    self.ssh_options.connect_timeout, max(left, MIN_RECONNECT_ATTEMPT_S)
                ),
            )
            try:
                if self.keep_s <= 0:
                    self._session = self._connect(attempt)
                self._tunnel(attempt)
                self.progress(f"reconnected to {self.head.endpoint}")
                return
            except ConnectionLost as e:
                last = e.message
            left = deadline - time.monotonic()
            if left < MIN_RECONNECT_ATTEMPT_S:
                raise ConnectionLost(
                    f"lost the connection to {self.head.endpoint} and could not reconnect "
                    f"within {budget:.0f} s ({last})"
                )
            # The last wait is cut so that one more attempt fits in the budget.
            wait = min(delay, left - MIN_RECONNECT_ATTEMPT_S)
            self.progress(f"not reconnected yet ({last}); next try in {wait:.0f} s")
            time.sleep(wait)
            delay = min(delay * 2, 30.0)

    # -- the rest of the verbs -------------------------------------------------------------
    def _read_text(self, path: str) -> str | None:
        """A small file of the head's: over the kept connection where this command uses one."""
        if self._kept is not None and self._session is None:
            return self._kept.read_text(path)
        return self.session.read_text(path)

    def autostop_state(self) -> dict[str, Any] | None:
        """The head's autostop state file (JSON), None where there is none or it is unusable."""
        text = self._read_text(layout.AUTOSTOP_STATE)
        try:
            state = json.loads(text) if text else None
        except ValueError:
            return None
        return state if isinstance(state, dict) else None

    def storage_state(self) -> dict[str, Any] | None:
        """From the head's storage settings (the bootstrap writes them only with results
        storage) and its mount table."""
        settings = self._read_text(layout.STORAGE_ENV)
        if settings is None:
            return {"configured": False, "mounted": False}
        values = dict(ln.split("=", 1) for ln in settings.splitlines() if "=" in ln)
        mounts = self._read_text("/proc/mounts") or ""
        return {
            "configured": True,
            "mounted": any(
                ln.split()[1:2] == [layout.CLUSTER_STORAGE_DIR] for ln in mounts.splitlines()
            ),
            "path": layout.CLUSTER_STORAGE_DIR,
            "account": values.get("RCLONE_AZUREBLOB_ACCOUNT", ""),
            "container": values.get("STORAGE_CONTAINER", ""),
        }

    def results_dir(self, submission_id: str) -> str:
        return str(PurePosixPath(layout.RESULTS_DIR) / submission_id)

    def download(
        self, submission_id: str, destination: Path, progress: ByteProgress | None = None
    ) -> DownloadReport:
        return download_tree(
            self.session.sftp(), self.results_dir(submission_id), destination, progress
        )

    def dashboard(self, local_ports: dict[str, int]) -> list[WebUI]:
        """Forward the dashboard and TensorBoard to local ports (0: any free one)."""
        self.ensure_ready()
        shown = []
        for name, remote_port in (
            (DASHBOARD, layout.RAY_DASHBOARD_PORT),
            (TENSORBOARD, layout.TENSORBOARD_PORT),
        ):
            fwd = self.session.forward(remote_port, local_port=local_ports.get(name, 0))
            shown.append(WebUI(name, fwd.url, self.session.reachable(remote_port), tunnelled=True))
        return shown

    def alive(self) -> bool:
        try:
            return self.session.transport.is_active()
        except DriverError:
            return False

    def shell(self, command: str | None, stdin: IO[Any], stdout: IO[Any], stderr: IO[Any]) -> int:
        return self.session.interactive(command, stdin, stdout, stderr)

    def close(self) -> None:
        """Close this command's own connection and tunnel; a kept connection stays."""
        self._jobs = None
        if self._bridge is not None:
            self._bridge.close()
            self._bridge = None
        if self._session is not None:
            self._session.close()
