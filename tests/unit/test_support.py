"""tests/support.py's helpers that a failing test leans on to say why it failed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import communicate_or_explain

WAITS = """
import time
print("BEFORE-THE-WAIT", flush=True)
def waits_forever():
    time.sleep(600)
waits_forever()
"""


def test_a_child_that_ends_gives_its_output() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "print('DONE')"], stdout=subprocess.PIPE, text=True
    )
    assert communicate_or_explain(child, 60).strip() == "DONE"


def test_a_child_that_does_not_end_is_killed_with_its_stacks_and_output() -> None:
    """The failure names the bound, shows where the child waits (py-spy's dump of its stack)
    and how its output ended, and the child is gone after."""
    child = subprocess.Popen(
        [sys.executable, "-c", WAITS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "BEFORE-THE-WAIT\n"
    with pytest.raises(AssertionError) as e:
        communicate_or_explain(child, 2)
    message = str(e.value)
    assert "did not end within 2 s" in message
    assert f"--- stacks of {child.pid}:" in message
    assert "waits_forever" in message, message
    assert child.returncode is not None  # killed, and reaped
