"""Azure, played on the bridge by the repository's test fakes (``tests/fakes``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from driver.errors import DriverError
from nodekit import render

NODE_FAKE = "tests/fakes/azure_node.py"
"""Azure's instance metadata service and Key Vault."""
COMPUTE_FAKE = "tests/fakes/azure_compute.py"
"""Azure Compute for the workers' scale set (scaling mode ray): raising its capacity boots
worker containers here, deleting an instance removes that container."""


def path(relative: str) -> Path:
    """The fake's file in the repository (which must be there)."""
    found = render.repo_root() / relative
    if not found.is_file():
        raise DriverError(f"the rehearsal plays Azure with {relative}, and {found} is missing")
    return found


def load(relative: str, module: str) -> Any:
    """The fake imported as ``module`` (its helpers write its config and read its state),
    once per process."""
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, path(relative))
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def node_fake() -> Any:
    return load(NODE_FAKE, "rehearsal_azure_fakes")
