"""The two kinds of progress a library function may report; only the CLI prints them."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
"""A line for the person waiting ("waiting for the head to finish bootstrapping ...")."""
ByteProgress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)`` while something uploads or downloads."""


def silent(_: str) -> None:
    """A :data:`Progress` that says nothing."""
