"""No test bounds a driver command below the driver's own budget for it (issue 35).

A fresh machine's suite failed 5 tests because they killed `driver local start` after 180 s while
the driver allows itself 360 s (``localray.START_TIMEOUT_S``, further starts included): such a
bound can only fail, and only under load. :func:`support.run_driver` derives its bound from
:func:`support.driver_budget` and refuses a shorter one when it runs; this module finds every
literal bound a test puts on a driver command without running the tests: a call of
``run_driver`` or a module's ``driver`` wrapper with ``timeout=<number>``, and a ``python -m
driver ...`` subprocess bounded by ``timeout=<number>`` (in the call, or in the
``communicate``/``wait`` of the same function).

A command that reaches a head waits for its Ray first (up to the ready timeout, 900 s): a
``status`` bounded at 300 s while the head came back from a deallocation failed the eviction
test in a whole run, the driver still inside its budget. Arguments the lint cannot read to their
end (``*cluster.args``) may name a head, so they are judged as if they did.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import REPO, TESTS, driver_budget, driver_floor, run_driver

WRAPPERS = {"run_driver", "driver", "_driver"}
"""Functions of the tests that run ``python -m driver`` with their arguments first."""
WAITS = {"communicate", "wait"}
SIGNALS = {"send_signal", "terminate", "kill"}
"""A process told to end (Ctrl-C, as a user ends ``dashboard``) is past its budget: a wait then
bounds its exit, not the command."""


@dataclass(frozen=True)
class Bound:
    where: str
    args: tuple[str, ...]
    seconds: float


def _literal(node: ast.AST | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    return None


MORE = "..."
"""Ends the arguments of a bound where a ``*args`` (or a verb in a variable) cut what the lint can
read."""
VALUE = "x"
"""Stands for one argument in a variable (a submission id, a path): a value, never an option."""


def _strings(nodes: list[ast.expr]) -> tuple[str, ...]:
    """The arguments as far as they can be read: string constants, :data:`VALUE` for a single
    argument in a variable, then :data:`MORE` where a ``*args`` (or a verb not written out)
    leaves the rest unknown."""
    out = []
    for n in nodes:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.append(n.value)
        elif isinstance(n, ast.Starred) or not out:
            out.append(MORE)
            break
        else:
            out.append(VALUE)
    return tuple(out)


def _name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _driver_argv(call: ast.Call) -> tuple[str, ...] | None:
    """The driver arguments of ``subprocess.X([python, "-m", "driver", ...])``, else None."""
    if not call.args or not isinstance(call.args[0], ast.List):
        return None
    items = call.args[0].elts
    for i in range(len(items) - 1):
        pair = items[i : i + 2]
        if all(isinstance(n, ast.Constant) for n in pair) and [
            n.value  # type: ignore[attr-defined]
            for n in pair
        ] == ["-m", "driver"]:
            return _strings(items[i + 2 :])
    return None


def _timeout(call: ast.Call) -> float | None:
    return next((_literal(k.value) for k in call.keywords if k.arg == "timeout"), None)


def literal_bounds(path: Path, root: Path = REPO) -> list[Bound]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[Bound] = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        seconds, argv = _timeout(call), _driver_argv(call)
        where = f"{path.relative_to(root)}:{call.lineno}"
        if seconds is not None and _name(call) in WRAPPERS:
            found.append(Bound(where, _strings(call.args), seconds))
        elif seconds is not None and argv is not None:
            found.append(Bound(where, argv, seconds))
    # A wait bounds the driver process that its function spawned last before it.
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        calls = sorted(
            (n for n in ast.walk(function) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        spawned: tuple[str, ...] | None = None
        for call in calls:
            argv = _driver_argv(call)
            spawned = spawned if argv is None else argv
            if _name(call) in SIGNALS:  # a wait after it bounds the exit it asked for
                spawned = None
            seconds = _timeout(call)
            if seconds is not None and _name(call) in WAITS and spawned is not None:
                found.append(Bound(f"{path.relative_to(root)}:{call.lineno}", spawned, seconds))
    return sorted(set(found), key=lambda b: b.where)


def literal_defaults(path: Path, root: Path = REPO) -> list[str]:
    """Wrappers of ``run_driver`` (functions that call it, or run ``python -m driver``) whose
    ``timeout`` parameter has a number for its default: a bound no call site shows, which the
    wrapper hands to every command it runs (test_autostop.py's gave 900 s to `start`, whose
    budget is 900 s itself)."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(function, ast.FunctionDef):
            continue
        a = function.args
        named = [*a.posonlyargs, *a.args]
        defaults = dict(
            zip([p.arg for p in named[len(named) - len(a.defaults) :]], a.defaults, strict=True)
        )
        defaults.update(
            {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None}
        )
        if _literal(defaults.get("timeout")) is None:
            continue
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
        if any(_name(c) in WRAPPERS or _driver_argv(c) is not None for c in calls):
            found.append(f"{path.relative_to(root)}:{function.lineno} {function.name}")
    return found


def test_no_wrapper_of_the_driver_has_a_literal_default_bound() -> None:
    assert [d for p in sorted(TESTS.rglob("*.py")) for d in literal_defaults(p)] == []


