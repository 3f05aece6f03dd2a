"""The saved cluster profile: what ``python -m driver use`` remembers between commands.

It holds how to find the cluster (a head address, a Terraform folder, or an ARM deployment) and
optionally which SSH key to use — never the cluster token, which stays on the head and is read
over SSH each time. Written with mode 0600 in :func:`driver.settings.config_dir`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from driver.errors import DriverError
from driver.settings import config_dir

PROFILE_NAME = "profile.json"
KEYS = ("head", "terraform_dir", "resource_group", "deployment", "subscription", "arm_endpoint")
"""Where-is-the-cluster keys; ``identity`` may come with any of them."""


def profile_path() -> Path:
    return config_dir() / PROFILE_NAME


def load() -> dict[str, str] | None:
    """The saved profile, or None. A damaged file is an error, not a silent fallback to local."""
    path = profile_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise DriverError(
            f"cannot read the saved profile {path}: {e} (fix it, or run `python -m driver use "
            "--forget`)"
        ) from None
    if not isinstance(data, dict) or not any(data.get(k) for k in KEYS):
        raise DriverError(f"the saved profile {path} names no cluster (expected one of {KEYS})")
    return {k: str(v) for k, v in data.items() if isinstance(v, str | int)}


def save(profile: dict[str, str]) -> Path:
    path = profile_path()
    tmp = path.with_suffix(".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(profile, f, indent=2)
                f.write("\n")
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves no empty profile.tmp behind
            raise
    except OSError as e:
        raise DriverError(f"cannot save the profile {path}: {e.strerror or e}") from None
    return path


def forget() -> bool:
    path = profile_path()
    if path.exists():
        path.unlink()
        return True
    return False
