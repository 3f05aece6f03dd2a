"""Every benchmark runs from the README's set-up (the package without its dev extra: no pytest),
or says in one line what it needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import REPO

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
