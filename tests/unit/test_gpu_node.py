"""GPU nodes: the rendered bootstrap finds NVIDIA GPUs on the PCI bus, installs the driver and the
CUDA lock where there is one (and neither where there is none), and a GPU that does not come up
fails the node with the reason instead of letting it join as a CPU node.

Everything here RUNS the rendered documents' own code (the bootstrap's shell functions, cut out
of the rendered script; node_check.py; ray-cluster-start) against a fake node: a PROBE_ROOT tree
with /sys's PCI devices, /etc/os-release and the kernel, and stub commands on PATH (apt-get,
python3, uv, modprobe, nvidia-smi, ray) that log their arguments. No GPU, no driver, no Azure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

from node_support import probe_tree
from nodekit import render
from nodekit.node import health
from support import REPO

RENDERED = REPO / "cloud-init" / "rendered"
DEFINITIONS_END = "# ---- end of the definitions"
LOGGER = (
    '#!/bin/bash\necho "$(basename "$0") $*" >>"$STUB_LOG"\n[ "${1:-}" != - ] || cat >/dev/null\n'
)


def _files(role: str = "worker") -> dict[str, str]:
    return render.document_files((RENDERED / f"{role}.yaml").read_text())


def _stub(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / name).write_text(body)
    (bin_dir / name).chmod(0o755)


def _values() -> dict[str, str]:
    return {n: render.deploy_value_defaults()[n] for n in render.INSTALL_VALUE_NAMES}


# -- the install phase: driver and CUDA lock on a GPU node, neither on a CPU node -----------------
def _install(tmp_path: Path, gpus: int, os_id: str = "ubuntu") -> tuple[int, list[str], str]:
    """Run the rendered bootstrap's install phase (install_phase, as ``ray-cluster-bootstrap
    install`` does) on a fake node: (exit code, the commands it ran, stderr)."""
    bootstrap = _files()[render.BOOTSTRAP_PATH]
    code = bootstrap[: bootstrap.index(DEFINITIONS_END)]
    # The files the install phase reads live under the fake node, not in this machine's /etc.
    etc = tmp_path / "etc-ray-cluster"
    etc.mkdir()
    (etc / "os-packages.txt").write_text("python3-venv\nxvfb\n")
    code = code.replace("/etc/ray-cluster/", f"{etc}/")
    root = probe_tree(tmp_path / "node", gpus=gpus, os_id=os_id)
    bin_dir = tmp_path / "bin"
    for name in ("apt-get", "sleep"):
        _stub(bin_dir, name, LOGGER)
    # python3: the image's Python; `-m venv DIR` makes a venv of logging stubs.
    _stub(
        bin_dir,
        "python3",
        LOGGER
        + 'case "$1" in\n-c) echo 3.12.3 ;;\n-m) mkdir -p "$3/bin"\n'
        + '    for t in pip uv python; do cp "$0.logger" "$3/bin/$t"; done ;;\nesac\n',
    )
    _stub(bin_dir, "python3.logger", LOGGER)
    log = tmp_path / "commands.log"
    snippet = (
        f"STATE={tmp_path}/state\nFAILED={tmp_path}/state/failed\nVENV={tmp_path}/venv\n"
        f"INSTALL_MARKER={tmp_path}/installed.json\n"
        'read_values() { :; }\ncheck_install_values\ndetect_gpu\ninstall_phase\necho "installed"\n'
    )
    p = subprocess.run(
        ["bash", "-c", code + snippet, "ray-cluster-bootstrap", "install"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            **_values(),
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "STUB_LOG": str(log),
            "RAY_NODE_PROBE_ROOT": str(root),
        },
    )
    commands = log.read_text().splitlines() if log.exists() else []
    return p.returncode, commands, p.stderr


def test_a_gpu_node_installs_the_driver_and_the_cuda_lock(tmp_path: Path) -> None:
    rc, commands, err = _install(tmp_path, gpus=2)
    assert rc == 0, err
    assert "hardware: 2 NVIDIA GPU(s) on the PCI bus" in err
    branch = render.load_config()["nvidia_driver"]
    driver = [c for c in commands if c.startswith("apt-get") and "nvidia" in c]
    assert len(driver) == 1, commands
    # Canonical's driver without DKMS and the modules signed for this kernel and its flavour.
    assert driver[0].split()[-4:] == [
        f"nvidia-headless-no-dkms-{branch}",
        f"nvidia-utils-{branch}",
        f"linux-modules-nvidia-{branch}-6.8.0-1021-azure",
        f"linux-modules-nvidia-{branch}-azure",
    ]
    assert " install -y nvidia-" in driver[0]
    uv = [c for c in commands if c.startswith("uv pip install")]
    # torch and its nvidia-* libraries by hash from the cluster's index; never the CPU index.
    assert any(
        f"--index-url {_values()['PIP_INDEX_URL']} --require-hashes --no-deps -r "
        f"{tmp_path}/etc-ray-cluster/requirements-cuda.lock" in c
        for c in uv
    ), uv
    assert not any(_values()["TORCH_INDEX_URL"] in c or "torch==" in c for c in uv), uv
    assert any(c.endswith("-r " + f"{tmp_path}/etc-ray-cluster/requirements.lock") for c in uv)
    marker = next(c for c in commands if c.startswith("python - "))
    assert marker.split()[-1] == "nvidia"  # the install marker says which variant it holds


def test_a_cpu_node_installs_neither(tmp_path: Path) -> None:
    rc, commands, err = _install(tmp_path, gpus=0)
    assert rc == 0, err
    assert "hardware: 0 NVIDIA GPU(s)" in err
    assert not [c for c in commands if "nvidia" in c or "cuda" in c], commands
    uv = [c for c in commands if c.startswith("uv pip install")]
    torch = f"torch=={render.cluster_pins().versions['torch']}"
    assert any(f"--index-url {_values()['TORCH_INDEX_URL']} --no-deps {torch}" in c for c in uv), uv
    assert next(c for c in commands if c.startswith("python - ")).split()[-1] == "none"


def test_a_gpu_node_on_debian_is_refused_in_one_line(tmp_path: Path) -> None:
    rc, commands, _ = _install(tmp_path, gpus=1, os_id="debian")
    assert rc == 1
    failed = (tmp_path / "state" / "failed").read_text()
    assert failed.count("\n") == 1
    assert failed.startswith("this node has 1 NVIDIA GPU(s), but GPU nodes need os_image ubuntu")
    assert "'debian'" in failed
    assert not [c for c in commands if "nvidia" in c or c.startswith("uv ")], commands


# -- the GPU coming up (or not), before Ray starts ------------------------------------------------
FAKE_TORCH = '''"""A torch that answers as the environment says (the GPU checks run it)."""
import os
__version__ = "2.13.0"
class version:
    cuda = "13.0"
class _T:
    def mul_(self, x): return self
    def sum(self): return self
    def item(self): return 16.0
class cuda:
    @staticmethod
    def is_available(): return os.environ.get("FAKE_CUDA", "ok") != "unavailable"
    @staticmethod
    def device_count(): return int(os.environ.get("FAKE_CUDA_DEVICES", "1"))
    @staticmethod
    def get_device_capability(i): return (7, 5)
    @staticmethod
    def get_device_name(i): return "Tesla T4"
def ones(n, device=None):
    if os.environ.get("FAKE_CUDA") == "no-kernel":
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    return _T()
'''
NVIDIA_SMI = """#!/bin/bash
echo "nvidia-smi $*" >>"$STUB_LOG"
[ -z "${SMI_FAIL:-}" ] || { echo "$SMI_FAIL"; exit 9; }
if [ "${1:-}" = --query-gpu=index,name,driver_version ]; then
    for ((i = 0; i < ${SMI_GPUS:-1}; i++)); do echo "$i, Tesla T4, 580.95.05"; done
