"""A laptop that only drives remote clusters installs the package without its local extra
(RLlib, torch, gymnasium: what jobs on the embedded local Ray import). An interpreter that lacks
what the extra adds to the core install, as such a laptop's does (the imports of those
distributions refused, their metadata hidden), runs the remote commands; the local path says
in one line what to install."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from azure_support import CLOSED, PARAMETERS
from driver import package
from fakes.retail_prices import FakeRetailPrices, vm_meters
from nodekit import render
from price_support import HEADER
from support import REPO, error_lines

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture(autouse=True)
def installed_as_written() -> None:
    """The installed metadata is pyproject.toml's (an install older than the local extra would
    let the local path start Ray here)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {str(r) for r in package.requirements() if r.marker is None}
    extras = importlib.metadata.metadata(package.DISTRIBUTION).get_all("Provides-Extra")
    assert (core, set(extras or [])) == (
        {str(Requirement(t)) for t in project["dependencies"]},
        set(project["optional-dependencies"]),
    ), "the installed metadata is not pyproject.toml's: pip install -e '.[dev]'"


# -- the metadata -------------------------------------------------------------------------------
def test_the_core_requirements_hold_nothing_only_local_ray_needs() -> None:
    core = [r for r in package.requirements() if r.marker is None]
    for req in core:
        if req.name == "ray":  # the Jobs SDK, at the cluster's version
            assert req.extras == {"default"}, req
        else:
            assert req.name not in render.CLUSTER_PACKAGES, req
    local = {r.name: r for r in package.extra_requirements(package.LOCAL_EXTRA)}
    assert set(local) == set(render.CLUSTER_PACKAGES)
    assert local["ray"].extras == {"rllib"} and not local["ray"].specifier  # pinned once: core
    dev = [r for r in package.extra_requirements("dev") if r.name == package.DISTRIBUTION]
    assert any(package.LOCAL_EXTRA in r.extras for r in dev)  # the tests train on local Ray


# -- an interpreter without the local extra ---------------------------------------------------
def _closure(extras: set[str]) -> set[str]:
    """The distributions this package with ``extras`` installs (as installed here)."""
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [(package.DISTRIBUTION, e) for e in {"", *extras}]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:  # another platform's, say
            continue
        found.add(name)
        for req in map(Requirement, requires):
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(canonicalize_name(req.name), e) for e in {"", *req.extras}]
    return found - {package.DISTRIBUTION}


@cache
def lean() -> dict[str, list[str]]:
    """What a core install lacks of one with the local extra: its distributions, and the
    modules only they provide (with ``ray.rllib``, which comes with Ray but needs the extra)."""
    absent = _closure({package.LOCAL_EXTRA}) - _closure(set())
    modules = [
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if dists and all(canonicalize_name(d) in absent for d in dists)
    ]
    return {"dists": sorted(absent), "modules": sorted([*modules, "ray.rllib"])}


PRELUDE = """\
import importlib.abc, importlib.metadata, json, os, re, runpy, sys
_LEAN = json.loads(os.environ["LEAN"])
class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in _LEAN["modules"]):
            raise ModuleNotFoundError(f"No module named {name!r} (a lean install)", name=name)
sys.meta_path.insert(0, _Refuse())
_discover = importlib.metadata.Distribution.discover.__func__
def _visible(cls, **kwargs):
    for dist in _discover(cls, **kwargs):
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name not in _LEAN["dists"]:
            yield dist
importlib.metadata.Distribution.discover = classmethod(_visible)
"""
DRIVER = PRELUDE + "runpy.run_module('driver', run_name='__main__', alter_sys=True)\n"


