"""What the CLI shows a person: status lines on stderr, progress bars, sizes, next commands.

stdout carries only what a command is asked for (a job's logs, JSON, a table), so it can be
piped; everything about the command itself goes to stderr.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from driver.progress import ByteProgress, human_size

size = human_size

PROG = "python -m driver"

# ANSI escape sequences and other control characters that a job's output (or a head) could use to
# rewrite the user's terminal: cursor moves, title changes, OSC 8 links, ... Colours (SGR, "ESC [
# ... m") are harmless and kept, so RLlib's coloured tables still look right.
_CONTROL = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-ln-z@`]"  # CSI sequences other than SGR (...m)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL/ST (titles, links, clipboard)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS/SOS/PM/APC strings
    r"|\x1b[^\[\]PX^_]"  # other two-byte escapes
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"  # C0 controls except \t \n \r and ESC
)


def say(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays the job's output)."""
    print(message, file=sys.stderr, flush=True)


def terminal_safe(text: str) -> str:
    """``text`` without the control sequences that could take over a terminal."""
    return _CONTROL.sub("", text)


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
    verbs = (f"logs {sid} --follow", f"status {sid}", f"stop {sid}", f"download {sid}")
    return "\n".join(["Next:", *(f"  {command(v, hint)}" for v in verbs)])


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
