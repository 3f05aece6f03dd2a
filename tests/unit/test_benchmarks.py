"""Every benchmark runs from the README's set-up (the package without its dev extra: no pytest),
or says in one line what it needs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

from nodekit import render
from support import REPO, error_lines

BENCHMARKS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))
NO_PYTEST = (
    "import runpy, sys\n"
    "sys.modules['pytest'] = None  # what `pip install -e .` (the quickstart) leaves out\n"
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
def _bootstrap_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bootstrap_benchmark", REPO / "benchmarks" / "bootstrap.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_anchor_documents_install_our_packages_with_one_pip_install(tmp_path: Path) -> None:
    """The documents embed the bootstrap gz+b64: the anchor's is built from the decoded script,
    installs our top-level requirements unpinned with pip (no uv, no lock), held to the lock's
    versions, and is otherwise our bootstrap."""
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
