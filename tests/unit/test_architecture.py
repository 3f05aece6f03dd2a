"""The shape of the Python code: two packages whose imports run one way, without cycles (the
contracts in pyproject.toml, run here with import-linter), and a client whose command line loads
neither Ray nor the toolkit nor any repository file."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYTHON = REPO / "python"
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """import-linter's ``lint-imports`` over ``root``'s packages with the contracts of
    ``root/pyproject.toml`` (all of them, or those named): exit status 0 when every one is kept."""
    limit = [arg for contract in contracts for arg in ("--contract", contract)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "python"), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", *limit],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
    )


def test_the_import_contracts_hold() -> None:
    """Which package may import which is stated once, as import-linter's contracts in
    pyproject.toml ([tool.importlinter]): the client never imports the toolkit, the toolkit only
    the client's shared modules, the node code nothing of ours, no cycles."""
    p = lint_imports(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", p.stdout)
    assert kept and int(kept[1]) == len(BREAKS), p.stdout


BREAKS: dict[str, dict[str, str]] = {
    "client": {"driver/probe.py": "import nodekit.render\n"},
    "shared": {"nodekit/rehearsal/probe.py": "from driver import remote\n"},
    "toolkit-layers": {"nodekit/node/probe.py": "from nodekit.rehearsal import state\n"},
    "node": {"nodekit/node/probe.py": "from driver import errors\n"},
    "node-files": {"nodekit/node/probe.py": "from nodekit.node import health\n"},
    "command-line": {"driver/probe.py": "from driver.cli import options\n"},
    "acyclic": {
        "driver/probe_a.py": "from driver import probe_b\n",
        "driver/probe_b.py": "from driver import probe_a\n",
    },
}
"""Per contract, modules added to a copy of python/ that break it."""


def test_every_contract_has_a_break() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert [c["id"] for c in contracts["contracts"]] == list(BREAKS)


@pytest.mark.parametrize("contract", list(BREAKS))
def test_a_broken_contract_fails(contract: str, tmp_path: Path) -> None:
    """The contracts would pass on a linter that sees nothing: each one fails on a copy of the
    packages with a module that breaks it."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copytree(PYTHON, tmp_path / "python", ignore=shutil.ignore_patterns("__pycache__"))
    for path, source in BREAKS[contract].items():
        (tmp_path / "python" / path).write_text(source)
    p = lint_imports(tmp_path, contract)
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"Contracts: 0 kept, 1 broken", p.stdout), p.stdout


def _loaded(setup: str, modules: tuple[str, ...], cwd: Path) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``setup``."""
    code = f"import sys\n{setup}\nprint(sorted(m for m in {modules!r} if m in sys.modules))\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return list(ast.literal_eval(p.stdout.strip()))


PARSER = "from driver.cli import build_parser\nbuild_parser().format_help()"


def test_the_command_line_loads_neither_ray_nor_the_toolkit(tmp_path: Path) -> None:
    assert _loaded(PARSER, ("ray", "torch", "nodekit"), tmp_path) == []


def test_the_command_line_starts_without_what_only_some_commands_use(tmp_path: Path) -> None:
    """Every command starts by building the parser: SSH, asyncio, HTTP and the package
    metadata (a quarter of a second together) are imported where a command uses them."""
    heavy = ("paramiko", "asyncio", "http.client", "urllib.request", "importlib.metadata")
    assert _loaded(PARSER, heavy, tmp_path) == []
    p = subprocess.run(
        [sys.executable, "-m", "driver", "--version"], capture_output=True, text=True, cwd=tmp_path
    )
    assert p.returncode == 0 and re.fullmatch(r"python -m driver \S+\n", p.stdout), p


def test_a_job_verb_through_a_kept_connection_loads_no_ssh_library(tmp_path: Path) -> None:
    """The keeper holds the SSH connection; a command that reaches it needs no paramiko (a
    fifth of a second of the time issue 39 bounds)."""
    setup = "import driver.connect\nimport driver.cli.jobs\nimport driver.ssh.kept"
    assert _loaded(setup, ("paramiko",), tmp_path) == []


def test_the_toolkits_command_line_starts_without_ray(tmp_path: Path) -> None:
    """``python -m nodekit`` (the rehearsal's commands, run many times by the tests) loads Ray's
    autoscaler only where the scale set's node provider is used (half a second a command)."""
    setup = (
        "from nodekit.cli import build_parser\n"
        "build_parser().format_help()\n"
        "import nodekit.rehearsal.cluster"
    )
    assert _loaded(setup, ("ray", "torch"), tmp_path) == []


def test_help_works_outside_the_checkout(tmp_path: Path) -> None:
    """Nothing reads repository files at import or parse time."""
    for module in ("driver", "nodekit"):
        for args in (
            ["--help"],
            ["submit", "--help"] if module == "driver" else ["rehearse", "up", "--help"],
        ):
            p = subprocess.run(
                [sys.executable, "-m", module, *args],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NODEKIT_REPO": str(tmp_path)},
            )
            assert p.returncode == 0, (module, args, p.stderr)


@pytest.mark.parametrize(("command", "module"), [("raydriver", "driver"), ("nodekit", "nodekit")])
def test_the_console_scripts_are_the_modules_command_lines(
    command: str, module: str, tmp_path: Path
) -> None:
    """pyproject's [project.scripts], installed next to this Python: the same parser, the
    same answer as ``python -m MODULE`` (usage, help, and a usage error's exit code)."""
    script = Path(sys.executable).parent / command
    assert script.is_file(), f"{script} is not installed (pip install -e . installs it)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["--help"], ["no-such-verb"]):
        by_script = subprocess.run(
            [str(script), *args], capture_output=True, text=True, cwd=tmp_path, env=env
        )
        by_module = subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        assert (by_script.returncode, by_script.stdout, by_script.stderr) == (
            by_module.returncode,
            by_module.stdout,
            by_module.stderr,
        )
    assert by_script.returncode == 2


TESTS_PATH = re.compile(r"(?:^|/)tests(?:/|$)")
"""A path under the repository's tests/ folder: ``tests/...``, ``.../tests/...``, or the
component ``"tests"`` of a join (``root / "tests" / "fakes"``)."""


def _paths_under_tests(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string in ``source`` that names a path under tests/, docstrings
    left out (they may say where a thing is tested)."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and TESTS_PATH.search(node.value)
    )


def test_nothing_installed_reads_the_tests_folder() -> None:
    """The packages are what a wheel installs, and a wheel has no tests/: what the rehearsal
    ships (its Azure stand-ins) lives in the package, and no code names a path under tests/."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for path in sorted(PYTHON.rglob("*.py"))
        for line, text in _paths_under_tests(path.read_text())
    ]
    assert found == []


def test_the_tests_folder_check_sees_paths() -> None:
    """The check above would pass on a scanner that finds nothing: it finds the forms the
    rehearsal once used to run the test fakes."""
    source = (
        '"""Docstring: tested in tests/unit/test_x.py."""\n'
        'NODE_FAKE = "tests/fakes/azure_node.py"\n'
        'sys.path.insert(0, str(render.repo_root() / "tests" / "fakes"))\n'
        'FAKE = f"{root}/tests/fakes/azure_compute.py"\n'
        'HELP = "the tests run it"\n'
    )
    assert [line for line, _ in _paths_under_tests(source)] == [2, 3, 4]


# -- the tests ---------------------------------------------------------------------------------
TESTS = REPO / "tests"


def imported_test_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a test module (``test_*``) in ``path``, those inside
    functions included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module else [a.name for a in node.names]
        else:
            continue
        found += [
            (node.lineno, n) for n in names if any(p.startswith("test_") for p in n.split("."))
        ]
    return found


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules (tests/support.py, tests/unit/*_support.py) and
    fixtures in conftest.py files: a test module is read, and run, on its own."""
    modules = sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)
    assert any(p.name.startswith("test_") for p in modules)
    offending = [
        f"{p.relative_to(REPO)}:{line}: imports {name}"
        for p in modules
        for line, name in imported_test_modules(p)
    ]
    assert not offending, "\n".join(offending)


def test_the_layout_check_sees_imports(tmp_path: Path) -> None:
    """The check above would pass on a checker that sees nothing."""
    source = tmp_path / "test_example.py"
    source.write_text(
        "import os, test_a\n"
        "from test_b import x\n"
        "from support import REPO\n"
        "def test_c():\n"
        "    from test_d import y\n"
        "    import test_e.f\n"
    )
    assert imported_test_modules(source) == [
        (1, "test_a"),
        (2, "test_b"),
        (5, "test_d"),
        (6, "test_e.f"),
    ]
