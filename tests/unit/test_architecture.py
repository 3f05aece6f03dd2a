"""The shape of the Python code: two packages whose imports run one way, without cycles, and a
client whose command line loads neither Ray nor the toolkit nor any repository file."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

PYTHON = REPO / "python"
SHARED = {
    "driver.layout",
    "driver.errors",
    "driver.procs",
    "driver.progress",
    "driver.yamlfile",
    "driver.hostkeys",
    "driver.package",
}
"""What the node toolkit may use from the client's package."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PYTHON).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """module → the modules of driver/nodekit it imports (explicitly, anywhere in the file)."""
    modules = {_module_name(p): p for p in PYTHON.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def test_the_client_never_imports_the_toolkit() -> None:
    graph = import_graph()
    offending = {
        m: sorted(e for e in edges if e.startswith("nodekit"))
        for m, edges in graph.items()
        if m.startswith("driver")
    }
    assert {m: e for m, e in offending.items() if e} == {}


def test_the_toolkit_uses_only_the_shared_modules_of_the_client() -> None:
    graph = import_graph()
    used = {
        e
        for m, edges in graph.items()
        if m.startswith("nodekit")
        for e in edges
        if e.startswith("driver")
    }
    assert used <= SHARED, used - SHARED


def test_code_that_runs_on_the_nodes_imports_nothing_of_ours() -> None:
    """nodekit.node's modules are copied onto the nodes alone: no driver, no nodekit there."""
    graph = import_graph()
    node_modules = [m for m in graph if m.startswith("nodekit.node.")]
    assert node_modules
    assert {m: sorted(graph[m]) for m in node_modules if graph[m]} == {}


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # A package's __init__ importing its own submodules is how packages work, not a cycle.
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_the_graph_sees_imports() -> None:
    """The checks above would pass on an empty graph: make sure it holds real edges."""
    graph = import_graph()
    assert "driver.ssh.forward" in graph["driver.remote"]
    assert "driver.layout" in graph["nodekit.render"]
    assert "driver.cli.options" in graph["driver.cli.jobs"]


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
