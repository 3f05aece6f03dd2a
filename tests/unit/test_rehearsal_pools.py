"""The rehearsal's second worker pool (``rehearse up --gpu-pool-max N``): its deploy-time values
and fake scale set, and the stand-in that makes its containers declare GPUs to Ray without
hardware (tests/e2e/test_autoscale.py boots it); the pools' orchestration mode (``rehearse up
--orchestration-mode``, default Flexible as the stacks'): each worker's VM name, instance id and
container, as the fake Compute, the metadata service and Scheduled Events name them."""

from __future__ import annotations

import inspect
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest

from compute_support import loopback_azure, use_managed_identity
from driver.errors import DriverError
from nodekit import render
from nodekit.node import azure_vmss_provider as vp
from nodekit.node.azure_vmss_provider import autoscaler_pools, autoscaling_config, node_type
from nodekit.rehearsal import cluster, network
from nodekit.rehearsal.cluster import GPU_STAND_IN_ENV, GPU_VM_SIZE, Rehearsal, gpu_stand_in
from nodekit.rehearsal.services import compute, imds
from nodekit.rehearsal.standins.azure_compute import _command_hook, is_flexible_vm_of
from nodekit.rehearsal.state import DEFAULT_ORCHESTRATION_MODE, DEFAULT_POOL, GPU_POOL, Node, State
from rehearsal_support import unit_cluster, unit_state
from support import REPO

WORKER_DOC = (REPO / "cloud-init" / "rendered" / "worker.yaml").read_text()


def _state(
    tmp_path: Path, gpu_pool_max: int, orchestration_mode: str = "Uniform"
) -> tuple[Rehearsal, State]:
    state = unit_state(
        head_root=str(tmp_path),
        scaling_mode="ray",
        min_workers=0,
        max_workers=2,
        gpu_pool_max=gpu_pool_max,
        documents_dir=str(REPO / "cloud-init" / "rendered"),
        orchestration_mode=orchestration_mode,
    )
    return unit_cluster(tmp_path), state


def test_the_gpu_pool_is_a_second_node_type_on_its_own_scale_set(tmp_path: Path) -> None:
    r, state = _state(tmp_path, gpu_pool_max=3)
    values = r.deploy_values(state)
    config = autoscaling_config(values)
    pools = {p["node_type"]: p for p in config["provider"]["pools"]}
    assert (
        list(pools)
        == [node_type(DEFAULT_POOL), node_type(GPU_POOL)]
        == [
            "ray.worker.default",
            "ray.worker.gpu",
        ]
    )
    # Both scale sets in the one resource group, the first pool's the one the values name.
    assert pools["ray.worker.default"]["scale_set_id"] == values["WORKER_SCALE_SET_ID"]
    assert pools["ray.worker.gpu"]["scale_set_id"] == compute.scale_set_id("unit", GPU_POOL)
    assert (
        pools["ray.worker.gpu"]["scale_set_id"].rsplit("/", 1)[0]
        == values["WORKER_SCALE_SET_ID"].rsplit("/", 1)[0]
    )
    assert pools["ray.worker.gpu"]["max_workers"] == 3
    assert config["max_workers"] == 2 + 3
    gpu = config["available_node_types"]["ray.worker.gpu"]
    # What the provider plans a GPU worker with: the size's CPUs and its one GPU.
    assert gpu["resources"] == {"CPU": 4, "GPU": 1, "simulator": 4}
    assert gpu["labels"] == {"pool": "gpu"}
    assert (gpu["min_workers"], gpu["max_workers"]) == (0, 3)
    cpu = config["available_node_types"]["ray.worker.default"]
    assert "GPU" not in cpu["resources"] and cpu["labels"] == {"pool": "workers"}
    assert values["WORKER_SCALE_SETS"].split() == ["rh-unit-workers", "rh-unit-gpu"]
    assert [p["vm_size"] for p in json.loads(values["AUTOSCALER_POOLS"])] == [
        values["WORKER_VM_SIZE"],
        GPU_VM_SIZE,
    ]
    assert [p["scale_set"] for p in autoscaler_pools(values)] == ["rh-unit-workers", "rh-unit-gpu"]
    # The cluster's values are the default pool's, as a stack's are its first pool's.
    assert values["WORKER_POOL"] == DEFAULT_POOL


