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
from collections.abc import Callable, Iterator
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


Releaser = Callable[[], None]
_RELEASES = pytest.StashKey[dict[str, Releaser]]()
"""Session fixture name -> what lets its resource go, as registered."""
_LAST_USERS = pytest.StashKey[dict[str, str]]()
"""Fixture name -> the node id of the run's last test that uses it (directly or not)."""


@pytest.fixture(scope="session")
def release_after_last_user(request: pytest.FixtureRequest) -> Callable[[str, Releaser], None]:
    """``release_after_last_user(name, release)``, for a session fixture ``name`` that holds a
    Ray head (an idle one costs ~4 CPU s a minute, and a lane runs other files after the
    fixture's last user): ``release`` runs right after the run's last test that uses ``name``.
    The fixture's own teardown still runs at the end, so ``release`` must be safe to repeat."""
    releases = request.session.stash.setdefault(_RELEASES, {})
    return releases.__setitem__


@pytest.fixture(scope="session")
def driver_home(
    tmp_path_factory: pytest.TempPathFactory,
    release_after_last_user: Callable[[str, Releaser], None],
) -> Iterator[Path]:
    """A RAYDRIVER_HOME for the whole run; the local Ray head it holds is stopped after the
    last test that uses it, and at the end."""
    home = tmp_path_factory.mktemp("driver-home")
    release_after_last_user("driver_home", lambda: _stop_local_head(home))
    yield home
    _stop_local_head(home)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.stash[_LAST_USERS] = {
        name: item.nodeid for item in session.items for name in _fixtures(item)
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield  # the test's own fixtures torn down
    if nextitem is not None:  # (no next test: the fixtures' own teardown is next)
        last = item.session.stash.get(_LAST_USERS, {})
        releases = item.session.stash.get(_RELEASES, {})
        for name in [n for n in releases if last.get(n) == item.nodeid]:
            releases.pop(name)()
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
