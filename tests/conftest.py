"""Fixtures for every kind of test: a private driver home, so tests never touch a user's local
Ray. Kinds: tests/unit (no root), tests/system (real sshd and Ray in network namespaces, root),
tests/e2e (the rehearsal cluster, root); their own conftest.py files add their fixtures."""

from __future__ import annotations

import copy
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import hcl2.api
import pytest

# A suite started in the background of a script (`.ci/run &`, `nohup ... &`) inherits an ignored
# SIGINT, and so would every process its tests start: Python keeps an ignored SIGINT, so the
# driver would never see the Ctrl-C the tests send it as a user does (scripts/test.sh cannot undo
# it: bash keeps a signal ignored at its start). A handler here is reset to the default in every
# process started from now on.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# python-hcl2 is pure Python (lark): ~0.1 s of CPU for one of the stacks' files, and the tests
# (and the scripts they import) parse the same files hundreds of times in a run, 505 times in
# test_terraform_validations.py and test_terraform_module.py alone. Each distinct text is parsed
# once per test process; every caller gets its own deep copy, as from a parse of its own.
_hcl2_loads = hcl2.api.loads


@functools.lru_cache(maxsize=1024)
def _hcl2_parsed(text: str) -> dict[str, Any]:
    return _hcl2_loads(text)


def _hcl2_loads_once(text: str, *, serialization_options: Any = None) -> dict[str, Any]:
    if serialization_options is not None:
        return _hcl2_loads(text, serialization_options=serialization_options)
    return copy.deepcopy(_hcl2_parsed(text))


hcl2.api.loads = hcl2.loads = _hcl2_loads_once  # hcl2.load reads its file and calls this


def _stop_local_head(home: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "driver", "local", "stop"],
        env={**os.environ, "RAYDRIVER_HOME": str(home)},
        capture_output=True,
        timeout=120,
    )


@pytest.fixture(scope="session")
def driver_home(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """A RAYDRIVER_HOME for the whole run; the local Ray head it holds is stopped after the
    last test that uses it (an idle head costs ~4 CPU s a minute), and at the end."""
    home = tmp_path_factory.mktemp("driver-home")
    request.session.stash[_DRIVER_HOME] = home
    yield home
    _stop_local_head(home)


_LAST_USER = pytest.StashKey[str]()
"""The node id of the run's last test that uses driver_home."""
_DRIVER_HOME = pytest.StashKey[Path]()


def pytest_collection_finish(session: pytest.Session) -> None:
    users = [item.nodeid for item in session.items if "driver_home" in _fixtures(item)]
    if users:
        session.stash[_LAST_USER] = users[-1]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield  # the test's own fixtures torn down
    if item.session.stash.get(_LAST_USER, None) == item.nodeid and nextitem is not None:
        # (no next test: the fixture's own teardown stops it)
        home = item.session.stash.get(_DRIVER_HOME, None)
        if home is not None:
            _stop_local_head(home)
    start = item.stash.get(_CPU_AT_SETUP, None)
    now = _lane_cpu_s()
    if start is not None and now is not None:
        item.user_properties.append(("cpu_s", f"{now - start:.1f}"))
    return result


# scripts/test.sh runs each lane in a CPU-accounting cgroup of its own, whose usage file it names
# in RAYDRIVER_LANE_CPU: each test's CPU seconds (all its processes', the Ray and the clusters
# it started, set-up and tear-down included, as the lane's other work beside it) go into the
# lane's JUnit XML as the property cpu_s, which scripts/lanes.py lists.
_LANE_CPU = os.environ.get("RAYDRIVER_LANE_CPU", "")
_CPU_AT_SETUP = pytest.StashKey[float]()


def _lane_cpu_s() -> float | None:
    if not _LANE_CPU:
        return None
    try:
        return int(Path(_LANE_CPU).read_text()) / 1e9
    except (OSError, ValueError):
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if (now := _lane_cpu_s()) is not None:
        item.stash[_CPU_AT_SETUP] = now


def _fixtures(item: pytest.Item) -> list[str]:
    return list(getattr(item, "fixturenames", ()))
