"""What a rehearsal cluster is made of, as ``<base>/clusters/<name>/state.json`` records it.

Everything ``up`` creates is recorded here *before* it is created (:meth:`StateFile.record`),
so ``down`` removes it all again, also after a failed ``up``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nodekit.rehearsal.image import ADMIN_USER

BASE_ENV = "RAYDRIVER_REHEARSAL_DIR"
DEFAULT_BASE = Path("/var/lib/ray-azure-rl/rehearsal")
DEFAULT_POOL = "workers"
"""The default worker pool, as a stack's default (the cluster of before pools)."""
GPU_POOL = "gpu"
"""The optional second pool (``rehearse up --gpu-pool-max N``), whose workers offer Ray GPUs."""
DEFAULT_ORCHESTRATION_MODE = "Flexible"
"""The pools' scale sets' orchestration mode unless ``rehearse up --orchestration-mode`` says
otherwise: the stacks' default (a test holds it to Terraform's ``worker_pools`` default)."""


def default_base() -> Path:
    """Where clusters (``clusters/NAME``) and the caches live."""
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
    """A worker's instance id in its pool's scale set: Uniform, a number (its VM name's suffix;
    ``""``: its name's number), Flexible, its VM name."""
    pool: str = DEFAULT_POOL
    """A worker's pool, whose scale set it is an instance of (the head's: meaningless)."""

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
    image: str = ""
    """The baked image layer every node's disk has over ``rootfs`` (``""``: none, the nodes
    install at boot; ``rehearse up --no-image``)."""
    image_digest: str = ""
    """The install digest that layer holds."""
    bake_s: float = 0.0
    """Seconds ``up`` spent baking that layer (0: the cache had it)."""
    http_pid: int | None = None
    identity_client_id: str = ""
    """The nodes' managed identity, as the fake metadata service and Key Vault know it."""
    scaling_mode: str = "cpu"
    """"ray": Ray's autoscaler on the head drives a fake scale set whose instances are workers
    booted (and removed) here."""
    autoscaler_client_id: str = ""
    """The head's autoscaler identity (scaling mode ray), allowed on the fake scale set."""
    orchestration_mode: str = "Uniform"
    """Every worker pool's scale set's orchestration mode (``up`` sets it, default
    :data:`DEFAULT_ORCHESTRATION_MODE`): Flexible, each worker a VM of its own whose name is its
    instance id (``rh-NAME-POOL_`` and 8 hexadecimal characters), or Uniform (``rh-NAME-POOL_N``).
    A state.json from before the choice has none: its pools were Uniform."""
    min_workers: int = 0
    max_workers: int = 4
    idle_timeout_minutes: int = 5
    gpu_pool_max: int = 0
    """Scaling mode ray: the GPU pool's max (:data:`GPU_POOL`, min 0); 0: no GPU pool."""
    autostop_idle_minutes: int = 0
    """The head's autostop (AUTOSTOP_IDLE_MINUTES): 0, off, unless ``up`` was told otherwise."""
    results_url: str = ""
    """The results container's URL (Azurite's, on the bridge) the nodes mirror every job's run
    folder to (RESULTS_URL); ``""``: ``up --no-results-storage``, results on the head's disk."""
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


class StateFile:
    """The cluster's ``state.json`` (written whole, by rename) and its lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> State | None:
        try:
            return State.from_json(self.path.read_text())
        except (OSError, ValueError, TypeError):
            return None

    def save(self, state: State) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.path)

    def record(self, state: State, item: str) -> None:
        """Note ``item`` (``link:NAME``, ``netns:NAME``, ``mount:PATH``, ``pid:N``) as created."""
        state.created.append(item)
        self.save(state)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One change of state.json at a time (the scale set's hooks run side by side)."""
        with open(self.path.parent / "state.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
