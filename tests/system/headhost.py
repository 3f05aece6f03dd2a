"""A throwaway cluster head on this machine: a real sshd and a real Ray head in a network namespace.

The driver's remote path expects a head laid out like python/driver/layout.py says (token, ready
and failed markers, results folder) behind SSH. This module builds exactly that, with real
components, so the driver needs no test hooks:

* **Network.** ``ip netns add`` a namespace and a veth pair with a private /30 taken from
  198.18.0.0/15 (RFC 2544's benchmarking range, routed nowhere): the host side gets the first
  address, the head the second. Loopback is up inside, so the head's 127.0.0.1:8265 (Ray's Jobs
  API) is reachable only from inside the namespace, like on a real head.
* **One init per head.** ``ip netns exec NS unshare --mount --propagation private --pid --fork
  --mount-proc`` runs a tiny init (PID 1 of a new PID namespace, reaping orphans) inside a
  private mount namespace where

  - ``/etc`` and ``/var/lib`` get a throwaway overlay, so the mount points ``/etc/ray-cluster``
    and ``/var/lib/ray-cluster`` exist there without touching the host's own folders;
  - ``/etc/ray-cluster`` and ``/var/lib/ray-cluster`` are bind mounts of this head's temp folders
    (``config_dir`` and ``state_dir``), so a test reads and writes the token, markers and results
    from the host side;
  - ``/run`` (sshd's privilege-separation folder) and ``/dev/shm`` (Ray's shared memory) are
    private tmpfs;
  - root's home (in the overlay's ``/etc/passwd``) is an empty folder of the head's, as an
    admin's on a fresh VM: a login runs no start-up files of this machine's root (its
    ``.bashrc`` may run ``pyenv init``, whose rehash lock a killed session leaves behind: every
    later login then waited 60 s for it).

  Every process of the head (sshd, Ray, the shells sshd starts, jobs) is started with
  ``nsenter`` into that init's namespaces, so all of them live in its PID namespace.
* **sshd** is Debian's ``/usr/sbin/sshd -D`` with a fresh ed25519 host key, root login by public
  key only (``PasswordAuthentication no``, ``KbdInteractiveAuthentication no``), SFTP, and a fresh
  ed25519 user key (``user_key``) that it accepts for root and for any user made with
  :meth:`HeadHost.add_user` (read through ``AuthorizedKeysCommand`` as root, because the temp
  folders are private). ``StrictModes no`` because its files live under /tmp.
  :meth:`HeadHost.start_sshd` starts more of them (other port, other host key) so a test can
  change a host key without disturbing the shared head.
* **Ray** (optional) is ``RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=/etc/ray-cluster/cluster-token
  ray start --head --node-ip-address=<head ip> --dashboard-host=127.0.0.1 --dashboard-port=8265
  --disable-usage-stats --block`` from this repository's .venv, with its own ``--temp-dir`` (the
  default /tmp/ray is shared with every other Ray on the machine) and HOME. Once ``ray start``
  says its node registered and the Jobs API answers, the ready marker is written, as the real
  bootstrap does (a node that misses Ray's 30 s to register on a loaded machine is started once
  more).

Teardown (also after failures, and for heads left by a killed run whose owner process is gone):
SIGKILL the init — the kernel then kills every process in its PID namespace — delete the network
namespace (which deletes the veth pair) and remove the temp folders. Nothing else is touched: no
``ray stop``, no process outside the namespace.

Fixtures (tests/system/conftest.py): ``head_host`` (session; sshd + Ray, ready) and
``make_head_host`` (a factory for bare heads: sshd only, no Ray, no ready marker, torn down after
the test). This module does not need pytest: outside it (benchmarks/driver_overhead.py),
``HeadHost(folder).start(ray=True)`` … ``stop()``. Needs root, iproute2, util-linux and
openssh-server.

What a test uses: ``ip``, ``host_ip``, ``target``/``cli_args`` (``--head root@IP -i KEY``),
``user_key``, ``token``, ``token_file``/``ready_marker``/``failed_marker``/``results_dir`` (host
side paths of the head's layout), ``write_ready``/``clear_ready``/``write_failed``, ``run`` and
``popen`` (commands on the head), ``ray_env`` (environment for Ray commands there),
``add_user``, ``start_sshd``, ``unplug``/``plug``, ``ssh_peers`` (who is still connected),
``sshd.freeze``/``Sshd.thaw`` (SIGSTOP/SIGCONT of sshd: a head that stops answering while its
kernel still acknowledges) and ``sshd.known_hosts_line`` (to pre-trust the head). On the client
side, ``driver_env(home)`` keeps the real user's HOME, SSH agent and cluster variables out of a
driver process, and
``leftovers_snapshot``/``assert_nothing_left`` check that an in-process command left no thread
or socket behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import itertools
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from driver import layout
from driver.localray import RETRY_NEEDS_S, STARTED_LINE, node_timed_out
from driver.procs import pid_alive

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
NS_PREFIX = "raydrv-"
"""Network namespaces made here are named ``raydrv-<owner pid>-<n>``."""
SUBNET_POOL = ipaddress.ip_network("198.18.0.0/15")
_SERIAL = itertools.count()
SSH_USER = "root"
RAY_START_TIMEOUT_S = 300.0
"""Only a bound on a hang: on a loaded machine (CI: 2 cores, load 8-12) Ray's start takes
minutes, and its node may miss Ray's own 30 s to register once (see :meth:`HeadHost.start_ray`)."""

