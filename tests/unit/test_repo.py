"""The repository's promises about itself: the README's two commands, CI, the layout."""

from __future__ import annotations

import re

from driver.package import LOCAL_EXTRA
from support import REPO


def test_readme_opens_with_the_setup_and_test_commands() -> None:
    readme = (REPO / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block is not None
    commands = [ln.split("#")[0].strip() for ln in first_block.group(1).splitlines()]
    assert commands == ["./scripts/quickstart.sh", "./scripts/test.sh"]
    quickstart = (REPO / "scripts" / "quickstart.sh").read_text()
    assert "python -m driver job submit examples/cartpole/train.py" in quickstart
    # It trains on local Ray: the package with the extra that brings RLlib and torch.
    assert f'-e ".[{LOCAL_EXTRA}]"' in quickstart


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    lines = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == "exec ./scripts/test.sh"
    workflow = (REPO / ".github" / "workflows" / "tests.yml").read_text()
    assert "./scripts/test.sh" in workflow


def test_top_level_layout() -> None:
    for folder in (
        "infra/bicep",
        "infra/terraform",
        "scripts",
        "cloud-init",
        "python",
        "tests",
        ".github",
        "examples",
        "benchmarks",
        "docs",
    ):
        path = REPO / folder
        assert path.is_dir(), folder
        files = [p for p in path.rglob("*") if p.is_file()]
        assert files, f"{folder} is empty"
        if all(p.name == "README.md" for p in files):  # a placeholder folder says what comes
            assert len((path / "README.md").read_text().split()) > 20


def test_scripts_are_executable() -> None:
    for script in ("scripts/quickstart.sh", "scripts/test.sh", ".ci/run"):
        assert (REPO / script).stat().st_mode & 0o111, script
