"""checkov on the Terraform stack (and on the workflows): zero failed checks, and every skip is
a `#checkov:skip=ID:reason` comment inside the resource it concerns, used by checkov, with a
reason. checkov lives in its own environment (.tools/checkov, created by scripts/test.sh,
exported as $RAYDRIVER_CHECKOV); without it these tests fail, they do not skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "infra" / "terraform"
SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(?P<id>[A-Z0-9_]+)(?::(?P<reason>.*))?")


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


def run_checkov(directory: Path, framework: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            str(checkov_binary()),
            "--config-file", str(REPO / ".checkov.yaml"),
            "--directory", str(directory),
            "--framework", framework,
            "--output", "json",
        ],
        cwd=REPO,
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


@pytest.fixture(scope="module")
def terraform_report() -> dict[str, Any]:
    return run_checkov(STACK, "terraform")


def test_no_failed_checks(terraform_report: dict[str, Any]) -> None:
    summary = terraform_report["summary"]
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in terraform_report["results"]["failed_checks"]
    ]
    assert summary["failed"] == 0, failed
    assert summary["parsing_errors"] == 0
    assert summary["passed"] >= 15
    assert summary["resource_count"] >= 15


def skip_comments() -> list[tuple[str, int, str, str]]:
    """(file, line, check id, reason) of every checkov skip in the stack."""
    found = []
    for path in sorted(STACK.glob("*.tf")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = SKIP_COMMENT.search(line)
            if match:
                found.append((path.name, number, match["id"], (match["reason"] or "").strip()))
    return found


def enclosing_block(path: Path, line: int) -> str | None:
    """The top-level block header a line sits in (``resource "type" "name"``), if any."""
    header = None
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if number == line:
            return header
        if re.match(r"^\S.*\{\s*$", text):
            header = text.rstrip(" {")
        elif text.startswith("}"):
            header = None
    return None


def test_every_skip_is_inside_its_resource_with_a_reason(terraform_report: dict) -> None:
    skipped = {
        (c["check_id"], c["resource"]): c["check_result"].get("suppress_comment", "")
        for c in terraform_report["results"]["skipped_checks"]
    }
    comments = skip_comments()
    assert len(comments) == len(skipped), (comments, skipped)
    for file, line, check_id, reason in comments:
        header = enclosing_block(STACK / file, line)
        assert header and header.startswith("resource "), f"{file}:{line} is not inside a resource"
        _, rtype, name = header.split()
        resource = f"{rtype.strip(chr(34))}.{name.strip(chr(34))}"
        assert (check_id, resource) in skipped, f"{file}:{line} {check_id} skips nothing"
        assert len(reason) >= 40, f"{file}:{line} {check_id}: the reason is missing or too short"
        assert skipped[(check_id, resource)] == reason


def test_github_workflows_pass_checkov() -> None:
    workflows = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
    assert workflows, "no workflow to check"
    report = run_checkov(REPO / ".github", "github_actions")
    failed = [f"{c['check_id']} {c['file_path']}" for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0, failed
    assert report["summary"]["passed"] > 0


def test_checkov_config_is_shared_by_every_stack() -> None:
    config = yaml.safe_load((REPO / ".checkov.yaml").read_text())
    assert {"terraform", "bicep", "arm", "github_actions"} <= set(config["framework"])
    assert "infra" in config["directory"]
    assert config.get("skip-download") is True  # offline: no Prisma Cloud API calls
    # Skips belong in the resources, with their reasons, never here.
    assert not {"skip-check", "skip-path", "soft-fail"} & set(config)


def test_checkov_parses_every_file_of_the_stack(terraform_report: dict[str, Any]) -> None:
    """checkov also reads tests/*.tftest.hcl: a file it cannot parse is a file it does not check."""
    assert terraform_report["results"].get("parsing_errors", []) == []
