"""Small wrappers around the system tools the rehearsal cluster drives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from driver.errors import DriverError

TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "apt-cacher-ng": "apt-cacher-ng",
    "mount": "mount",
    "nsenter": "util-linux",
}


def require_root_linux() -> None:
    """Fail with one clear line unless this is Linux, as root, with the tools installed."""
    if not sys.platform.startswith("linux"):
        raise DriverError(f"the rehearsal cluster needs Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        raise DriverError(
            "the rehearsal cluster needs root (network namespaces, mounts, containers): "
            "run it with sudo"
        )
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise DriverError(
            f"the rehearsal cluster needs these Debian packages: {' '.join(missing)} "
            f"(apt-get install {' '.join(missing)})"
        )


def run(
    cmd: Sequence[str],
    *,
    what: str | None = None,
    check: bool = True,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing output; on failure raise a one-line DriverError."""
    try:
        p = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            input=input,
            env=env,
            timeout=timeout,
            cwd=cwd,
        )
    except FileNotFoundError:
        raise DriverError(f"{what or cmd[0]}: command not found: {cmd[0]}") from None
    except subprocess.TimeoutExpired:
        raise DriverError(f"{what or cmd[0]}: timed out after {timeout:.0f} s") from None
    if check and p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise DriverError(f"{what or ' '.join(cmd[:3])} failed (exit {p.returncode}): {tail[0]}")
    return p


def mount_overlay(
    lower: Path | Sequence[Path], upper: Path, work: Path, merged: Path, what: str
) -> None:
    """A writable overlay of ``lower`` at ``merged`` (writes land in ``upper``); several lower
    folders stack, the first on top (an image layer over the root filesystem)."""
    lowers = [lower] if isinstance(lower, Path) else list(lower)
    run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={':'.join(map(str, lowers))},upperdir={upper},workdir={work}",
            str(merged),
        ],
        what=what,
    )


def unmount_under(folder: Path) -> list[str]:
    """Unmount everything mounted below ``folder``, deepest first (lazily if busy); the mount
    points."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    gone = sorted((m for m in mounts if m.startswith(f"{folder}/")), reverse=True)
    for m in gone:
        if run(["umount", m], check=False).returncode != 0:
            run(["umount", "-l", m], what=f"unmounting {m}")
    return gone