else
    echo "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0 |"
fi
"""
REJECTED = "Key was rejected by service"
SMI_FAILED = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
MODPROBE = """#!/bin/bash
echo "modprobe $*" >>"$STUB_LOG"
[ -z "${MODPROBE_FAIL:-}" ] || { echo "$MODPROBE_FAIL" >&2; exit 1; }
"""


def _gpu_node(tmp_path: Path, gpus: int = 1, torch: str = "fake") -> tuple[Path, dict[str, str]]:
    """A fake GPU node: its probe root (with /dev and /proc/devices), node_check.py, a venv
    whose python is this one, stub modprobe and nvidia-smi; and the environment to run in."""
    root = probe_tree(tmp_path / "node", gpus=gpus)
    (root / "dev").mkdir()
    (root / "dev" / "nvidia-uvm").write_text("")  # made already (mknod needs a real root)
    (tmp_path / "node_check.py").write_text(_files()[render.NODE_CHECK_PATH])
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    _stub(tmp_path / "venv" / "bin", "python", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    bin_dir = tmp_path / "bin"
    _stub(bin_dir, "modprobe", MODPROBE)
    _stub(bin_dir, "nvidia-smi", NVIDIA_SMI)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "commands.log"),
        "RAY_NODE_PROBE_ROOT": str(root),
        "SMI_GPUS": str(gpus),
        "FAKE_CUDA_DEVICES": str(gpus),
    }
    if torch == "fake":
        (tmp_path / "fake" / "torch").mkdir(parents=True)
        (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
        env["PYTHONPATH"] = str(tmp_path / "fake")
    return root, env


def _gpu_up(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The rendered bootstrap's detect_gpu and gpu_up (its own fail() writes the FAILED marker)."""
    bootstrap = _files()[render.BOOTSTRAP_PATH]
    code = bootstrap[: bootstrap.index(DEFINITIONS_END)]
    snippet = (
        f"STATE={tmp_path}/state\nFAILED={tmp_path}/state/failed\nVENV={tmp_path}/venv\n"
        f"NODE_CHECK={tmp_path}/node_check.py\nmkdir -p $STATE\n"
        'detect_gpu\ngpu_up\necho "RAY_NUM_GPUS=$RAY_NUM_GPUS"\n'
    )
    return subprocess.run(
        ["bash", "-c", code + snippet, "ray-cluster-bootstrap", "worker"],
        capture_output=True,
        text=True,
        env=env,
    )