def test_without_a_gpu_pool_there_is_one_pool(tmp_path: Path) -> None:
    r, state = _state(tmp_path, gpu_pool_max=0)
    values = r.deploy_values(state)
    assert [p["name"] for p in json.loads(values["AUTOSCALER_POOLS"])] == [DEFAULT_POOL]
    assert values["WORKER_SCALE_SETS"] == "rh-unit-workers"
    assert list(r.pools(state)) == [DEFAULT_POOL]
    assert len(r.pools(state)[DEFAULT_POOL][1]) == network.MAX_NODES - 1
    with pytest.raises(DriverError, match="has no worker pool 'gpu'"):
        r.pool_values(state, GPU_POOL)


def test_a_gpu_worker_document_is_the_committed_one_filled_with_its_pools_values(
    tmp_path: Path,
) -> None:
    r, state = _state(tmp_path, gpu_pool_max=1)
    own = r.pool_values(state, GPU_POOL)
    # Exactly what the stacks give each pool of its own (tests/unit/test_deploy_values.py).
    assert own == {"WORKER_POOL": "gpu", "RAY_RESOURCES": "{}", "RAY_LABELS": ""}
    filled = r._user_data(state, "worker", own)
    # The committed document but for its placeholder, which holds the cluster's values with
    # the pool's over them.
    encoded = render.encode_deploy_values({**r.deploy_values(state), **own})
    assert filled == WORKER_DOC.replace(render.PLACEHOLDER, encoded)
    [deploy] = [
        path
        for path, text in render.document_files(WORKER_DOC).items()
        if text == render.PLACEHOLDER
    ]
    assert json.loads(render.document_files(filled)[deploy])["WORKER_POOL"] == "gpu"


def test_the_pools_scale_sets_never_share_an_address(tmp_path: Path) -> None:
    r, state = _state(tmp_path, gpu_pool_max=cluster.GPU_POOL_ADDRESSES)
    pools = r.pools(state)
    assert {p: size for p, (size, _) in pools.items()} == {
        DEFAULT_POOL: r.pool_sizes(state)[DEFAULT_POOL][0],
        GPU_POOL: GPU_VM_SIZE,
    }
    cpu, gpu = pools[DEFAULT_POOL][1], pools[GPU_POOL][1]
    assert not set(cpu) & set(gpu)
    assert len(gpu) == cluster.GPU_POOL_ADDRESSES and len(cpu) >= 40  # --max-workers' bound
    assert set(cpu) | set(gpu) == set(network.worker_pool(ipaddress.IPv4Network(state.subnet)))
    subnet = ipaddress.IPv4Network(state.subnet)
    # A GPU instance's node index (its namespace and link) is its address's.
    assert [network.node_index(subnet, ip) for ip in gpu] == list(range(41, 51))
    assert all(network.node_ip(subnet, network.node_index(subnet, ip)) == ip for ip in cpu + gpu)
    with pytest.raises(DriverError, match="no node address"):
        network.node_index(subnet, "10.213.0.5")


def test_gpu_pool_names_as_azure_names_them() -> None:
    node = Node("gpu-3", "worker", "10.213.0.51", "ns", "v", "/x", instance_id="3", pool=GPU_POOL)
    assert compute.vm_name(unit_state(orchestration_mode="Uniform"), node) == "rh-unit-gpu_3"
    assert compute.scale_set_name("unit", GPU_POOL) == "rh-unit-gpu"
    assert compute.pool_of("unit", "RH-UNIT-GPU") == GPU_POOL
    assert compute.pool_of("unit", "rh-unit-workers") == DEFAULT_POOL
    with pytest.raises(ValueError, match="no scale set of rehearsal cluster 'unit'"):
        compute.pool_of("unit", "rh-other-gpu")
    # A state from before pools: its workers are the default pool's; from before the
    # orchestration mode: its pools were Uniform.
    old = json.loads(State("o", "10.0.0.0/24", "b", "h", 1, "k").to_json())
    old["nodes"] = [{"name": "worker-1", "role": "worker", "ip": "i", "netns": "n", "veth": "v",
                     "dir": "d"}]  # fmt: skip
    del old["orchestration_mode"]
    assert State.from_json(json.dumps(old)).nodes[0].pool == DEFAULT_POOL
    assert State.from_json(json.dumps(old)).orchestration_mode == "Uniform"


