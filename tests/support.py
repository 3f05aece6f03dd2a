"""Helpers every kind of test shares: where the repository is, and running the driver the way a
user does, as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"


def run_driver(
    *args: str,
    home: Path,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    module: str = "driver",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd or REPO,
        env={**os.environ, "RAYDRIVER_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]