def test_a_gpu_that_comes_up_gives_ray_its_gpus_and_the_versions(tmp_path: Path) -> None:
    _, env = _gpu_node(tmp_path, gpus=2)
    p = _gpu_up(tmp_path, env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "RAY_NUM_GPUS=2"
    info = json.loads((tmp_path / "state" / "gpu.json").read_text())
    assert info == {
        "count": 2,
        "names": ["Tesla T4", "Tesla T4"],
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "torch_cuda_version": "13.0",
        "compute_capabilities": ["7.5", "7.5"],
    }
    log = (tmp_path / "commands.log").read_text().splitlines()
    assert log[:2] == ["modprobe nvidia", "modprobe nvidia_uvm"]
    assert not (tmp_path / "state" / "failed").exists()


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        (
            {"MODPROBE_FAIL": f"modprobe: ERROR: could not insert 'nvidia': {REJECTED}"},
            "GPU: the NVIDIA driver did not load: modprobe nvidia: modprobe: ERROR: could not "
            f"insert 'nvidia': {REJECTED} (a kernel module not signed for Secure Boot)",
        ),
        (
            {"SMI_FAIL": SMI_FAILED},
            f"GPU: nvidia-smi failed (exit 9): {SMI_FAILED}",
        ),
        ({"SMI_GPUS": "1"}, "GPU: the PCI bus shows 2 NVIDIA GPU(s), nvidia-smi sees 1"),
        (
            {"FAKE_CUDA": "unavailable"},
            "GPU: torch 2.13.0 (CUDA 13.0) cannot use the GPU: torch.cuda.is_available() is False "
            "with driver 580.95.05 (CUDA 13.0)",
        ),
        (
            {"FAKE_CUDA": "no-kernel"},
            "GPU: a CUDA kernel of torch 2.13.0 failed on GPU 0 (Tesla T4): CUDA error: no kernel "
            "image is available for execution on the device",
        ),
    ],
)
def test_a_gpu_that_does_not_come_up_fails_the_node_with_the_reason(
    tmp_path: Path, setting: dict[str, str], reason: str
) -> None:
    _, env = _gpu_node(tmp_path, gpus=2)
    p = _gpu_up(tmp_path, {**env, **setting})
    assert p.returncode == 1
    assert "RAY_NUM_GPUS=" not in p.stdout  # Ray never starts, with or without GPUs
    assert (tmp_path / "state" / "failed").read_text() == reason + "\n"


