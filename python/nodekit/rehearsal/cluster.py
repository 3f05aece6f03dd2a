"""Boot, inspect and remove a rehearsal cluster (see :mod:`nodekit.rehearsal`).

Everything ``up`` creates is recorded in ``<base>/clusters/<name>/state.json`` *before* it is
created, and every name carries the cluster's prefix, so ``down`` removes it all again: after a
clean ``up``, after a failed one, and after a crash that lost the state file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from driver import layout
from driver.errors import DriverError
from driver.procs import pid_alive, pids_with_cmdline, spawn
from driver.progress import Progress, silent
from nodekit import render
from nodekit.node.azure_vmss_provider import parse_scale_set_id
from nodekit.rehearsal import mirrors, trust
from nodekit.rehearsal.image import ADMIN_USER, ImageCache, document_requirements
from nodekit.rehearsal.system import mount_overlay, require_root_linux, run

BASE_ENV = "RAYDRIVER_REHEARSAL_DIR"
DEFAULT_BASE = Path("/var/lib/ray-azure-rl/rehearsal")
DEFAULT_SUBNET = "10.213.0.0/24"
DEFAULT_HTTP_PORT = 8470
VAULT_PORT_OFFSET = 1
"""The fake Key Vault listens on the bridge at the package server's port + 1."""
APT_PORT_OFFSET = 2
"""apt-cacher-ng: the package server's port + 2."""
PYPI_PORT_OFFSET = 3
"""proxpi: the package server's port + 3."""
COMPUTE_PORT_OFFSET = 4
"""The fake Azure Compute endpoint (scaling mode ray): the package server's port + 4."""
# checkov:skip=CKV_SECRET_6:The name of the token's Key Vault secret, not a secret value
TOKEN_SECRET_NAME = "ray-cluster-token"
FAKES = "tests/fakes/azure_node.py"
"""Azure's instance metadata service and Key Vault, played by the repository's test fakes."""
COMPUTE_FAKE = "tests/fakes/azure_compute.py"
"""Azure Compute for the workers' scale set (scaling mode ray), played by the test fake: raising
its capacity boots worker containers here, deleting an instance removes that container."""
TERMINATE_ACK_TIMEOUT_S = 120
"""How long a deleted worker may take to acknowledge its Terminate event (the scale set's
termination notice; the watcher on the worker drains, stops Ray and acknowledges)."""
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,8}$")


def default_base() -> Path:
    return Path(os.environ.get(BASE_ENV) or DEFAULT_BASE)


@dataclass
class Node:
    name: str
    role: str
    ip: str
    netns: str
    veth: str
    dir: str
    pid: int | None = None
    instance_id: str = ""
    """Scaling mode ray: the node's instance id in the fake scale set (its VM name's suffix)."""

    @property
    def root(self) -> Path:
        return Path(self.dir) / "root"

    @property
    def console_log(self) -> Path:
        return Path(self.dir) / "console.log"


@dataclass
class State:
    name: str
    subnet: str
    bridge: str
    host_ip: str
    http_port: int
    ssh_key: str
    admin_user: str = ADMIN_USER
    public_key: str = ""
    documents_dir: str = ""
    extra_pip: list[str] = field(default_factory=list)
    extra_apt: list[str] = field(default_factory=list)
    warm_node_cache: bool = False
    rootfs: str = ""
    http_pid: int | None = None
    identity_client_id: str = ""
    """The nodes' managed identity, as the fake metadata service and Key Vault know it."""
    scaling_mode: str = "cpu"
    """"ray": Ray's autoscaler on the head drives a fake scale set whose instances are workers
    booted (and removed) here."""
    autoscaler_client_id: str = ""
    """The head's autoscaler identity (scaling mode ray), allowed on the fake scale set."""
    min_workers: int = 0
    max_workers: int = 4
    idle_timeout_minutes: int = 5
    nodes: list[Node] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    head_host_keys: list[list[str]] = field(default_factory=list)
    """The head's SSH host keys (type, base64) that ``up`` recorded in ``known_hosts``."""
    known_hosts: str = ""
    """The driver's known_hosts those keys went to (``down`` removes them there)."""

    @property
    def head(self) -> Node:
        return next(n for n in self.nodes if n.role == "head")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        data["nodes"] = [Node(**n) for n in data.get("nodes", [])]
        return cls(**data)


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    return []


