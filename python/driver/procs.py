"""Looking at processes: shared by the local Ray head and the rehearsal cluster."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """Whether ``pid`` runs. A zombie counts as gone (and is reaped if it is our child)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def pids_with_cmdline(fragment: str) -> list[int]:
    """PIDs (not this process) whose command line, space-joined, contains ``fragment``."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if fragment in cmdline:
                pids.append(int(p.name))
    return pids


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (so it can be stopped as a group), output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
