"""Fixtures for every kind of test: a private driver home, so tests never touch a user's local
Ray. Kinds: tests/unit (no root), tests/system (real sshd and Ray in network namespaces, root),
tests/e2e (the rehearsal cluster, root); their own conftest.py files add their fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two lanes for `pytest -n 2 --dist loadgroup` (scripts/test.sh): the end-to-end tests on the
    rehearsal clusters (mostly waiting on containers that boot and train) in one, every other test
    in the other. Each lane runs its tests one at a time in collection order (the disruptive
    rehearsal tests still last), so no two tests of the same kind ever run side by side; only
    the lanes overlap. A plain `pytest` (no -n) ignores the marks."""
    for item in items:
        lane = "rehearsal" if E2E in Path(str(item.path)).parents else "host"
        item.add_marker(pytest.mark.xdist_group(lane))


@pytest.fixture(scope="session")
def driver_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A RAYDRIVER_HOME for the whole run; the local Ray head it holds is stopped at the end."""
    home = tmp_path_factory.mktemp("driver-home")
    yield home
    subprocess.run(
        [sys.executable, "-m", "driver", "local", "stop"],
        env={**os.environ, "RAYDRIVER_HOME": str(home)},
        capture_output=True,
        timeout=120,
    )