_INIT = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("init ready", flush=True)
while True:  # PID 1 of the head: reap whatever gets orphaned.
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.5)
"""


def _sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kw)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def keygen(path: Path, comment: str = "raydriver-test") -> Path:
    """A fresh passphrase-less ed25519 key pair at ``path`` / ``path.pub``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
    return path


def fingerprint(pub_key: Path) -> str:
    """OpenSSH's SHA256 fingerprint of a public key file (``SHA256:...``)."""
    return _sh("ssh-keygen", "-l", "-E", "sha256", "-f", str(pub_key)).stdout.split()[1]


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = _sh("ip", "-4", "-o", "addr", "show").stdout
    nets = []
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    return nets


def reap_stale_heads() -> list[str]:
    """Delete heads left behind by a test run that was killed (its owner pid is gone)."""
    removed = []
    for line in _sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(NS_PREFIX):
            continue
        try:
            owner = int(name[len(NS_PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if pid_alive(owner):
            continue
        pids = _sh("ip", "netns", "pids", name, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _sh("ip", "netns", "del", name, check=False)
        removed.append(name)
    return removed


@dataclass
class Sshd:
    """One sshd process on the head."""

    head: HeadHost
    port: int
    host_key: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.head.workdir / f"sshd-{self.port}.log"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.host_key.with_name(self.host_key.name + ".pub"))

    @property
    def known_hosts_line(self) -> str:
        """This sshd's key as a known_hosts line (to pre-trust it in a test's driver home)."""
        name = self.head.ip if self.port == 22 else f"[{self.head.ip}]:{self.port}"
        kind, blob = self.host_key.with_name(self.host_key.name + ".pub").read_text().split()[:2]
        return f"{name} {kind} {blob}\n"

    @property
    def target(self) -> str:
        """``user@host[:port]`` as the driver's ``--head`` takes it."""
        suffix = "" if self.port == 22 else f":{self.port}"
        return f"{SSH_USER}@{self.head.ip}{suffix}"

    def start(self) -> Sshd:
        config = self.head.workdir / f"sshd-{self.port}.conf"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.head.ip}",
                    f"HostKey {self.host_key}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    # Read as root: the test's temp folders are not readable by other users.
                    "AuthorizedKeysFile none",
                    f"AuthorizedKeysCommand /bin/cat {self.head.authorized_keys}",
                    "AuthorizedKeysCommandUser root",
                    "StrictModes no",
                    "PidFile none",
                    "AllowTcpForwarding yes",
                    "UseDNS no",
                    "LogLevel VERBOSE",
                    f"Subsystem sftp {SFTP_SERVER}",
                    "",
                ]
            )
        )
        with open(self.log, "ab") as log:
            self.proc = self.head.popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log)
        deadline = time.monotonic() + 120  # a bound on a hang, not a speed target
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {self.target} did not start: {self.log.read_text()}")
            time.sleep(0.05)
        return self

    def _listening(self) -> bool:
        out = self.head.run(["ss", "-ltnH", f"sport = :{self.port}"], check=False).stdout
        return f"{self.head.ip}:{self.port}" in out

    def stop(self) -> None:
        if self.proc is None:
            return
        # nsenter forked sshd inside the PID namespace: signal sshd itself, then reap nsenter.
        for pid in _children(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in _children(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def freeze(self, listener: bool = False) -> list[int]:
        """SIGSTOP the sshd processes serving this sshd's connections (and, with ``listener``,
        the one that accepts new ones): the head's kernel still acknowledges every packet and
        accepts new connections, but nothing is read or sent — an overloaded or stuck sshd.
        Returns the host pids, for :meth:`thaw`."""
        assert self.proc is not None
        (accepting,) = _children(self.proc.pid)  # nsenter forked sshd -D
        serving, todo = [], _children(accepting)
        while todo:
            pid = todo.pop()
            serving.append(pid)
            todo += _children(pid)
        frozen = serving + ([accepting] if listener else [])
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        return frozen

    @staticmethod
    def thaw(pids: Sequence[int]) -> None:
        """Undo :meth:`freeze` (processes that are gone meanwhile are skipped)."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def restart_with_new_host_key(self) -> None:
        """What a reinstalled or impersonated head looks like to a client."""
        self.stop()
        keygen(self.host_key, "raydriver-test-host")
        self.start()


class HeadHost:
    """A cluster head in its own network, PID and mount namespaces (see the module docstring)."""

    def __init__(self, workdir: Path | None = None) -> None:
        reap_stale_heads()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="raydrv-head-"))
        self.name = ""
        self.veth_head = self.veth_host = ""
        self.ip = ""
        self.host_ip = ""
        self.init_proc: subprocess.Popen[bytes] | None = None
        self.init_pid = 0
        self.sshd: Sshd | None = None
        self.extra_sshds: list[Sshd] = []
        self.ray_proc: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.config_dir = self.workdir / "etc-ray-cluster"
        """Host-side view of the head's /etc/ray-cluster."""
        self.state_dir = self.workdir / "var-lib-ray-cluster"
        """Host-side view of the head's /var/lib/ray-cluster."""
        self.user_key = self.workdir / "user" / "id_ed25519"
        """The private key the head accepts for root (``-i``)."""
        self.authorized_keys = self.workdir / "ssh" / "authorized_keys"
        self.ray_temp_dir = Path("/tmp") / f"raydrv-ray-{secrets.token_hex(4)}"
        self.ray_log = self.workdir / "ray-start.log"

    # -- paths as the driver sees them -----------------------------------------------------
    @property
    def token_file(self) -> Path:
        return self.config_dir / Path(layout.TOKEN_FILE).name

    @property
    def ready_marker(self) -> Path:
        return self.state_dir / Path(layout.READY_MARKER).name

    @property
    def failed_marker(self) -> Path:
        return self.state_dir / Path(layout.FAILED_MARKER).name

    @property
    def results_dir(self) -> Path:
        return self.state_dir / Path(layout.RESULTS_DIR).name

    @property
    def target(self) -> str:
        """``root@<head ip>``, for ``--head``."""
        assert self.sshd is not None
        return self.sshd.target

    @property
    def cli_args(self) -> list[str]:
        """The driver options that reach this head: ``--head root@IP -i KEY``."""
        return ["--head", self.target, "-i", str(self.user_key)]

    # -- life cycle ------------------------------------------------------------------------
    def start(self, ray: bool = True) -> HeadHost:
        if os.geteuid() != 0:
            raise RuntimeError("a test head needs root (ip netns, unshare, mount)")
        for tool in (SSHD, SFTP_SERVER, shutil.which("nsenter"), shutil.which("ip")):
            if not tool or not Path(tool).exists():
                raise RuntimeError(
                    f"a test head needs {tool or 'nsenter/ip'}: install the Debian packages in "
                    "scripts/apt-packages.txt (scripts/test.sh does, as root)"
                )
        try:
            self._network()
            self._init()
            self._files()
            self.sshd = Sshd(self, 22, self.workdir / "ssh" / "host_ed25519_key")
            keygen(self.sshd.host_key, "raydriver-test-host")
            self.sshd.start()
            if ray:
                self.start_ray()
                self.write_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _network(self) -> None:
        used = _used_networks()
        while True:
            # Never reuse a name: the kernel frees a deleted namespace (and its veth) lazily.
            n = next(_SERIAL)
            name = f"{NS_PREFIX}{os.getpid()}-{n}"
            if _sh("ip", "netns", "add", name, check=False).returncode == 0:
                break
            if n > 1000:
                raise RuntimeError("cannot create a network namespace (are we root?)")
        self.name = name
        blocks = SUBNET_POOL.num_addresses // 4
        start = secrets.randbelow(blocks)
        for i in range(blocks):
            net = ipaddress.ip_network(
                (int(SUBNET_POOL.network_address) + 4 * ((start + i) % blocks), 30)
            )
            if not any(net.overlaps(u) for u in used):
                break
        host_ip, head_ip = list(net.hosts())
        self.host_ip, self.ip = str(host_ip), str(head_ip)
        tag = f"rd{os.getpid() % 10_000_000}{n:x}"
        veth_host, veth_head = f"{tag}h", f"{tag}n"
        self.veth_head = veth_head
        self.veth_host = veth_host
        _sh("ip", "link", "add", veth_host, "type", "veth", "peer", "name", veth_head)
        _sh("ip", "link", "set", veth_head, "netns", self.name)
        _sh("ip", "addr", "add", f"{host_ip}/30", "dev", veth_host)
        _sh("ip", "link", "set", veth_host, "up")
        inside = ("ip", "netns", "exec", self.name)
        _sh(*inside, "ip", "addr", "add", f"{head_ip}/30", "dev", veth_head)
        _sh(*inside, "ip", "link", "set", veth_head, "up")
        _sh(*inside, "ip", "link", "set", "lo", "up")

    def _init(self) -> None:
        ovl = self.workdir / "overlay"
        for d in ("etc/upper", "etc/work", "lib/upper", "lib/work"):
            (ovl / d).mkdir(parents=True, exist_ok=True)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / Path(layout.RESULTS_DIR).name).mkdir(parents=True, exist_ok=True)
        root_home = self.workdir / "root-home"
        passwd_edit = rf"s#^\(root:[^:]*:0:0:[^:]*:\)[^:]*:#\1{root_home}:#"
        script = " && ".join(
            [
                "mount -t overlay overlay -o "
                f"lowerdir=/etc,upperdir={ovl}/etc/upper,workdir={ovl}/etc/work /etc",
                "mount -t overlay overlay -o "
                f"lowerdir=/var/lib,upperdir={ovl}/lib/upper,workdir={ovl}/lib/work /var/lib",
                f"mkdir -p -m 0700 {root_home}",
                f"sed -i {shlex.quote(passwd_edit)} /etc/passwd",
                f"mkdir -p {layout.CONFIG_DIR} {layout.STATE_DIR}",
                f"mount --bind {self.config_dir} {layout.CONFIG_DIR}",
                f"mount --bind {self.state_dir} {layout.STATE_DIR}",
                "mount -t tmpfs -o mode=0755 tmpfs /run",
                "mkdir -p -m 0755 /run/sshd",
                "mount -t tmpfs tmpfs /dev/shm",
                f"exec {shlex.quote(sys.executable)} -c {shlex.quote(_INIT)}",
            ]
        )
        self.init_proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.name,
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--mount-proc",
                "sh",
                "-c",
                script,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.init_proc.stdout is not None
        line = self.init_proc.stdout.readline()
        if b"init ready" not in line:
            err = self.init_proc.stderr.read().decode() if self.init_proc.stderr else ""
            raise RuntimeError(f"head init did not start: {line!r} {err}")
        children = _children(self.init_proc.pid)
        if len(children) != 1:
            raise RuntimeError(f"cannot find the head's init under unshare: {children}")
        self.init_pid = children[0]

    def _files(self) -> None:
        keygen(self.user_key, "raydriver-test-user")
        self.authorized_keys.parent.mkdir(parents=True, exist_ok=True)
        self.authorized_keys.write_text(self.user_key.with_name("id_ed25519.pub").read_text())
        self.token = secrets.token_hex(32)
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o640)

    def stop(self) -> None:
        """Remove everything this head started; safe to call twice and after a failed start."""
        if self.init_pid:
            # PID 1 of the namespace: when it dies the kernel kills every process inside.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
        for proc in (self.init_proc, self.ray_proc, *(s.proc for s in self._sshds())):
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
        if self.name:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                left = _sh("ip", "netns", "pids", self.name, check=False).stdout.split()
                if not left:
                    break
                time.sleep(0.1)
            if self.veth_host:
                _sh("ip", "link", "del", self.veth_host, check=False)  # takes its peer along
            _sh("ip", "netns", "del", self.name, check=False)
            self.name = ""
        self.init_pid = 0
        self.init_proc = self.ray_proc = None
        shutil.rmtree(self.ray_temp_dir, ignore_errors=True)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _sshds(self) -> list[Sshd]:
        return ([self.sshd] if self.sshd else []) + self.extra_sshds

    # -- running things on the head --------------------------------------------------------
    def _enter(self, cmd: Sequence[str]) -> list[str]:
        assert self.init_pid, "head not started"
        return [
            "nsenter",
            f"--target={self.init_pid}",
            "--net",
            "--mount",
            "--pid",
            "--",
            *cmd,
        ]

    def run(
        self, cmd: Sequence[str], check: bool = True, timeout: float = 120, **kw
    ) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
        """Run a command on the head (its network, mounts and PID namespace) and wait for it."""
        return subprocess.run(
            self._enter(cmd), check=check, capture_output=True, text=True, timeout=timeout, **kw
        )

    def popen(self, cmd: Sequence[str], **kw) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
        """Start a command on the head; it dies with the head at the latest."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.STDOUT)
        return subprocess.Popen(self._enter(cmd), **kw)

    @property
    def ray_env(self) -> dict[str, str]:
        """Environment for Ray commands on the head (token auth, this repo's .venv first)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RAY_", "PYTEST_")) and k not in ("RAYDRIVER_HOME",)
        }
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=layout.TOKEN_FILE,
            RAY_USAGE_STATS_ENABLED="0",
            HOME=str(self.workdir / "ray-home"),
            PATH=os.pathsep.join([str(VENV_BIN), env.get("PATH", "/usr/bin:/bin")]),
        )
        return env

    def start_ray(self, num_cpus: int = 2, timeout: float = RAY_START_TIMEOUT_S) -> None:
        """Ray's head, ready once ``ray start`` said its node registered and the Jobs API
        answers (the dashboard answers before the node has registered, and ``ray start`` may
        still give up on it). Ray gives its node 30 s to register, which a loaded machine can
        miss ("The current node timed out during startup", or its client server's "Timed out
        waiting for node info", which ends ``ray start --block``): then it is started once more,
        within ``timeout`` in all, as the driver's local Ray does (driver/localray.py)."""
        (self.workdir / "ray-home").mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self._start_ray_once(num_cpus, deadline, timeout)
        except RuntimeError as e:
            if not node_timed_out(str(e)) or time.monotonic() > deadline - RETRY_NEEDS_S:
                raise
            # What the failed start left (its GCS, dashboard): this head's processes only.
            self.run([str(VENV_BIN / "ray"), "stop", "--force"], check=False, env=self.ray_env)
            self._start_ray_once(num_cpus, deadline, timeout)

    def _start_ray_once(self, num_cpus: int, deadline: float, timeout: float) -> None:
        cmd = [
            str(VENV_BIN / "ray"),
            "start",
            "--head",
            "--block",
            f"--node-ip-address={self.ip}",
            f"--port={layout.RAY_GCS_PORT}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={layout.RAY_DASHBOARD_PORT}",
            "--disable-usage-stats",
            f"--temp-dir={self.ray_temp_dir}",
            f"--num-cpus={num_cpus}",
            "--object-store-memory=300000000",
        ]
        offset = self.ray_log.stat().st_size if self.ray_log.exists() else 0
        with open(self.ray_log, "ab") as log:
            self.ray_proc = self.popen(cmd, stdout=log, env=self.ray_env, cwd=self.workdir)
        probe = (
            f"import urllib.request as u; t = open({layout.TOKEN_FILE!r}).read().strip(); "
            f"u.urlopen(u.Request('http://127.0.0.1:{layout.RAY_DASHBOARD_PORT}/api/version', "
            "headers={'Authorization': 'Bearer ' + t}), timeout=10)"
        )
        while True:
            said = self.ray_log.read_bytes()[offset:].decode(errors="replace")
            if self.ray_proc.poll() is not None:
                raise RuntimeError(f"ray start exited ({self.ray_proc.returncode}): {said[-3000:]}")
            if (
                STARTED_LINE in said
                and self.run([sys.executable, "-c", probe], check=False).returncode == 0
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray did not start in {timeout:.0f} s: {said[-3000:]}")
            time.sleep(0.5)

    # -- markers ---------------------------------------------------------------------------
    def write_ready(self) -> None:
        status = {"status": "ready", "role": "head", "ip": self.ip, "time": time.time()}
        self.ready_marker.write_text(json.dumps(status) + "\n")

    def clear_ready(self) -> None:
        self.ready_marker.unlink(missing_ok=True)

    def write_failed(self, reason: str) -> None:
        self.failed_marker.write_text(reason + "\n")

    # -- observation -----------------------------------------------------------------------
    def ssh_peers(self) -> list[str]:
        """Established SSH connections to the head, as ``peer_ip:port`` (all sshd ports)."""
        ports = " or ".join(f"sport = :{s.port}" for s in self._sshds())
        out = self.run(["ss", "-tnH", "state", "established", f"( {ports} )"], check=False).stdout
        return [line.split()[-1] for line in out.splitlines() if line.strip()]

    def add_user(self, name: str, in_ray_group: bool = True) -> str:
        """A non-root login like the cluster's admin user; returns ``name@ip`` for ``--head``.

        The account exists only inside the head (its /etc is an overlay). As on a real head,
        the token becomes ``root:ray`` mode 0640, so only members of group ray can read it.
        """
        groups = "-G ray" if in_ray_group else ""
        self.run(
            [
                "sh",
                "-c",
                f"getent group ray >/dev/null || groupadd --system ray; "
                f"chgrp ray {layout.TOKEN_FILE} && chmod 0640 {layout.TOKEN_FILE}; "
                f"id -u {name} >/dev/null 2>&1 || "
                f"useradd --no-log-init --no-create-home --no-user-group -d / -s /bin/sh "
                f"{groups} {name}; usermod -p '*' {name}",  # key login only, not 'locked'
            ]
        )
        return f"{name}@{self.ip}"

    def unplug(self) -> None:
        """Take the head's network link down: packets to it vanish, nothing answers (a host
        that is off, or a firewall that drops).

        The head's MAC address stays pinned on this side, so nothing says "no route to host"
        either: without it, this machine's ARP gives up on the head after about 3 s and fails
        every connection waiting for it, a moment that races a client's own timeout (a
        --connect-timeout 1 attempt begun 2 s after the first one hit it whenever a loaded
        machine started it 70 ms late). A head on Azure that is off just never answers."""
        link = _sh("ip", "netns", "exec", self.name, "ip", "-o", "link", "show", self.veth_head)
        words = link.stdout.split()
        mac = words[words.index("link/ether") + 1]
        _sh("ip", "neigh", "replace", self.ip, "lladdr", mac, "dev", self.veth_host,
            "nud", "permanent")  # fmt: skip
        self.run(["ip", "link", "set", self.veth_head, "down"])

    def plug(self) -> None:
        """Undo :meth:`unplug`: the link comes back with its address and route, and the
        connections that lived through the silence go on (a laptop waking up)."""
        self.run(["ip", "link", "set", self.veth_head, "up"])
        _sh("ip", "neigh", "del", self.ip, "dev", self.veth_host, check=False)

    def start_sshd(self, port: int) -> Sshd:
        """Another sshd on ``port`` with its own host key (stopped with the head)."""
        sshd = Sshd(self, port, self.workdir / "ssh" / f"host_{port}_ed25519_key")
        keygen(sshd.host_key, "raydriver-test-host")
        self.extra_sshds.append(sshd.start())
        return sshd


# -- the client side -----------------------------------------------------------------------------
def driver_env(home: Path, keep_connection: float = 0.0) -> dict[str, str]:
    """Environment for a driver process in a test: nothing from the real user leaks in.

    HOME points at ``home/user-home`` (so ~/.ssh/known_hosts and ~/.ssh/id_* are the test's),
    no SSH agent, no cluster named by the environment, no Terraform version check. Kept
    connections (``keep_connection`` seconds, 0: none, so a command's connection ends with it,
    as most tests check) live in a runtime folder of this home's own, short enough for a Unix
    socket's path.
    """
    user_home = home / "user-home"
    user_home.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    runtime = Path(tempfile.gettempdir()) / f"raydrv-run-{digest}"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {
        "RAYDRIVER_HOME": str(home),
        "HOME": str(user_home),
        "SSH_AUTH_SOCK": "",
        "RAYDRIVER_HEAD": "",
        "RAYDRIVER_READY_TIMEOUT": "",
        "RAYDRIVER_KEEP_CONNECTION": f"{keep_connection:g}",
        "XDG_RUNTIME_DIR": str(runtime),
        "CHECKPOINT_DISABLE": "1",
    }


@dataclass(frozen=True)
class Leftovers:
    threads: frozenset[int]
    sockets: frozenset[str]


def _socket_inodes() -> frozenset[str]:
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:"):
                found.add(target)
    return frozenset(found)


def leftovers_snapshot() -> Leftovers:
    """This process's threads and sockets now (import the driver's libraries first)."""
    import threading

    import paramiko  # noqa: F401
    import ray.job_submission  # noqa: F401

    return Leftovers(frozenset(t.ident or 0 for t in threading.enumerate()), _socket_inodes())


def assert_nothing_left(before: Leftovers, wait: float = 60.0) -> None:
    """No thread and no socket that was not there ``before`` (after up to ``wait`` seconds)."""
    import threading

    deadline = time.monotonic() + wait
    while True:
        threads = [
            t for t in threading.enumerate() if t.is_alive() and t.ident not in before.threads
        ]
        sockets = _socket_inodes() - before.sockets
        if not threads and not sockets:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left running: threads {threads}, sockets {sorted(sockets)}")
        time.sleep(0.1)