class Rehearsal:
    """One named rehearsal cluster under ``base``."""

    def __init__(
        self,
        name: str = "rehearsal",
        base: Path | None = None,
        subnet: str = DEFAULT_SUBNET,
        http_port: int = DEFAULT_HTTP_PORT,
    ) -> None:
        if not NAME_RE.match(name):
            raise DriverError(
                f"rehearsal name {name!r}: use 1-9 lowercase letters/digits, starting with a letter"
            )
        try:
            net = ipaddress.ip_network(subnet)
        except ValueError:
            raise DriverError(f"--subnet {subnet!r} is not a network like 10.213.0.0/24") from None
        if not isinstance(net, ipaddress.IPv4Network) or net.num_addresses < 16:
            raise DriverError(f"--subnet {subnet}: need an IPv4 network of at least /28")
        self.name = name
        self.base = base or default_base()
        self.subnet: ipaddress.IPv4Network = net
        self.http_port = http_port
        self.dir = self.base / "clusters" / name
        self.state_file = self.dir / "state.json"
        self.cache = ImageCache(self.base / "cache")

    # -- state -----------------------------------------------------------------------------
    def load(self) -> State | None:
        try:
            return State.from_json(self.state_file.read_text())
        except (OSError, ValueError, TypeError):
            return None

    def _save(self, state: State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    # -- up --------------------------------------------------------------------------------
    def up(
        self,
        workers: int = 2,
        extra_pip: list[str] | None = None,
        ssh_public_key: Path | None = None,
        extra_apt: list[str] | None = None,
        documents_dir: Path | None = None,
        torch_index_url: str | None = None,
        warm_node_cache: bool = False,
        timeout: float = 1800,
        progress: Progress = silent,
        scaling_mode: str = "cpu",
        min_workers: int = 0,
        max_workers: int = 4,
        idle_timeout_minutes: int = 5,
    ) -> State:
        """Build what is missing, boot head + ``workers`` and wait until Ray runs on all.

        ``scaling_mode="ray"``: Ray's autoscaler on the head drives a fake scale set (Azure
        Compute played on the bridge) whose instances are worker containers booted and removed
        here; the ``workers`` booted now are its first instances."""
        require_root_linux()
        if not 0 <= workers <= 50:
            raise DriverError(f"--workers must be between 0 and 50, got {workers}")
        if scaling_mode not in ("cpu", "ray"):
            raise DriverError(f"--scaling-mode must be cpu or ray, got {scaling_mode!r}")
        if not (0 <= min_workers <= max_workers <= 40 and max_workers >= 1):
            raise DriverError(
                f"--min-workers {min_workers} / --max-workers {max_workers}: need "
                "0 <= min <= max, 1 <= max <= 40"
            )
        if not 1 <= idle_timeout_minutes <= 1440:
            raise DriverError(f"--idle-timeout-minutes must be 1-1440, got {idle_timeout_minutes}")
        if self.load() is not None or self.dir.exists():
            raise DriverError(
                f"rehearsal cluster {self.name!r} exists already ({self.dir}): "
                f"run `python -m nodekit rehearse down --name {self.name}` first"
            )
        if ssh_public_key is not None and not ssh_public_key.is_file():
            raise DriverError(f"--ssh-public-key: no such file: {ssh_public_key}")
        extra_pip = list(extra_pip or [])
        for req in extra_pip:
            if not req or any(c.isspace() for c in req) or req.startswith("-"):
                raise DriverError(f"--pip {req!r}: expected one requirement such as 'x==1.0'")
        extra_apt = list(extra_apt or [])
        for package in extra_apt:
            if not render.DEB_NAME.match(package):
                raise DriverError(f"--apt {package!r}: expected one Debian package name")
        hosts = list(self.subnet.hosts())
        self._check_subnet_free()
        documents_dir = documents_dir or render.rendered_dir()
        documents = {r: (documents_dir / f"{r}.yaml").read_text() for r in render.ROLES}
        needs = document_requirements(documents)
        torch_req = next((r for r in needs.requirements if r.startswith("torch==")), None)
        if torch_req is None:
            raise DriverError("the rendered documents do not pin torch")

        t0 = time.monotonic()
        rootfs = self.cache.ensure_rootfs(progress)
        self.cache.ensure_torch(
            torch_req,
            # Where Azure nodes get torch by default is where the host fetches it for the nodes.
            torch_index_url or render.deploy_value_defaults()["TORCH_INDEX_URL"],
            progress,
        )
        proxpi = mirrors.ensure_proxpi(self.base / "tools", progress)
        progress(f"image, torch and mirror tools ready ({time.monotonic() - t0:.0f} s)")

        self.dir.mkdir(parents=True)
        key_path = self.dir / "id_ed25519"
        if ssh_public_key is None:
            public_key = _new_ssh_key(key_path)
        else:
            public_key = ssh_public_key.read_text().strip()
            key_path = ssh_public_key.with_suffix("")
        (self.dir / "token").write_text(secrets.token_hex(32))
        (self.dir / "token").chmod(0o600)
        state = State(
            name=self.name,
            subnet=str(self.subnet),
            bridge=f"rh-{self.name}",
            host_ip=str(hosts[0]),
            http_port=self.http_port,
            ssh_key=str(key_path),
            public_key=public_key,
            documents_dir=str(documents_dir),
            extra_pip=extra_pip,
            extra_apt=extra_apt,
            warm_node_cache=warm_node_cache,
            rootfs=str(rootfs),
            identity_client_id=str(uuid.uuid4()),
            scaling_mode=scaling_mode,
            autoscaler_client_id=str(uuid.uuid4()) if scaling_mode == "ray" else "",
            min_workers=min_workers,
            max_workers=max_workers,
            idle_timeout_minutes=idle_timeout_minutes,
        )
        self._save(state)
        self._create_bridge(state)
        self._start_http(state)
        self._start_mirrors(state, proxpi)
        self._start_vault(state)
        new = [self._plan_node(state, "head"), *[self._plan_node(state) for _ in range(workers)]]
        if scaling_mode == "ray":
            self._start_compute(state, new[1:])
        for node in new:
            self._create_node(state, node)
        progress(
            f"booted {len(new)} containers on {state.bridge} ({self.subnet}); "
            "waiting for cloud-init and Ray"
        )
        self.wait_ready(state, timeout, progress)
        keys, known_hosts = trust.record(state.head.ip, state.head.root, self.dir)
        state.head_host_keys, state.known_hosts = [list(k) for k in keys], str(known_hosts)
        self._save(state)
        progress(f"recorded the head's host keys in {known_hosts}")
        progress(f"rehearsal cluster {self.name!r} is up ({time.monotonic() - t0:.0f} s)")
        return state

    def add_workers(
        self, count: int = 1, timeout: float = 1800, progress: Progress = silent
    ) -> list[Node]:
        """Boot ``count`` more workers into the running cluster (like a scale-out on Azure)."""
        require_root_linux()
        state = self.load()
        if state is None:
            raise DriverError(f"no rehearsal cluster {self.name!r}: run `rehearse up` first")
        # The cluster's own network, whatever this object was constructed with.
        self.subnet = ipaddress.IPv4Network(state.subnet)
        if not 1 <= count <= 50 - (len(state.nodes) - 1):
            raise DriverError(f"--count must be between 1 and {51 - len(state.nodes)}")
        new = [self._plan_node(state) for _ in range(count)]
        for node in new:
            self._create_node(state, node)
        progress(f"booted {', '.join(n.name for n in new)}; waiting for cloud-init and Ray")
        self.wait_ready(state, timeout, progress, nodes=new)
        return new

    def _plan_node(
        self, state: State, role: str = "worker", index: int | None = None, ip: str | None = None
    ) -> Node:
        """The next node; a scale set's instance comes with its own index and address."""
        if index is None:
            index = len(state.nodes)
            if (role == "head") != (index == 0):
                raise AssertionError("the head is node 0")
        name = "head" if role == "head" else f"worker-{index}"
        if any(n.name == name for n in state.nodes):
            raise DriverError(f"rehearsal cluster {self.name!r} has a {name} already")
        node = Node(
            name=name,
            role=role,
            ip=ip or str(list(self.subnet.hosts())[9 + index]),
            netns=f"rh-{self.name}-{'head' if role == 'head' else f'w{index}'}",
            veth=f"rh-{self.name}-{index}",
            dir=str(self.dir / "nodes" / name),
        )
        state.nodes.append(node)
        self._save(state)
        return node

    def deploy_values(self, state: State) -> dict[str, str]:
        """The deploy-time values, as Terraform and Bicep compute them for a cluster on Azure."""
        host = state.host_ip
        return {
            "RAY_HEAD_IP": state.head.ip,
            "KEY_VAULT_URL": f"https://{state.host_ip}:{state.http_port + VAULT_PORT_OFFSET}/",
            "TOKEN_SECRET_NAME": TOKEN_SECRET_NAME,
            "IDENTITY_CLIENT_ID": state.identity_client_id,
            "RAY_ADMIN_USER": state.admin_user,
            "EXTRA_PIP_PACKAGES": " ".join(state.extra_pip),
            "EXTRA_APT_PACKAGES": " ".join(state.extra_apt),
            "PIP_INDEX_URL": f"http://{host}:{state.http_port + PYPI_PORT_OFFSET}/index/",
            "TORCH_INDEX_URL": f"http://{host}:{state.http_port}/simple/",
            "APT_SOURCE": mirrors.apt_source(
                host, state.http_port + APT_PORT_OFFSET, self.cache.mirror
            ),
            "SCALING_MODE": state.scaling_mode,
            "WORKER_SCALE_SET_ID": self.scale_set_id(state),
            # The containers share this machine's CPUs: a size with as many, so Ray's autoscaler
            # plans with what a new worker really brings.
            "WORKER_VM_SIZE": f"Standard_D{os.cpu_count() or 1}s_v5",
            "AUTOSCALER_MIN_WORKERS": str(state.min_workers),
            "AUTOSCALER_MAX_WORKERS": str(state.max_workers),
            "AUTOSCALER_IDLE_TIMEOUT_MINUTES": str(state.idle_timeout_minutes),
            "AUTOSCALER_CLIENT_ID": state.autoscaler_client_id,
            "ARM_ENDPOINT": f"https://{host}:{state.http_port + COMPUTE_PORT_OFFSET}",
        }

    def scale_set_id(self, state: State) -> str:
        """The fake scale set the rehearsal's workers belong to (scaling mode ray)."""
        subscription = uuid.uuid5(uuid.NAMESPACE_DNS, f"rehearsal/{state.name}")
        return (
            f"/subscriptions/{subscription}/resourceGroups/rh-{state.name}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/rh-{state.name}-workers"
        )

    def _user_data(self, state: State, role: str) -> str:
        """The committed document for ``role``, filled as Terraform and Bicep fill it."""
        text = (Path(state.documents_dir) / f"{role}.yaml").read_text()
        return render.fill(text, self.deploy_values(state))

    def _check_subnet_free(self) -> None:
        routes = run(["ip", "-4", "-o", "route", "show"], what="ip route").stdout
        for line in routes.splitlines():
            dest = line.split()[0]
            if dest == "default":
                continue
            with contextlib.suppress(ValueError):
                if ipaddress.ip_network(dest, strict=False).overlaps(self.subnet):
                    raise DriverError(
                        f"subnet {self.subnet} overlaps the host route '{line.strip()}': "
                        "choose another with --subnet"
                    )

    def _record(self, state: State, item: str) -> None:
        state.created.append(item)
        self._save(state)

    def _create_bridge(self, state: State) -> None:
        self._record(state, f"link:{state.bridge}")
        run(["ip", "link", "add", state.bridge, "type", "bridge"], what="creating the bridge")
        run(
            ["ip", "addr", "add", f"{state.host_ip}/{self.subnet.prefixlen}", "dev", state.bridge],
            what="addressing the bridge",
        )
        run(["ip", "link", "set", state.bridge, "up"], what="raising the bridge")

    def _start_http(self, state: State) -> None:
        log = open(self.dir / "http.log", "wb")  # noqa: SIM115 - owned by the server process
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                state.host_ip,
                "--directory",
                str(self.cache.torch_index),
                str(state.http_port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        state.http_pid = proc.pid
        self._record(state, f"pid:{proc.pid}")
        url = f"http://{state.host_ip}:{state.http_port}/simple/"
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise DriverError(
                        f"the package server on {state.host_ip}:{state.http_port} did not "
                        f"start: {e}"
                    ) from None
                time.sleep(0.3)

    @property
    def mirror_cache(self) -> Path:
        """Kept across ``down``: the next ``up`` of this cluster finds its packages there."""
        return self.base / "cache" / "mirrors" / self.name

    def _start_mirrors(self, state: State, proxpi: Path) -> None:
        """apt-cacher-ng and proxpi on the bridge: the nodes' way to the registries."""
        apt_port = state.http_port + APT_PORT_OFFSET
        pypi_port = state.http_port + PYPI_PORT_OFFSET
        pid = mirrors.start_apt_cacher(
            state.host_ip,
            apt_port,
            self.mirror_cache / "apt",
            self.dir / "apt-cacher-ng",
            self.dir / "apt-cacher-ng.log",
        )
        self._record(state, f"pid:{pid}")
        # The launcher lives in the cluster folder, so `down` finds the process by it.
        launcher = self.dir / "pypi-mirror.py"
        launcher.write_text(
            "import sys\nfrom proxpi.server import app\n"
            "app.run(host=sys.argv[1], port=int(sys.argv[2]), threaded=True)\n"
        )
        env_pid = mirrors.start_proxpi(
            proxpi,
            state.host_ip,
            pypi_port,
            self.mirror_cache / "pypi",
            self.dir / "pypi-mirror.log",
            launcher,
        )
        self._record(state, f"pid:{env_pid}")
        _wait_for_port(state.host_ip, apt_port, "the apt mirror (apt-cacher-ng)")
        _wait_for_port(state.host_ip, pypi_port, "the PyPI mirror (proxpi)")

    # -- Azure's part: Key Vault on the bridge, a metadata service in each node ------------------
    @property
    def azure_dir(self) -> Path:
        return self.dir / "azure"

    def _fakes(self) -> Path:
        path = render.repo_root() / FAKES
        if not path.is_file():
            raise DriverError(
                f"the rehearsal plays Azure's metadata service and Key Vault with {FAKES} from "
                f"the repository, and {path} is missing"
            )
        return path

    def _spawn(self, state: State, cmd: list[str], log: Path) -> int:
        proc = spawn(cmd, log)
        self._record(state, f"pid:{proc.pid}")
        return proc.pid

    def _start_vault(self, state: State) -> None:
        """The cluster's Key Vault, holding the token (HTTPS with a CA the nodes trust)."""
        fakes = self._fakes()
        spec = importlib.util.spec_from_file_location("rehearsal_azure_fakes", fakes)
        assert spec is not None and spec.loader is not None
        azure_node = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(azure_node)
        vault = self.azure_dir / "vault"
        vault.mkdir(parents=True)
        key = secrets.token_bytes(32)
        (self.azure_dir / "token-key").write_bytes(key)
        ca, cert, cert_key = azure_node.tls_certificate(self.azure_dir / "tls", state.host_ip)
        token = (self.dir / "token").read_text()
        config = azure_node.vault_config(
            key, [state.identity_client_id], {TOKEN_SECRET_NAME: token}
        )
        (vault / "config.json").write_text(json.dumps(config))
        port = state.http_port + VAULT_PORT_OFFSET
        self._spawn(
            state,
            [
                sys.executable,
                str(fakes),
                "keyvault",
                "--bind",
                state.host_ip,
                "--port",
                str(port),
                "--state",
                str(vault),
                "--cert",
                str(cert),
                "--key",
                str(cert_key),
            ],
            self.azure_dir / "vault.log",
        )
        _wait_for_port(state.host_ip, port, "the rehearsal's Key Vault")
        (self.azure_dir / "imds.json").write_text(
            json.dumps({"token_key": key.hex(), "ca": str(ca)})
        )

    def _start_imds(self, state: State, node: Node) -> None:
        """The node's own metadata service at 169.254.169.254, inside its network namespace."""
        fakes = self._fakes()
        shared = json.loads((self.azure_dir / "imds.json").read_text())
        folder = Path(node.dir) / "imds"
        folder.mkdir(parents=True)
        name = (
            f"rh-{self.name}-head"
            if node.role == "head"
            else f"rh-{self.name}-workers_{node.instance_id or node.name.split('-')[-1]}"
        )
        config = {
            "token_key": shared["token_key"],
            "identities": {
                state.identity_client_id: f"principal-{self.name}",
                # scaling mode ray: the autoscaler identity is attached to the head only.
                **(
                    {state.autoscaler_client_id: f"principal-{self.name}-autoscaler"}
                    if node.role == "head" and state.autoscaler_client_id
                    else {}
                ),
            },
            "compute": {
                "name": name,
                "vmId": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.name}/{node.name}")),
                "vmScaleSetName": "" if node.role == "head" else f"rh-{self.name}-workers",
                "location": "rehearsal",
                "osType": "Linux",
            },
        }
        (folder / "config.json").write_text(json.dumps(config))
        imds = urllib.parse.urlsplit(layout.IMDS_ENDPOINT)
        run(
            ["ip", "-n", node.netns, "addr", "add", f"{imds.hostname}/32", "dev", "lo"],
            what=f"the metadata address of {node.name}",
        )
        self._spawn(
            state,
            [
                "ip",
                "netns",
                "exec",
                node.netns,
                sys.executable,
                str(fakes),
                "imds",
                "--bind",
                str(imds.hostname),
                "--port",
                str(imds.port or 80),
                "--state",
                str(folder),
            ],
            folder / "imds.log",
        )
        _wait_for_port(
            str(imds.hostname),
            imds.port or 80,
            f"the metadata service of {node.name}",
            netns=node.netns,
        )
        # The node trusts the vault's CA, as a VM trusts the public CA behind vault.azure.net.
        ca = Path(shared["ca"]).read_text()
        local = node.root / "usr/local/share/ca-certificates"
        local.mkdir(parents=True, exist_ok=True)
        (local / "rehearsal-azure.crt").write_text(ca)
        with open(node.root / "etc/ssl/certs/ca-certificates.crt", "a") as bundle:
            bundle.write(ca)

    def _create_node(self, state: State, node: Node) -> None:
        rootfs, user_data, public_key = (
            state.rootfs,
            self._user_data(state, node.role),
            state.public_key,
        )
        self._record(state, f"netns:{node.netns}")
        run(["ip", "netns", "add", node.netns], what=f"creating netns {node.netns}")
        self._record(state, f"link:{node.veth}")
        run(
            [
                "ip",
                "link",
                "add",
                node.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                node.netns,
            ],
            what=f"creating the veth pair of {node.name}",
        )
        run(["ip", "link", "set", node.veth, "master", state.bridge, "up"], what="bridging")
        run(
            [
                "ip",
                "-n",
                node.netns,
                "addr",
                "add",
                f"{node.ip}/{self.subnet.prefixlen}",
                "dev",
                "eth0",
            ],
            what=f"addressing {node.name}",
        )
        run(["ip", "-n", node.netns, "link", "set", "eth0", "up"], what="raising eth0")
        run(["ip", "-n", node.netns, "link", "set", "lo", "up"], what="raising lo")

        ndir = Path(node.dir)
        for d in ("upper", "work", "root"):
            (ndir / d).mkdir(parents=True)
        self._record(state, f"mount:{node.root}")
        mount_overlay(
            Path(rootfs),
            ndir / "upper",
            ndir / "work",
            node.root,
            f"mounting the root filesystem of {node.name}",
        )
        self._start_imds(state, node)
        seed = node.root / "var/lib/cloud/seed/nocloud"
        seed.mkdir(parents=True)
        (seed / "meta-data").write_text(
            f"instance-id: rehearsal-{self.name}-{node.name}-{secrets.token_hex(4)}\n"
            f"local-hostname: {node.name}\n"
            f"public-keys:\n  - {public_key}\n"
        )
        (seed / "user-data").write_text(user_data)
        binds = []
        if state.warm_node_cache:
            cache = self.base / "node-cache"
            cache.mkdir(parents=True, exist_ok=True)
            binds.append(f"--bind={cache}:/var/cache/ray-cluster")
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
                *binds,
            ]
        )
        # A VM that reboots comes back: nspawn ends with 133 when the container asks for a
        # reboot, and this loop boots it again; a power-off (any other end) ends the loop.
        supervisor = f"while :; do {nspawn}; rc=$?; [ $rc -eq 133 ] || exit $rc; done"
        proc = spawn(["bash", "-c", supervisor], node.console_log)
        node.pid = proc.pid
        self._record(state, f"pid:{proc.pid}")

    # -- Azure Compute for the workers' scale set (scaling mode ray) ---------------------------
    def _load_fake(self, relative: str, module: str) -> Any:
        path = render.repo_root() / relative
        if not path.is_file():
            raise DriverError(f"the rehearsal plays Azure with {relative}, and {path} is missing")
        spec = importlib.util.spec_from_file_location(module, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        spec.loader.exec_module(loaded)
        return loaded

    def _start_compute(self, state: State, workers: list[Node]) -> None:
        """The fake Azure Compute on the bridge, over HTTPS with the vault's certificate (same
        address, a CA the nodes trust). Its scale set starts with ``workers``; raising its
        capacity or deleting an instance runs ``rehearse scale-set`` here."""
        sys.path.insert(0, str(render.repo_root() / "tests" / "fakes"))
        compute = self._load_fake(COMPUTE_FAKE, "rehearsal_azure_compute")
        folder = self.azure_dir / "compute"
        folder.mkdir(parents=True)
        key = (self.azure_dir / "token-key").read_bytes()
        sub, group, name = parse_scale_set_id(self.scale_set_id(state))
        used = {n.ip for n in state.nodes}
        pool = [str(h) for h in list(self.subnet.hosts())[10:60] if str(h) not in used]
        endpoint = self.deploy_values(state)["ARM_ENDPOINT"]
        config = compute.compute_config(
            key,
            endpoint,
            [state.autoscaler_client_id],
            [compute.scale_set_config(sub, group, name, pool, location="rehearsal")],
        )
        (folder / "config.json").write_text(json.dumps(config))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        instances = [
            {"instanceId": n.name.split("-")[-1], "ip": n.ip, "state": "Succeeded", "created": now}
            for n in workers
        ]
        (folder / "instances.json").write_text(json.dumps({name.lower(): instances}))
        hook = shlex.join(
            [sys.executable, "-m", "nodekit", "rehearse", "scale-set", "--name", self.name]
        )
        port = state.http_port + COMPUTE_PORT_OFFSET
        tls = self.azure_dir / "tls"
        self._spawn(
            state,
            [
                "env",
                f"{render.REPO_ENV}={render.repo_root()}",
                f"{BASE_ENV}={self.base}",
                sys.executable,
                str(render.repo_root() / COMPUTE_FAKE),
                "--bind",
                state.host_ip,
                "--port",
                str(port),
                "--state",
                str(folder),
                "--cert",
                str(tls / "server.crt"),
                "--key",
                str(tls / "server.key"),
                "--on-create",
                f'{hook} create --instance-id "$INSTANCE_ID" --ip "$PRIVATE_IP"',
                "--on-delete",
                f'{hook} delete --instance-id "$INSTANCE_ID" --ip "$PRIVATE_IP"',
            ],
            self.azure_dir / "compute.log",
        )
        _wait_for_port(state.host_ip, port, "the rehearsal's Azure Compute")

    @contextlib.contextmanager
    def _state_lock(self) -> Iterator[None]:
        """One change of state.json at a time (the scale set's hooks run side by side)."""
        import fcntl

        with open(self.dir / "state.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def scale_set_create(self, instance_id: str, ip: str, timeout: float = 1800) -> Node:
        """A new instance of the fake scale set: a worker container at ``ip``, booted from the
        worker document like any other; returns once its Ray runs (Azure says Succeeded)."""
        require_root_linux()
        if not instance_id.isdigit():
            raise DriverError(f"--instance-id must be a number, got {instance_id!r}")
        with self._state_lock():
            state = self.load()
            if state is None:
                raise DriverError(f"no rehearsal cluster {self.name!r}")
            self.subnet = ipaddress.IPv4Network(state.subnet)
            # Node 0 is the head: instance N is the node of index N + 1 (its names: worker-N+1,
            # its metadata service calls it rh-NAME-workers_N, as Azure names the VM).
            node = self._plan_node(state, "worker", index=int(instance_id) + 1, ip=ip)
            node.instance_id = instance_id
            self._save(state)
            self._create_node(state, node)
        self.wait_ready(state, timeout, silent, nodes=[node])
        return node

    def scale_set_delete(self, instance_id: str) -> None:
        """An instance of the fake scale set deleted: as Azure does with a termination notice,
        the worker gets a Terminate scheduled event and its watcher drains it, stops Ray and
        acknowledges (or the notice runs out); then the container and all it had go."""
        require_root_linux()
        state = self.load()
        node = next(
            (
                n
                for n in (state.nodes if state else [])
                if n.role == "worker" and (n.instance_id or n.name.split("-")[-1]) == instance_id
            ),
            None,
        )
        if state is None or node is None:
            raise DriverError(f"rehearsal cluster {self.name!r} has no instance {instance_id}")
        name = node.name
        fakes = self._load_fake(FAKES, "rehearsal_azure_fakes")
        events = Path(node.dir) / "imds"
        folder = fakes.StateFolder(events)
        event_id = str(uuid.uuid4()).upper()
        vm = f"rh-{self.name}-workers_{instance_id}"
        folder.write(
            "events.json",
            [
                *folder.read("events.json", []),
                fakes.scheduled_event(event_id, "Terminate", [vm], TERMINATE_ACK_TIMEOUT_S),
            ],
        )
        folder.write("incarnation.json", int(folder.read("incarnation.json", 1)) + 1)
        deadline = time.monotonic() + TERMINATE_ACK_TIMEOUT_S
        while time.monotonic() < deadline and pid_alive(node.pid):
            if any(a.get("EventId") == event_id for a in folder.lines("acks.jsonl")):
                break
            time.sleep(0.5)
        self._remove_node(node)
        with self._state_lock():
            state = self.load()
            if state is not None:
                state.nodes = [n for n in state.nodes if n.name != name]
                self._save(state)

    def _remove_node(self, node: Node) -> None:
        """One node's container, metadata service, mount, namespace, link and folder."""
        if node.pid is not None and pid_alive(node.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and pid_alive(node.pid):
                time.sleep(0.5)
            for child in _children(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and pid_alive(node.pid):
                time.sleep(0.5)
        for pid in pids_with_cmdline(f"{node.dir}/"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(f"{node.dir}/")), reverse=True):
            if run(["umount", m], check=False).returncode != 0:
                run(["umount", "-l", m], what=f"unmounting {m}")
        run(["ip", "netns", "del", node.netns], check=False)
        run(["ip", "link", "del", node.veth], check=False)
        shutil.rmtree(node.dir, ignore_errors=True)

    # -- power -----------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        state = self.load()
        if state is None:
            raise DriverError(f"no rehearsal cluster {self.name!r}: run `rehearse up` first")
        for node in state.nodes:
            if node.name == name:
                return node
        names = ", ".join(n.name for n in state.nodes)
        raise DriverError(f"rehearsal cluster {self.name!r} has no node {name!r} (it has {names})")

    @staticmethod
    def container_init(node: Node) -> int | None:
        """PID (here) of the container's systemd: the child of the current nspawn."""
        for nspawn in _children(node.pid or 0):
            for init in _children(nspawn):
                return init
        return None

    def exec(self, node: Node, command: list[str], timeout: float = 120) -> str:
        """Run a command inside the container (all its namespaces), as root; its output."""
        init = self.container_init(node)
        if init is None:
            raise DriverError(f"rehearsal node {node.name} is not running")
        p = run(
            ["nsenter", "-t", str(init), "-a", *command], what=f"on {node.name}", timeout=timeout
        )
        return p.stdout

    def reboot(self, name: str) -> None:
        """As `sudo reboot` on the VM: its services stop, it boots again from the same disk."""
        require_root_linux()
        node = self.node(name)
        before = self.container_init(node)
        self.exec(node, ["systemctl", "reboot"])
        deadline = time.monotonic() + 120
        while self.container_init(node) in (before, None):
            if time.monotonic() > deadline:
                raise DriverError(f"rehearsal node {name} did not come back from its reboot")
            time.sleep(0.5)

    def poweroff(self, name: str) -> None:
        """As a VM switched off: it shuts down and stays down."""
        require_root_linux()
        node = self.node(name)
        self.exec(node, ["systemctl", "poweroff"])
        deadline = time.monotonic() + 120
        while pid_alive(node.pid):
            if time.monotonic() > deadline:
                raise DriverError(f"rehearsal node {name} did not power off")
            time.sleep(0.5)

    def crash(self, name: str) -> None:
        """As a VM lost at once (its host failed): nothing shuts down. Its network goes silent
        first (the bridge's end of its link down), then every process in it is killed with its
        init; it stays down. The rest of the cluster notices only by what it no longer hears."""
        require_root_linux()
        node = self.node(name)
        if not pid_alive(node.pid):
            raise DriverError(f"rehearsal node {name} is not running")
        run(["ip", "link", "set", node.veth, "down"], what=f"cutting the network of {name}")
        assert node.pid is not None
        nspawns = _children(node.pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)  # the supervisor: no boot after this one
        for nspawn in nspawns:
            for init in _children(nspawn):  # its PID namespace, all processes, goes with it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while any(pid_alive(p) for p in [node.pid, *nspawns]):
            if time.monotonic() > deadline:
                raise DriverError(f"rehearsal node {name} did not stop")
            time.sleep(0.2)

    # -- readiness -------------------------------------------------------------------------
    @staticmethod
    def marker(node: Node) -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads((node.root / layout.READY_MARKER.lstrip("/")).read_text())
        return None

    @staticmethod
    def failure(node: Node) -> str | None:
        with contextlib.suppress(OSError):
            return (node.root / layout.FAILED_MARKER.lstrip("/")).read_text().strip()
        return None

    @staticmethod
    def phase(node: Node) -> str:
        """The bootstrap's last announced step, from the node's cloud-init output log."""
        log = node.root / "var/log/cloud-init-output.log"
        with contextlib.suppress(OSError):
            steps = re.findall(r"ray-cluster-bootstrap\[\w+\]: (\w+)\n", log.read_text())
            if steps:
                return steps[-1]
        return "booting"

    def wait_ready(
        self, state: State, timeout: float, progress: Progress, nodes: list[Node] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        next_note = 0.0
        while True:
            pending = []
            for node in nodes or state.nodes:
                reason = self.failure(node)
                if reason:
                    raise DriverError(
                        f"rehearsal node {node.name} failed to bootstrap: {reason} "
                        f"(inspect {node.root}/var/log/cloud-init-output.log, then "
                        f"`python -m nodekit rehearse down --name {self.name}`)"
                    )
                if not pid_alive(node.pid):
                    raise DriverError(
                        f"rehearsal node {node.name}'s container exited (console: "
                        f"{node.console_log}); run `python -m nodekit rehearse down --name "
                        f"{self.name}`"
                    )
                if self.marker(node) is None:
                    pending.append(node)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise DriverError(
                    f"rehearsal cluster not ready after {timeout:.0f} s: "
                    + ", ".join(f"{n.name} at {self.phase(n)}" for n in pending)
                )
            if time.monotonic() >= next_note:
                progress("waiting: " + ", ".join(f"{n.name} {self.phase(n)}" for n in pending))
                next_note = time.monotonic() + 15
            time.sleep(1)

    # -- down ------------------------------------------------------------------------------
    def down(self, progress: Progress = silent) -> list[str]:
        """Remove every container, mount, namespace, link, process and file of the cluster."""
        require_root_linux()
        state = self.load()
        removed: list[str] = []
        nodes = state.nodes if state else []
        # Keys are recorded only once the head booted; a failed up may have no head at all.
        if (
            state
            and state.head_host_keys
            and trust.forget(state.head.ip, state.head_host_keys, state.known_hosts)
        ):
            removed.append(f"the head's host keys from {state.known_hosts}")
        # 1. containers: a clean poweroff first, then the whole PID namespace goes.
        pids = {n.pid for n in nodes if n.pid is not None and pid_alive(n.pid)}
        pids.update(pids_with_cmdline(f"--directory={self.dir}/nodes/"))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.5)
        for pid in pids:
            for child in _children(pid):  # the container's init: SIGKILL ends its namespace
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.5)
        still = [p for p in pids if pid_alive(p)]
        if still:
            raise DriverError(f"containers did not stop (pids {still}); run down again")
        removed += [f"container pid {p}" for p in sorted(pids)]
        # 2. the package server.
        host_ip = state.host_ip if state else str(next(self.subnet.hosts()))
        servers: set[int] = set()
        if state and state.http_pid is not None and pid_alive(state.http_pid):
            servers.add(state.http_pid)
        servers.update(pids_with_cmdline(f"http.server --bind {host_ip} "))
        # The Azure fakes, the mirrors: everything started with a path of the cluster folder.
        servers.update(pids_with_cmdline(f"{self.dir}/"))
        for pid in servers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            removed.append(f"server pid {pid}")
        # 3. mounts under the cluster folder (deepest first).
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(f"{self.dir}/")), reverse=True):
            if run(["umount", m], check=False).returncode != 0:
                run(["umount", "-l", m], what=f"unmounting {m}")
            removed.append(f"mount {m}")
        # 4. network namespaces and links with the cluster's prefix.
        prefix = f"rh-{self.name}"
        for ns in run(["ip", "netns", "list"], what="ip netns").stdout.split("\n"):
            ns = ns.split(" ")[0]
            if ns.startswith(prefix + "-"):
                run(["ip", "netns", "del", ns], what=f"deleting netns {ns}")
                removed.append(f"netns {ns}")
        links = run(["ip", "-o", "link", "show"], what="ip link").stdout
        for line in links.splitlines():
            link = line.split(":")[1].strip().split("@")[0]
            if link == prefix or link.startswith(prefix + "-"):
                run(["ip", "link", "del", link], check=False)
                removed.append(f"link {link}")
        # 5. files.
        if self.dir.exists():
            shutil.rmtree(self.dir)
            removed.append(f"folder {self.dir}")
        for r in removed:
            progress(f"removed {r}")
        return removed

    # -- status ----------------------------------------------------------------------------
    def status(self) -> dict:
        state = self.load()
        if state is None:
            return {"name": self.name, "up": False}
        nodes = []
        for n in state.nodes:
            marker = self.marker(n)
            nodes.append(
                {
                    "name": n.name,
                    "role": n.role,
                    "ip": n.ip,
                    "running": pid_alive(n.pid),
                    "ready": marker is not None,
                    "failed": self.failure(n),
                    "phase": "ready" if marker else self.phase(n),
                }
            )
        return {
            "name": self.name,
            "up": True,
            "subnet": state.subnet,
            "bridge": state.bridge,
            "ssh_key": state.ssh_key,
            "admin_user": state.admin_user,
            "head": state.head.ip,
            "nodes": nodes,
        }


def _new_ssh_key(path: Path) -> str:
    """Write an ed25519 key pair (OpenSSH format) and return the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + " rehearsal"
    )
    path.with_suffix(".pub").write_text(public + "\n")
    return public


def _wait_for_port(host: str, port: int, what: str, netns: str | None = None) -> None:
    """Wait (15 s at most) until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + 15
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
        if time.monotonic() > deadline:
            raise DriverError(f"{what} did not start on {host}:{port}: {why}")
        time.sleep(0.2)
