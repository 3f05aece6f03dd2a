"""The services on the rehearsal's bridge: what a cluster on Azure reaches over the network.

Each stand-in has a module of its own here and starts with one call, given a :class:`Context`
(the cluster's name, folder, cache base and state; :meth:`Context.spawn` starts a process and
records it, :meth:`Context.port` is the stand-in's port on the bridge). ``down`` stops every
process started with a path of the cluster folder, so a stand-in that keeps its files (config,
log, launcher) there needs no teardown of its own.

- :mod:`.packages`: the torch index (an HTTP server) and the caching mirrors of the Debian
  archive and of PyPI, the nodes' only way to packages;
- :mod:`.keyvault`: Key Vault, holding the cluster token, with the TLS and token key the other
  Azure stand-ins share;
- :mod:`.imds`: each node's instance metadata service, inside its network namespace;
- :mod:`.compute`: Azure Compute for the workers' scale set (scaling mode ray);
- :mod:`.azurite`: Blob storage, played by Azurite, Azure's own emulator, over HTTPS with OAuth
  (the results storage; unless ``up --no-results-storage``). Its data lives outside the cluster
  folder and outlives ``down`` (its process does not: it is started with the cluster folder's
  certificate).

Azure's services are played by the package's stand-ins (:mod:`nodekit.rehearsal.standins`,
run with this interpreter as ``python -m``), Blob storage by Azurite. Adding a stand-in: a
module here with ``start(ctx)`` and the URL the nodes use, its port offset in
:data:`PORT_OFFSETS`, a call in ``Rehearsal.up`` and a line in ``Rehearsal.deploy_values``
(:mod:`nodekit.rehearsal.cluster`) when the nodes get its address as a deploy-time value.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from driver.errors import DriverError
from driver.procs import pid_alive, pids_with_cmdline, spawn
from nodekit.rehearsal.state import State, StateFile
from nodekit.rehearsal.system import run

PORT_OFFSETS = {
    "packages": 0,  # the torch index: the cluster's --http-port itself
    "keyvault": 1,
    "apt": 2,  # apt-cacher-ng
    "pypi": 3,  # proxpi
    "compute": 4,  # scaling mode ray
    "azurite": 5,  # Blob storage
}
"""Each stand-in's port on the bridge: the cluster's ``--http-port`` + its offset. The next
stand-in takes the next free offset."""


@dataclass
class Context:
    """What a service on the bridge is given."""

    name: str
    """The cluster's name."""
    dir: Path
    """The cluster folder: a process started with a path in it is stopped by ``down``."""
    base: Path
    """The rehearsal's base folder (caches kept across clusters live under it)."""
    state: State
    store: StateFile

    @property
    def host(self) -> str:
        """The host's address on the bridge, where every service listens."""
        return self.state.host_ip

    def port(self, service: str) -> int:
        return port(self.state, service)

    @property
    def azure_dir(self) -> Path:
        """The Azure stand-ins' files (config, TLS, logs)."""
        return self.dir / "azure"

    def spawn(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        """Start ``cmd`` in its own session (in ``env``, else this process's environment),
        output to ``log``, and record it; its pid."""
        pid = spawn(cmd, log, env).pid
        self.store.record(self.state, f"pid:{pid}")
        return pid


def port(state: State, service: str) -> int:
    """``service``'s port on the bridge (see :data:`PORT_OFFSETS`)."""
    return state.http_port + PORT_OFFSETS[service]


PORT_WAIT_S = 120.0
"""How long a stand-in may take to listen: only a bound on a hang. Azurite (Node.js) and the
Python fakes listen within seconds on a quiet machine; on a loaded one (CI: 2 cores at a load of
8-12) that is tens of seconds, and 15 s was not enough. A stand-in whose process ends is an
error at once."""


def wait_for_port(
    host: str,
    port: int,
    what: str,
    netns: str | None = None,
    pid: int | None = None,
    limit: float = PORT_WAIT_S,
) -> None:
    """Wait (``limit`` s at most) until something accepts TCP connections on host:port; with
    ``pid``, the process that is to listen there: its end is an error at once."""
    deadline = time.monotonic() + limit
    while True:
        if netns is None:
            try:
                with socket.create_connection((host, port), timeout=1):
                    return
            except OSError as e:
                why = str(e)
        else:
            probe = run(
                ["ip", "netns", "exec", netns, "bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"],
                check=False,
            )
            if probe.returncode == 0:
                return
            why = probe.stderr.strip()[-200:]
        if pid is not None and not pid_alive(pid):
            raise DriverError(f"{what} did not start on {host}:{port}: its process ended ({why})")
        if time.monotonic() > deadline:
            raise DriverError(f"{what} did not start on {host}:{port} within {limit:.0f} s: {why}")
        time.sleep(0.2)


def running(cluster_dir: Path, host_ip: str, state: State | None) -> set[int]:
    """Every service process of the cluster: the torch index's server (recorded, or found by
    its address) and everything started with a path of the cluster folder."""
    servers: set[int] = set()
    if state and state.http_pid is not None and pid_alive(state.http_pid):
        servers.add(state.http_pid)
    servers.update(pids_with_cmdline(f"http.server --bind {host_ip} "))
    servers.update(pids_with_cmdline(f"{cluster_dir}/"))
    return servers