def test_a_cpu_torch_on_a_gpu_node_fails_it(tmp_path: Path) -> None:
    """This machine's own torch is the CPU build: the check says so, from the real torch."""
    _, env = _gpu_node(tmp_path, gpus=1, torch="real")
    p = _gpu_up(tmp_path, env)
    assert p.returncode == 1
    failed = (tmp_path / "state" / "failed").read_text()
    assert re.fullmatch(r"GPU: the node's torch 2\.\d+\.\d+\+cpu is a CPU build\n", failed), failed


def test_a_cpu_node_runs_no_gpu_check(tmp_path: Path) -> None:
    _, env = _gpu_node(tmp_path, gpus=0)
    p = _gpu_up(tmp_path, env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "RAY_NUM_GPUS="
    assert not (tmp_path / "commands.log").exists()
    # Ray's pre-start (as root) does nothing on a node without RAY_NUM_GPUS.
    devices = subprocess.run(
        [sys.executable, str(tmp_path / "node_check.py"), "gpu", "--devices-only"],
        env={k: v for k, v in env.items() if k != "RAY_NUM_GPUS"},
    )
    assert devices.returncode == 0 and not (tmp_path / "commands.log").exists()


# -- at every later boot: the readiness check, and what the health endpoint says -------------------
def test_after_a_reboot_a_gpu_that_does_not_come_up_makes_the_worker_unhealthy(
    tmp_path: Path,
) -> None:
    _, env = _gpu_node(tmp_path, gpus=1)
    env = {**env, "RAY_NUM_GPUS": "1", "SMI_FAIL": "No devices were found"}
    restart_failed = tmp_path / "restart-failed"
    p = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "node_check.py"),
            "ready",
            "--role",
            "worker",
            "--timeout",
            "5",
            "--marker",
            str(tmp_path / "ready"),
            "--failed",
            str(restart_failed),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 1 and not (tmp_path / "ready").exists()
    reason = "GPU: nvidia-smi failed (exit 9): No devices were found"
    assert restart_failed.read_text() == reason + "\n"
    node = health.Node(
        ready=str(tmp_path / "ready"),
        failed=str(tmp_path / "failed"),
        restart_failed=str(restart_failed),
        unit_state=lambda: "active",
        boot_id=lambda: "this-boot",
        boot_time=lambda: 0.0,
    )
    assert health.assess(node) == (
        health.UNHEALTHY,
        f"Ray did not come back at this boot: {reason}",
    )
    # The first boot's failure (the bootstrap's FAILED marker) reads the same way.
    (tmp_path / "failed").write_text(reason + "\n")
    assert health.assess(node) == (health.UNHEALTHY, f"the bootstrap failed: {reason}")


