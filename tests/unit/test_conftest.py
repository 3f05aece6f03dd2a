"""tests/conftest.py's own machinery, run on a small suite of its own in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO

SUITE = """
import json
import os
import pytest

EVENTS = []


@pytest.fixture(scope="session")
def held(release_after_last_user):
    EVENTS.append("up")
    release_after_last_user("held", lambda: EVENTS.append("released"))
    yield
    EVENTS.append("teardown")
    with open(os.environ["EVENTS_FILE"], "w") as f:
        json.dump(EVENTS, f)


@pytest.fixture
def uses_held(held):  # a user once removed counts too
    pass


def test_a(held):
    EVENTS.append("a")


def test_b(uses_held):
    EVENTS.append("b")


def test_c():
    EVENTS.append("c")
"""


def test_a_session_fixture_is_released_right_after_its_last_user(tmp_path: Path) -> None:
    """Released once its last user (here one that uses it through another fixture) is done,
    before the next test; its own teardown still runs at the end."""
    (tmp_path / "conftest.py").write_text((REPO / "tests/conftest.py").read_text())
    (tmp_path / "test_suite.py").write_text(SUITE)
    events = tmp_path / "events.json"
    env = {k: v for k, v in os.environ.items() if k != "RAYDRIVER_LANE_CPU"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**env, "EVENTS_FILE": str(events)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert events.read_text() == '["up", "a", "b", "released", "c", "teardown"]'
