"""Small YAML settings files (runtime_env.yaml, a render config), read or refused in one line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from driver.errors import DriverError


def load_mapping(path: Path, what: str, known: Iterable[str]) -> dict[str, Any]:
    """The mapping in ``path``; errors name ``what`` and the file, and list the known keys."""
    import yaml

    known = list(known)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as e:
        raise DriverError(f"cannot read {what} {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise DriverError(
            f"{what} {path} is not valid YAML: {' '.join(str(e).split())[:200]}"
        ) from None
    if not isinstance(data, dict):
        raise DriverError(f"{what} {path} must be a mapping of {', '.join(known)}")
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        raise DriverError(
            f"{what} {path}: unknown {', '.join(unknown)} (known: {', '.join(known)})"
        )
    return data