def test_the_fake_computes_hooks_say_which_scale_set(tmp_path: Path) -> None:
    out = tmp_path / "env"
    hook = _command_hook(f'echo "$SCALE_SET $INSTANCE_ID $PRIVATE_IP" > {out}')
    hook(
        {
            "instanceId": "2",
            "name": "rh-unit-gpu_2",
            "ip": "10.213.0.51",
            "scale_set": "rh-unit-gpu",
        }
    )
    assert out.read_text() == "rh-unit-gpu 2 10.213.0.51\n"
    assert "--scale-set" in compute.HOOK_ARGS and "$SCALE_SET" in compute.HOOK_ARGS


def test_the_gpu_stand_in_starts_ray_with_gpus_and_without_the_gpu_check() -> None:
    files = gpu_stand_in(WORKER_DOC, 1)
    doc = render.document_files(WORKER_DOC)
    unit = "/etc/systemd/system/ray-worker.service"
    assert set(files) == {f"{unit}.d/50-rehearsal-gpu.conf", GPU_STAND_IN_ENV}
    assert files[GPU_STAND_IN_ENV] == "RAY_NUM_GPUS=1\n"
    drop_in = [ln for ln in files[f"{unit}.d/50-rehearsal-gpu.conf"].splitlines() if ln[:1] != "#"]
    assert drop_in == [
        "[Service]",
        f"EnvironmentFile={GPU_STAND_IN_ENV}",
        "ExecStartPre=",  # resets the unit's list
        "ExecStartPre=+/usr/local/sbin/ray-cluster-node-ip",
    ]
    # Against the committed unit: its own environment (node.env, whose RAY_NUM_GPUS the
    # bootstrap leaves empty on a node without GPUs) comes first, so the later file wins; the
    # GPU check is the step left out, every other step is kept.
    text = doc[unit]
    env_files = re.findall(r"^EnvironmentFile=(.+)$", text, re.M)
    assert env_files and GPU_STAND_IN_ENV not in env_files
    pre = re.findall(r"^ExecStartPre=(.+)$", text, re.M)
    assert [p for p in pre if p not in drop_in[-1]] == [
        p for p in pre if re.search(r"node_check\.py gpu\b", p)
    ]
    assert len(pre) == 2
    # The start script turns RAY_NUM_GPUS into --num-gpus.
    start = doc["/usr/local/bin/ray-cluster-start"]
    assert '--num-gpus="$RAY_NUM_GPUS"' in start
    assert files == gpu_stand_in(WORKER_DOC, 1)  # the same text every time
    assert gpu_stand_in(WORKER_DOC, 4)[GPU_STAND_IN_ENV] == "RAY_NUM_GPUS=4\n"


def test_a_worker_document_without_the_gpu_check_has_no_stand_in() -> None:
    doc = render.document_files(WORKER_DOC)
    unit = "/etc/systemd/system/ray-worker.service"
    without = "\n".join(ln for ln in doc[unit].splitlines() if " gpu " not in ln)
    text = "write_files:\n" + "".join(
        f"  - path: {path}\n    content: {json.dumps(body)}\n"
        for path, body in {**doc, unit: without}.items()
    )
    with pytest.raises(DriverError, match="no GPU check to stand in for"):
        gpu_stand_in(text, 1)
    with pytest.raises(DriverError, match="0 units that start Ray"):
        gpu_stand_in("write_files: []\n", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_pool_max": 1}, "--gpu-pool-max needs --scaling-mode ray"),
        ({"gpu_pool_max": 11, "scaling_mode": "ray"}, r"--gpu-pool-max must be between 0 .* 10"),
        ({"gpu_pool_max": -1, "scaling_mode": "ray"}, "--gpu-pool-max must be between"),
        (
            {"orchestration_mode": "flexible"},
            "--orchestration-mode must be Flexible or Uniform, got 'flexible'",
        ),
    ],
)
def test_gpu_pool_options_are_checked_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict, message: str
) -> None:
    monkeypatch.setattr(cluster, "require_root_linux", lambda: None)
    with pytest.raises(DriverError, match=message):
        Rehearsal("x", base=tmp_path).up(**kwargs)
    assert not (tmp_path / "clusters").exists()


def test_rehearse_takes_a_gpu_pool_and_hooks_name_the_scale_set() -> None:
    from nodekit.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["rehearse", "up"]).gpu_pool_max == 0
    assert parser.parse_args(["rehearse", "up", "--gpu-pool-max", "2"]).gpu_pool_max == 2
    args = parser.parse_args(
        ["rehearse", "scale-set", "create", "--scale-set", "rh-x-gpu", "--instance-id", "0",
         "--ip", "10.0.0.51"]
    )  # fmt: skip
    assert args.scale_set == "rh-x-gpu"


# -- the pools' orchestration mode ------------------------------------------------------------
VM_NAME = re.compile(r"^rh-unit-(workers|gpu)_[0-9a-f]{8}$")
"""A VM of the unit cluster's Flexible pools: its scale set's name, _ and 8 hex characters."""


def test_the_rehearsals_default_orchestration_mode_is_the_stacks() -> None:
    """``rehearse up`` rehearses pools as the stacks deploy them when no mode is given:
    Terraform's ``worker_pools`` default (``orchestration_mode = optional(string, ...)``)."""
    from nodekit.cli import build_parser

    text = (REPO / "infra/terraform/modules/cluster/variables.tf").read_text()
    block = text[text.index('variable "worker_pools"') :]
    block = block[: block.index("\n}\n")]
    [stacks] = re.findall(r'orchestration_mode\s*=\s*optional\(string,\s*"(\w+)"\)', block)
    assert stacks == DEFAULT_ORCHESTRATION_MODE == "Flexible"
    assert inspect.signature(Rehearsal.up).parameters["orchestration_mode"].default == stacks
    parser = build_parser()
    assert parser.parse_args(["rehearse", "up"]).orchestration_mode == stacks
    up = ["rehearse", "up", "--orchestration-mode"]
    assert parser.parse_args([*up, "Uniform"]).orchestration_mode == "Uniform"
    with pytest.raises(DriverError, match="invalid choice: 'flex'"):
        parser.parse_args([*up, "flex"])


def test_a_flexible_pools_workers_are_vms_named_by_their_instance_id(tmp_path: Path) -> None:
    r, state = _state(tmp_path, gpu_pool_max=1, orchestration_mode="Flexible")
    first, second = r._plan_node(state), r._plan_node(state)
    assert (first.name, first.pool) == ("worker-1", DEFAULT_POOL)
    # A VM of its own: its instance id is its name, a new one each (as the fake Compute's).
    assert VM_NAME.match(first.instance_id) and first.instance_id != second.instance_id
    assert is_flexible_vm_of("rh-unit-workers", first.instance_id)
    assert compute.instance_id(first) == compute.vm_name(state, first) == first.instance_id
    sub, group = compute.resource_group("unit")
    assert compute.vm_resource_id(state, first) == (
        f"/subscriptions/{sub}/resourceGroups/{group}/providers/Microsoft.Compute"
        f"/virtualMachines/{first.instance_id}"
    )
    # The metadata service says so (name, scale set, resource id), and the head is the head.
    placed = imds._placement(state, first)
    assert placed["resourceId"] == compute.vm_resource_id(state, first)
    assert imds._placement(state, state.head)["resourceId"] == compute.head_vm_id("unit")
    assert compute.vm_name(state, state.head) == "rh-unit-head"
    # A scale set's new VM becomes the container named after its pool and its 8 characters.
    assert compute.node_name(state, DEFAULT_POOL, "rh-unit-workers_0123abcd") == "worker-0123abcd"
    assert compute.node_name(state, GPU_POOL, "rh-unit-gpu_0123abcd") == "gpu-0123abcd"
    # A Flexible worker without a VM name is a bug, said in one line, not a guessed name.
    nameless = Node("worker-9", "worker", "10.213.0.19", "ns", "v", "/x")
    with pytest.raises(DriverError, match="no VM name of Flexible scale set rh-unit-workers"):
        compute.vm_name(state, nameless)


