"""Boot, inspect and remove a rehearsal cluster (see :mod:`nodekit.rehearsal`): the
orchestration of the pieces that have a module each.

- :mod:`~nodekit.rehearsal.state`: what a cluster is made of (``state.json``);
- :mod:`~nodekit.rehearsal.network`: the bridge, each node's namespace and link;
- :mod:`~nodekit.rehearsal.nodes`: the node containers (disk, seed, boot, power, readiness);
- :mod:`~nodekit.rehearsal.image`: the root filesystem and the torch wheel they boot from;
- :mod:`~nodekit.rehearsal.services`: what the nodes reach on the bridge (package mirrors, the
  Azure stand-ins).

Everything ``up`` creates is recorded in ``<base>/clusters/<name>/state.json`` *before* it is
created, and every name carries the cluster's prefix, so ``down`` removes it all again: after a
clean ``up``, after a failed one, and after a crash that lost the state file.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from driver.errors import DriverError
from driver.procs import pid_alive, pids_with_cmdline
from driver.progress import Progress, silent
from nodekit import render
from nodekit.rehearsal import bake, mirrors, network, nodes, trust
from nodekit.rehearsal.image import ImageCache, document_requirements
from nodekit.rehearsal.nodes import wait_ready as _wait_ready
from nodekit.rehearsal.services import Context, azurite, compute, imds, keyvault, packages
from nodekit.rehearsal.services import running as running_services
from nodekit.rehearsal.standins.azure_compute import ORCHESTRATION_MODES, is_flexible_vm_of
from nodekit.rehearsal.state import (
    BASE_ENV,
    DEFAULT_BASE,
    DEFAULT_ORCHESTRATION_MODE,
    DEFAULT_POOL,
    GPU_POOL,
    Node,
    State,
    StateFile,
    default_base,
)
from nodekit.rehearsal.system import require_root_linux, unmount_under

__all__ = [
    "BASE_ENV",
    "DEFAULT_BAKE_SUBNET",
    "DEFAULT_BASE",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_SUBNET",
    "Node",
    "Rehearsal",
    "State",
    "default_base",
]

DEFAULT_SUBNET = "10.213.0.0/24"
DEFAULT_BAKE_SUBNET = "10.229.0.0/24"
"""``rehearse prepare --bake``'s bridge (no cluster of the tests or benchmarks uses it)."""
DEFAULT_HTTP_PORT = 8470
TERMINATE_ACK_TIMEOUT_S = 120
"""How long a deleted worker may take to acknowledge its Terminate event (the scale set's
termination notice; the watcher on the worker drains, stops Ray and acknowledges)."""
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,8}$")
GPU_VM_SIZE = "Standard_NC4as_T4_v3"
"""The GPU pool's VM size: the smallest of the node provider's GPU sizes (GPU_SIZES), one GPU
as its containers declare to Ray. The provider plans its 4 vCPUs; a container offers this
machine's CPUs (``nproc``), as the default pool's containers do (docs/rehearsal.md)."""
GPU_POOL_ADDRESSES = 10
"""The GPU pool's workers take the last addresses of the worker range (nodes 41 to 50), the
default pool's the others: the scale sets never hand out one address twice."""
GPU_STAND_IN_ENV = "/etc/ray-rehearsal/gpu.env"
"""Where a GPU pool container's stand-in sets RAY_NUM_GPUS (:func:`gpu_stand_in`)."""


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
        self.store = StateFile(self.state_file)
        self.cache = ImageCache(self.base / "cache")

    # -- state -----------------------------------------------------------------------------
    def load(self) -> State | None:
        return self.store.load()

    def _save(self, state: State) -> None:
        self.store.save(state)

    def _recorder(self, state: State) -> Callable[[str], None]:
        return lambda item: self.store.record(state, item)

    def _services(self, state: State) -> Context:
        return Context(self.name, self.dir, self.base, state, self.store)

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
        image: bool = True,
        autostop_idle_minutes: int = 0,
        results_storage: bool = True,
        gpu_pool_max: int = 0,
        boot: bool = True,
        orchestration_mode: str = DEFAULT_ORCHESTRATION_MODE,
    ) -> State:
        """Build what is missing, boot head + ``workers`` and wait until Ray runs on all.

        ``scaling_mode="ray"``: Ray's autoscaler on the head drives a fake scale set (Azure
        Compute played on the bridge) whose instances are worker containers booted and removed
        here; the ``workers`` booted now are its first instances.

        ``image``: boot the nodes from the node image, the install phase baked once per install
        digest (:mod:`nodekit.rehearsal.bake`); without it every node installs at boot.

        ``results_storage``: Blob storage on the bridge (Azurite), its container's URL the
        deploy-time value RESULTS_URL, so every job mirrors its run folder there; its data is
        kept by ``down`` (:func:`azurite.data_dir`). Off: results stay on the head's disk.

        ``gpu_pool_max`` (scaling mode ray): a second worker pool ``gpu`` (min 0, max N), its
        own fake scale set (size :data:`GPU_VM_SIZE`) whose instances boot from the same worker
        document filled with that pool's values; its containers declare one GPU to Ray without
        hardware (:func:`gpu_stand_in`). 0: the default pool alone.

        ``orchestration_mode``: every pool's scale set Flexible (each worker a VM of its own,
        named ``rh-NAME-POOL_`` and 8 hexadecimal characters: its metadata service, Scheduled
        Events and the fake Compute call it so) or Uniform (``rh-NAME-POOL_N``), in every
        scaling mode.

        ``boot=False``: the bridge, the torch index and the mirrors, and the node image baked
        (:meth:`bake_image`); no Key Vault, storage or node."""
        require_root_linux()
        if not 0 <= workers <= 50:
            raise DriverError(f"--workers must be between 0 and 50, got {workers}")
        if scaling_mode not in ("cpu", "ray"):
            raise DriverError(f"--scaling-mode must be cpu or ray, got {scaling_mode!r}")
        if orchestration_mode not in ORCHESTRATION_MODES:
            raise DriverError(
                f"--orchestration-mode must be {' or '.join(ORCHESTRATION_MODES)}, "
                f"got {orchestration_mode!r}"
            )
        if not (0 <= min_workers <= max_workers <= 40 and max_workers >= 1):
            raise DriverError(
                f"--min-workers {min_workers} / --max-workers {max_workers}: need "
                "0 <= min <= max, 1 <= max <= 40"
            )
        if not 0 <= gpu_pool_max <= GPU_POOL_ADDRESSES:
            raise DriverError(
                f"--gpu-pool-max must be between 0 (no GPU pool) and {GPU_POOL_ADDRESSES}, "
                f"got {gpu_pool_max}"
            )
        if gpu_pool_max and scaling_mode != "ray":
            raise DriverError("--gpu-pool-max needs --scaling-mode ray (Ray's autoscaler)")
        if not 1 <= idle_timeout_minutes <= 1440:
            raise DriverError(f"--idle-timeout-minutes must be 1-1440, got {idle_timeout_minutes}")
        if not 0 <= autostop_idle_minutes <= 10080:
            raise DriverError(
                f"--autostop-idle-minutes must be 0 (off) to 10080, got {autostop_idle_minutes}"
            )
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
        self._check_subnet_free()
        documents_dir = documents_dir or render.rendered_dir()
        if image:
            self._customizer(documents_dir)

        t0 = time.monotonic()
        rootfs, proxpi = self.prepare(documents_dir, torch_index_url, progress)
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
            bridge=network.prefix(self.name),
            host_ip=network.host_ip(self.subnet),
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
            orchestration_mode=orchestration_mode,
            min_workers=min_workers,
            max_workers=max_workers,
            idle_timeout_minutes=idle_timeout_minutes,
            autostop_idle_minutes=autostop_idle_minutes,
            gpu_pool_max=gpu_pool_max,
        )
        self._save(state)
        network.create_bridge(
            state.bridge, state.host_ip, self.subnet.prefixlen, self._recorder(state)
        )
        # The services on the bridge (see nodekit.rehearsal.services).
        ctx = self._services(state)
        packages.start_torch_index(ctx, self.cache.torch_index)
        if image:  # a bake under way fills its mirror: this one starts with what it fetched
            self._images().wait_for_bakes(progress)
        packages.start_mirrors(ctx, proxpi)
        if boot:
            keyvault.start(ctx, (self.dir / "token").read_text())
        if results_storage and boot:
            state.results_url = f"{azurite.start(ctx)}/{azurite.CONTAINER}"
            self._save(state)
            progress(f"results storage: {state.results_url} (kept by down: {self.results_dir})")
        new = [self._plan_node(state, "head"), *[self._plan_node(state) for _ in range(workers)]]
        if boot and (scaling_mode == "ray" or autostop_idle_minutes > 0):
            compute.start(ctx, new[1:], self.pools(state))
        if image:
            self._bake(state, progress)
        if not boot:
            return state
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

    def prepare(
        self,
        documents_dir: Path | None = None,
        torch_index_url: str | None = None,
        progress: Progress = silent,
    ) -> tuple[Path, Path]:
        """What every cluster boots from, built once per machine into the cache (``up`` calls
        it; ``rehearse prepare`` alone, e.g. while a test run sets up): the Debian root
        filesystem, the index with the documents' torch, and the PyPI mirror's tool
        environment. Each under its lock: a second caller waits and finds it built. The root
        filesystem and proxpi's python."""
        require_root_linux()
        documents_dir = documents_dir or render.rendered_dir()
        documents = {r: (documents_dir / f"{r}.yaml").read_text() for r in render.ROLES}
        needs = document_requirements(documents)
        torch_req = next((r for r in needs.requirements if r.startswith("torch==")), None)
        if torch_req is None:
            raise DriverError("the rendered documents do not pin torch")
        rootfs = self.cache.ensure_rootfs(progress)
        self.cache.ensure_torch(
            torch_req,
            # Where Azure nodes get torch by default is where the host fetches it for the nodes.
            torch_index_url or render.deploy_value_defaults()["TORCH_INDEX_URL"],
            progress,
        )
        return rootfs, mirrors.ensure_proxpi(self.base / "tools", progress)

    def bake_image(
        self,
        documents_dir: Path | None = None,
        torch_index_url: str | None = None,
        progress: Progress = silent,
    ) -> Path:
        """The node image of an ``up`` with default values (the tests' clusters), baked now if
        the cache has none (``rehearse prepare --bake``, run by scripts/test.sh while it sets
        up): this cluster's bridge with the torch index and the mirrors, the bake, then all of
        it removed again; its PyPI mirror's cache stays and seeds the next clusters' mirrors.
        The image layer."""
        if self.load() is not None or self.dir.exists():
            self.down()  # what a killed bake left behind
        try:
            state = self.up(
                workers=0,
                documents_dir=documents_dir,
                torch_index_url=torch_index_url,
                results_storage=False,
                boot=False,
                progress=progress,
            )
            return Path(state.image)
        finally:
            self.down()

    def add_workers(
        self,
        count: int = 1,
        timeout: float = 1800,
        progress: Progress = silent,
        image: bool = True,
        values: dict[str, str] | None = None,
        documents_dir: Path | None = None,
    ) -> list[Node]:
        """Boot ``count`` more workers into the running cluster (like a scale-out on Azure).

        ``image=False``: these workers boot without the cluster's node image (they install at
        boot). ``values``: deploy-time values of these workers that differ from the cluster's
        (as a worker pool deployed with its own). ``documents_dir``: they boot from its worker
        document instead of the cluster's (benchmarks/bootstrap.py: another install method's)."""
        unknown = sorted(set(values or {}) - set(render.deploy_value_names()))
        if unknown:
            raise DriverError(f"no deploy-time value {', '.join(unknown)}")
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
            self._create_node(state, node, image=image, values=values, documents_dir=documents_dir)
        progress(f"booted {', '.join(n.name for n in new)}; waiting for cloud-init and Ray")
        self.wait_ready(state, timeout, progress, nodes=new)
        return new

    def _plan_node(
        self,
        state: State,
        role: str = "worker",
        index: int | None = None,
        ip: str | None = None,
        name: str = "",
        instance_id: str | None = None,
        pool: str = DEFAULT_POOL,
    ) -> Node:
        """The next node; a scale set's instance comes with its own index, address, name and
        instance id. A worker without one is an instance of ``pool`` all the same: its VM name
        is a new one in a Flexible pool (:func:`compute.new_instance_id`)."""
        if index is None:
            index = len(state.nodes)
            if (role == "head") != (index == 0):
                raise AssertionError("the head is node 0")
        name = name or ("head" if role == "head" else f"worker-{index}")
        if any(n.name == name for n in state.nodes):
            raise DriverError(f"rehearsal cluster {self.name!r} has a {name} already")
        node = Node(
            name=name,
            role=role,
            ip=ip or network.node_ip(self.subnet, index),
            netns=network.node_netns(self.name, role, index),
            veth=network.node_veth(self.name, index),
            dir=str(self.dir / "nodes" / name),
            pool=pool,
        )
        if role == "worker":
            node.instance_id = (
                compute.new_instance_id(state, pool) if instance_id is None else instance_id
            )
        state.nodes.append(node)
        self._save(state)
        return node

    def deploy_values(self, state: State) -> dict[str, str]:
        """The deploy-time values, as Terraform and Bicep compute them for a cluster on Azure."""
        return {
            "RAY_HEAD_IP": state.head.ip,
            "KEY_VAULT_URL": keyvault.url(state),
            "TOKEN_SECRET_NAME": keyvault.TOKEN_SECRET_NAME,
            "IDENTITY_CLIENT_ID": state.identity_client_id,
            "RAY_ADMIN_USER": state.admin_user,
            "EXTRA_PIP_PACKAGES": " ".join(state.extra_pip),
            "EXTRA_APT_PACKAGES": " ".join(state.extra_apt),
            "PIP_INDEX_URL": packages.pip_index_url(state),
            "TORCH_INDEX_URL": packages.torch_index_url(state),
            "APT_SOURCE": packages.apt_source(state, self.cache.mirror),
            "SCALING_MODE": state.scaling_mode,
            "WORKER_SCALE_SET_ID": self.scale_set_id(state),
            # The containers share this machine's CPUs: a size with as many, so Ray's autoscaler
            # plans with what a new worker really brings.
            "WORKER_VM_SIZE": f"Standard_D{os.cpu_count() or 1}s_v5",
            # The default pool, as a stack's default, and the GPU pool if there is one (below):
            # what Ray's autoscaler plans with, one node type per pool.
            "AUTOSCALER_POOLS": json.dumps(
                [
                    {
                        "labels": self.pool_values(state, pool)["RAY_LABELS"],
                        "max": high,
                        "min": low,
                        "name": pool,
                        "resources": json.loads(self.pool_values(state, pool)["RAY_RESOURCES"]),
                        "scale_set": compute.scale_set_name(state.name, pool),
                        "vm_size": size,
                    }
                    for pool, (size, low, high) in self.pool_sizes(state).items()
                ],
                separators=(",", ":"),
            ),
            "AUTOSCALER_IDLE_TIMEOUT_MINUTES": str(state.idle_timeout_minutes),
            "AUTOSCALER_CLIENT_ID": state.autoscaler_client_id,
            "ARM_ENDPOINT": compute.arm_endpoint(state),
            # Off unless `rehearse up --autostop-idle-minutes N`: other clusters never stop.
            "AUTOSTOP_IDLE_MINUTES": str(state.autostop_idle_minutes),
            # The rehearsal has no Azure Monitor autoscale (scaling mode cpu has no scale set).
            "WORKER_AUTOSCALE_NAME": "",
            # Every pool's fake scale set; the default pool's own values (each pool's workers get
            # theirs, :meth:`pool_values`), as a stack fills them.
            "WORKER_SCALE_SETS": " ".join(
                compute.scale_set_name(state.name, pool) for pool in self.pool_sizes(state)
            ),
            **self.pool_values(state, DEFAULT_POOL),
            # The results container on the bridge (Azurite), as a stack with results storage
            # passes its container's URL; "" with `up --no-results-storage` (the stacks'
            # default): results stay on the head's disk.
            "RESULTS_URL": state.results_url,
        }

    def scale_set_id(self, state: State, pool: str = DEFAULT_POOL) -> str:
        """The fake scale set of a worker pool (scaling mode ray)."""
        return compute.scale_set_id(state.name, pool)

    @staticmethod
    def pool_sizes(state: State) -> dict[str, tuple[str, int, int]]:
        """Each worker pool's (VM size, min, max), the default pool first. The default pool's
        containers share this machine's CPUs: a size with as many, so Ray's autoscaler plans
        with what a new worker really brings; the GPU pool's is :data:`GPU_VM_SIZE`."""
        pools = {
            DEFAULT_POOL: (
                f"Standard_D{os.cpu_count() or 1}s_v5",
                state.min_workers,
                state.max_workers,
            )
        }
        if state.gpu_pool_max:
            pools[GPU_POOL] = (GPU_VM_SIZE, 0, state.gpu_pool_max)
        return pools

    @staticmethod
    def pool_values(state: State, pool: str) -> dict[str, str]:
        """A pool's own deploy-time values, over the cluster's in its workers' documents (as
        the stacks fill each pool's custom data): its name, and no resources or labels beyond
        what every worker offers (CPUs and GPUs, a simulator slot per CPU, pool=NAME)."""
        if pool != DEFAULT_POOL and not (pool == GPU_POOL and state.gpu_pool_max):
            raise DriverError(f"rehearsal cluster {state.name!r} has no worker pool {pool!r}")
        return {"WORKER_POOL": pool, "RAY_RESOURCES": "{}", "RAY_LABELS": ""}

    def pools(self, state: State) -> dict[str, tuple[str, list[str]]]:
        """Each pool's fake scale set: its VM size and the addresses its instances get."""
        addresses = network.worker_pool(ipaddress.IPv4Network(state.subnet))
        if not state.gpu_pool_max:
            return {DEFAULT_POOL: (self.pool_sizes(state)[DEFAULT_POOL][0], addresses)}
        split = len(addresses) - GPU_POOL_ADDRESSES
        sizes = self.pool_sizes(state)
        return {
            DEFAULT_POOL: (sizes[DEFAULT_POOL][0], addresses[:split]),
            GPU_POOL: (sizes[GPU_POOL][0], addresses[split:]),
        }

    def _user_data(
        self,
        state: State,
        role: str,
        values: dict[str, str] | None = None,
        documents_dir: Path | None = None,
    ) -> str:
        """The committed document for ``role`` (the cluster's, or ``documents_dir``'s), filled
        as Terraform and Bicep fill it (with ``values`` over the cluster's)."""
        return render.fill(
            self._document(state, role, documents_dir),
            {**self.deploy_values(state), **(values or {})},
        )

    @staticmethod
    def _document(state: State, role: str, documents_dir: Path | None = None) -> str:
        return (Path(documents_dir or state.documents_dir) / f"{role}.yaml").read_text()

    def _check_subnet_free(self) -> None:
        network.check_subnet_free(self.subnet)

    @property
    def results_dir(self) -> Path:
        """The cluster's Blob storage data: outside its folder, kept across ``down`` (as a
        storage account outlives the compute), removed by ``down(delete_results=True)``."""
        return azurite.data_dir(self.base, self.name)

    @property
    def mirror_cache(self) -> Path:
        """Kept across ``down``: the next ``up`` of this cluster finds its packages there."""
        return packages.mirror_cache(self.base, self.name)

    def _create_node(
        self,
        state: State,
        node: Node,
        image: bool = True,
        values: dict[str, str] | None = None,
        documents_dir: Path | None = None,
    ) -> None:
        """Network, disk (the node image over the root filesystem, unless ``image`` is false
        or the cluster has none), metadata service, seed (from the cluster's documents, or
        ``documents_dir``'s), then boot (each piece recorded first)."""
        network.attach_node(node, state.bridge, self.subnet.prefixlen, self._recorder(state))
        self.store.record(state, f"mount:{node.root}")
        layers = [state.image] if image and state.image else []
        nodes.mount_root(node, [Path(p) for p in (*layers, state.rootfs)])
        hosts = node.root / "etc/hosts"
        hosts.write_text(packages.etc_hosts(state, hosts.read_text()))
        imds.start(self._services(state), node)
        if node.role == "worker":
            values = {**self.pool_values(state, node.pool), **(values or {})}
        if node.role == "worker" and node.pool == GPU_POOL:
            # Imported here: the provider's module loads Ray's autoscaler (0.5 s a command).
            from nodekit.node.azure_vmss_provider import vm_size_gpus

            gpus = vm_size_gpus(GPU_VM_SIZE)
            document = self._document(state, "worker", documents_dir)
            for path, text in gpu_stand_in(document, gpus).items():
                target = node.root / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                target.chmod(0o644)
        nodes.seed(
            node,
            f"rehearsal-{self.name}-{node.name}-{secrets.token_hex(4)}",
            state.public_key,
            self._user_data(state, node.role, values, documents_dir),
        )
        binds = []
        if state.warm_node_cache:
            cache = self.base / "node-cache"
            cache.mkdir(parents=True, exist_ok=True)
            binds.append(f"{cache}:/var/cache/ray-cluster")
        node.pid = nodes.start(node, binds)
        self.store.record(state, f"pid:{node.pid}")

    @staticmethod
    def _customizer(documents_dir: Path) -> Path:
        """The image customizer rendered with the documents (install.sh next to them)."""
        customizer = documents_dir / render.CUSTOMIZER
        if not customizer.is_file():
            raise DriverError(
                f"{customizer} is missing (`python -m nodekit render` writes it next to the "
                "documents); or boot without the node image: --no-image"
            )
        return customizer

    def _images(self) -> bake.Images:
        return bake.Images(self.base / "cache" / "images", clusters=self.base / "clusters")

    def _bake(self, state: State, progress: Progress) -> None:
        """The node image for this cluster's install digest (baked now if the cache has none),
        in a namespace of its own on the bridge, gone again once baked."""
        documents_dir = Path(state.documents_dir)
        documents = {r: (documents_dir / f"{r}.yaml").read_text() for r in render.ROLES}
        values = self.deploy_values(state)
        digest = bake.install_digest(documents, values)
        customizer = self._customizer(documents_dir)
        room = Node(
            name="bake",
            role="bake",
            ip=network.bake_ip(self.subnet),
            netns=f"{network.prefix(self.name)}-bake",
            veth=f"{network.prefix(self.name)}-b",
            dir=str(self.dir / "bake"),
        )

        def attach() -> Node:
            network.attach_node(room, state.bridge, self.subnet.prefixlen, self._recorder(state))
            return room

        images = self._images()
        t0 = time.monotonic()
        try:
            layer = images.ensure(
                digest,
                Path(state.rootfs),
                customizer,
                bake.install_values(values),
                packages.etc_hosts(state, (Path(state.rootfs) / "etc/hosts").read_text()),
                attach,
                progress,
            )
        finally:
            network.detach_node(room)
        state.image, state.image_digest = str(layer), digest
        if room.pid is not None:  # baked now, not found in the cache
            state.bake_s = round(time.monotonic() - t0, 1)
        self._save(state)

    # -- the fake scale set (scaling mode ray) -------------------------------------------------
    @contextlib.contextmanager
    def _state_lock(self) -> Iterator[None]:
        """One change of state.json at a time (the scale set's hooks run side by side)."""
        with self.store.locked():
            yield

    def scale_set_create(
        self, instance_id: str, ip: str, timeout: float = 1800, scale_set: str = ""
    ) -> Node:
        """A new instance of a pool's fake scale set (``scale_set``, default the default
        pool's): a worker container at ``ip``, booted from the worker document like any other
        (filled with its pool's values); returns once its Ray runs (Azure says Succeeded)."""
        require_root_linux()
        pool = self._pool_of(scale_set)
        with self._state_lock():
            state = self.load()
            if state is None:
                raise DriverError(f"no rehearsal cluster {self.name!r}")
            self.subnet = ipaddress.IPv4Network(state.subnet)
            self.pool_values(state, pool)  # a pool this cluster has
            own = compute.scale_set_name(self.name, pool)
            if compute.flexible(state) and not is_flexible_vm_of(own, instance_id):
                raise DriverError(
                    f"--instance-id must be a VM name of Flexible scale set {own} ({own}_ and "
                    f"8 hexadecimal characters), got {instance_id!r}"
                )
            if not compute.flexible(state) and not instance_id.isdigit():
                raise DriverError(f"--instance-id must be a number, got {instance_id!r}")
            # Uniform: node 0 is the head, so the default pool's instance N is the node of
            # index N + 1 (its metadata service calls it rh-NAME-workers_N, as Azure names the
            # VM). Another pool's instance, and a Flexible VM: the index (namespace, link) of
            # its address, which no other node has.
            uniform_default = pool == DEFAULT_POOL and not compute.flexible(state)
            index = int(instance_id) + 1 if uniform_default else network.node_index(self.subnet, ip)
            node = self._plan_node(
                state,
                "worker",
                index=index,
                ip=ip,
                name=compute.node_name(state, pool, instance_id),
                instance_id=instance_id,
                pool=pool,
            )
            self._create_node(state, node)
        self.wait_ready(state, timeout, silent, nodes=[node])
        return node

    def scale_set_delete(self, instance_id: str, scale_set: str = "") -> bool:
        """An instance of a pool's fake scale set deleted (``scale_set``, default the default
        pool's): as Azure does with a termination notice, the worker gets a Terminate scheduled
        event naming its VM (:func:`compute.vm_name`) and its watcher drains it, stops Ray and
        acknowledges (or the notice runs out); then the container and all it had go. Whether
        the worker acknowledged the notice."""
        require_root_linux()
        pool = self._pool_of(scale_set)
        state = self.load()
        node = next(
            (
                n
                for n in (state.nodes if state else [])
                if n.role == "worker" and n.pool == pool and compute.instance_id(n) == instance_id
            ),
            None,
        )
        if state is None or node is None:
            raise DriverError(f"rehearsal cluster {self.name!r} has no instance {instance_id}")
        event_id = imds.schedule(
            node, "Terminate", [compute.vm_name(state, node)], TERMINATE_ACK_TIMEOUT_S
        )
        deadline = time.monotonic() + TERMINATE_ACK_TIMEOUT_S
        acknowledged = False
        while time.monotonic() < deadline and pid_alive(node.pid):
            acknowledged = imds.acknowledged(node, event_id)
            if acknowledged:
                break
            time.sleep(0.5)
        self._remove_node(node)
        with self._state_lock():
            state = self.load()
            if state is not None:
                state.nodes = [n for n in state.nodes if n.name != node.name]
                self._save(state)
        return acknowledged

    def _pool_of(self, scale_set: str) -> str:
        """The pool of a scale set's name ("": the default pool's)."""
        if not scale_set:
            return DEFAULT_POOL
        try:
            return compute.pool_of(self.name, scale_set)
        except ValueError as e:
            raise DriverError(str(e)) from None

    def remove(self, name: str) -> None:
        """A worker deleted: it shuts down cleanly (its Ray leaves the cluster), then its
        container and all it had go."""
        require_root_linux()
        node = self.node(name)
        if node.role != "worker":
            raise DriverError(f"{name} is not a worker; `rehearse down` removes the cluster")
        if pid_alive(node.pid):
            nodes.poweroff(node)
        self._remove_node(node)
        with self._state_lock():
            state = self.load()
            if state is not None:
                state.nodes = [n for n in state.nodes if n.name != name]
                self._save(state)

    def _remove_node(self, node: Node) -> None:
        """One node's container, metadata service, mount, namespace, link and folder."""
        nodes.stop_node(node)
        network.detach_node(node)
        nodes.remove_folder(node)
        trust.forget_node(node.ip, self.dir)

    def replace_head(self, timeout: float = 1800, progress: Progress = silent) -> Node:
        """As the head's VM deleted with its OS disk and created again from the same documents
        (a re-created head on Azure): its container, disk (everything it wrote), metadata
        service and network go, and a fresh head boots at the same address from the
        cluster's documents and deploy-time values; returns once its Ray runs. What the
        cluster keeps outside the head (Key Vault, the results storage, the workers) stays.
        Its new SSH host keys replace the old ones where ``up`` recorded them."""
        require_root_linux()
        with self._state_lock():
            state = self.load()
            if state is None:
                raise DriverError(f"no rehearsal cluster {self.name!r}: run `rehearse up` first")
            self.subnet = ipaddress.IPv4Network(state.subnet)
            head = state.head
            self._remove_node(head)
            head.pid = None
            self._save(state)
            progress(f"removed the head's container and disk ({head.dir})")
            self._create_node(state, head)
        progress("booted a fresh head from the same documents; waiting for cloud-init and Ray")
        self.wait_ready(state, timeout, progress, nodes=[head])
        keys, known_hosts = trust.record(head.ip, head.root, self.dir)
        with self._state_lock():
            state = self.load()
            assert state is not None
            state.head_host_keys, state.known_hosts = [list(k) for k in keys], str(known_hosts)
            self._save(state)
        progress(f"recorded the new head's host keys in {known_hosts}")
        return head

    # -- the head's fake VM (autostop) ------------------------------------------------------
    def vm_deallocate(self) -> None:
        """The head's VM deallocated (the fake Compute's hook): its container shuts down and
        stays down; its disk, namespace and metadata service stay, as a VM's disk and NIC do."""
        require_root_linux()
        head = self.node("head")
        if pid_alive(head.pid):
            nodes.poweroff(head)

    def vm_start(self) -> None:
        """The head's VM started (the fake Compute's hook): its container boots again from the
        same disk; returns once it runs (Azure's start ends with the VM running, not its Ray)."""
        require_root_linux()
        with self._state_lock():
            state = self.load()
            if state is None:
                raise DriverError(f"no rehearsal cluster {self.name!r}")
            head = state.head
            if pid_alive(head.pid):
                return
            binds = []
            if state.warm_node_cache:
                binds.append(f"{self.base / 'node-cache'}:/var/cache/ray-cluster")
            head.pid = nodes.start(head, binds)
            self.store.record(state, f"pid:{head.pid}")
        deadline = time.monotonic() + 120
        while nodes.container_init(head) is None:
            if time.monotonic() > deadline or not pid_alive(head.pid):
                raise DriverError("the rehearsal's head did not boot again")
            time.sleep(0.5)

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
        return nodes.container_init(node)

    def exec(self, node: Node, command: list[str], timeout: float = 120) -> str:
        """Run a command inside the container (all its namespaces), as root; its output."""
        return nodes.exec(node, command, timeout)

    def reboot(self, name: str) -> None:
        """As `sudo reboot` on the VM: its services stop, it boots again from the same disk."""
        require_root_linux()
        nodes.reboot(self.node(name))

    def poweroff(self, name: str) -> None:
        """As a VM switched off: it shuts down and stays down."""
        require_root_linux()
        nodes.poweroff(self.node(name))

    def crash(self, name: str) -> None:
        """As a VM lost at once (its host failed): nothing shuts down. Its network goes silent
        first (the bridge's end of its link down), then every process in it is killed with its
        init; it stays down. The rest of the cluster notices only by what it no longer hears."""
        require_root_linux()
        node = self.node(name)
        if not pid_alive(node.pid):
            raise DriverError(f"rehearsal node {name} is not running")
        network.cut(node)
        nodes.kill(node)

    # -- readiness -------------------------------------------------------------------------
    marker = staticmethod(nodes.marker)
    failure = staticmethod(nodes.failure)
    phase = staticmethod(nodes.phase)

    def wait_ready(
        self, state: State, timeout: float, progress: Progress, nodes: list[Node] | None = None
    ) -> None:
        """Until ``nodes`` (default: all) are ready; then each worker's host keys go to the
        cluster folder's known_hosts, for the ``worker`` ssh line ``up`` prints."""
        ready = nodes or state.nodes
        _wait_ready(self.name, ready, timeout, progress)
        for node in ready:
            if node.role != "worker":
                continue
            try:
                trust.record_worker(node.ip, node.root, self.dir)
            except (OSError, ValueError) as e:  # it runs; only `ssh` to it will not verify
                progress(f"{node.name}: host keys not recorded ({e})")

    # -- down ------------------------------------------------------------------------------
    def down(self, progress: Progress = silent, delete_results: bool = False) -> list[str]:
        """Remove every container, mount, namespace, link, process and file of the cluster;
        its results storage's data (:attr:`results_dir`) stays, as a storage account outlives
        the compute, unless ``delete_results``."""
        require_root_linux()
        state = self.load()
        removed: list[str] = []
        # Keys are recorded only once the head booted; a failed up may have no head at all.
        if (
            state
            and state.head_host_keys
            and trust.forget(state.head.ip, state.head_host_keys, state.known_hosts)
        ):
            removed.append(f"the head's host keys from {state.known_hosts}")
        # 1. containers: a clean poweroff first, then the whole PID namespace goes.
        pids = {
            n.pid for n in (state.nodes if state else []) if n.pid is not None and pid_alive(n.pid)
        }
        pids.update(pids_with_cmdline(f"--directory={self.dir}/nodes/"))
        still = nodes.stop(pids)
        if still:
            raise DriverError(f"containers did not stop (pids {still}); run down again")
        removed += [f"container pid {p}" for p in sorted(pids)]
        for node in state.nodes if state else []:
            nodes.remove_own_cgroup(node.netns)
        # 2. the services on the bridge.
        host_ip = state.host_ip if state else network.host_ip(self.subnet)
        services = running_services(self.dir, host_ip, state)
        # Each is waited for (SIGTERM, then SIGKILL): down returns when they are gone.
        still = nodes.stop(set(services))
        if still:
            raise DriverError(f"services did not stop (pids {still}); run down again")
        removed += [f"server pid {pid}" for pid in sorted(services)]
        # 3. mounts under the cluster folder (deepest first).
        removed += [f"mount {m}" for m in unmount_under(self.dir)]
        # 4. network namespaces and links with the cluster's prefix.
        removed += network.remove_all(self.name)
        # 5. files.
        if self.dir.exists():
            shutil.rmtree(self.dir)
            removed.append(f"folder {self.dir}")
        if delete_results and set(azurite.serving(self.results_dir)) - services:
            raise DriverError(
                f"the results storage {self.results_dir} is being served (`rehearse storage "
                f"--name {self.name}`): stop that, then run down --delete-results again"
            )
        if delete_results and self.results_dir.exists():
            shutil.rmtree(self.results_dir)
            removed.append(f"results storage {self.results_dir}")
        for r in removed:
            progress(f"removed {r}")
        if self.results_dir.exists():
            progress(
                f"kept the results storage {self.results_dir} (serve it: python -m nodekit "
                f"rehearse storage --name {self.name}; remove it: down --delete-results)"
            )
        return removed

    # -- status ----------------------------------------------------------------------------
    def status(self) -> dict:
        state = self.load()
        if state is None:
            return {"name": self.name, "up": False}
        rows = []
        for n in state.nodes:
            marker = nodes.marker(n)
            rows.append(
                {
                    "name": n.name,
                    "role": n.role,
                    "pool": n.pool if n.role == "worker" else "",
                    "ip": n.ip,
                    "running": pid_alive(n.pid),
                    "ready": marker is not None,
                    "failed": nodes.failure(n),
                    "phase": "ready" if marker else nodes.phase(n),
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
            "image": state.image,
            "orchestration_mode": state.orchestration_mode,
            "nodes": rows,
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


def gpu_stand_in(worker_document: str, gpus: int) -> dict[str, str]:
    """The rehearsal's stand-in for GPUs the bootstrap found and checked, written into a GPU
    pool container before it boots (the documents stay as Azure runs them): a drop-in for the
    worker's Ray unit (the unit in ``worker_document`` that runs ``ray-cluster-start worker``)
    whose later ``EnvironmentFile`` sets RAY_NUM_GPUS (Ray starts with ``--num-gpus``; a later
    file wins over node.env's empty value), and whose ExecStartPre list is reset to the steps
    other than the GPU check (which needs the NVIDIA driver and hardware): the node-ip step.
    ``{path: text}``."""
    files = render.document_files(worker_document)
    units = [
        path
        for path, text in files.items()
        if path.startswith("/etc/systemd/system/")
        and re.search(r"^ExecStart=\S*ray-cluster-start worker\b", text, re.M)
    ]
    if len(units) != 1:
        raise DriverError(f"the worker document has {len(units)} units that start Ray, not 1")
    pre = re.findall(r"^ExecStartPre=(.+)$", files[units[0]], re.M)
    kept = [p for p in pre if not re.search(r"\bgpu\b", p)]
    if len(kept) == len(pre) or not kept:
        raise DriverError(
            f"{units[0]} in the worker document has no GPU check to stand in for, or nothing "
            "else before Ray starts"
        )
    drop_in = "".join(
        [
            "# The rehearsal's stand-in for GPUs the bootstrap found and checked (a\n",
            "# container has none): Ray starts with --num-gpus, without the GPU check.\n",
            "[Service]\n",
            f"EnvironmentFile={GPU_STAND_IN_ENV}\n",
            "ExecStartPre=\n",
            *(f"ExecStartPre={p}\n" for p in kept),
        ]
    )
    return {
        f"{units[0]}.d/50-rehearsal-gpu.conf": drop_in,
        GPU_STAND_IN_ENV: f"RAY_NUM_GPUS={gpus}\n",
    }
