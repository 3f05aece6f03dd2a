"""Every benchmark runs from the README's set-up (the package without its dev extra: no pytest),
or says in one line what it needs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import pytest
from packaging.requirements import Requirement

from nodekit import render
from nodekit.rehearsal.cluster import Rehearsal
from nodekit.rehearsal.services import packages
from nodekit.rehearsal.state import State
from rehearsal_support import unit_cluster, unit_state
from support import REPO, error_lines

BENCHMARKS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
NO_PYTEST = (
    "import runpy, sys\n"
    "sys.modules['pytest'] = None  # what the quickstart's `pip install -e .[local]` leaves out\n"
    "sys.argv = [sys.argv[1], '--help']\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def test_there_are_benchmarks() -> None:
    assert {"cartpole.py", "bootstrap.py", "driver_overhead.py"} <= set(BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_needs_no_test_dependencies(name: str) -> None:
    p = subprocess.run(
        [sys.executable, "-c", NO_PYTEST, str(REPO / "benchmarks" / name)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("usage:"), p.stdout[:300]


# -- benchmarks/bootstrap.py: the anchor's documents, what each method installed ---------------
def _benchmark(name: str, script: str) -> ModuleType:
    """A script of benchmarks/ imported as module ``name`` (it is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bootstrap_benchmark() -> ModuleType:
    return _benchmark("bootstrap_benchmark", "bootstrap.py")


def test_the_anchor_documents_install_our_packages_with_pip(tmp_path: Path) -> None:
    """The documents' archives hold the bootstrap: the anchor's is built from the unpacked script,
    installs torch as ours does and then our top-level requirements unpinned with one pip
    install (no uv, no lock), held to the lock's versions, and is otherwise our bootstrap."""
    bench = _bootstrap_benchmark()
    out = bench.anchor_documents(tmp_path / "anchor")
    ours_lock = render.read_lock()
    for role in render.ROLES:
        ours = render.document_files((render.rendered_dir() / f"{role}.yaml").read_text())
        text = (out / f"{role}.yaml").read_text()
        theirs = render.document_files(text)
        mine, anchor = ours[bench.BOOTSTRAP], theirs[bench.BOOTSTRAP]
        assert "uv" in mine and "/bin/uv" not in anchor and '"uv==' not in anchor
        pip = anchor[
            anchor.index('retry "$VENV/bin/pip" install') : anchor.index("read -ra EXTRA <<<")
        ]
        assert f"-c {bench.ANCHOR_CONSTRAINTS} -r {bench.ANCHOR_REQUIREMENTS}" in pip
        # Our script before the venv's install and from Ray's start on, unchanged.
        assert anchor[: anchor.index("python3 -m venv")] == mine[: mine.index("python3 -m venv")]
        assert anchor[anchor.index("phase start_ray") :] == mine[mine.index("phase start_ray") :]
        # Every other file as ours.
        assert {p: c for p, c in theirs.items() if p != bench.BOOTSTRAP and p in ours} == {
            p: c for p, c in ours.items() if p != bench.BOOTSTRAP
        }
        requirements = [Requirement(r) for r in ours[render.REQUIREMENTS_PATH].split()]
        unpinned = theirs[bench.ANCHOR_REQUIREMENTS].split()
        assert [Requirement(r).name for r in unpinned] == [r.name for r in requirements]
        assert "ray[default,rllib]" in unpinned and not any("=" in r or "<" in r for r in unpinned)
        constraints = theirs[bench.ANCHOR_CONSTRAINTS].splitlines()
        torch = next(str(r) for r in requirements if r.name == "torch")
        assert torch in constraints and "ray==2.60.0" in constraints
        pinned = [ln.split(" \\")[0] for ln in ours_lock.splitlines() if "==" in ln]
        assert sorted(constraints) == sorted([*pinned, torch])
        filled = tmp_path / f"{role}-filled.yaml"
        filled.write_text(render.fill(text, render.deploy_value_samples()))
        p = subprocess.run(
            ["cloud-init", "schema", "--config-file", str(filled)], capture_output=True, text=True
        )
        assert p.returncode == 0 and "Valid cloud-config" in p.stdout, p.stdout + p.stderr


PIP_RECORDER = """#!/bin/sh
# Each call's arguments, one per line, then an empty line.
printf '%s\\n' "$@" '' >>"$PIP_CALLS"
"""


def _run_anchor_install(
    install: str, tmp_path: Path, values: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """The anchor's install phase (``install``: the bootstrap's text from the venv's creation to
    the install marker) run in bash with the deploy-time ``values``, each pip call recorded (its
    arguments) instead of run, and each phase as ``PHASE <name>``."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "pip").write_text(PIP_RECORDER)
    (venv / "bin" / "pip").chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    script = (
        'phase() { printf "PHASE %s\\n\\n" "$1" >>"$PIP_CALLS"; }\n'
        'fail() { echo "FAILED: $*"; exit 1; }\n'
        'retry() { "$@"; }\n'
        f"install() {{\n{install}}}\ninstall\n"
    )
    p = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={"PATH": os.environ["PATH"], "VENV": str(venv), "PIP_CALLS": str(calls), **values},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p, [c.splitlines() for c in calls.read_text().split("\n\n") if c]


def test_the_anchors_pip_trusts_each_plain_http_index_and_takes_torch_from_the_torch_index(
    tmp_path: Path,
) -> None:
    """With the rehearsal's indexes (plain http: its PyPI mirror by address, its torch index by
    name) every index a pip call of the anchor is given has its host trusted (pip skips an
    untrusted http index: the anchor then took the package index's CUDA torch, whose NVIDIA
    libraries filled the node's /tmp); torch comes from the torch index alone, as ours does,
    and the install of everything else is given the package index alone. With https indexes
    (Azure's defaults) nothing is trusted."""
    bench = _bootstrap_benchmark()
    out = bench.anchor_documents(tmp_path / "anchor")
    script = render.document_files((out / "worker.yaml").read_text())[bench.BOOTSTRAP]
    venv = '    python3 -m venv "$VENV"\n'
    install = script[script.index(venv) + len(venv) : script.index(bench.INSTALL_END)]
    state = State(
        name="bootbench", subnet="10.221.0.0/24", bridge="rh-bootbench", host_ip="10.221.0.1",
        http_port=8000, ssh_key="",
    )  # fmt: skip
    rehearsal = {
        "PIP_INDEX_URL": packages.pip_index_url(state),
        "TORCH_INDEX_URL": packages.torch_index_url(state),
    }
    azure = {k: render.deploy_value_defaults()[k] for k in rehearsal}
    torch = f"torch=={render.cluster_pins().versions['torch']}"
    for values, scheme in ((rehearsal, "http"), (azure, "https")):
        assert all(urlsplit(v).scheme == scheme for v in values.values())
        p, calls = _run_anchor_install(
            install,
            tmp_path / scheme,
            {**values, "SCALING_MODE": "cpu", "EXTRA_PIP_PACKAGES": "minigrid==3.0.0"},
        )
        assert p.returncode == 0, p.stdout + p.stderr
        pips = [c for c in calls if c[0] == "install"]
        for call in pips:
            indexes = [
                call[i + 1]
                for i, a in enumerate(call)
                if a in ("-i", "--index-url", "--extra-index-url")
            ]
            trusted = [call[i + 1] for i, a in enumerate(call) if a == "--trusted-host"]
            assert trusted == [urlsplit(u).hostname for u in indexes if scheme == "http"], call
            assert len(indexes) == 1, call
        assert [c[0] for c in calls if c[0] != "install"] == [
            "PHASE install_torch",
            "PHASE install_ray",
        ]
        assert len(pips) == 3, calls
        torch_call, main_call, extra_call = pips
        assert values["TORCH_INDEX_URL"] in torch_call and torch_call[-2:] == ["--no-deps", torch]
        assert values["PIP_INDEX_URL"] in main_call
        assert main_call[-4:] == ["-c", bench.ANCHOR_CONSTRAINTS, "-r", bench.ANCHOR_REQUIREMENTS]
        assert values["PIP_INDEX_URL"] in extra_call and extra_call[-1] == "minigrid==3.0.0"
    p, calls = _run_anchor_install(install, tmp_path / "ray", {**rehearsal, "SCALING_MODE": "ray"})
    assert (p.returncode, p.stdout, calls) == (
        1,
        "FAILED: the anchor documents are for scaling mode cpu\n",
        [["PHASE install_torch"]],
    )


def test_a_worker_joining_with_the_anchor_documents_boots_the_anchor_worker_document(
    tmp_path: Path,
) -> None:
    """``--smoke``/``--reuse`` boot the anchor's worker into a running cluster
    (``Rehearsal.add_workers(documents_dir=...)``): its user data is the anchor's worker
    document filled with the cluster's values, as the cluster's own workers get theirs."""
    bench = _bootstrap_benchmark()
    anchor = bench.anchor_documents(tmp_path / "anchor")
    r = unit_cluster(tmp_path)
    state = unit_state(head_root=str(tmp_path), documents_dir=str(render.rendered_dir()))
    values = r.deploy_values(state)
    theirs = r._user_data(state, "worker", None, anchor)
    assert theirs == render.fill((anchor / "worker.yaml").read_text(), values)
    assert theirs != r._user_data(state, "worker")
    assert r._user_data(state, "worker") == render.fill(
        (render.rendered_dir() / "worker.yaml").read_text(), values
    )


def test_the_bootstrap_benchmark_reuses_only_a_running_cluster_that_can_boot_its_workers(
    tmp_path: Path,
) -> None:
    bench = _bootstrap_benchmark()
    r = Rehearsal("bb", base=tmp_path)
    with pytest.raises(bench.BenchmarkError, match=r"^--reuse: no rehearsal cluster 'bb' is up"):
        bench.check_cluster(r, True, ["anchor"])
    r.dir.mkdir(parents=True)
    state = State(
        name="bb", subnet="10.222.0.0/24", bridge="rh-bb", host_ip="10.222.0.1",
        http_port=8000, ssh_key="", scaling_mode="ray",
    )  # fmt: skip
    r.store.save(state)
    with pytest.raises(bench.BenchmarkError, match=r"has no node image .* --only cold --only"):
        bench.check_cluster(r, True, ["baked", "anchor"])
    with pytest.raises(bench.BenchmarkError, match="scaling mode ray: the anchor documents"):
        bench.check_cluster(r, True, ["cold", "anchor"])
    bench.check_cluster(r, True, ["cold"])
    state.image, state.scaling_mode = str(tmp_path / "image"), "cpu"
    r.store.save(state)
    bench.check_cluster(r, True, list(bench.METHODS))
    # Without --reuse a cluster of that name is never taken (nor removed).
    with pytest.raises(bench.BenchmarkError, match=r"exists .*: choose another --name, reuse it"):
        bench.check_cluster(r, False, list(bench.METHODS))


def test_installed_versions_are_compared_with_the_lock() -> None:
    bench = _bootstrap_benchmark()
    own = {r: (render.rendered_dir() / f"{r}.yaml").read_text() for r in render.ROLES}
    expected = bench.expected_versions(own, "3.11.2")
    assert expected["numpy"] == "2.4.6"  # the lock's version for Python 3.11, not 3.10's or 3.12's
    installed = {("Ray" if n == "ray" else n): v for n, v in expected.items()}
    installed["torch"] += "+cpu"
    installed["pip"] = "23.0.1"
    same = bench.compare_installed(installed, expected)
    assert same["same_versions_as_lock"] and same["not_in_lock"] == {"pip": "23.0.1"}
    assert same["key"]["ray"] == "2.60.0" and same["key"]["torch"].endswith("+cpu")
    installed["gymnasium"] = "1.3.0"
    del installed["tensorboard"]
    newer = bench.compare_installed(installed, expected)
    assert not newer["same_versions_as_lock"]
    assert newer["differ_from_lock"] == {
        "gymnasium": {"expected": expected["gymnasium"], "installed": "1.3.0"}
    }
    assert newer["missing_from_lock"] == ["tensorboard"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--subnet", "10.221.0.0/30"], "--subnet 10.221.0.0/30: need an IPv4 network"),
        (["--name", "Bad_Name"], "rehearsal name 'Bad_Name'"),
    ],
)
def test_the_bootstrap_benchmark_refuses_a_bad_cluster_in_one_line(
    args: list[str], message: str
) -> None:
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bootstrap.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 2
    assert error_lines(p.stderr) == [error_lines(p.stderr)[0]]
    assert error_lines(p.stderr)[0].startswith(f"error: {message}"), p.stderr
    assert p.stdout == ""


# -- benchmarks/cluster_storage_sweep.py: the storage's cost by its parts ----------------------
def _sweep_benchmark() -> ModuleType:
    return _benchmark("cluster_storage_sweep", "cluster_storage_sweep.py")


HYBRID_MOUNTS = (
    "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
    "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
)


@pytest.mark.parametrize(
    ("proc_cgroup", "mounts", "cgroup", "file"),
    [
        # cgroup v1 beside v2 (hybrid): the cpuacct hierarchy's, where it is not the root.
        (
            "3:cpuset:/bench\n2:cpuacct:/sweep/x\n1:cpu:/\n0::/",
            HYBRID_MOUNTS,
            "v1:/sweep/x",
            "/sys/fs/cgroup/cpuacct/sweep/x/cpuacct.usage",
        ),
        # Only v2 puts it in a cgroup of its own (a systemd unit's).
        (
            "2:cpuacct:/\n0::/system.slice/ray.service",
            HYBRID_MOUNTS,
            "v2:/system.slice/ray.service",
            "/sys/fs/cgroup/unified/system.slice/ray.service/cpu.stat",
        ),
        # cpu and cpuacct mounted together; v2 alone.
        (
            "4:cpu,cpuacct:/job\n",
            "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n",
            "v1:/job",
            "/sys/fs/cgroup/cpu,cpuacct/job/cpuacct.usage",
        ),
        ("0::/user.slice/a", "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", "v2:/user.slice/a", None),
    ],
)
def test_the_sweeps_cpu_is_read_from_its_own_cgroup(
    proc_cgroup: str, mounts: str, cgroup: str, file: str | None
) -> None:
    found = _sweep_benchmark().cpu_cgroup(proc_cgroup, mounts)
    assert found["cgroup"] == cgroup and found["reason"] is None
    assert found["file"] == (file or "/sys/fs/cgroup/user.slice/a/cpu.stat")


def test_the_sweeps_cpu_in_the_root_cgroup_is_not_read() -> None:
    """The root cgroup holds every process of the machine: no figure, and the reason."""
    bench = _sweep_benchmark()
    for proc_cgroup in ("2:cpuacct:/\n0::/", "4:memory:/x\n"):
        found = bench.cpu_cgroup(proc_cgroup, HYBRID_MOUNTS)
        assert found["file"] is None and "no cgroup of its own" in found["reason"]


def test_a_cgroups_cpu_seconds(tmp_path: Path) -> None:
    bench = _sweep_benchmark()
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "cpuacct.usage").write_text("1500000000\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 5\n")
    assert bench.cgroup_cpu_s(tmp_path / "v1" / "cpuacct.usage") == 1.5
    assert bench.cgroup_cpu_s(tmp_path / "cpu.stat") == 2.5


def test_the_storage_client_is_the_process_that_names_the_mount_point(tmp_path: Path) -> None:
    """The process whose command line has the mount point as an argument, and no other (a
    path below it or beside it is not the mount point); its CPU seconds are the kernel's."""
    bench = _sweep_benchmark()
    point = tmp_path / "mnt"
    burn = "import sys, time; sum(range(3_000_000)); print(1, flush=True); time.sleep(60)"
    client = subprocess.Popen(
        [sys.executable, "-c", burn, "mount", "remote:", str(point)], stdout=subprocess.PIPE
    )
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"{point}2", str(point / "s")]
    )
    try:
        assert client.stdout is not None and client.stdout.readline() == b"1\n"
        found = bench.storage_client({"mount_point": str(point), "type": "fuse.rclone"})
        assert found["pids"] == [client.pid] and found["reason"] is None
        assert found["names"] == [Path(sys.executable).name[:15]]
        assert bench.process_cpu_s(client.pid) > 0
        assert client.pid in bench.descendants(os.getpid(), bench.processes())
        gone = bench.storage_client({"mount_point": f"{point}3", "type": "fuse.rclone"})
        assert gone["pids"] == [] and "no process's command line names" in gone["reason"]
        plain = bench.storage_client({"mount_point": str(point), "type": "ext4"})
        assert plain["pids"] == [] and "of type ext4" in plain["reason"]
    finally:
        for p in (client, other):
            p.kill()
            p.wait()
    with pytest.raises(OSError):
        bench.process_cpu_s(client.pid)


