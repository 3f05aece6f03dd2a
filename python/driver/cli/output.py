"""What the CLI shows a person: status lines on stderr, progress bars, sizes, next commands.

stdout carries only what a command is asked for (a job's logs, JSON, a table), so it can be
piped; everything about the command itself goes to stderr.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from driver.progress import ByteProgress, human_size

size = human_size

PROG = "python -m driver"

# ANSI escape sequences and other control characters that a job's output (or a head) could use to
# rewrite the user's terminal: cursor moves, title changes, OSC 8 links, ... Each sequence goes
# whole, in its 7-bit form (ESC [, ESC ], ESC P ...) and its 8-bit C1 form (U+009B CSI, U+009D OSC,
# U+0090 DCS ...: terminals that decode UTF-8 act on them too), and so does every other C0 and C1
# control. Colours (SGR: "ESC [ digits;... m") are harmless and kept, so RLlib's coloured tables
# still look right.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_CONTROL = re.compile(
    # CSI: parameter bytes, intermediate bytes, a final byte (missing when the text ends first)
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    # OSC, ended by BEL or ST (ESC \ or U+009C); titles, links, the clipboard. One that is not
    # ended goes to the end of the line, not further: the next lines stay.
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    # DCS, SOS, PM, APC strings, ended by ST
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"
    # any other escape: intermediates and a final byte (ESC ( 0, ESC # 8, ESC c ...), or a lone ESC
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    # C0 controls except \t \n \r, DEL, and the C1 controls U+0080-U+009F
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def _strip(match: re.Match[str]) -> str:
    return match.group() if _SGR.fullmatch(match.group()) else ""


def say(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays the job's output)."""
    print(message, file=sys.stderr, flush=True)


def terminal_safe(text: str) -> str:
    """``text`` without the control sequences that could take over a terminal."""
    return _CONTROL.sub(_strip, text)


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


def listed(items: Sequence[str], most: int = 5) -> str:
    """The first ``most`` of ``items``, terminal-safe, then how many more: "a, b and 3 more"."""
    shown = ", ".join(terminal_safe(x) for x in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
