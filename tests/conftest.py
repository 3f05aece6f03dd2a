"""Fixtures for every kind of test: a private driver home, so tests never touch a user's local
Ray. Kinds: tests/unit (no root), tests/system (real sshd and Ray in network namespaces, root),
tests/e2e (the rehearsal cluster, root); their own conftest.py files add their fixtures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# A suite started in the background of a script (`.ci/run &`, `nohup ... &`) inherits an ignored
# SIGINT, and so would every process its tests start: Python keeps an ignored SIGINT, so the
# driver would never see the Ctrl-C the tests send it as a user does (scripts/test.sh cannot undo
# it: bash keeps a signal ignored at its start). A handler here is reset to the default in every
# process started from now on.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def driver_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A RAYDRIVER_HOME for the whole run; the local Ray head it holds is stopped at the end."""
    home = tmp_path_factory.mktemp("driver-home")
    yield home
    subprocess.run(
        [sys.executable, "-m", "driver", "local", "stop"],
        env={**os.environ, "RAYDRIVER_HOME": str(home)},
        capture_output=True,
        timeout=120,
    )
