"""This package as installed: its name, its extras, and whether an extra's requirements are here.

pyproject.toml's dependencies and extras, read from the installed metadata: the cloud-init
renderer reads the cluster's pins from them (:mod:`nodekit.render`), the driver whether this
environment can train on the embedded local Ray (:func:`missing`).
"""

from __future__ import annotations

from typing import Any

DISTRIBUTION = "azure-ray-rl"
LOCAL_EXTRA = "local"
"""pyproject's extra with what jobs on the embedded local Ray import (RLlib, torch, gymnasium):
a laptop that only drives remote clusters installs the package without it."""
LOCAL_INSTALL = f"pip install '{DISTRIBUTION}[{LOCAL_EXTRA}]'"


def requirements() -> list[Any]:
    """This package's requirements (pyproject.toml via its metadata), parsed
    (``packaging.requirements.Requirement``)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    from driver.errors import DriverError

    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        raise DriverError(f"{DISTRIBUTION} is not installed: pip install -e .") from None
    return [Requirement(text) for text in requires]


def in_extra(req: Any, extra: str) -> bool:
    """Whether ``req`` is a requirement of ``extra`` here, and not one that holds without it
    (a requirement whose marker names only the platform or Python is no extra's)."""
    marker = req.marker
    if marker is None:
        return False
    return bool(marker.evaluate({"extra": extra})) and not marker.evaluate({"extra": ""})


def extra_requirements(extra: str, of: list[Any] | None = None) -> list[Any]:
    """The requirements ``extra`` adds (of this package, or of the list ``of``), markers
    dropped."""
    from packaging.requirements import Requirement

    found = []
    for req in requirements() if of is None else of:
        if in_extra(req, extra):
            bare = Requirement(str(req))
            bare.marker = None
            found.append(bare)
    return found


def missing(extra: str) -> list[str]:
    """What of this package's ``extra`` this environment lacks: each requirement not installed
    or at another version, and for one with extras (``ray[rllib]``) what those extras require
    and is not installed. Empty when this package is not installed (a source tree on
    ``PYTHONPATH``: nothing says what it needs)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    from driver.errors import DriverError

    try:
        wanted = extra_requirements(extra)
    except DriverError:  # not installed
        return []
    lacking: list[str] = []
    through_extras: list[Any] = []
    for req in wanted:
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            lacking.append(req.name)
            continue
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            lacking.append(f"{req.name}{req.specifier} (not {dist.version})")
        deps = [Requirement(text) for text in dist.requires or []]
        for sub in sorted(req.extras):
            through_extras += extra_requirements(sub, deps)
    for dep in through_extras:
        try:
            importlib.metadata.distribution(dep.name)
        except importlib.metadata.PackageNotFoundError:
            lacking.append(dep.name)
    return list(dict.fromkeys(lacking))
