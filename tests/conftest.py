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
