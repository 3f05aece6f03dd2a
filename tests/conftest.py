"""Shared fixtures: a private driver home (so tests never touch a user's local Ray) and a
helper that runs ``python -m driver`` the way a user does, as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The shared rehearsal cluster fixture (`rehearsal`) lives in its own module.
pytest_plugins = ["rehearsal_fixture"]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


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


def run_driver(
    *args: str,
    home: Path,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver", *args],
        cwd=cwd or REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]
