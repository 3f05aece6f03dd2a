"""ruff (lint and format) over the whole repository, at the dev extra's pinned version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO


def test_ruff_check() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_ruff_format() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy() -> None:
    """The packages ship py.typed: their annotations are checked (settings in pyproject.toml).

    Its incremental cache is the machine's, as the suite's environments are (scripts/test.sh),
    unless MYPY_CACHE_DIR names another: a fresh clone then checks in ~1.5 s of CPU, not ~35.
    mypy checks each cached module against its source's hash, whatever folder the clone is in."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "azure-ray-rl/mypy"
    p = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=REPO,
        env={"MYPY_CACHE_DIR": str(cache), **os.environ},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout
