"""Where the driver keeps its state: one folder, overridable for tests and CI."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RAYDRIVER_HOME"


def driver_home() -> Path:
    """The driver's own folder: ``$RAYDRIVER_HOME``, else ``$XDG_STATE_HOME/ray-azure-rl``.

    It holds the local Ray head's state and token, saved cluster profiles and the driver's own
    known_hosts file. Created with mode 0700 because it holds secrets.
    """
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        base = Path(explicit).expanduser()
    else:
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(state) / "ray-azure-rl"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def config_dir() -> Path:
    """Where ``python -m driver use`` saves the cluster profile.

    ``$RAYDRIVER_HOME`` when set (so a test or CI run keeps everything in one throwaway folder),
    else ``$XDG_CONFIG_HOME/ray-azure-rl`` (``~/.config/ray-azure-rl``): a profile is
    configuration the user chose, not state the driver keeps.
    """
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        base = Path(explicit).expanduser()
    else:
        config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        base = Path(config) / "ray-azure-rl"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def known_hosts_file() -> Path:
    """The driver's own known_hosts: heads it trusted on first use (next to ~/.ssh/known_hosts)."""
    return driver_home() / "known_hosts"
