"""ruff (lint and format) over the whole repository, at the dev extra's pinned version."""

from __future__ import annotations

import subprocess
import sys

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
    scripts/test.sh points MYPY_CACHE_DIR at the machine's cache, which every clone shares."""
    p = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=1200
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout
