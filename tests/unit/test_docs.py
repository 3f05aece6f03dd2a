"""The docs site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, and strict means a
broken link fails it; docs/cli.md is what scripts/cli_docs.py makes of the parser; the README
stays two screens that open with the two commands. The docs tool is .tools/docs, set up by
scripts/setup.d/30-docs.sh (scripts/test.sh runs it): without it these tests fail, they do not
skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

MKDOCS = REPO / ".tools" / "docs" / "bin" / "mkdocs"


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    if not MKDOCS.exists():
        pytest.fail(f"{MKDOCS.relative_to(REPO)} is missing: run scripts/setup.d/30-docs.sh")
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    r = build(REPO, tmp_path / "site")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "index.html").is_file()


@pytest.mark.parametrize(
    "broken", ["[a page](no-such-page.md)", "[an anchor](gpu.md#no-such-anchor)"]
)
def test_a_broken_link_fails_the_build(tmp_path: Path, broken: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy)
    with (copy / "docs" / "layout.md").open("a") as f:
        f.write(f"\nSee {broken}.\n")
    r = build(copy, tmp_path / "site")
    assert r.returncode != 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert broken.split("(")[1].rstrip(")") in r.stderr, r.stderr[-3000:]


def test_every_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text().split("\nnav:\n")[1]
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert sorted(re.findall(r"([\w-]+\.md)\s*$", nav, re.M)) == pages


def test_the_cli_reference_is_current() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_the_readme_is_two_screens_and_opens_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    first_block = re.search(r"```(\w*)\n(.*?)```", readme, re.S)
    assert first_block is not None and first_block.group(1) == "sh"
    commands = [ln.split("#")[0].strip() for ln in first_block.group(2).splitlines()]
    assert commands == ["./scripts/quickstart.sh", "./scripts/test.sh"]


def test_the_readme_s_diagram_is_the_architecture_page_s() -> None:
    """The diagram and its two rules are in both; the copies agree."""
    readme = (REPO / "README.md").read_text()
    page = (REPO / "docs" / "architecture.md").read_text()
    diagram = readme.split("## How it fits together\n\n")[1].split("\n- **One source")[0]
    assert diagram.startswith("```\n") and diagram in page
    rules = readme.split("- **One source per fact.**")[1].split("\nThe bootstrap's")[0]
    assert rules.strip() and rules in page


def test_the_benchmarks_page_opens_as_the_benchmarks_readme() -> None:
    """Which test runs each benchmark's smoke mode is said in both; the copies agree."""
    readme = (REPO / "benchmarks" / "README.md").read_text()
    page = (REPO / "docs" / "benchmarks.md").read_text()
    opening = readme.split("\n\n- `benchmarks/")[0]
    assert "--smoke" in opening and "tests/e2e/test_autoscale.py" in opening
    assert page.startswith(opening + "\n\n")
