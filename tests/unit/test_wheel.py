"""A normal install works: the wheel, installed into a fresh virtual environment outside the
checkout, runs the driver's --help, a job on local Ray and status, from a folder that is not
the repository (nothing reads repository files at import or parse time). Installed first
without its local extra (a laptop that drives remote clusters only: no torch), it says in one
line what local Ray needs; with the extra, the job runs.

The wheel's dependencies are installed by uv (the dev extra's pin), from the indexes pip is
configured with here: the same environment ``pip install`` makes (the same distributions at the
same versions, their bytecode compiled as pip compiles it), in a fraction of the time (pip took
~60 s of CPU on 2 cores, uv ~10 s, ~60 s with the bytecode). Without the bytecode every process
of the local Ray head compiled what it imported at once: on a busy machine its node missed Ray's
30 s to register three times over (clean-clone run 26)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from driver.package import DISTRIBUTION, LOCAL_EXTRA, LOCAL_INSTALL
from support import REPO

pytestmark = pytest.mark.slow


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


PIP_SCOPES = {"global": 0, "user": 1, "site": 2, ":env:": 3}
"""pip's configuration scopes, later ones winning (its environment variables over its files)."""


def pip_indexes_for_uv(cwd: Path, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for the indexes pip is configured with (pip.conf and PIP_*
    variables, which uv reads neither of): CI's PyTorch CPU index, a machine's find-links."""
    listed = _run([sys.executable, "-m", "pip", "config", "list"], cwd, env)
    assert listed.returncode == 0, listed.stderr
    found: dict[str, tuple[int, str]] = {}
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        rank = PIP_SCOPES.get(scope, -1)
        if rank >= found.get(name, (-1, ""))[0]:
            found[name] = (rank, ast.literal_eval(value))
    config = {name: value for name, (_, value) in found.items()}
    # pip takes the best version any index offers (a local +cpu torch over PyPI's).
    options = ["--index-strategy", "unsafe-best-match"]
    if "index-url" in config:
        options += ["--index-url", config["index-url"]]
    for url in config.get("extra-index-url", "").split():
        options += ["--extra-index-url", url]
    for link in config.get("find-links", "").split():
        options += ["--find-links", link]
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    return options, ({"SSL_CERT_FILE": config["cert"]} if "cert" in config else {})


def test_wheel_in_a_fresh_environment(tmp_path: Path) -> None:
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "NODEKIT_"))
    }
    # Build from a copy of what git sees (tracked and not ignored), as a fresh clone would:
    # setuptools writes build/ into the tree it builds, which must not be the checkout.
    source = tmp_path / "source"
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        work,
        env,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    wheels = list(dist.glob("azure_ray_rl-*.whl"))
    assert len(wheels) == 1, wheels
    # The wheel holds the two packages and nothing of the repository around them.
    listing = _run([sys.executable, "-m", "zipfile", "-l", str(wheels[0])], work, env).stdout
    assert "driver/cli/__init__.py" in listing and "nodekit/render.py" in listing
    assert "tests/" not in listing and "cloud-init/" not in listing

    base = sys.executable
    made = _run([base, "-m", "venv", str(venv)], work, env)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    options, uv_env = pip_indexes_for_uv(work, env)

    def install(requirement: str) -> None:
        installed = _run(
            [sys.executable, "-m", "uv", "pip", "install", "--compile-bytecode", "--python",
             python, *options, requirement],
            work,
            {**env, **uv_env},
            timeout=1800,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr[-3000:]

    run_env = {
        **env,
        "RAYDRIVER_HOME": str(tmp_path / "home"),
        "PATH": f"{venv / 'bin'}:{env['PATH']}",
    }
    job = work / "job"
    job.mkdir()
    (job / "train.py").write_text("import ray\nprint('WHEEL-JOB', ray.__version__)\n")

    install(str(wheels[0]))  # the core alone: what drives remote clusters
    r = _run([python, "-c", "import ray.job_submission, matplotlib, paramiko; import torch"],
             work, run_env)  # fmt: skip
    assert "No module named 'torch'" in r.stderr, r.stderr[-3000:]
    r = _run([python, "-m", "driver", "submit", str(job / "train.py")], work, run_env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-3000:]
    assert r.stderr.startswith("error: local Ray cannot train here: this environment lacks torch")
    assert f"{LOCAL_INSTALL} (in a checkout" in r.stderr
    install(f"{DISTRIBUTION}[{LOCAL_EXTRA}] @ {wheels[0].as_uri()}")
    where = _run(
        [python, "-c", "import driver, nodekit; print(driver.__file__, driver.__version__)"],
        work,
        run_env,
    )
    assert where.returncode == 0 and str(venv) in where.stdout, where.stdout + where.stderr
    assert where.stdout.split()[1] != "0+unknown"

    r = _run([python, "-m", "driver", "--help"], work, run_env)
    assert r.returncode == 0 and "submit" in r.stdout, r.stderr

    try:
        r = _run(
            [python, "-m", "driver", "submit", "--submission-id", "wheel-1", str(job / "train.py")],
            work,
            run_env,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        assert "WHEEL-JOB 2.60.0" in r.stdout
        r = _run([python, "-m", "driver", "status", "wheel-1"], work, run_env)
        assert r.returncode == 0 and r.stdout.startswith("wheel-1: SUCCEEDED"), r.stdout + r.stderr
    finally:
        _run([python, "-m", "driver", "local", "stop"], work, run_env)

    # The toolkit needs a checkout for its templates, and says so in one line when it has none.
    r = _run([python, "-m", "nodekit", "render", "--check"], work, run_env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: cannot find the repository's cloud-init/templates in the current folder or its "
        "parents: run from a checkout of the repository, or set NODEKIT_REPO"
    ]
