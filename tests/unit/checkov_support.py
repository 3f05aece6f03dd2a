"""Running checkov as the tests of every stack do: its own environment (.tools/checkov, created
by scripts/test.sh, exported as $RAYDRIVER_CHECKOV) and the repository's .checkov.yaml. Without
checkov these tests fail, they do not skip."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support import REPO


def checkov_binary() -> Path:
    path = Path(
        os.environ.get("RAYDRIVER_CHECKOV", REPO / ".tools" / "checkov" / "bin" / "checkov")
    )
    if not path.exists():
        pytest.fail(
            f"checkov not found at {path}: run scripts/test.sh, or python3 -m venv .tools/checkov"
            " && .tools/checkov/bin/pip install -r scripts/checkov-requirements.txt"
        )
    return path


def run_checkov(directory: Path | None, framework: str, root: Path = REPO) -> dict[str, Any]:
    """checkov with ``root``'s .checkov.yaml, run from ``root``; ``directory`` None scans what
    the configuration names (the repository root)."""
    where = [] if directory is None else ["--directory", str(directory)]
    result = subprocess.run(
        [
            str(checkov_binary()),
            "--config-file", str(root / ".checkov.yaml"),
            *where,
            "--framework", framework,
            "--output", "json",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads(result.stdout)
    if isinstance(report, list):
        [report] = [r for r in report if r.get("check_type") == framework]
    assert report.get("check_type") == framework, result.stdout[:2000]
    return report