def test_a_uniform_pools_workers_keep_their_numbered_names(tmp_path: Path) -> None:
    r, state = _state(tmp_path, gpu_pool_max=1, orchestration_mode="Uniform")
    first = r._plan_node(state)
    assert first.instance_id == "" and compute.instance_id(first) == "1"
    assert compute.vm_name(state, first) == "rh-unit-workers_1"
    assert compute.vm_resource_id(state, first) == "" and "resourceId" not in imds._placement(
        state, first
    )
    assert compute.node_name(state, DEFAULT_POOL, "3") == "worker-4"  # node 0 is the head
    assert compute.node_name(state, GPU_POOL, "3") == "gpu-3"


def test_the_fake_compute_plays_the_rehearsals_flexible_pools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``up`` gives the fake Compute for Flexible pools (its scale sets and the first
    workers) is what the node provider reads as Flexible, through azure-mgmt-compute: the
    workers ``up`` booted by their VM names and addresses; a raise makes VMs whose names the
    ``scale-set create`` hook takes, a delete names exactly the VM."""
    r, state = _state(tmp_path, gpu_pool_max=1, orchestration_mode="Flexible")
    workers = [r._plan_node(state), r._plan_node(state)]
    pools = r.pools(state)
    autoscaler = "aaaaaaaa-0000-4000-8000-000000000001"
    created: list[dict[str, Any]] = []
    deleted: list[dict[str, Any]] = []
    (tmp_path / "azure").mkdir()
    with loopback_azure(
        tmp_path / "azure",
        "rh-unit-head",
        {autoscaler: "p-autoscaler"},
        [autoscaler],
        compute.scale_sets(state, pools),
        on_create=created.append,
        on_delete=deleted.append,
    ) as fakes:
        fakes.compute.state.write("instances.json", compute.first_instances(state, workers, pools))
        use_managed_identity(monkeypatch, fakes.imds)

        def scale_set(pool: str) -> vp.ScaleSet:
            return vp.ScaleSet(
                compute.scale_set_id("unit", pool),
                vp.managed_identity(autoscaler),
                fakes.compute.url,
                connection_verify=str(fakes.ca),
                polling_interval=0.05,
            )

        cpu, gpu = scale_set(DEFAULT_POOL), scale_set(GPU_POOL)
        assert cpu.flexible() and gpu.flexible()
        assert [(i.instance_id, i.name, i.ip) for i in cpu.instances()] == [
            (w.instance_id, w.instance_id, w.ip) for w in workers
        ]
        assert gpu.instances() == []
        # A raise: a new VM after the first two, at an address no worker has, named as the
        # hook's `--instance-id` must be for that pool.
        cpu.set_capacity(3)
        [new] = created
        assert new["scale_set"] == "rh-unit-workers" and new["name"] == new["instanceId"]
        assert is_flexible_vm_of("rh-unit-workers", new["instanceId"])
        assert new["ip"] not in {w.ip for w in workers}
        gpu.set_capacity(1)
        assert is_flexible_vm_of("rh-unit-gpu", created[1]["instanceId"])
        # Deleting by name removes exactly that VM; scale to zero is the one cut Flexible takes.
        cpu.delete([workers[0].instance_id])
        assert [d["instanceId"] for d in deleted] == [workers[0].instance_id]
        assert [i.name for i in cpu.instances()] == [workers[1].instance_id, new["instanceId"]]
        gpu.set_capacity(0)
        assert gpu.instances() == [] and gpu.capacity() == 0


def _hooks_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orchestration_mode: str
) -> tuple[Rehearsal, list[Node]]:
    """A unit cluster whose hooks run without root: booting a node records it instead."""
    r, state = _state(tmp_path, gpu_pool_max=1, orchestration_mode=orchestration_mode)
    r._save(state)
    booted: list[Node] = []
    monkeypatch.setattr(cluster, "require_root_linux", lambda: None)
    monkeypatch.setattr(Rehearsal, "_create_node", lambda self, state, node: booted.append(node))
    monkeypatch.setattr(Rehearsal, "wait_ready", lambda self, *a, **k: None)
    return r, booted


def test_a_flexible_scale_sets_new_vm_boots_as_its_pools_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, booted = _hooks_cluster(tmp_path, monkeypatch, "Flexible")
    state = r.load()
    assert state is not None
    gpu_ip, cpu_ip = r.pools(state)[GPU_POOL][1][0], r.pools(state)[DEFAULT_POOL][1][0]
    node = r.scale_set_create("rh-unit-gpu_0123abcd", gpu_ip, scale_set="rh-unit-gpu")
    assert booted == [node]
    assert (node.name, node.pool) == ("gpu-0123abcd", GPU_POOL)
    assert node.instance_id == "rh-unit-gpu_0123abcd"
    # Its namespace and link are its address's (no other node has it).
    index = network.node_index(r.subnet, gpu_ip)
    assert node.netns == network.node_netns("unit", "worker", index)
    state = r.load()
    assert state is not None and state.nodes[-1] == node
    worker = r.scale_set_create("rh-unit-workers_89abcdef", cpu_ip, scale_set="rh-unit-workers")
    assert (worker.name, worker.pool) == ("worker-89abcdef", DEFAULT_POOL)
    # What is no VM name of that Flexible scale set is refused in one line, nothing booted.
    for instance_id, scale_set in (
        ("3", "rh-unit-workers"),
        ("rh-unit-workers_0123abcd", "rh-unit-gpu"),
        ("rh-unit-gpu_0123ABCD", "rh-unit-gpu"),
    ):
        with pytest.raises(DriverError, match="must be a VM name of Flexible scale set"):
            r.scale_set_create(instance_id, "10.213.0.30", scale_set=scale_set)
    assert len(booted) == 2


def test_a_uniform_scale_sets_instances_keep_their_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, booted = _hooks_cluster(tmp_path, monkeypatch, "Uniform")
    node = r.scale_set_create("3", "10.213.0.20")
    assert (node.name, node.instance_id, node.netns) == ("worker-4", "3", "rh-unit-w4")
    with pytest.raises(DriverError, match="--instance-id must be a number"):
        r.scale_set_create("rh-unit-workers_0123abcd", "10.213.0.21")
    assert booted == [node]


def test_deleting_a_flexible_vm_sends_its_terminate_notice_naming_the_vm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, _ = _hooks_cluster(tmp_path, monkeypatch, "Flexible")
    state = r.load()
    assert state is not None
    vm = "rh-unit-gpu_0123abcd"
    r.scale_set_create(vm, r.pools(state)[GPU_POOL][1][0], scale_set="rh-unit-gpu")
    notices: list[tuple[str, list[str]]] = []

    def schedule(node: Node, kind: str, resources: list[str], not_before_s: float) -> str:
        notices.append((kind, resources))
        return "EVENT-1"

    removed: list[str] = []
    monkeypatch.setattr(imds, "schedule", schedule)
    monkeypatch.setattr(imds, "acknowledged", lambda node, event_id: event_id == "EVENT-1")
    monkeypatch.setattr(cluster, "pid_alive", lambda pid: True)
    monkeypatch.setattr(Rehearsal, "_remove_node", lambda self, node: removed.append(node.name))
    with pytest.raises(DriverError, match="has no instance rh-unit-gpu_0123abcd"):
        r.scale_set_delete(vm, scale_set="rh-unit-workers")  # another pool's VM
    assert r.scale_set_delete(vm, scale_set="rh-unit-gpu") is True
    assert notices == [("Terminate", [vm])] and removed == ["gpu-0123abcd"]
    state = r.load()
    assert state is not None and [n.name for n in state.nodes] == ["head"]
