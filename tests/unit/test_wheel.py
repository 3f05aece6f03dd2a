"""A normal install works: the wheel, installed into a fresh virtual environment outside the
checkout, runs the driver's --help, a job on local Ray and status, from a folder that is not
the repository (nothing reads repository files at import or parse time)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

pytestmark = pytest.mark.slow


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


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
    installed = _run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])],
        work,
        env,
        timeout=1800,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    run_env = {
        **env,
        "RAYDRIVER_HOME": str(tmp_path / "home"),
        "PATH": f"{venv / 'bin'}:{env['PATH']}",
    }
    where = _run(
        [python, "-c", "import driver, nodekit; print(driver.__file__, driver.__version__)"],
        work,
        run_env,
    )
    assert where.returncode == 0 and str(venv) in where.stdout, where.stdout + where.stderr
    assert where.stdout.split()[1] != "0+unknown"

    r = _run([python, "-m", "driver", "--help"], work, run_env)
    assert r.returncode == 0 and "submit" in r.stdout, r.stderr

    job = work / "job"
    job.mkdir()
    (job / "train.py").write_text("import ray\nprint('WHEEL-JOB', ray.__version__)\n")
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
