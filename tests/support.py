"""Helpers every kind of test shares: where the repository is, and running the driver the way a
user does, as a separate process."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"


CLUSTER_FLAGS = ("--head", "--terraform-dir", "--resource-group")
"""The options that make ``submit`` reach a remote cluster instead of local Ray."""
NO_RAY_WAIT = frozenset(
    {"up", "down", "price", "use", "ssh", "download", "runs", "plot", "render", "image"}
)
"""Verbs that never wait for a head's Ray (``download`` reads the head's disk over SFTP); the
rest that reach a head wait up to the ready timeout. ``local start`` has a budget of its own."""
SLACK_S = 120.0
"""What a test allows a driver command beyond the driver's own budget: the interpreter's start,
its imports and the clean-up after the budget ran out, on a loaded machine."""


LOCAL_RAY_INIT = """
import ray
from driver.localray import init_local_ray
"""
"""For a ``python -c`` script that starts a local Ray in its own process: ``init_local_ray``
(driver/localray.py), ``ray.init`` tried again, as ``driver local start`` tries ``ray start``,
when the node misses the 30 s Ray gives it to register (ray/_private/node.py; on 2 cores under
the suite's load)."""


@functools.cache
def _parsed(args: tuple[str, ...]) -> argparse.Namespace | None:
    """The driver's own parse of ``args``; None where its parser refuses them (or --help)."""
    from driver.cli import build_parser
    from driver.errors import DriverError

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return build_parser().parse_args(list(args))
    except (SystemExit, DriverError):
        return None


def driver_budget(args: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """The longest the driver allows itself, by its own constants and options, for what the
    command ``args`` may wait on (0 for a command with no budget of its own). Arguments the
    driver's parser refuses (or only a command's first words, as a lint knows them) get the most
    the command may allow itself with any options.

    A test's bound on a driver command is at least this plus :data:`SLACK_S` (issue 35: a bound
    below the product's own budget, e.g. 180 s on ``local start`` whose budget is 360 s, can
    only fail, and only on a loaded machine). :func:`driver_timeout` derives a bound from it and
    refuses a shorter one; tests/unit/test_test_bounds.py checks every literal bound."""
    from driver import localray, power
    from driver.cli import SHORTCUTS
    from driver.settings import DEFAULT_READY_TIMEOUT_S, HEAD_ENV, READY_TIMEOUT_ENV

    env = {**os.environ, **(env or {})}
    own = list(args[: list(args).index("--")]) if "--" in args else list(args)
    # A command in the grammar's spelling (``job cancel``) budgets as its shortcut (``stop``).
    shortcut = {new: old for old, new in SHORTCUTS.items()}.get(" ".join(own[:2]))
    if shortcut is not None:
        own = [shortcut, *own[2:]]
    words = [*own, "", ""][:2]
    parsed = _parsed(tuple(own))
    if words == ["local", "start"]:
        return localray.START_TIMEOUT_S
    # A command that reaches a head's Ray first waits for it (a head still bootstrapping, or
    # restarted and its Ray coming back: driver.remote.wait_until_ready), up to the ready timeout.
    ready = float(env.get(READY_TIMEOUT_ENV) or DEFAULT_READY_TIMEOUT_S)
    if words[0] in NO_RAY_WAIT or (words[0] == "cluster" and words[1] in NO_RAY_WAIT):
        return 0.0
    if parsed is not None:
        ready = float(getattr(parsed, "ready_timeout", None) or ready)
        remote = any(getattr(parsed, o.lstrip("-").replace("-", "_"), None) for o in CLUSTER_FLAGS)
    else:  # refused, or a lint's first words: a cluster option among them
        remote = any(w.split("=")[0] in CLUSTER_FLAGS for w in own)
    remote = remote or bool(env.get(HEAD_ENV))
    if words[0] == "start":  # the head VM started (driver.power), then its Ray waited for
        return power.START_TIMEOUT_S + ready
    if words[0] == "stop":  # a job: the verb's own --timeout (its default, or the test's)
        if parsed is None:
            parsed = _parsed(("stop", "raysubmit_x"))
            assert parsed is not None
        return (ready if remote else 0.0) + (0.0 if parsed.no_wait else float(parsed.timeout))
    if words[0] == "submit":
        # A remote head may still be bootstrapping; local Ray is started if it is not running.
        return ready if remote else localray.START_TIMEOUT_S
    return ready if remote else 0.0


def driver_floor(args: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """The shortest bound a test may put on ``python -m driver ARGS``: its budget plus
    :data:`SLACK_S`, or none (0) for a command without a budget of its own."""
    budget = driver_budget(args, env)
    return budget + SLACK_S if budget > 0 else 0.0


def driver_timeout(
    args: Sequence[str], timeout: float | None = None, env: Mapping[str, str] | None = None
) -> float:
    """A test's bound on ``python -m driver ARGS``: ``timeout``, which must be at least
    :func:`driver_floor`, or by default that (and at least 600 s)."""
    floor = driver_floor(args, env)
    if timeout is None:
        return max(600.0, floor)
    if timeout < floor:
        raise ValueError(
            f"a test bounds `driver {' '.join(args[:2])}` at {timeout:.0f} s, below the "
            f"driver's own budget for it plus slack ({floor:.0f} s): it could only fail under load"
        )
    return timeout


def run_driver(
    *args: str,
    home: Path,
    cwd: Path | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    module: str = "driver",
) -> subprocess.CompletedProcess[str]:
    """``python -m driver ARGS`` as a user runs it, bounded by :func:`driver_timeout`. Each
    command opens its own SSH connection (``RAYDRIVER_KEEP_CONNECTION=0``, unless ``env`` says
    otherwise): a kept one would outlive the test that started it, and on an autostop cluster
    count as activity. The kept connection has tests of its own
    (tests/unit/test_kept_connection.py, tests/system/test_kept_connection.py)."""
    if module == "driver":
        timeout = driver_timeout(args, timeout, env)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd or REPO,
        env={
            **os.environ,
            "RAYDRIVER_HOME": str(home),
            "RAYDRIVER_KEEP_CONNECTION": "0",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def logs_until(
    cluster: Sequence[str],
    sid: str,
    match: Callable[[str], bool],
    *,
    home: Path,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> tuple[subprocess.Popen[str], list[str]]:
    """``logs -f SID`` of a running job, as a user follows it, read line by line until
    ``match`` takes one: the follower, still running, and the lines so far (the matched one
    last). One process streams the log; a test that polled ``logs`` paid a driver's start and
    an SSH connection (~1.5 CPU s) every few seconds while it waited. The follower ends with
    the job (or is the caller's to end); AssertionError, with the lines, if the log ends or
    ``timeout`` (by default :func:`driver_timeout`'s) passes before a line matches."""
    argv = ["logs", *cluster, "-f", sid]
    timeout = driver_timeout(argv, timeout, env)
    follower = subprocess.Popen(
        [sys.executable, "-m", "driver", *argv],
        cwd=REPO,
        env={
            **os.environ,
            "RAYDRIVER_HOME": str(home),
            "RAYDRIVER_KEEP_CONNECTION": "0",
            **(env or {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(timeout, follower.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert follower.stdout is not None
        for line in follower.stdout:
            lines.append(line.rstrip("\n"))
            if match(lines[-1]):
                return follower, lines
    finally:
        watchdog.cancel()
    follower.wait()
    raise AssertionError(
        f"{sid}'s log ended (exit {follower.returncode}, or {timeout:.0f} s passed) before the "
        "line awaited:\n" + "\n".join(lines[-40:])
    )


def end_follower(follower: subprocess.Popen[str]) -> None:
    """A :func:`logs_until` follower no longer needed, ended as Ctrl-C ends it (the job goes
    on)."""
    if follower.poll() is None:
        follower.send_signal(signal.SIGINT)
        try:
            follower.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            follower.kill()
            follower.communicate()


def job_failure(r: subprocess.CompletedProcess[str], width: int = 300) -> str:
    """A failed ``submit``'s story for an assertion message: the job's last traceback, if it
    printed one, then the tail of its output and the driver's stderr, each line cut to
    ``width`` characters (an exception can carry a megabyte of arrays in its message)."""

    def cut(text: str) -> str:
        return "\n".join(
            line if len(line) <= width else line[:width] + f" ... ({len(line)} chars)"
            for line in text.splitlines()
        )

    out = r.stdout or ""
    start = out.rfind("Traceback (most recent call last)")
    traceback = cut(out[start:])[:6000] if start >= 0 else "(no traceback in the job's output)"
    end, stderr = cut(out)[-2000:], cut(r.stderr)[-2000:]
    return f"{traceback}\n--- output's end:\n{end}\n--- stderr:\n{stderr}"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def run_benchmark(
    name: str,
    *args: str,
    timeout: float,
    home: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``benchmarks/NAME.py ARGS`` as its docstring says to run it (from the repository, as a
    separate process; with ``home``, the driver's home for the local Ray it submits to): the
    process, and every JSON object it printed on stdout, in order (each benchmark prints one,
    or one line per step and then the whole), with the lines that are not JSON left out."""
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *args],
        cwd=REPO,
        env={
            **os.environ,
            **({"RAYDRIVER_HOME": str(home)} if home is not None else {}),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, json_objects(p.stdout)


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text`` that start a line (indented over many lines or on one)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end + 1
        if text.startswith("{", at):
            try:
                obj, stop = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                pass
            else:
                found.append(obj)
                at = stop
                continue
        at = end
    return found


def python_stacks(pid: int) -> str:
    """py-spy's dump of the Python threads of process ``pid`` and its children, for the message
    of a test whose process did not end in time: where each thread waits. py-spy comes with
    Ray's dashboard extra; a process it cannot read says why, in its place."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return f"(no stacks: {spy} is not installed)"
    try:
        r = subprocess.run(
            [str(spy), "dump", "--subprocesses", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return f"(no stacks: py-spy dump of {pid} took over 60 s)"
    return (r.stdout + r.stderr).strip() or f"(py-spy dump of {pid} printed nothing)"


def ray_workers() -> list[int]:
    """This process's descendants that are Ray's workers (actors, tasks: ``ray::...``): the
    processes of a Ray a test started in-process, whose stacks explain a job waiting on them."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.cmdline()[:1] and child.cmdline()[0].startswith("ray::"):
                found.append(child.pid)
    return found


def communicate_or_explain(
    child: subprocess.Popen[str], timeout: float, also: Sequence[int] = ()
) -> str:
    """``child``'s output once it ends; if it does not within ``timeout`` seconds, a failure that
    says where it waits (its stacks, and those of ``also``: e.g. :func:`ray_workers`) and how its
    output ended, then the child killed. CI shows only a failure's message: a bare
    ``TimeoutExpired`` there told nothing of why a job hung (issue 35)."""
    try:
        out, _ = child.communicate(timeout=timeout)
        return out
    except subprocess.TimeoutExpired:
        stacks = "\n".join(
            f"--- stacks of {pid}:\n{python_stacks(pid)}" for pid in (child.pid, *also)
        )
        child.kill()
        out, _ = child.communicate()
        raise AssertionError(
            f"{child.args!r} did not end within {timeout:.0f} s\n{stacks[-12000:]}\n"
            f"--- its output's end:\n{(out or '')[-4000:]}"
        ) from None