@pytest.mark.parametrize("role", ["head", "worker"])
def test_ray_starts_with_the_gpus_the_bootstrap_found(tmp_path: Path, role: str) -> None:
    start = _files(role)["/usr/local/bin/ray-cluster-start"]
    if role == "worker":  # straight to `ray start`: the head is there, the preflight passes
        start = re.sub(r"^until timeout .*?^done\n", "", start, flags=re.M | re.S)
        start = start.replace(f"python {render.NODE_CHECK_PATH} preflight", ": preflight")
    script = tmp_path / "ray-cluster-start"
    script.write_text(start)
    _stub(tmp_path / "bin", "ray", LOGGER)
    log = tmp_path / "commands.log"
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "RAY_NODE_IP": "10.0.0.5",
        "RAY_HEAD_IP": "10.0.0.4",
        # What the bootstrap wrote into a worker's node.env: its pool's resources and labels.
        "RAY_WORKER_RESOURCES": '{"simulator":4}',
        "RAY_WORKER_LABELS": "pool=gpu,accelerator=t4",
    }
    for gpus, expected in (("2", ["--num-gpus=2"]), ("", [])):
        log.unlink(missing_ok=True)
        p = subprocess.run(
            ["bash", str(script), role], env={**env, "RAY_NUM_GPUS": gpus}, capture_output=True
        )
        assert p.returncode == 0, p.stderr
        (line,) = log.read_text().splitlines()
        assert [a for a in line.split() if a.startswith("--num-gpus")] == expected, line
        pool_args = [a for a in line.split() if a.startswith(("--resources=", "--labels="))]
        if role == "worker":
            assert pool_args == ['--resources={"simulator":4}', "--labels=pool=gpu,accelerator=t4"]
        else:
            assert not any(a.startswith("--labels") for a in pool_args), line


# -- the GPU variant of the node lock -----------------------------------------------------------
CUDA_LOCK = REPO / "cloud-init" / render.CUDA_LOCK_FILE
NODE_LOCK = REPO / "cloud-init" / render.LOCK_FILE


def _pins(text: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"^([^\s#][^\\]*?)\s*\\$", text, re.M):
        req = Requirement(m.group(1))
        found.setdefault(req.name.lower(), set()).add(next(iter(req.specifier)).version)
    return found


def test_the_cuda_lock_is_made_from_the_current_pins_and_node_lock() -> None:
    recorded = render.LOCK_DIGEST_RE.search(CUDA_LOCK.read_text())
    inputs = render.lock_inputs(render.load_config())
    expected = render.lock_digest([*render.cuda_lock_inputs(), render.lock_digest(inputs)])
    assert recorded and recorded.group(1) == expected, (
        "cloud-init/node-lock-cuda.txt is stale: run .venv/bin/python scripts/lock_nodes.py"
    )


def test_both_variants_install_the_same_ray_and_torch() -> None:
    pins = render.cluster_pins().versions
    cuda, node = _pins(CUDA_LOCK.read_text()), _pins(NODE_LOCK.read_text())
    # GPU nodes: torch from the CUDA lock, everything else (Ray included) from the node lock.
    assert cuda["torch"] == {pins["torch"]} and "ray" not in cuda
    assert node["ray"] == {pins["ray"]} and "torch" not in node
    # CPU nodes: the same torch version from TORCH_INDEX_URL, the same node lock.
    bootstrap = _files()[render.BOOTSTRAP_PATH]
    assert f'--no-deps "torch=={pins["torch"]}"' in bootstrap
    # The GPU variant only adds: nothing of the node lock is pinned twice.
    assert not set(cuda) & set(node)
    assert any(name.startswith("nvidia-cudnn") for name in cuda)
    assert any(name.startswith("nvidia-nccl") for name in cuda)
    text = CUDA_LOCK.read_text()
    assert "--hash=sha256:" in text.split("torch==", 1)[1].split("\n", 2)[1]


def test_the_documents_carry_the_cuda_lock() -> None:
    for role in render.ROLES:
        assert _files(role)[render.CUDA_LOCK_PATH] == CUDA_LOCK.read_text()


# -- the readiness marker of a GPU node ------------------------------------------------------------
def _node_check_module(tmp_path: Path) -> ModuleType:
    """The rendered node_check.py, imported (its ``ready`` is driven in-process below)."""
    path = tmp_path / "node_check_mod.py"
    path.write_text(_files()[render.NODE_CHECK_PATH])
    spec = importlib.util.spec_from_file_location("node_check_mod", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("registered_gpus", "ok"), [(2.0, True), (0.0, False)])
