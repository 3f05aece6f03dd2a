"""The rehearsal's second worker pool (``rehearse up --gpu-pool-max N``): its deploy-time values
and fake scale set, and the stand-in that makes its containers declare GPUs to Ray without
hardware (tests/e2e/test_autoscale.py boots it)."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest

from driver.errors import DriverError
from nodekit import render
from nodekit.node.azure_vmss_provider import autoscaler_pools, autoscaling_config, node_type
from nodekit.rehearsal import cluster, network
from nodekit.rehearsal.cluster import GPU_STAND_IN_ENV, GPU_VM_SIZE, Rehearsal, gpu_stand_in
from nodekit.rehearsal.services import compute
from nodekit.rehearsal.standins.azure_compute import _command_hook
from nodekit.rehearsal.state import DEFAULT_POOL, GPU_POOL, Node, State
from rehearsal_support import unit_cluster, unit_state
from support import REPO

WORKER_DOC = (REPO / "cloud-init" / "rendered" / "worker.yaml").read_text()


def _state(tmp_path: Path, gpu_pool_max: int) -> tuple[Rehearsal, State]:
    state = unit_state(
        head_root=str(tmp_path),
        scaling_mode="ray",
        min_workers=0,
        max_workers=2,
        gpu_pool_max=gpu_pool_max,
        documents_dir=str(REPO / "cloud-init" / "rendered"),
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
    assert compute.vm_name("unit", node) == "rh-unit-gpu_3"
    assert compute.scale_set_name("unit", GPU_POOL) == "rh-unit-gpu"
    assert compute.pool_of("unit", "RH-UNIT-GPU") == GPU_POOL
    assert compute.pool_of("unit", "rh-unit-workers") == DEFAULT_POOL
    with pytest.raises(ValueError, match="no scale set of rehearsal cluster 'unit'"):
        compute.pool_of("unit", "rh-other-gpu")
    # A state from before pools: its workers are the default pool's.
    old = json.loads(State("o", "10.0.0.0/24", "b", "h", 1, "k").to_json())
    old["nodes"] = [{"name": "worker-1", "role": "worker", "ip": "i", "netns": "n", "veth": "v",
                     "dir": "d"}]  # fmt: skip
    assert State.from_json(json.dumps(old)).nodes[0].pool == DEFAULT_POOL


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