def test_the_wrapper_finder_sees_a_literal_default(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "def drive(home, *argv, timeout=120):\n"
        "    return run_driver(*argv, home=home, timeout=timeout)\n"
        "def fine(home, *argv, timeout=None):\n"
        "    return run_driver(*argv, home=home, timeout=timeout)\n"
        "def other(timeout=5):\n"
        "    return urlopen('http://127.0.0.1', timeout=timeout)\n"
    )
    assert literal_defaults(sample, tmp_path) == ["test_sample.py:1 drive"]


def all_bounds() -> list[Bound]:
    return [b for p in sorted(TESTS.rglob("*.py")) for b in literal_bounds(p)]


ANY_VERB = (("submit", "--head"), ("start",), ("local", "start"), ("stop", "--head"))
"""What a bound on a command whose verb the lint cannot read (a variable) must cover: the most
any verb allows itself (test_paths.py's drive() gave 300 s to every verb, `submit` included)."""


def floor(args: tuple[str, ...]) -> float:
    """The shortest bound the lint accepts. Arguments it cannot read to their end may hold a
    cluster option (``*cluster.args``): the command may then wait for a head's Ray as well."""
    known = args[:-1] if args[-1:] == (MORE,) else args
    if not known:
        return max(driver_floor(a) for a in ANY_VERB)
    if known == args:
        return driver_floor(known)
    return max(driver_floor(known), driver_floor((*known, "--head")))


def test_no_literal_bound_is_below_the_driver_budget() -> None:
    short = [
        f"{b.where}: `driver {' '.join(b.args) or '<any verb>'}` bounded at {b.seconds:.0f} s, "
        f"its budget + slack is {floor(b.args):.0f} s"
        for b in all_bounds()
        if b.seconds < floor(b.args)
    ]
    assert short == []


def test_the_finder_sees_the_bounds_it_must_judge(tmp_path: Path) -> None:
    """The lint finds each shape of bound, and judges `local start` at 180 s short (the bound
    that failed on a fresh machine)."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "def test_a(tmp_path):\n"
        "    run_driver('local', 'start', '--num-cpus', '1', home=tmp_path, timeout=180)\n"
        "def test_b(tmp_path):\n"
        "    proc = subprocess.Popen([sys.executable, '-m', 'driver', 'submit', 'x.py'])\n"
        "    proc.communicate(timeout=100)\n"
        "def test_c():\n"
        "    subprocess.run([sys.executable, '-m', 'driver', 'list'], timeout=30)\n"
        "def drive(home, verb, *rest):\n"
        "    return run_driver(verb, *rest, home=home, timeout=300)\n"
        "def test_d(cluster):\n"
        "    run_driver('status', *cluster.args, home=cluster.home, timeout=120)\n"
        "    run_driver('plot', *cluster.args, home=cluster.home, timeout=120)\n"
    )
    bounds = sorted(
        (
            Bound(b.where.split(":")[-1], b.args, b.seconds)
            for b in literal_bounds(sample, tmp_path)
        ),
        key=lambda b: int(b.where),
    )
    assert bounds == [
        Bound("2", ("local", "start", "--num-cpus", "1"), 180.0),
        Bound("5", ("submit", "x.py"), 100.0),  # the Popen's own wait
        Bound("7", ("list",), 30.0),
        Bound("9", (MORE,), 300.0),  # any verb: `submit` and `start` among them
        Bound("11", ("status", MORE), 120.0),  # maybe a head's: its Ray waited for
        Bound("12", ("plot", MORE), 120.0),  # never waits for a head's Ray
    ]
    short = [b.where for b in bounds if b.seconds < floor(b.args)]
    assert short == ["2", "5", "9", "11"]


@pytest.mark.parametrize(
    "args, budget",
    [
        (("local", "start", "--num-cpus", "1"), "localray.START_TIMEOUT_S"),
        (("submit", "train.py"), "localray.START_TIMEOUT_S"),
        (("submit", "--head", "u@h", "--ready-timeout", "30", "x.py"), "30"),
        (
            ("start", "--resource-group", "rg"),
            "power.START_TIMEOUT_S + settings.DEFAULT_READY_TIMEOUT_S",
        ),
        (("status", "--head", "u@h"), "settings.DEFAULT_READY_TIMEOUT_S"),
        (("logs", "--head", "u@h", "--ready-timeout", "40", "raysubmit_1"), "40"),
        (
            ("stop", "--head", "u@h", "raysubmit_1", "--timeout", "5"),
            "settings.DEFAULT_READY_TIMEOUT_S + 5",
        ),
        (("ssh", "--head", "u@h"), "0"),
        (("download", "--head", "u@h", "raysubmit_1"), "0"),
        (("status",), "0"),
        (("stop", "raysubmit_1", "--timeout", "5"), "5"),
        (("stop", "raysubmit_1"), "60"),
        (("list",), "0"),
        (("local", "start", "--no-such-option"), "localray.START_TIMEOUT_S"),
        (("submit", "--head"), "settings.DEFAULT_READY_TIMEOUT_S"),  # a lint's first words
    ],
)
def test_the_budget_is_the_driver_own(args: tuple[str, ...], budget: str) -> None:
    from driver import localray, power, settings

    names = {"localray": localray, "power": power, "settings": settings}
    expected = eval(budget, names)
    assert driver_budget(args, env={}) == float(expected)


def test_run_driver_refuses_a_bound_below_the_budget(tmp_path: Path) -> None:
    short = 180.0  # what test_local_heads.py had
    with pytest.raises(ValueError, match="below the driver's own budget"):
        run_driver("local", "start", home=tmp_path, timeout=short)