def test_a_process_cpu_seconds_are_what_the_kernel_charged() -> None:
    bench = _sweep_benchmark()
    sum(range(5_000_000))
    times = os.times()
    assert abs(bench.process_cpu_s(os.getpid()) - (times.user + times.system)) <= 0.05


def _summary(
    client: float | None, cpu: float, outside: float, wall: float
) -> dict[str, float | None]:
    return {
        "client_cpu_s": client,
        "sweep_cpu_s": cpu,
        "trial_outside_steps_s": outside,
        "trial_wall_s": wall,
    }


def test_the_storage_cost_adds_the_clients_cpu_and_the_trials_wait() -> None:
    """Client CPU the shared sweeps add over a local sweep's CPU, plus the wait a shared trial
    adds over a local trial's wall time; the goal is at most 5 %."""
    bench = _sweep_benchmark()
    local, shared = _summary(0.1, 100.0, 2.0, 40.0), _summary(3.1, 104.0, 2.8, 41.0)
    cost = bench.storage_cost(local, shared, {"client_cpu": None, "sweep_cpu": None})
    assert cost["client_cpu_s"] == 3.0 and cost["client_cpu_fraction"] == 0.03
    assert cost["blocking_s"] == 0.8 and cost["blocking_fraction"] == 0.02
    assert cost["estimated_slowdown"] == 0.05 and cost["goal_met"] is True
    assert cost["sweep_cpu_shared_over_local"] == 1.04 and cost["reason"] is None
    slower = bench.storage_cost(
        local, _summary(3.1, 100.0, 3.2, 41.0), {"client_cpu": None, "sweep_cpu": None}
    )
    assert slower["estimated_slowdown"] == 0.06 and slower["goal_met"] is False
    none = bench.storage_cost(
        _summary(None, 100.0, 2.0, 40.0),
        _summary(None, 100.0, 2.4, 40.0),
        {"client_cpu": "/ is of type ext4", "sweep_cpu": None},
    )
    assert none["blocking_fraction"] == 0.01 and none["estimated_slowdown"] is None
    assert none["goal_met"] is None and none["reason"] == "client_cpu: / is of type ext4"