def test_the_readiness_marker_names_the_driver_and_cuda_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registered_gpus: float, ok: bool
) -> None:
    """``ready`` on a node with RAY_NUM_GPUS: the GPU check's versions go into the marker once Ray
    registered the node with that many GPUs; a Ray that registered another count fails it."""
    nc = _node_check_module(tmp_path)
    info = {"count": 2, "driver_version": "580.95.05", "cuda_version": "13.0"}
    monkeypatch.setattr(nc, "gpu_info", lambda expect: {**info, "count": expect})
    monkeypatch.setattr(nc, "service_refusal", lambda role: None)
    monkeypatch.setattr(nc, "raylet_running", lambda: True)
    seen = {"registered": True, "node_id": "ab", "resources": {"CPU": 4.0, "GPU": registered_gpus}}
    probe = subprocess.CompletedProcess([], 0, stdout=json.dumps(seen) + "\n", stderr="")
    monkeypatch.setattr(nc.subprocess, "run", lambda *a, **k: probe)
    for name, value in {
        "RAY_NUM_GPUS": "2",
        "RAY_NODE_IP": "10.0.0.5",
        "RAY_HEAD_IP": "10.0.0.4",
    }.items():
        monkeypatch.setenv(name, value)
    args = argparse.Namespace(
        role="worker",
        timeout=5,
        marker=str(tmp_path / "ready"),
        failed=str(tmp_path / "failed"),
        timings="",
        install="fresh",
        install_digest="d",
    )
    assert nc.ready(args) == (0 if ok else 1)
    if ok:
        marker = json.loads((tmp_path / "ready").read_text())
        assert marker["gpu"] == {**info, "count": 2}
        assert marker["resources"]["GPU"] == 2.0
    else:
        assert not (tmp_path / "ready").exists()
        assert (tmp_path / "failed").read_text() == (
            "GPU: Ray registered 0 GPU(s) on this worker, it has 2\n"
        )


def test_ready_probes_only_once_the_raylet_runs_and_then_less_and_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each probe is a Python importing Ray (~1 CPU s): none while the node's raylet is not yet
    running, then with pauses growing from 0.5 s to at most 2 s until the node is registered."""
    nc = _node_check_module(tmp_path)
    monkeypatch.setattr(nc, "service_refusal", lambda role: None)
    running = iter([False] * 5 + [True] * 100)
    monkeypatch.setattr(nc, "raylet_running", lambda: next(running))
    probes: list[int] = []
    waits: list[float] = []

    def probe(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        probes.append(len(waits))
        seen = {"registered": len(probes) == 8, "node_id": "ab", "resources": {"CPU": 2.0}}
        return subprocess.CompletedProcess([], 0, stdout=json.dumps(seen) + "\n", stderr="")

    monkeypatch.setattr(nc.subprocess, "run", probe)
    monkeypatch.setattr(nc.time, "sleep", waits.append)
    for name, value in {"RAY_NODE_IP": "10.0.0.5", "RAY_HEAD_IP": "10.0.0.4"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RAY_NUM_GPUS", raising=False)
    args = argparse.Namespace(
        role="worker", timeout=60, marker=str(tmp_path / "ready"),
        failed=str(tmp_path / "failed"), timings="", install="", install_digest="",
    )  # fmt: skip
    assert nc.ready(args) == 0
    assert json.loads((tmp_path / "ready").read_text())["node_id"] == "ab"
    assert probes[0] == 5  # the first probe after five pauses without a raylet
    assert len(probes) == 8
    assert waits[:5] == [nc.PROBE_EVERY_S[0]] * 5
    between = waits[5:]
    assert between == sorted(between) and between[0] == nc.PROBE_EVERY_S[0]
    assert max(between) == nc.PROBE_EVERY_S[1]
