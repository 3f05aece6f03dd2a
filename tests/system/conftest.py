"""System tests: a real sshd and Ray head in a network namespace (root). See headhost.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headhost import HeadHost


@pytest.fixture(scope="session")
def head_host(
    tmp_path_factory: pytest.TempPathFactory,
    release_after_last_user: Callable[[str, Callable[[], None]], None],
) -> Iterator[HeadHost]:
    """A ready head: sshd on port 22 and a Ray head with token auth behind it, removed after
    the last test that uses it (the autostop lane runs its clusters' tests after these)."""
    head = HeadHost(tmp_path_factory.mktemp("head"))
    head.start(ray=True)
    release_after_last_user("head_host", head.stop)
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture
def home(tmp_path: Path, head_host: HeadHost) -> Path:
    """The driver's home (``driver_env(home)``) for a test: an empty user home, and the driver's
    known_hosts trusting the session's head."""
    (tmp_path / "user-home").mkdir()
    assert head_host.sshd is not None
    (tmp_path / "known_hosts").write_text(head_host.sshd.known_hosts_line)
    return tmp_path


@pytest.fixture
def make_head_host(tmp_path: Path) -> Iterator[Callable[[], HeadHost]]:
    """Bare heads (sshd only: no Ray, no ready marker), removed when the test ends."""
    heads: list[HeadHost] = []

    def make() -> HeadHost:
        head = HeadHost(tmp_path / f"head{len(heads)}")
        heads.append(head)
        return head.start(ray=False)

    try:
        yield make
    finally:
        for head in heads:
            head.stop()
