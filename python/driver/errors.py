"""Exit codes and the one exception type the CLI turns into a one-line message."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from driver.untrusted import one_line, terminal_safe

__all__ = ["one_line"]  # re-exported: many modules take it from here

EXIT_OK = 0
"""The job succeeded (or the command did what it was asked)."""
EXIT_JOB_FAILED = 1
"""The job failed or was stopped."""
EXIT_USAGE = 2
"""Bad usage, bad input, or the cluster could not be reached."""
EXIT_CAPACITY = 3
"""``up``/``price``: Azure would refuse the cluster at its maximum size (vCPU quota, a VM size not
offered or restricted in the region); ``up`` created nothing (driver/capacity.py)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C while following a job: the job keeps running (128 + SIGINT, the shell convention)."""


class DriverError(Exception):
    """An error the user can act on: printed as one line on stderr, never as a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def shaped(what: str) -> Iterator[None]:
    """Reading ``what`` (an answer from Azure) inside the block: a field of another type than
    Azure's (a list where an object belongs, a number where a list does) is a
    :class:`DriverError` with one line, never a traceback from deep inside."""
    try:
        yield
    except (AttributeError, TypeError, KeyError, IndexError) as e:
        raise DriverError(
            f"{what}: not in the shape Azure answers in ({type(e).__name__}: {one_line(e, 120)})"
        ) from None


class ConnectionLost(DriverError):
    """The way to the cluster broke (network silent, SSH dropped): not a statement about a job."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class NoSuchJob(DriverError):
    """The cluster has no job with this submission id."""


def run_main(command: Callable[[], int], say: Callable[[str], None]) -> int:
    """Run a command line's work and map what escapes it to a line and an exit code.

    A :class:`DriverError` is its message; Ctrl-C is 130; an OS refusal (a file, a permission, a
    port) is one line, not a traceback; a closed stdout (``| head``) is not an error.
    """
    try:
        return int(command())
    except DriverError as e:
        # Messages quote what Azure, the store or a head said: never a terminal's controls.
        say(f"error: {terminal_safe(e.message)}")
        return e.exit_code
    except KeyboardInterrupt:
        say("\ninterrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        say(f"error: {e.strerror or e}{where}")
        return EXIT_USAGE
