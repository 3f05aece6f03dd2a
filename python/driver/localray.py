"""The embedded default: a local Ray head the driver starts, reuses and stops.

The head is a ``ray start --head --block`` process in its own session, with token
authentication switched on explicitly (Ray 2.60 otherwise decides from whether
``~/.ray/auth_token`` happens to exist). Every process Ray spawns stays in that session, so
``stop`` removes exactly what the driver started and nothing else: ``ray stop`` would also kill
unrelated Ray processes, including those of a rehearsal cluster's containers.

One head per Python environment: jobs run ``python`` of the environment that started the head,
so a driver from another virtual environment (another clone's ``.venv``) gets a head of its own
instead of silently running its jobs in someone else's packages.

What listens, and where (Ray 2.60 offers no way to bind its gRPC services to loopback): the
dashboard/Jobs API on 127.0.0.1 only; the GCS, the raylet (node and object manager) and the
dashboard agent's gRPC port on all interfaces, the agents' HTTP ports and the Ray Client server
on 127.0.0.1 and the machine's address — every one of them refuses requests without the token
(the tests check the HTTP and GCS ones). The autoscaler monitor and the Prometheus metrics
endpoints (the dashboard's on 0.0.0.0:44227 included), which answer without a token, are not
started. Ray's session folder lives in a
folder only the user may enter (Ray itself makes its own folders world-writable).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from driver import layout
from driver.cluster import DASHBOARD, TENSORBOARD, WebUI
from driver.errors import ConnectionLost, DriverError
from driver.jobs import JobsClient
from driver.package import DISTRIBUTION, LOCAL_EXTRA, LOCAL_INSTALL, missing
from driver.procs import pid_alive, spawn
from driver.progress import ByteProgress, Progress
from driver.results import DownloadReport
from driver.settings import RESULTS_ENV, private_tmp

START_TIMEOUT_S = 360.0
"""The bound on starting local Ray, further starts included."""
STARTS = 4
"""How often ``ray start`` is tried when its node misses Ray's registration window, within
START_TIMEOUT_S (clean-clone run 18, two cores saturated by the test lanes: a node missed it
twice; each miss took 75-100 s; 2026-11-28, load 15-30: three misses in 236 s, with 124 s of the
budget left for a fourth)."""
RETRY_NEEDS_S = 70.0
"""Time a second ``ray start`` needs left to be tried: a node that misses Ray's 30 s to register
has been seen to take 60 s to give up on a loaded machine."""
STARTED_LINE = "Ray runtime started."
"""What ``ray start`` prints once its node has registered (ray/scripts/scripts.py)."""
NODE_TIMED_OUT = ("timed out during startup", "Timed out waiting for node info")
"""Ray's words when its node did not register in time: ``ray start`` itself gave up after its
30 s (ray/_private/node.py), or a process it started and waits for did (its client server's
``get_node_with_retry``, ray/_private/services.py), which ends ``ray start --block`` too."""


def node_timed_out(text: str) -> bool:
    """Whether Ray's output ``text`` says its node did not register in time."""
    return any(words in text for words in NODE_TIMED_OUT)