def run_lean(
    code: str, *args: str, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={
            **os.environ,
            "LEAN": json.dumps(lean()),
            "RAYDRIVER_HOME": str(home / "driver-home"),
            "CHECKPOINT_DISABLE": "1",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_lean_interpreter_lacks_what_the_local_extra_adds(tmp_path: Path) -> None:
    assert {"torch", "gymnasium", "scipy"} <= set(lean()["dists"])
    assert not {"ray", "aiohttp", "matplotlib", "paramiko"} & set(lean()["dists"])
    probe = PRELUDE + (
        "out = {}\n"
        "for m in ('torch', 'gymnasium', 'ray.rllib', 'ray.job_submission', 'matplotlib'):\n"
        "    try:\n"
        "        __import__(m)\n"
        "        out[m] = 'ok'\n"
        "    except ImportError as e:\n"
        "        out[m] = type(e).__name__\n"
        "for d in ('torch', 'gymnasium', 'ray'):\n"
        "    try:\n"
        "        out[d + ' dist'] = importlib.metadata.version(d)\n"
        "    except importlib.metadata.PackageNotFoundError:\n"
        "        out[d + ' dist'] = None\n"
        "print(json.dumps(out))\n"
    )
    r = run_lean(probe, home=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out == {
        "torch": "ModuleNotFoundError",
        "gymnasium": "ModuleNotFoundError",
        "ray.rllib": "ModuleNotFoundError",
        "ray.job_submission": "ok",
        "matplotlib": "ok",
        "torch dist": None,
        "gymnasium dist": None,
        "ray dist": render.cluster_pins().versions["ray"],
    }


def verbs() -> list[str]:
    """The driver's own verbs (``render`` and ``rehearse`` run the node toolkit, a child
    process of its own)."""
    from driver.cli import build_parser, node

    (sub,) = [a for a in build_parser()._actions if a.dest == "verb"]
    return sorted(set(sub.choices) - set(node.ALIASES))


def test_every_verbs_help_works_without_the_local_extra(tmp_path: Path) -> None:
    names = verbs()
    assert {"submit", "status", "logs", "download", "up", "price"} <= set(names)
    helps = PRELUDE + (
        "import contextlib, io\n"
        "from driver.cli import main\n"
        "codes = {}\n"
        "for verb in sys.argv[1:]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        try:\n"
        "            main([verb, '--help'])\n"
        "        except SystemExit as e:\n"
        "            codes[verb] = (e.code, 'usage:' in out.getvalue())\n"
        "print(json.dumps(codes))\n"
    )
    r = run_lean(helps, *names, home=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == {verb: [0, True] for verb in names}


@pytest.fixture
def prices() -> Iterator[FakeRetailPrices]:
    items = [
        *vm_meters("westeurope", "Standard_D4s_v5", 0.23, spot=0.046),
        *vm_meters(
            "westeurope", "Standard_F8s_v2", 0.40, spot=0.08, product="Virtual Machines FSv2 Series"
        ),
    ]
    with FakeRetailPrices(items) as api:
        yield api


def test_price_works_without_the_local_extra(prices: FakeRetailPrices, tmp_path: Path) -> None:
    r = run_lean(
        DRIVER, "price", "--parameters", str(PARAMETERS), "--location", "westeurope",
        home=tmp_path, env={"RAYDRIVER_PRICES_URL": prices.url},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert HEADER.match(r.stdout.splitlines()[0]) and "Standard_D4s_v5" in r.stdout


def test_status_of_a_remote_head_works_without_the_local_extra(tmp_path: Path) -> None:
    """Down to the SSH connection it cannot make: its one line, no ImportError."""
    r = run_lean(DRIVER, "status", "--head", CLOSED, "--retries", "0", home=tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = error_lines(r.stderr)
    assert line.startswith("error: cannot reach the head 127.0.0.1:1 over SSH"), line


def test_the_jobs_sdk_works_without_the_local_extra(tmp_path: Path) -> None:
    """The client every remote job command uses (Ray's Jobs SDK, aiohttp), down to the
    connection a closed port refuses."""
    code = PRELUDE + (
        "from driver.errors import ConnectionLost\n"
        "from driver.jobs import JobsClient\n"
        "try:\n"
        "    JobsClient('http://127.0.0.1:1', 'token', where='the head')\n"
        "except ConnectionLost as e:\n"
        "    print(e)\n"
    )
    r = run_lean(code, home=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("cannot reach the Ray Jobs API of the head: "), r.stdout


@pytest.mark.parametrize("args", [["submit", "train.py"], ["local", "start"]])
def test_local_ray_without_the_local_extra_says_what_to_install(
    args: list[str], tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("import ray.rllib\n")
    r = run_lean(DRIVER, *[str(tmp_path / a) if a.endswith(".py") else a for a in args],
                 home=tmp_path)  # fmt: skip
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = error_lines(r.stderr)
    assert line.startswith("error: local Ray cannot train here: this environment lacks "), line
    assert "torch" in line and line.endswith(
        f"{package.LOCAL_INSTALL} (in a checkout: pip install -e '.[{package.LOCAL_EXTRA}]')"
    )
    assert list((tmp_path / "driver-home").rglob("head.json")) == [], "local Ray was started"
