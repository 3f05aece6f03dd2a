"""What the CLI shows a person: status lines on stderr, progress bars, sizes, next commands.

stdout carries only what a command is asked for (a job's logs, JSON, a table), so it can be
piped; everything about the command itself goes to stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from driver.progress import ByteProgress, human_size
from driver.untrusted import shown, terminal_safe

__all__ = ["shown", "terminal_safe"]  # the sanitizer lives with the other readers of outside text

size = human_size

PROG = "python -m driver"


def say(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays the job's output)."""
    print(message, file=sys.stderr, flush=True)


def write_out(text: str) -> None:
    """Text from the cluster (logs) on stdout, with terminal control sequences removed."""
    sys.stdout.write(terminal_safe(text))
    sys.stdout.flush()


def byte_bar(desc: str) -> ByteProgress:
    """A byte progress bar on stderr (only on a terminal), as a ``progress(done, total)``."""
    from tqdm import tqdm

    # No monitor thread: it would outlive a bar abandoned by Ctrl-C.
    tqdm.monitor_interval = 0
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=desc,
                file=sys.stderr,
                disable=not sys.stderr.isatty(),
                leave=False,
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def command(verb: str, hint: str = "") -> str:
    """The command line that repeats ``verb`` against the same cluster."""
    return f"{PROG} {verb}" + (f" {hint}" if hint else "")


def next_steps(sid: str, hint: str = "") -> str:
    verbs = (
        f"job logs {sid} --follow",
        f"job status {sid}",
        f"job cancel {sid}",
        f"results download {sid}",
    )
    return "\n".join(["Next:", *(f"  {command(v, hint)}" for v in verbs)])


def listed(items: Sequence[str], most: int = 5) -> str:
    """The first ``most`` of ``items``, terminal-safe, then how many more: "a, b and 3 more"."""
    shown = ", ".join(terminal_safe(x) for x in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
