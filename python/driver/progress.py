"""The two kinds of progress a library function may report; only the CLI prints them."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
"""A line for the person waiting ("waiting for the head to finish bootstrapping ...")."""
ByteProgress = Callable[[int, int], None]
"""``progress(bytes_done, bytes_total)`` while something uploads or downloads."""


def silent(_: str) -> None:
    """A :data:`Progress` that says nothing."""


def human_size(n: float) -> str:
    """``512 B``, ``1.5 KB``, ``3.2 MB`` ... (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