def init_local_ray(**kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` for a Ray of this process's own, tried again (up to
    :data:`STARTS` times) when its node misses Ray's window to register, as ``driver local
    start`` tries ``ray start``: on a loaded machine a first start can miss it and the next one
    succeed. Any other error is raised at once.

    Its own: ``address="local"`` unless told otherwise. Without an address ``ray.init`` joins any
    Ray already running on the machine (``RAY_ADDRESS``, then ``/tmp/ray/ray_current_cluster``),
    and then refuses ``num_cpus``; in a whole run of the suite another lane's local head was
    running, and a restore script failed so."""
    import ray

    kwargs.setdefault("address", "local")
    for start in range(1, STARTS + 1):
        try:
            return ray.init(**kwargs)
        except Exception as e:  # Ray raises a bare Exception for the timeout
            if start == STARTS or not node_timed_out(str(e)):
                raise
            ray.shutdown()
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class LocalHead:
    """What a client needs to use a running local head."""

    pid: int
    session_id: int
    dashboard_port: int
    gcs_port: int
    token_file: str
    temp_dir: str
    log_file: str
    prefix: str = ""
    """The Python environment (sys.prefix) whose ``python`` runs the jobs."""

    @property
    def jobs_address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def token(self) -> str:
        return Path(self.token_file).read_text().strip()


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are chosen, so the kernel
    never hands one out twice (Ray refuses two components on one port)."""
    with contextlib.ExitStack() as stack:
        held = [
            stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)
        ]
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]


def session_pids(session_id: int) -> list[int]:
    """PIDs of the live processes in a session (Linux /proc; other systems via ps).

    Zombies are left out: they hold nothing and vanish once their parent reaps them.
    """
    pids: list[int] = []
    proc = Path("/proc")
    if proc.is_dir():
        candidates = [int(p.name) for p in proc.iterdir() if p.name.isdigit()]
    else:  # pragma: no cover - macOS
        out = subprocess.run(["ps", "-A", "-o", "pid="], capture_output=True, text=True).stdout
        candidates = [int(x) for x in out.split()]
    for pid in candidates:
        if pid == os.getpid():
            continue
        try:
            if os.getsid(pid) == session_id and pid_alive(pid):
                pids.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def _dashboard_up(port: int, timeout: float = 2.0) -> bool:
    import urllib.error  # here: urllib.request costs every command's start-up
    import urllib.request

    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/api/gcs_healthz", timeout=timeout
        ) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def environment_key(prefix: str | None = None) -> str:
    """Names the Python environment (``sys.prefix``) a local head belongs to."""
    return hashlib.sha1(str(Path(prefix or sys.prefix).resolve()).encode()).hexdigest()[:10]


def require_local_extra() -> None:
    """Jobs on local Ray run in this environment: an error, in one line with the command that
    installs it, if it lacks what they import (pyproject's local extra: RLlib, torch, ...), as
    an environment made for driving remote clusters only does."""
    lacking = missing(LOCAL_EXTRA)
    if not lacking:
        return
    shown = ", ".join(lacking[:3]) + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else "")
    raise DriverError(
        f"local Ray cannot train here: this environment lacks {shown} ({DISTRIBUTION}'s "
        f"{LOCAL_EXTRA} extra, for jobs on local Ray; remote clusters need none of it): "
        f"{LOCAL_INSTALL} (in a checkout: pip install -e '.[{LOCAL_EXTRA}]')"
    )


class LocalRay:
    """Start, find and stop the local Ray head of this Python environment, state under ``home``."""

    def __init__(self, home: Path, prefix: str | None = None) -> None:
        self.prefix = str(Path(prefix or sys.prefix).resolve())
        self.root = home / "local"
        self.dir = self.root / environment_key(self.prefix)
        self.state_file = self.dir / "head.json"
        self.token_file = self.dir / "token"
        self.log_file = self.dir / "ray-start.log"
        # Ray's unix sockets live under the temp dir and their paths must stay under 108 bytes,
        # so the temp dir is short and derived from the state folder rather than inside it.
        digest = hashlib.sha1(str(self.dir.resolve()).encode()).hexdigest()[:10]
        self.temp_dir = Path("/tmp") / f"raydriver-{os.getuid()}" / digest

    # -- state -----------------------------------------------------------------------------
    def _read_state(self) -> LocalHead | None:
        try:
            return LocalHead(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def running(self) -> LocalHead | None:
        """The running head this driver started, or None (stale state is cleaned up)."""
        head = self._read_state()
        if head is None:
            return None
        if pid_alive(head.pid) and _dashboard_up(head.dashboard_port):
            return head
        if pid_alive(head.pid):
            # Alive but not answering: give a slow dashboard a moment before declaring it dead.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and pid_alive(head.pid):
                if _dashboard_up(head.dashboard_port):
                    return head
                time.sleep(0.5)
        self._kill_session(head.session_id)
        self.state_file.unlink(missing_ok=True)
        return None

    # -- start -----------------------------------------------------------------------------
    def _token(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.token_file.exists():
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return self.token_file.read_text().strip()

    def start(
        self,
        num_cpus: int | None = None,
        timeout: float = START_TIMEOUT_S,
        progress: Progress | None = None,
    ) -> tuple[LocalHead, bool]:
        """Return ``(head, started)``: the running head, starting one if there is none.

        Ray's own ``ray start`` gives its node 30 s to register (hard-coded in Ray's node.py):
        on a loaded machine it can miss that and exit with "The current node timed out during
        startup"; then it is started again (STARTS in all), within ``timeout`` in all.
        Without the local extra installed, an error that says so (:func:`require_local_extra`)."""
        require_local_extra()
        head = self.running()
        if head is not None:
            return head, False
        private_tmp()
        self._token()
        deadline = time.monotonic() + timeout
        for start in range(1, STARTS + 1):
            try:
                return self._start_once(num_cpus, deadline, timeout, progress), True
            except DriverError as e:
                # Ray's log says so in its traceback's last line; the error names an earlier one.
                timed_out = node_timed_out(str(e)) or node_timed_out(self._log_text())
                if not timed_out or start == STARTS or time.monotonic() > deadline - RETRY_NEEDS_S:
                    raise
                if progress:
                    progress(
                        "local Ray's node missed Ray's 30 s to register (a busy machine?); again"
                    )
        raise AssertionError("unreachable")

    def _start_once(
        self, num_cpus: int | None, deadline: float, timeout: float, progress: Progress | None
    ) -> LocalHead:
        ray_bin = Path(sys.executable).with_name("ray")
        if not ray_bin.exists():
            found = shutil.which("ray")
            if found is None:
                raise DriverError(
                    f"cannot start local Ray: no 'ray' executable next to {sys.executable} "
                    "or on PATH (install the package: pip install -e .)"
                )
            ray_bin = Path(found)
        names = [
            "port",
            "dashboard-port",
            "ray-client-server-port",
            "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port",
            "runtime-env-agent-port",
            "metrics-export-port",
            "node-manager-port",
            "object-manager-port",
        ]
        ports = dict(zip(names, _free_ports(len(names)), strict=True))
        cmd = [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            "--no-monitor",  # the autoscaler's monitor serves metrics on 0.0.0.0 without a token
            *[f"--{k}={v}" for k, v in ports.items()],
        ]
        if num_cpus is not None:
            cmd.append(f"--num-cpus={num_cpus}")
        env = dict(os.environ)
        for var in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
            env.pop(var, None)
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_file),
            RAY_USAGE_STATS_ENABLED="0",
            # No Prometheus endpoints: they listen on every interface and take no token (the
            # dashboard's maps 127.0.0.1 to the machine's address).
            **layout.RAY_NO_METRICS_ENV,
            # Jobs run `python script.py`: make that the driver's own interpreter.
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        )
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            proc = spawn(cmd, self.log_file, env)
        except OSError as e:
            raise DriverError(f"cannot start local Ray: {e}") from None
        head = LocalHead(
            pid=proc.pid,
            session_id=proc.pid,  # start_new_session: the child leads its own session
            dashboard_port=ports["dashboard-port"],
            gcs_port=ports["port"],
            token_file=str(self.token_file),
            temp_dir=str(self.temp_dir),
            log_file=str(self.log_file),
            prefix=self.prefix,
        )
        try:
            if progress:
                progress(f"starting local Ray (log: {self.log_file})")
            while True:
                if proc.poll() is not None:
                    raise DriverError(
                        f"local Ray did not start: 'ray start' exited with code {proc.returncode}"
                        f" ({self._last_log_line()})"
                    )
                # The dashboard answers before the node has registered (and `ray start` may
                # still give up on it): ready once `ray start` said so too.
                if self._said_started() and _dashboard_up(head.dashboard_port, timeout=1.0):
                    break
                if time.monotonic() > deadline:
                    raise DriverError(
                        f"local Ray did not start within {timeout:.0f} s ({self._last_log_line()})"
                    )
                time.sleep(0.5)
        except BaseException:
            # Nothing half-started is left behind: not on error, not on Ctrl-C.
            self._kill_session(head.session_id)
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                proc.wait(timeout=5)
            raise
        self.state_file.write_text(json.dumps(asdict(head), indent=2))
        return head

    def _said_started(self) -> bool:
        return STARTED_LINE in self._log_text()

    def _log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def _last_log_line(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log_file.read_text(errors="replace").splitlines()]
        except OSError:
            return "no log"
        lines = [ln for ln in lines if ln]
        for ln in reversed(lines):  # a traceback's verdict first: "Exception: ...", "...Error: ..."
            if re.match(r"^[A-Za-z_.]*(Exception|Error): ", ln):
                return ln[-300:]
        for ln in reversed(lines):
            if "Error" in ln or "error" in ln:
                return ln[-300:]
        return lines[-1][-300:] if lines else f"empty log {self.log_file}"

    # -- stop ------------------------------------------------------------------------------
    @staticmethod
    def _kill_session(session_id: int, grace: float = 10.0) -> None:
        pids = session_pids(session_id)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and session_pids(session_id):
            time.sleep(0.2)
        for pid in session_pids(session_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and session_pids(session_id):
            time.sleep(0.1)
        # Reap our own child if it is ours, so no zombie lingers in a long-lived caller.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(session_id, os.WNOHANG)

    @classmethod
    def others(cls, home: Path) -> list[LocalHead]:
        """Running heads that other Python environments started under ``home``."""
        mine = environment_key()
        found = []
        for state in sorted((home / "local").glob("*/head.json")):
            if state.parent.name == mine:
                continue
            with contextlib.suppress(OSError, ValueError, TypeError):
                head = LocalHead(**json.loads(state.read_text()))
                if pid_alive(head.pid):
                    found.append(head)
        return found

    def stop(self) -> bool:
        """Stop the head this driver started. Returns False if none was running."""
        head = self._read_state()
        if head is None:
            return False
        self._kill_session(head.session_id)
        self.state_file.unlink(missing_ok=True)
        shutil.rmtree(head.temp_dir, ignore_errors=True)
        return True


NO_CLUSTER_GIVEN = "no --head, --terraform-dir, --resource-group/--deployment or saved profile"


class LocalCluster:
    """The embedded default as a :class:`~driver.cluster.Cluster`: the driver's own Ray head."""

    cli_hint = ""

    def __init__(self, home: Path, results_root: Path, start: bool, progress: Progress) -> None:
        self.local = LocalRay(home)
        if start:
            head, _ = self.local.start(progress=progress)
            progress(f"using local Ray at {head.jobs_address} ({NO_CLUSTER_GIVEN})")
        else:
            running = self.local.running()
            if running is None:
                raise DriverError(
                    "no cluster: local Ray is not running and no remote cluster was given "
                    "(submit a job or run `python -m driver local start`)"
                )
            head = running
        self.head = head
        self.progress = progress
        self.results_root = results_root
        self.description = f"local Ray ({head.jobs_address})"

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm_up(self) -> None:
        pass

    def jobs(self) -> JobsClient:
        return JobsClient(self.head.jobs_address, self.head.token(), where="local Ray")

    def results_dir(self, submission_id: str) -> str:
        return str((self.results_root / submission_id).resolve())

    def autostop_state(self) -> dict[str, Any] | None:
        return None  # local Ray never stops itself

    def storage_state(self) -> dict[str, Any] | None:
        return None  # one machine: its own disk is every node's

    def download(
        self, submission_id: str, destination: Path, progress: ByteProgress | None = None
    ) -> DownloadReport:
        """Nothing to copy: say where the job wrote its results on this machine."""
        where = self.jobs().env_var(submission_id, RESULTS_ENV)
        if not where:
            raise DriverError(
                f"job {submission_id} has no {RESULTS_ENV} (was it submitted by python -m "
                "driver?): no results folder to point to"
            )
        if not Path(where).is_dir():
            raise DriverError(f"job {submission_id} wrote no results: {where} does not exist")
        return DownloadReport(where, Path(where), 0, 0, 0, in_place=True)

    def dashboard(self, local_ports: dict[str, int]) -> list[WebUI]:
        return [
            WebUI(DASHBOARD, self.head.jobs_address),
            WebUI(
                TENSORBOARD, "", f"not started locally: tensorboard --logdir {self.results_root}"
            ),
        ]

    def reconnect(self, reason: str) -> None:
        """Local Ray has no network path to heal: if its Jobs API went away, the head did."""
        if self.local.running() is None:
            raise ConnectionLost(f"local Ray stopped ({reason})")
        self.progress(f"local Ray answered again after: {reason}")

    def alive(self) -> bool:
        return pid_alive(self.head.pid)

    def shell(self, command: str | None, stdin: IO[Any], stdout: IO[Any], stderr: IO[Any]) -> int:
        raise DriverError(
            "ssh needs a remote cluster: expected --head, --terraform-dir, "
            "--resource-group/--deployment or a saved profile"
        )

    def close(self) -> None:
        pass
